"""The command line's own surface: help on every command and option with its default and
the exit codes, one-line usage errors that suggest the command or option meant, one-line
errors for what nobody foresaw (a traceback only on request), `make run`'s ports."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from turnstile_tools import cli

ROOT = Path(__file__).resolve().parents[2]


def every_command(
    command: click.Command = cli.turnstile_cli, path: str = "turnstile"
) -> Iterator[tuple[str, click.Command]]:
    """Every command of the click tree, groups included, with its path."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from every_command(sub, f"{path} {name}")


def every_argument(
    parser: argparse.ArgumentParser, path: str = "turnstile bench"
) -> Iterator[tuple[str, argparse.Action]]:
    """Every option and positional of the benchmark's own (argparse) parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from every_argument(subparser, f"{path} {name}")
        else:
            yield path, action


def every_param() -> Iterator[tuple[str, str, str | None]]:
    """(command path, parameter name, its help) of every command, the benchmark's too."""
    for path, command in every_command():
        for param in command.params:
            yield path, str(param.name), getattr(param, "help", None)
    for path, action in every_argument(cli.bench_parser()):
        help_text = None if action.help == argparse.SUPPRESS else action.help
        yield path, action.dest, help_text


def test_every_option_and_argument_has_help():
    missing = [f"{path} {name}" for path, name, help_text in every_param() if not help_text]
    assert missing == []


def test_every_command_has_a_description_and_a_short_help():
    # worker, sweep and redrive had none (argparse's description) before click
    missing = [
        path
        for path, command in every_command()
        if path != "turnstile" and not (command.help and command.short_help)
    ]
    assert missing == []


def test_the_walk_reaches_nested_commands():
    # (a walk that stopped at the first level would pass the tests above vacuously)
    seen = {(path, name) for path, name, _ in every_param()}
    assert ("turnstile event create", "capacity") in seen
    assert ("turnstile bench", "seed") in seen
    assert ("turnstile local", "api_port") in seen
    assert ("turnstile signups list", "event_id") in seen


def context_of(path: str) -> click.Context:
    """The context `turnstile` makes for the command at ``path`` ("turnstile event
    create"), as main makes it (its settings: -h too), parsing nothing."""
    ctx = cli.turnstile_cli.make_context("turnstile", [], resilient_parsing=True)
    for word in path.split()[1:]:
        assert isinstance(ctx.command, click.Group)
        command = ctx.command.commands[word]
        ctx = command.make_context(word, [], parent=ctx, resilient_parsing=True)
    return ctx


def command_help(path: str) -> str:
    """The help text of the command at ``path``, unwrapped."""
    return " ".join(context_of(path).get_help().split())


def test_help_shows_every_option_s_default():
    # every option but --help and --version says its default, or that it is required
    unshown = []
    for path, command in every_command():
        ctx = context_of(path)
        for param in command.params:
            if not isinstance(param, click.Option) or param.name == "version":
                continue
            record = param.get_help_record(ctx)
            assert record is not None, (path, param.name)
            if "[default: " not in record[1] and "[required]" not in record[1]:
                unshown.append(f"{path} {param.opts[0]}")
    assert unshown == []
    text = command_help("turnstile status")
    assert "--wait SECONDS wait up to SECONDS for a decision (0: answer at once) [default: 0]" in (
        text
    )
    assert "[default: $TURNSTILE_API_URL, else the tables]" in text
    assert "[default: json]" in text
    assert "[default: table]" in command_help("turnstile audit")
    assert "[default: 300]" in command_help("turnstile sweep")


def test_the_benchmark_s_help_shows_its_defaults():
    # the benchmark's parser is its own (argparse): its options with a default say it
    text = " ".join(cli.bench_parser().format_help().split())
    assert "--strategies WAY[,WAY...]" in text
    defaulted = [
        a
        for a in cli.bench_parser()._actions
        if a.option_strings and a.default not in (None, False, argparse.SUPPRESS)
    ]
    for action in defaulted:
        assert f"(default: {action.default})" in text, action.option_strings


def test_help_lists_the_exit_codes():
    top = command_help("turnstile")
    for code, meaning in cli.EXIT_CODES.items():
        assert f"{code} {' '.join(meaning.split())}" in top, code
    assert "Exit codes: 0 " in top
    status = command_help("turnstile status")
    assert "Exit codes:" in status and "3 --wait ended before that" in status
    audit = command_help("turnstile audit")
    assert "1 something is broken" in audit and "4 nothing broken found" in audit
    assert "2 a run failed" in command_help("turnstile sweep")
    assert "2 some records still undecided after --wait" in command_help("turnstile redrive")
    # a command whose codes are the usual ones (0, or 2 and one line) lists none
    assert "Exit codes" not in command_help("turnstile event show")


