"""The command line's own surface: help on every option, one-line errors for what nobody
foresaw (a traceback only on request), `make run`'s ports."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstile import cli

ROOT = Path(__file__).resolve().parents[2]


def every_argument(
    parser: argparse.ArgumentParser, path: str = "turnstile"
) -> Iterator[tuple[str, argparse.Action]]:
    """Every option and positional of every command, with the command's path."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from every_argument(subparser, f"{path} {name}")
        else:
            yield path, action


def test_every_option_and_argument_has_help():
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, action in every_argument(cli.build_parser())
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert missing == []


def test_the_walk_reaches_nested_commands():
    # (a walk that stopped at the first level would pass the test above vacuously)
    seen = {(path, action.dest) for path, action in every_argument(cli.build_parser())}
    assert ("turnstile event create", "capacity") in seen
    assert ("turnstile bench", "seed") in seen
    assert ("turnstile local", "api_port") in seen


def broken(args: argparse.Namespace) -> int:
    raise RuntimeError("something nobody foresaw")


def test_an_unforeseen_error_is_one_line_with_a_hint(monkeypatch, capsys):
    monkeypatch.setattr(cli, "cmd_event_show", broken)
    monkeypatch.delenv("TURNSTILE_DEBUG", raising=False)
    assert cli.main(["event", "show", "x"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err == (
        "turnstile: unexpected error: RuntimeError: something nobody foresaw "
        "(--debug or TURNSTILE_DEBUG=1 shows the traceback)\n"
    )


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--debug", "event", "show", "x"], None),
        (["event", "show", "x", "--debug"], None),
        (["event", "show", "x"], "1"),
    ],
)
def test_debug_shows_the_traceback(monkeypatch, capsys, argv, env):
    monkeypatch.setattr(cli, "cmd_event_show", broken)
    if env is None:
        monkeypatch.delenv("TURNSTILE_DEBUG", raising=False)
    else:
        monkeypatch.setenv("TURNSTILE_DEBUG", env)
    assert cli.main(argv) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith("turnstile: unexpected error: RuntimeError: something nobody foresaw\n")


def test_an_error_message_on_several_lines_is_printed_on_one(monkeypatch, capsys):
    def multiline(args: argparse.Namespace) -> int:
        raise cli.CliError("first\nsecond\n")

    monkeypatch.setattr(cli, "cmd_event_show", multiline)
    assert cli.main(["event", "show", "x"]) == cli.EXIT_ERROR
    assert capsys.readouterr().err == "turnstile: first second\n"


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_event_show", interrupted)
    assert cli.main(["event", "show", "x"]) == 130
    assert capsys.readouterr().err == "turnstile: interrupted\n"


def test_manual_run_ids_are_their_own():
    from datetime import UTC, datetime

    from turnstile.sweeper import run_id_for

    at = datetime(2026, 11, 21, 22, 4, 59, 123456, tzinfo=UTC)
    assert cli.manual_run_id(at) == "manual-2026-11-21T22:04:59.123456Z"
    assert cli.manual_run_id(at) != run_id_for(at)


def make_run(*args: str, env: dict[str, str] | None = None) -> str:
    """The command `make run` would run (-n: print it, run nothing, set nothing up)."""
    import os

    result = subprocess.run(
        ["make", "-n", "run", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if "turnstile local" in line)


def test_make_run_passes_its_ports_on():
    assert make_run("PORT=4567", "API_PORT=8081").endswith(
        "turnstile local --port 4567 --api-port 8081"
    )
    assert make_run("API_PORT=8081").endswith("turnstile local --api-port 8081")
    assert make_run().endswith("turnstile local")


def test_make_run_ignores_a_port_variable_from_the_environment():
    # PORT in the environment is usually some other program's; TURNSTILE_PORT is ours.
    assert make_run(env={"PORT": "3000", "API_PORT": "3001"}).endswith("turnstile local")
