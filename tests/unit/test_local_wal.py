"""The local stack's write-ahead log: records come back in order; a torn tail is cut off."""

from __future__ import annotations

from turnstile.local.persist import WriteAheadLog


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