def usage_error(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == cli.EXIT_ERROR
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("turnstile: "), err
    return err.removeprefix("turnstile: ").rstrip("\n")


def test_a_mistyped_command_suggests_the_closest(capsys):
    assert usage_error(capsys, "evnt", "list") == "no such command 'evnt'; did you mean 'event'?"
    assert (
        usage_error(capsys, "event", "crate", "x", "--capacity", "1")
        == "no such command 'event crate'; did you mean 'event create'?"
    )
    assert usage_error(capsys, "sttaus", "x", "y") == (
        "no such command 'sttaus'; did you mean 'status'?"
    )
    line = usage_error(capsys, "frobnicate")
    assert line.startswith("no such command 'frobnicate' (known: local, worker, event,")


def test_a_mistyped_option_suggests_the_closest_not_a_missing_one(capsys):
    line = usage_error(capsys, "event", "create", "x", "--capcity", "3")
    assert line == "no such option --capcity; did you mean --capacity?"
    assert "missing" not in line
    assert usage_error(capsys, "status", "x", "y", "--wiat", "1") == (
        "no such option --wiat; did you mean --wait?"
    )
    assert usage_error(capsys, "event", "show", "x", "--zzz") == (
        "no such option --zzz (see: turnstile event show --help)"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["status"], "the following arguments are required: event_id, signup_id"),
        (["status", "x"], "the following arguments are required: signup_id"),
        (["event", "create", "x"], "missing option --capacity"),
        (["event"], "missing command: one of create, update, close, show, list"),
        ([], "missing command: one of local, worker, event, signups, submit, confirm"),
        (["status", "x", "y", "--until", "DONE"], "invalid value for --until: not a status: DONE"),
        (["status", "x", "y", "-o", "yaml"], "invalid value for --output: 'yaml' is not one of"),
        (["local", "--port", "65536"], "invalid value for --port: not a port number from 0"),
        (["event", "create", "x", "--capacity", "two"], "invalid value for --capacity: 'two'"),
        (["audit", "--json", "--output", "text"], "--json is --output json, not --output text"),
        (["audit", "--stack"], "option --stack needs a NAME"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, line):
    assert usage_error(capsys, *argv).startswith(line)


@pytest.mark.parametrize(
    "argv",
    [
        ["--until", "ACCEPTED"],  # was ignored: the status read answered at once, exit 0
        ["--wait", "0", "--until", "ACCEPTED"],
    ],
)
def test_until_without_a_wait_is_a_usage_error(monkeypatch, capsys, argv):
    ran: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, "cmd_status", lambda args: ran.append(args) or 0)
    line = usage_error(capsys, "status", "gig", "erin", *argv)
    assert line == "--until needs --wait SECONDS (above 0) (see: turnstile status --help)"
    assert ran == []


@pytest.mark.parametrize("value", ["-5", "-0.5", "nan", "NaN", "inf", "-inf", "1e3", "", "9" * 400])
def test_wait_is_a_finite_number_of_seconds_not_below_0(monkeypatch, capsys, value):
    ran: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, "cmd_status", lambda args: ran.append(args) or 0)
    line = usage_error(capsys, "status", "gig", "erin", "--wait", value)
    assert line.startswith(
        f"invalid value for --wait: not a number of seconds, 0 or more (such as 10 or 2.5): "
        f"{value!r}"
    )
    assert ran == []


@pytest.mark.parametrize(
    ("argv", "wait", "until"),
    [
        ([], 0, None),
        (["--wait", "0"], 0, None),
        (["--wait", "10"], 10, None),
        (["--wait", "2.5", "--until", "held,ACCEPTED"], 2.5, {"HELD", "ACCEPTED"}),
        (["--wait", ".5", "--until", "ACCEPTED"], 0.5, {"ACCEPTED"}),
    ],
)
def test_status_takes_a_wait_and_its_until(monkeypatch, argv, wait, until):
    ran: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, "cmd_status", lambda args: ran.append(args) or 0)
    assert cli.main(["status", "gig", "erin", *argv]) == 0
    (args,) = ran
    assert (args.wait, args.until) == (wait, until)


