"""Every option given in seconds takes a whole or decimal number, 0 or more, and nothing
else: -5, nan or inf is a one-line usage error (exit 2) before the command runs, as
``status --wait`` was the first to be. (``worker --until-idle``, ``sweep --min-age``,
``--lease``, ``--max-run``, ``--full-scan-every``, ``audit --pending-grace`` and ``redrive
--wait`` took any float: a negative age, a nan grace, an infinite lease.)"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import click
import pytest

from turnstile_tools import cli

#: Each command's arguments before its options, and the function that runs it.
COMMANDS = {
    "turnstile worker": ([], "cmd_worker"),
    "turnstile sweep": ([], "cmd_sweep"),
    "turnstile audit": ([], "cmd_audit"),
    "turnstile redrive": ([], "cmd_redrive"),
    "turnstile status": (["gig", "erin"], "cmd_status"),
}
#: Every option given in seconds.
OPTIONS = [
    ("turnstile worker", "--until-idle"),
    ("turnstile sweep", "--min-age"),
    ("turnstile sweep", "--lease"),
    ("turnstile sweep", "--max-run"),
    ("turnstile sweep", "--full-scan-every"),
    ("turnstile audit", "--pending-grace"),
    ("turnstile redrive", "--wait"),
    ("turnstile status", "--wait"),
]
BAD = ["-5", "-0.5", "nan", "NaN", "inf", "-inf", "Infinity", "1e3", "", "ten", "9" * 400]


def every_option(
    command: click.Command = cli.turnstile_cli, path: str = "turnstile"
) -> Iterator[tuple[str, click.Option]]:
    """Every option of the click tree, with the path of its command."""
    for param in command.params:
        if isinstance(param, click.Option):
            yield path, param
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from every_option(sub, f"{path} {name}")


def test_every_option_in_seconds_takes_the_one_check():
    in_seconds = [
        (path, max(option.opts, key=len))
        for path, option in every_option()
        if option.metavar == "SECONDS" or option.type is cli.SECONDS
    ]
    checked = [
        (path, max(option.opts, key=len))
        for path, option in every_option()
        if option.type is cli.SECONDS
    ]
    assert sorted(in_seconds) == sorted(checked) == sorted(OPTIONS)
    # a plain float takes nan and inf: no option of the tree has one
    floats = [
        (path, option.opts)
        for path, option in every_option()
        if isinstance(option.type, click.types.FloatParamType)
    ]
    assert floats == []


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize(("path", "option"), OPTIONS)
def test_a_bad_number_of_seconds_is_one_line_and_exit_2(monkeypatch, capsys, path, option, value):
    args, function = COMMANDS[path]
    ran: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, function, lambda parsed: ran.append(parsed) or 0)
    argv = [*path.split()[1:], *args, option, value]
    assert cli.main(argv) == cli.EXIT_ERROR
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err == (
        f"turnstile: invalid value for {option}: not a number of seconds, 0 or more (such as "
        f"10 or 2.5): {value!r} (see: {path} --help)\n"
    )
    assert ran == []


@pytest.mark.parametrize(("value", "seconds"), [("0", 0), ("10", 10), ("2.5", 2.5), (".5", 0.5)])
@pytest.mark.parametrize(("path", "option"), OPTIONS)
def test_a_number_of_seconds_reaches_the_command(monkeypatch, path, option, value, seconds):
    args, function = COMMANDS[path]
    ran: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, function, lambda parsed: ran.append(parsed) or 0)
    assert cli.main([*path.split()[1:], *args, option, value]) == 0
    (parsed,) = ran
    assert getattr(parsed, option.lstrip("-").replace("-", "_")) == seconds


def test_the_defaults_are_unchanged(monkeypatch):
    ran: dict[str, argparse.Namespace] = {}
    for path, (args, function) in COMMANDS.items():
        monkeypatch.setattr(cli, function, lambda parsed, f=function: ran.update({f: parsed}))
        assert cli.main([*path.split()[1:], *args]) == 0
    assert ran["cmd_worker"].until_idle is None
    sweep = ran["cmd_sweep"]
    assert (sweep.min_age, sweep.lease, sweep.max_run, sweep.full_scan_every) == (
        300,
        120,
        180,
        86_400,
    )
    assert ran["cmd_audit"].pending_grace == 300
    assert ran["cmd_redrive"].wait == 60
    assert ran["cmd_status"].wait == 0
