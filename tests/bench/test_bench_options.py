"""The benchmark's workload knobs take what makes a workload, and nothing else: a count
below its least, a share outside 0 to 1, nan or inf is a one-line usage error (exit 2)
before any run. (``--hot-share -1`` ran a whole benchmark; ``--hot-share nan`` failed
deep inside it, as an unexpected error.)"""

from __future__ import annotations

import argparse

import pytest

import turnstile_bench
from turnstile_tools import cli

BAD = {
    "--events": ["0", "-1", "2.5", "x", ""],
    "--capacity": ["0", "-3", "1e3"],
    "--signups": ["0", "nan"],
    "--producers": ["0", "-2"],
    "--waitlist": ["-1", "inf"],
    "--hold-seconds": ["0", "-5", "1.5"],
    "--hot-share": ["-0.1", "1.5", "nan", "inf", "x"],
    "--confirm-share": ["2", "NaN"],
    "--cancel-share": ["-1", "-inf"],
    "--rate": ["-1", "inf", "nan", "fast"],
}
GOOD = [
    ("--events", "3", 3),
    ("--waitlist", "0", 0),
    ("--hot-share", "0", 0.0),
    ("--hot-share", "1", 1.0),
    ("--confirm-share", "0.25", 0.25),
    ("--rate", "0", 0.0),
    ("--rate", "12.5", 12.5),
    ("--hold-seconds", "30", 30),
]


def run(monkeypatch, argv: list[str]) -> tuple[int, list[argparse.Namespace]]:
    ran: list[argparse.Namespace] = []
    monkeypatch.setattr(turnstile_bench, "cmd_bench", lambda args: ran.append(args) or 0)
    return cli.main(["bench", *argv]), ran


@pytest.mark.parametrize(("option", "value"), [(o, v) for o, values in BAD.items() for v in values])
def test_a_bad_knob_is_one_line_and_exit_2(monkeypatch, capsys, option, value):
    code, ran = run(monkeypatch, ["--quick", f"{option}={value}"])
    out, err = capsys.readouterr()
    assert (code, ran, out) == (cli.EXIT_ERROR, [], "")
    assert err.count("\n") == 1 and err.startswith(f"turnstile: argument {option}: "), err
    assert repr(value) in err, err


@pytest.mark.parametrize(("option", "value", "parsed"), GOOD)
def test_a_good_knob_reaches_the_run(monkeypatch, option, value, parsed):
    code, ran = run(monkeypatch, ["--quick", option, value])
    assert code == 0
    (args,) = ran
    assert getattr(args, option.lstrip("-").replace("-", "_")) == parsed


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("persist", ["--idle-s", "nan"]),
        ("persist", ["--sweep-interval", "-1"]),
        ("persist", ["--sweep-interval", "0"]),
        ("persist", ["--threads", "0"]),
        ("persist", ["--restarts", "-1"]),
        ("waits", ["--wait-s", "inf"]),
        ("waits", ["--seconds", "-2"]),
        ("waits", ["--waiters", "0"]),
        ("wakeups", ["--rounds", "0"]),
        ("waitlists", ["--shards", "1"]),
        ("waitlists", ["--shards", "33"]),
        ("waitlists", ["--waitlist", "0"]),
        ("waitlists", ["--batch", "x"]),
    ],
)
def test_the_measurement_modules_check_their_options_too(capsys, module, argv):
    import importlib

    main = importlib.import_module(f"turnstile_bench.{module}").main
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    _, err = capsys.readouterr()
    assert exit_.value.code == 2
    assert f"error: argument {argv[0]}: expected " in err and repr(argv[1]) in err, err
