"""``--stream-shards`` on ``turnstile local`` and ``turnstile worker``, as a user runs them:
the banner says how many shards the worker emulates, and a bad value or a clash with a
parallelization factor is one line (the lanes' decisions:
tests/integration/test_local_stream_shards.py)."""

from __future__ import annotations

import subprocess

from tests.e2e.conftest import BIN, running_local_stack, user_environment


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "turnstile"), *args],
        env={**user_environment("http://127.0.0.1:9"), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_banner_names_the_stream_shards_and_a_submit_is_decided(tmp_path):
    with running_local_stack(tmp_path / "state", "--in-memory", "--stream-shards", "4") as stack:
        env = stack.env
        created = subprocess.run(
            [str(BIN / "turnstile"), "event", "create", "drop", "--capacity", "1", "--shards", "4"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        for sid in ("first", "second"):
            submitted = subprocess.run(
                [str(BIN / "turnstile"), "submit", "drop", sid],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert submitted.returncode == 0, submitted.stderr
            # one seat over 4 shards: the second signup's shard draws it or finds none
            done = subprocess.run(
                [str(BIN / "turnstile"), "status", "drop", sid, "--wait", "60", "-o", "text"],
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert ("ACCEPTED" if sid == "first" else "REJECTED") in done.stdout, done.stdout
    banner = (tmp_path / "state" / "local.log").read_text()
    assert "worker       polling the intake stream as 4 stream shards" in banner, banner


def test_a_bad_stream_shards_value_is_one_line():
    done = run("local", "--in-memory", "--stream-shards", "0")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "--stream-shards" in lines[0] and "from 1 to 64" in lines[0]


def test_stream_shards_with_a_parallelization_factor_is_one_line(tmp_path):
    done = run(
        "worker",
        "--state-dir",
        str(tmp_path),
        "--stream-shards",
        "4",
        env={"TURNSTILE_PARALLELIZATION_FACTOR": "2"},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert "cannot both be above 1" in lines[0], lines