class NeverStarted:
    """``turnstile local``'s stack, in a test that must refuse before starting one."""

    def __init__(self, **kwargs: object) -> None:
        raise AssertionError(f"the stack was started: {kwargs}")


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["--port", "4790", "--api-port", "4790"], {}, "--port and --api-port are both 4790"),
        (["--port", "8080"], {}, "--port and the default --api-port are both 8080"),
        ([], {"TURNSTILE_PORT": "8080"}, "TURNSTILE_PORT and the default --api-port are both 8080"),
        (
            ["--api-port", "4791"],
            {"TURNSTILE_PORT": "4791", "TURNSTILE_API_PORT": "8081"},
            "TURNSTILE_PORT and --api-port are both 4791",
        ),
    ],
)
def test_local_with_one_port_for_both_servers_is_refused_up_front(
    monkeypatch, capsys, argv, env, line
):
    # It was found only once the endpoint listened: "port 4790 (the HTTP API) is in use by
    # another program", when the program was this very one.
    from turnstile_tools.local import stack

    monkeypatch.setattr(stack, "LocalStack", NeverStarted)
    for name in ("TURNSTILE_PORT", "TURNSTILE_API_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert usage_error(capsys, "local", "--in-memory", *argv) == (
        f"{line}: the AWS endpoint and the HTTP API need a port each"
    )


def test_local_may_pick_free_ports_for_both_servers(monkeypatch):
    for name in ("TURNSTILE_PORT", "TURNSTILE_API_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert cli._local_ports(0, 0) == (0, 0)
    assert cli._local_ports(None, None) == (4566, 8080)
    assert cli._local_ports(4790, 4791) == (4790, 4791)


def test_version_and_help_exit_0(capsys):
    from importlib.metadata import version

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"turnstile {version('turnstile')}\n"
    for argv in (["--help"], ["-h"], ["event", "--help"], ["event", "create", "-h"]):
        assert cli.main(argv) == 0
        out, err = capsys.readouterr()
        assert out.startswith("Usage: turnstile") and err == "", argv


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

    from turnstile.jobs.sweeper import run_id_for

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


def test_make_run_tells_turnstile_local_it_runs_under_make():
    assert make_run("PORT=4567").startswith("TURNSTILE_MAKE_RUN=1 ")


def port_in_use(server: str) -> Exception:
    import errno

    from turnstile_tools.local.server import ListenError

    return ListenError(server, "127.0.0.1", 4792, OSError(errno.EADDRINUSE, "in use"))


def test_a_port_in_use_under_make_run_names_make_run_s_variable(monkeypatch):
    monkeypatch.delenv(cli.MAKE_RUN_ENV, raising=False)
    assert cli.error_line(port_in_use("aws"), None).endswith(
        "choose another port with --port (or TURNSTILE_PORT)"
    )
    monkeypatch.setenv(cli.MAKE_RUN_ENV, "1")
    assert cli.error_line(port_in_use("aws"), None).endswith(
        "choose another port with make run PORT=N (or TURNSTILE_PORT)"
    )
    assert cli.error_line(port_in_use("api"), None).endswith(
        "choose another port with make run API_PORT=N (or TURNSTILE_API_PORT)"
    )
    for name in ("TURNSTILE_PORT", "TURNSTILE_API_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(cli.CliError, match=r"^PORT and API_PORT are both 4790: "):
        cli._local_ports(4790, 4790)
    with pytest.raises(cli.CliError, match=r"^PORT and the default API_PORT are both 8080: "):
        cli._local_ports(8080, None)


def test_make_run_ignores_a_port_variable_from_the_environment():
    # PORT in the environment is usually some other program's; TURNSTILE_PORT is ours.
    assert make_run(env={"PORT": "3000", "API_PORT": "3001"}).endswith("turnstile local")


@pytest.mark.parametrize(
    "argv",
    [
        ["--stack", "Prod", "--debug", "event", "show", "x"],
        ["event", "show", "x", "--stack", "Prod", "--debug"],
        ["event", "--debug", "show", "--stack=Prod", "x"],
    ],
)
def test_stack_and_debug_are_accepted_anywhere(monkeypatch, argv):
    seen: list[object] = []
    monkeypatch.setattr(cli, "_apply_stack", seen.append)
    monkeypatch.setattr(cli, "cmd_event_show", lambda args: seen.append(args) or 0)
    assert cli.main(argv) == 0
    stack, args = seen
    assert stack == "Prod"
    assert (args.event_id, args.stack, args.debug, args.output) == ("x", "Prod", True, "json")


def test_every_command_that_prints_data_takes_output():
    with_output = {
        path for path, command in every_command() if any(p.name == "output" for p in command.params)
    }
    assert with_output == {
        f"turnstile {name}"
        for name in (
            "event create",
            "event update",
            "event close",
            "event show",
            "event list",
            "signups list",
            "submit",
            "confirm",
            "cancel",
            "status",
            "audit",
            "sweep",
            "redrive",
        )
    }
