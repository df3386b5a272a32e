"""An idle ``turnstile local`` writes nothing: its write log and snapshot do not grow while
nothing happens, however many periods its background jobs (the sweeper, the due holds, the
worker's polls) run. The sweep loop looks before it sweeps (``sweep_has_work``): a sweep
takes the lease and writes its run history whatever it finds, which grew the log by a few
kilobytes a minute. Periods are counted, never waited for: no test here depends on time."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnstile.base.contract import INTAKE_TABLE
from turnstile.jobs.sweeper import Sweeper
from turnstile.storage.store import SignupStore
from turnstile_tools.local import persist
from turnstile_tools.local.server import WAL_NAME
from turnstile_tools.local.stack import (
    DUE_HOLDS_INTERVAL_ENV,
    LocalStack,
    _SweepLook,
    local_aws_environment,
    sweep_has_work,
)

OLD = "2020-01-01T00:00:00.000000Z"
NOW = "2026-01-01T00:00:00.000000Z"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    """A whole local stack in this process, persisted in ``tmp_path``, its background jobs
    on short periods (the sweeper's full scan due every period), its environment undone."""
    from moto.core.base_backend import BackendDict

    for name in [*local_aws_environment("http://x"), "TURNSTILE_FAILURE_QUEUE_URL"]:
        kept = os.environ.get(name)
        monkeypatch.setenv(name, kept or "")
        if kept is None:
            monkeypatch.delenv(name)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("TURNSTILE_SWEEP_INTERVAL_S", "0.05")
    monkeypatch.setenv("TURNSTILE_SWEEP_FULL_SCAN_EVERY_S", "0")
    monkeypatch.setenv(DUE_HOLDS_INTERVAL_ENV, "0.02")
    monkeypatch.delenv(persist.COMPACT_BYTES_ENV, raising=False)
    BackendDict.reset()
    local = LocalStack(port=free_port(), api_port=free_port(), state_dir=tmp_path)
    local.start()
    yield local
    local.stop()
    BackendDict.reset()


def wait_for(condition: Any, what: str, timeout: float = 120) -> None:
    """Until ``condition()``; the deadline only bounds a broken run."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def periods_pass(stack: LocalStack, n: int) -> None:
    """Until ``n`` more periods of each background job have ended."""
    sweeps, holds = stack.sweep_periods, stack.due_holds_periods
    wait_for(
        lambda: stack.sweep_periods >= sweeps + n and stack.due_holds_periods >= holds + n,
        f"{n} periods of the sweeper and the due holds",
    )


def state_files(state_dir: Path) -> dict[str, int]:
    return {
        name: (state_dir / name).stat().st_size if (state_dir / name).exists() else -1
        for name in (WAL_NAME, persist.SNAPSHOT_NAME)
    }


def test_an_idle_stack_does_not_grow_its_write_log(stack: LocalStack, tmp_path: Path) -> None:
    store = SignupStore(sleep=lambda _: None)
    # GIVEN a stack that has done some work: events, signups decided, a hold not due for
    # an hour (the due-holds index has an entry), a signup past the sweeper's min age
    store.create_event("idle", 5, NOW, hold_seconds=3600)
    store.create_event("plain", 1, NOW)
    for signup, submitted in (("a", NOW), ("b", OLD), ("c", NOW)):
        store.put_intake("idle", signup, 1, None, submitted)
    store.put_intake("plain", "d", 1, None, OLD)
    store.put_intake("plain", "e", 1, None, NOW)
    decided = [("idle", s) for s in "abc"] + [("plain", s) for s in "de"]
    wait_for(
        lambda: all(store.get_decision(e, s) is not None for e, s in decided),
        "every signup decided",
    )
    periods_pass(stack, 5)  # whatever the work set off has run
    before, sweeps = state_files(tmp_path), stack.sweeps
    assert before[WAL_NAME] > 0
    # WHEN nothing happens for many periods of every background job
    periods_pass(stack, 40)
    # THEN nothing was written: not one byte of log, no snapshot
    assert state_files(tmp_path) == before
    assert stack.sweeps == sweeps  # the sweeper looked every period, and found nothing
    # AND a write is still logged, and the worker still decides it
    store.put_intake("plain", "f", 1, None, NOW)
    wait_for(lambda: store.get_decision("plain", "f") is not None, "the new signup decided")
    assert state_files(tmp_path)[WAL_NAME] > before[WAL_NAME]


# -- what the sweep loop looks for (in process, moto) -----------------------------------


@pytest.fixture
def sweeper(store: SignupStore) -> Sweeper:
    return Sweeper(store, owner="test", min_age_s=300, full_scan_every_s=3600)


def test_nothing_to_sweep_in_an_empty_or_decided_state(sweeper: Sweeper, store: SignupStore):
    now = time.time()
    looked = _SweepLook()
    # an empty state: nothing (a full scan was due: the whole table was read, and noted)
    assert not sweep_has_work(sweeper, now, looked)
    assert looked.full_read_at == now
    # a young undecided signup: not yet (the sweeper leaves it to the stream)
    store.create_event("ev", 5, NOW)
    store.put_intake(
        "ev", "young", 1, None, time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(now))
    )
    assert not sweep_has_work(sweeper, now, looked)


def test_work_is_found_as_the_sweep_would_find_it(sweeper: Sweeper, store: SignupStore):
    now = time.time()
    looked = _SweepLook()
    store.create_event("ev", 5, NOW)
    # an old undecided signup, marked: found through the index
    store.put_intake("ev", "old", 1, None, OLD)
    assert sweep_has_work(sweeper, now, looked)
    # once swept (re-emitted: the stream's again for the min age), nothing is left to do
    result = sweeper.sweep()
    assert result.re_emitted == 1
    assert not sweep_has_work(sweeper, time.time() + 10, looked)
    # ... until the min age has passed with the signup still undecided
    assert sweep_has_work(sweeper, time.time() + 301, looked)


def test_an_unmarked_record_is_found_by_a_due_full_scan(
    sweeper: Sweeper, store: SignupStore, client
) -> None:
    """A record its producer wrote without the ``undecided`` marker: not in the index."""
    client.put_item(
        TableName=INTAKE_TABLE.name,
        Item={"event_id": {"S": "ev"}, "signup_id": {"S": "unmarked"}, "submitted_at": {"S": OLD}},
    )
    now = time.time()
    assert sweep_has_work(sweeper, now, _SweepLook())  # a full scan is due: never done
    result = sweeper.sweep()
    assert result.full_scan and result.re_emitted == 1
    # the sweep recorded its full scan (and marked the record): re-emitted, nothing to do
    assert not sweep_has_work(sweeper, time.time() + 10, _SweepLook())


def test_a_due_full_scan_that_found_nothing_is_not_repeated_every_period(
    sweeper: Sweeper, store: SignupStore, client
) -> None:
    now = time.time()
    looked = _SweepLook()
    assert not sweep_has_work(sweeper, now, looked)  # due (never done): read, nothing
    client.put_item(
        TableName=INTAKE_TABLE.name,
        Item={"event_id": {"S": "ev"}, "signup_id": {"S": "unmarked"}, "submitted_at": {"S": OLD}},
    )
    # still due on the lease (nothing was written), but read again only an interval later
    assert not sweep_has_work(sweeper, now + 60, looked)
    assert sweep_has_work(sweeper, now + 3600, looked)


def test_a_parked_event_is_work(sweeper: Sweeper, store: SignupStore, monkeypatch) -> None:
    monkeypatch.setattr(
        type(store), "parking_markers", lambda self, event_id=None: {"ev": {"version": 1}}
    )
    assert sweep_has_work(sweeper, time.time(), _SweepLook())
