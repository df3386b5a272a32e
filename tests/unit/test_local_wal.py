"""The local stack's write-ahead log: records come back in order; a torn tail is cut off; a
log begins with a header naming the snapshot it follows; snapshots come back whole or not
at all; compaction leaves a log of the writes after the snapshot, when it is due."""

from __future__ import annotations

import base64
import json

import pytest

from turnstile_tools.local import persist
from turnstile_tools.local.persist import (
    SNAPSHOT_NAME,
    DurableState,
    StateFilesError,
    WriteAheadLog,
    read_snapshot,
    write_snapshot,
)


def test_records_come_back_in_order_and_a_torn_tail_is_cut_off(tmp_path):
    path = tmp_path / "aws.wal"
    wal = WriteAheadLog(path)
    wal.append({"n": 1})
    wal.append({"n": 2})
    wal.close()
    whole = path.read_bytes()
    with open(path, "ab") as f:  # a crash in the middle of a third append
        f.write(whole[: len(whole) // 2 - 1])  # a record less its last byte
    wal = WriteAheadLog(path)
    assert list(wal.records()) == [{"n": 1}, {"n": 2}]
    assert path.stat().st_size == len(whole)
    wal.append({"n": 3})  # appends after the cut, readable
    wal.close()
    assert list(WriteAheadLog(path).records()) == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_a_corrupt_record_ends_the_log(tmp_path):
    path = tmp_path / "aws.wal"
    wal = WriteAheadLog(path)
    wal.append({"n": 1})
    wal.append({"n": 2})
    wal.close()
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF  # the second record's payload, its CRC no longer matches
    path.write_bytes(bytes(data))
    assert list(WriteAheadLog(path).records()) == [{"n": 1}]


# -- the header, snapshots and compaction -------------------------------------------------


def record(n: int) -> dict:
    """A logged request as ``SerializedApp`` logs one (its body says which)."""
    body = base64.b64encode(json.dumps({"n": n}).encode()).decode()
    return {"method": "POST", "path": "/", "query": "", "headers": {}, "body": body}


class App:
    """A WSGI app that answers 200 and keeps the bodies replayed through it."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        self.seen.append(json.loads(body)["n"])
        start_response("200 OK", [])
        return [b"{}"]


@pytest.fixture
def no_moto(monkeypatch):
    """Snapshots of an empty endpoint (no moto needed): the state is what was replayed."""
    monkeypatch.setattr(persist, "capture_state", lambda now=None, retention_s=0: {"tables": []})
    monkeypatch.setattr(persist, "restore_state", lambda state, now=None: 0)


def test_a_new_log_begins_with_a_header_naming_the_snapshot_it_follows(tmp_path):
    wal = WriteAheadLog(tmp_path / "aws.wal", base="snap-1")
    wal.append({"n": 1})
    wal.close()
    reopened = WriteAheadLog(tmp_path / "aws.wal")
    assert reopened.base == "snap-1" and reopened.id
    assert list(reopened.records()) == [{"n": 1}] and reopened.records_count == 1
    assert list(reopened.records(after=reopened.size)) == []


def test_a_snapshot_comes_back_whole_or_not_at_all(tmp_path):
    path = tmp_path / "aws.snapshot"
    assert read_snapshot(path) is None
    size = write_snapshot(path, {"id": "s", "blob": b"\x00\xff", "text": "é"})
    assert path.stat().st_size == size and not (tmp_path / "aws.snapshot.tmp").exists()
    data = read_snapshot(path)
    assert data["binary"] is True and persist._from_json(data["blob"]) == b"\x00\xff"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(StateFilesError, match="damaged"):
        read_snapshot(path)


def test_the_log_after_a_compaction_holds_only_the_writes_after_it(tmp_path, no_moto):
    state = DurableState(tmp_path, compact_bytes=10**9)
    assert state.restore(App()) == 0
    for n in (1, 2, 3):
        state.append(record(n))
    state.compact()
    state.append(record(4))
    assert [r["body"] for r in state.log.records()] == [record(4)["body"]]
    state.close()
    # a restart replays the writes after the snapshot, and only those
    app = App()
    again = DurableState(tmp_path, compact_bytes=10**9)
    assert again.restore(app) == 4  # the state holds all four writes
    assert app.seen == [4]


def test_compaction_is_due_by_the_log_s_growth_since_the_snapshot(tmp_path, no_moto):
    state = DurableState(tmp_path, compact_bytes=1000)
    state.restore(App())
    state.snapshot_bytes = 8000  # as if the last snapshot were that big
    frame = len(persist._frame(record(0)))
    tails = []
    while state.compactions == 0:
        tails.append(state.tail_bytes + frame)  # the tail this append makes
        state.append(record(0))
    # while running: past compact_bytes and a quarter of the snapshot, not before
    assert tails[-2] < 2000 <= tails[-1]
    assert list(state.log.records()) == []
    # at start: past the smaller of compact_bytes and START_COMPACT_BYTES, and a 64th of
    # the snapshot
    state.snapshot_bytes = 64 * 20 * frame  # a 64th: 20 records, more than compact_bytes
    for _ in range(19):
        state.append(record(0))
        assert not state.compaction_due(starting=True)
    state.append(record(0))
    assert state.compaction_due(starting=True) and not state.compaction_due()
    # ... and nothing logged since the snapshot is never worth one
    state.compact_bytes = 0
    state.compact()
    assert not state.compaction_due(starting=True) and not state.compaction_due()


def test_a_crash_between_the_snapshot_and_the_new_log_replays_only_what_it_missed(
    tmp_path, no_moto
):
    """The snapshot renamed into place, the old log still there (the crash before its
    replacement): its records up to the covered length are in the snapshot."""
    state = DurableState(tmp_path, compact_bytes=10**9)
    state.restore(App())
    for n in (1, 2):
        state.append(record(n))
    covered = state.log.size
    write_snapshot(
        tmp_path / SNAPSHOT_NAME,
        {"id": "s2", "writes": 2, "covers": {"log": state.log.id, "bytes": covered}},
    )
    state.append(record(3))  # (not possible in one process, but the files allow it)
    state.close()
    app = App()
    again = DurableState(tmp_path, compact_bytes=10**9)
    assert again.restore(app) == 3
    assert app.seen == [3]
    # and the start finished the compaction: a new log, after a new snapshot
    assert again.compactions == 1 and list(again.log.records()) == []
    assert again.log.base == again.snapshot_id != "s2"
