"""The local stack's snapshot and compaction (``turnstile_tools.local.persist``), in process: a
restart after compaction brings back every table, item, index, stream record, queue and
message; the log after a compaction holds only the writes made since; a crash at any
point of a compaction loses nothing acknowledged; stream records past the retention are
trimmed as DynamoDB trims them."""

from __future__ import annotations

import copy
import functools
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from turnstile.base.contract import FAILURE_QUEUE_NAME, INTAKE_TABLE
from turnstile_tools.local import persist
from turnstile_tools.local.persist import (
    SNAPSHOT_NAME,
    DurableState,
    StateFilesError,
    WriteAheadLog,
)
from turnstile_tools.local.server import WAL_NAME, EmbeddedAws
from turnstile_tools.local.stack import ensure_resources, local_aws_environment

EXTRA = "t-extra"
NEVER = 10**15  # a compaction threshold nothing reaches


def _without_endpoint_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in local_aws_environment("http://x"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(persist.COMPACT_BYTES_ENV, raising=False)
    monkeypatch.delenv(persist.STREAM_RETENTION_ENV, raising=False)


@pytest.fixture(autouse=True)
def _endpoint_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from moto.core.base_backend import BackendDict

    _without_endpoint_environment(monkeypatch)
    BackendDict.reset()
    yield
    BackendDict.reset()


@contextmanager
def endpoint(state: Path, compact_bytes: int = NEVER) -> Iterator[EmbeddedAws]:
    """The embedded endpoint on ``state`` (restored as it starts), stopped on exit, and its
    moto state dropped: the next one starts from the files alone, as a new process would."""
    from moto.core.base_backend import BackendDict

    BackendDict.reset()
    os.environ[persist.COMPACT_BYTES_ENV] = str(compact_bytes)
    try:
        server = EmbeddedAws("127.0.0.1", 0, state_dir=state)
    finally:
        del os.environ[persist.COMPACT_BYTES_ENV]
    server.start()
    try:
        yield server
    finally:
        server.stop()
        BackendDict.reset()


@functools.cache
def session() -> boto3.Session:
    """One session for the module: its clients share the service models it loaded."""
    return boto3.Session(
        aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )


def clients(server: EmbeddedAws) -> tuple[Any, Any, Any]:
    return _clients(server.url)


@functools.cache
def _clients(url: str) -> tuple[Any, Any, Any]:
    """One set of clients per endpoint URL (``full_state`` runs many times a test)."""
    s = session()
    return (
        s.client("dynamodb", endpoint_url=url),
        s.client("dynamodbstreams", endpoint_url=url),
        s.client("sqs", endpoint_url=url),
    )


def populate(server: EmbeddedAws) -> None:
    """Tables of every shape turnstile's and a user's tools make, items of every type,
    updates, deletes and transactions, a deleted table; queues (standard, FIFO, with a
    dead-letter queue) with messages sent, received and deleted."""
    dynamodb, _streams, sqs = clients(server)
    os.environ.update(local_aws_environment(server.url))
    try:
        ensure_resources(session())
    finally:
        for name in local_aws_environment(server.url):
            os.environ.pop(name, None)
    dynamodb.create_table(
        TableName=EXTRA,
        KeySchema=[
            {"AttributeName": "h", "KeyType": "HASH"},
            {"AttributeName": "r", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "h", "AttributeType": "S"},
            {"AttributeName": "r", "AttributeType": "N"},
            {"AttributeName": "g", "AttributeType": "S"},
            {"AttributeName": "l", "AttributeType": "B"},
        ],
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 7},
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["n"]},
                "ProvisionedThroughput": {"ReadCapacityUnits": 3, "WriteCapacityUnits": 2},
            }
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "by-l",
                "KeySchema": [
                    {"AttributeName": "h", "KeyType": "HASH"},
                    {"AttributeName": "l", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        Tags=[{"Key": "team", "Value": "seats"}],
    )
    dynamodb.update_time_to_live(
        TableName=EXTRA, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
    for i in range(30):
        dynamodb.put_item(
            TableName=EXTRA,
            Item={
                "h": {"S": f"h{i % 4}"},
                "r": {"N": str(i)},
                "g": {"S": f"g{i % 3}"},
                "l": {"B": bytes([i, 0, 255])},
                "n": {"N": "12345678901234567890.5"},
                "m": {
                    "M": {
                        "b": {"B": b"\x00\x01"},
                        "deep": {"L": [{"NULL": True}, {"BOOL": i % 2 == 0}]},
                    }
                },
                "ss": {"SS": ["a", "b"]},
                "ns": {"NS": ["1", "2.5"]},
                "bs": {"BS": [b"x", b"\xff"]},
                "ttl": {"N": "4102444800"},
            },
        )
    dynamodb.update_item(
        TableName=EXTRA,
        Key={"h": {"S": "h1"}, "r": {"N": "1"}},
        UpdateExpression="SET n = n + :one, extra = :e REMOVE ss",
        ExpressionAttributeValues={":one": {"N": "1"}, ":e": {"S": "é ✓"}},
    )
    dynamodb.delete_item(TableName=EXTRA, Key={"h": {"S": "h2"}, "r": {"N": "2"}})
    dynamodb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": INTAKE_TABLE.name, "Item": _intake("e1", f"s{i}")}}
            for i in range(5)
        ]
    )
    dynamodb.batch_write_item(
        RequestItems={
            INTAKE_TABLE.name: [{"PutRequest": {"Item": _intake("e2", f"b{i}")}} for i in range(25)]
        }
    )
    dynamodb.create_table(
        TableName="t-gone",
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.delete_table(TableName="t-gone")
    dlq = sqs.create_queue(QueueName="t-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    standard = sqs.create_queue(
        QueueName="t-standard",
        Attributes={
            "VisibilityTimeout": "45",
            "RedrivePolicy": f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": "3"}}',
        },
        tags={"team": "seats"},
    )["QueueUrl"]
    fifo = sqs.create_queue(
        QueueName="t-order.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    for i in range(6):
        sqs.send_message(
            QueueUrl=standard,
            MessageBody=f"m{i} ✓",
            MessageAttributes={
                "kind": {"DataType": "String", "StringValue": f"k{i}"},
                "blob": {"DataType": "Binary", "BinaryValue": bytes([i, 254])},
                "n": {"DataType": "Number", "StringValue": str(i)},
            },
        )
        sqs.send_message(QueueUrl=fifo, MessageBody=f"f{i}", MessageGroupId=f"g{i % 2}")
    sqs.send_message_batch(
        QueueUrl=sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"],
        Entries=[{"Id": str(i), "MessageBody": f"failure {i}"} for i in range(3)],
    )
    got = sqs.receive_message(QueueUrl=standard, MaxNumberOfMessages=2, VisibilityTimeout=0)
    sqs.delete_message(QueueUrl=standard, ReceiptHandle=got["Messages"][0]["ReceiptHandle"])


def _intake(event_id: str, signup_id: str) -> dict[str, Any]:
    return {
        "event_id": {"S": event_id},
        "signup_id": {"S": signup_id},
        "seats": {"N": "1"},
        "undecided": {"S": signup_id[:1]},
    }


def more_writes(server: EmbeddedAws) -> int:
    """Writes after a snapshot: puts, an update, a delete, a send, a delete of a message;
    how many (each one logged record)."""
    dynamodb, _streams, sqs = clients(server)
    for i in range(3):
        dynamodb.put_item(TableName=INTAKE_TABLE.name, Item=_intake("e3", f"late{i}"))
    dynamodb.update_item(
        TableName=EXTRA,
        Key={"h": {"S": "h0"}, "r": {"N": "0"}},
        UpdateExpression="SET g = :g",
        ExpressionAttributeValues={":g": {"S": "g9"}},
    )
    dynamodb.delete_item(
        TableName=INTAKE_TABLE.name, Key={"event_id": {"S": "e2"}, "signup_id": {"S": "b0"}}
    )
    url = sqs.get_queue_url(QueueName="t-standard")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="late")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=0)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["Messages"][0]["ReceiptHandle"])
    return 7


def full_state(server: EmbeddedAws) -> dict[str, Any]:
    """Everything a client can read: every table's description, TTL, backups, tags, items
    (and each index's), its stream's records (sequence numbers, keys and images); every
    queue's attributes, tags and messages. Leaves the messages visible again."""
    dynamodb, streams, sqs = clients(server)
    state: dict[str, Any] = {"tables": {}, "queues": {}}
    for name in dynamodb.list_tables()["TableNames"]:
        table = dynamodb.describe_table(TableName=name)["Table"]
        described = {k: v for k, v in table.items() if k not in ("ItemCount", "TableSizeBytes")}
        scans = {None: _scan(dynamodb, TableName=name)}
        for index in table.get("GlobalSecondaryIndexes", []) + table.get(
            "LocalSecondaryIndexes", []
        ):
            scans[index["IndexName"]] = _scan(
                dynamodb, TableName=name, IndexName=index["IndexName"]
            )
        state["tables"][name] = {
            "description": described,
            "ttl": dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"],
            "backups": dynamodb.describe_continuous_backups(TableName=name)[
                "ContinuousBackupsDescription"
            ],
            "tags": dynamodb.list_tags_of_resource(ResourceArn=table["TableArn"]).get("Tags", []),
            "items": scans,
            "stream": _stream(streams, table.get("LatestStreamArn")),
        }
    for url in sqs.list_queues().get("QueueUrls", []):
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        messages = []
        while True:
            got = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=30,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not got:
                break
            messages += got
        for start in range(0, len(messages), 10):  # visible again, for the next look
            changed = sqs.change_message_visibility_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for n, m in enumerate(messages[start : start + 10])
                ],
            )
            assert not changed.get("Failed"), changed["Failed"]
        state["queues"][url.rsplit("/", 1)[1]] = {
            "attributes": attributes,
            "tags": sqs.list_queue_tags(QueueUrl=url).get("Tags", {}),
            "messages": sorted(
                (
                    {
                        "id": m["MessageId"],
                        "body": m["Body"],
                        "md5": m["MD5OfBody"],
                        "attributes": {
                            k: v
                            for k, v in m["Attributes"].items()
                            # receives are not logged: a snapshot keeps the counts it saw
                            if k
                            not in ("ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp")
                        },
                        "message_attributes": m.get("MessageAttributes"),
                    }
                    for m in messages
                ),
                key=lambda m: m["id"],
            ),
        }
    return state


def _scan(dynamodb: Any, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        page = dynamodb.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return sorted(items, key=repr)
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _stream(streams: Any, arn: str | None) -> Any:
    if arn is None:
        return None
    description = streams.describe_stream(StreamArn=arn)["StreamDescription"]
    shards = description["Shards"]
    records = []
    for shard in shards:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            got = page["Records"]
            records += [
                (
                    r["eventName"],
                    r["dynamodb"]["SequenceNumber"],
                    r["dynamodb"]["Keys"],
                    r["dynamodb"].get("NewImage"),
                    r["dynamodb"].get("OldImage"),
                )
                for r in got
            ]
            iterator = page.get("NextShardIterator") if got else None
    return {
        "label": description["StreamLabel"],
        "view": description["StreamViewType"],
        "shards": shards,
        "records": records,
    }


def logged(state: Path) -> list[dict[str, Any]]:
    return list(WriteAheadLog(state / WAL_NAME).records())


def replayed_view(state: dict[str, Any]) -> dict[str, Any]:
    """``full_state`` less what a replay of the log makes anew (docs: the queues' creation
    and change times, the messages' sent times); a snapshot keeps those too."""
    view = {"tables": state["tables"], "queues": {}}
    for name, queue in state["queues"].items():
        attributes = {
            k: v
            for k, v in queue["attributes"].items()
            if k not in ("CreatedTimestamp", "LastModifiedTimestamp")
        }
        messages = [
            {**m, "attributes": {k: v for k, v in m["attributes"].items() if k != "SentTimestamp"}}
            for m in queue["messages"]
        ]
        view["queues"][name] = {**queue, "attributes": attributes, "messages": messages}
    return view


def test_a_restart_after_compaction_restores_everything_and_the_log_holds_only_what_followed(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    # GIVEN a state written with the log alone (no snapshot yet)
    with endpoint(state) as server:
        populate(server)
        before = full_state(server)
    assert not (state / SNAPSHOT_NAME).exists()
    writes = len(logged(state))
    # WHEN it restarts with compaction due: the log replayed, then a snapshot of it all
    with endpoint(state, compact_bytes=0) as server:
        assert server.replayed == writes
        assert server.app.wal.compactions == 1
        # THEN the snapshot holds it all, and the new log nothing but its header
        assert (state / SNAPSHOT_NAME).exists() and logged(state) == []
        compacted = full_state(server)
        assert replayed_view(compacted) == replayed_view(before)
    # WHEN it restarts from the snapshot alone
    with endpoint(state) as server:
        assert server.app.wal.restored["log_records"] == 0
        assert server.replayed == writes  # every write, restored
        # THEN everything is exactly as it was: tables, items, indexes, streams, queues,
        # messages (their times included)
        assert full_state(server) == compacted
        # AND the log holds the writes made after the snapshot, and only those
        n = more_writes(server)
        tail = logged(state)
        assert len(tail) == n
        assert "sqs_delete" in tail[-1]
        after = full_state(server)
    # WHEN it restarts again: the snapshot loaded, the log's tail replayed after it
    with endpoint(state) as server:
        restored = server.app.wal.restored
        assert restored["log_records"] == n and restored["snapshot_items"] > 0
        assert server.replayed == writes + n
        # THEN all of it is back (what the tail's replay makes anew aside)
        again = full_state(server)
        assert replayed_view(again) == replayed_view(after)
    # AND a snapshot that holds the tail too brings back exactly what it saw
    with endpoint(state, compact_bytes=0) as server:
        compacted = full_state(server)
        assert replayed_view(compacted) == replayed_view(after)
    with endpoint(state) as server:
        assert server.app.wal.restored["log_records"] == 0
        assert full_state(server) == compacted


def test_the_stream_carries_on_after_a_snapshot_with_its_arn_and_sequence_numbers(
    tmp_path: Path,
) -> None:
    """A checkpoint taken before the restart is a position in the same stream after it."""
    state = tmp_path / "state"
    with endpoint(state) as server:
        populate(server)
        dynamodb, streams, _sqs = clients(server)
        arn = dynamodb.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
        records = _stream(streams, arn)["records"]
        checkpoint = records[-3][1]
    with endpoint(state, compact_bytes=0) as server:
        pass
    with endpoint(state) as server:
        assert server.app.wal.restored["snapshot_items"] > 0
        dynamodb, streams, _sqs = clients(server)
        assert (
            dynamodb.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"] == arn
        )
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
        iterator = streams.get_shard_iterator(
            StreamArn=arn,
            ShardId=shard,
            ShardIteratorType="AFTER_SEQUENCE_NUMBER",
            SequenceNumber=checkpoint,
        )["ShardIterator"]
        dynamodb.put_item(TableName=INTAKE_TABLE.name, Item=_intake("e9", "new"))
        got = streams.get_records(ShardIterator=iterator)["Records"]
        # the two records after the checkpoint, then the new write's, numbered next
        assert [r["dynamodb"]["SequenceNumber"] for r in got[:2]] == [r[1] for r in records[-2:]]
        assert int(got[2]["dynamodb"]["SequenceNumber"]) == int(records[-1][1]) + 1
        assert got[2]["dynamodb"]["Keys"]["signup_id"] == {"S": "new"}


def test_stream_records_past_the_retention_are_trimmed_as_dynamodb_trims_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    with endpoint(state) as server:
        populate(server)
        dynamodb, streams, _sqs = clients(server)
        arn = dynamodb.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
        records = _stream(streams, arn)["records"]
    # A snapshot taken as if a day had passed since those writes
    monkeypatch.setenv(persist.STREAM_RETENTION_ENV, "0")
    with endpoint(state, compact_bytes=0):
        pass
    monkeypatch.delenv(persist.STREAM_RETENTION_ENV)
    with endpoint(state) as server:
        dynamodb, streams, _sqs = clients(server)
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]
        # the shard starts after the trimmed records; nothing is left before it
        assert (
            int(shard["SequenceNumberRange"]["StartingSequenceNumber"]) == int(records[-1][1]) + 1
        )
        assert _stream(streams, arn)["records"] == []
        # a checkpoint inside the trimmed part: TrimmedDataAccessException, as from AWS
        with pytest.raises(ClientError, match="TrimmedDataAccessException"):
            streams.get_shard_iterator(
                StreamArn=arn,
                ShardId=shard["ShardId"],
                ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                SequenceNumber=records[-2][1],
            )
        # a checkpoint on the last trimmed record reads on: nothing after it was lost
        iterator = streams.get_shard_iterator(
            StreamArn=arn,
            ShardId=shard["ShardId"],
            ShardIteratorType="AFTER_SEQUENCE_NUMBER",
            SequenceNumber=records[-1][1],
        )["ShardIterator"]
        dynamodb.put_item(TableName=INTAKE_TABLE.name, Item=_intake("e9", "new"))
        (got,) = streams.get_records(ShardIterator=iterator)["Records"]
        assert int(got["dynamodb"]["SequenceNumber"]) == int(records[-1][1]) + 1
        # the items themselves are all there
        assert len(_scan(dynamodb, TableName=INTAKE_TABLE.name)) == 30 + 1


# -- crashes in the middle of a compaction ----------------------------------------------


class Crash(BaseException):
    """The process dying at that point: nothing after it runs, no cleanup."""


def crash_points() -> list[str]:
    return [
        "snapshot half written",
        "snapshot written, not renamed",
        "snapshot renamed, directory not synced",
        "snapshot in place, new log half written",
        "new log written, not renamed",
        "new log renamed, directory not synced",
    ]


def _crash_at(point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next compaction die at ``point``."""
    real_replace, real_fsync_dir, real_open = os.replace, persist._fsync_dir, open
    renames: list[str] = []

    def replace(src: Any, dst: Any) -> None:
        name = Path(dst).name
        if point == "snapshot written, not renamed" and name == SNAPSHOT_NAME:
            raise Crash
        if point == "new log written, not renamed" and name == WAL_NAME:
            raise Crash
        real_replace(src, dst)
        renames.append(name)

    def fsync_dir(path: Path) -> None:
        if point == "snapshot renamed, directory not synced" and renames[-1:] == [SNAPSHOT_NAME]:
            raise Crash
        if point == "new log renamed, directory not synced" and renames[-1:] == [WAL_NAME]:
            raise Crash
        real_fsync_dir(path)

    class HalfFile:
        def __init__(self, f: Any) -> None:
            self.f = f

        def __enter__(self) -> HalfFile:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.f.close()

        def write(self, data: bytes) -> None:
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise Crash

    def opener(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, mode, *args, **kwargs)
        name = Path(str(file)).name
        if mode == "wb" and (
            (point == "snapshot half written" and name == SNAPSHOT_NAME + ".tmp")
            or (point == "snapshot in place, new log half written" and name == WAL_NAME + ".tmp")
        ):
            return HalfFile(f)
        return f

    monkeypatch.setattr(persist.os, "replace", replace)
    monkeypatch.setattr(persist, "_fsync_dir", fsync_dir)
    monkeypatch.setattr("builtins.open", opener)


def snapshot_then_log(state: Path) -> dict[str, Any]:
    """A state directory with a snapshot and a log of more acknowledged writes after it;
    the full state those make."""
    with endpoint(state) as server:
        populate(server)
    with endpoint(state, compact_bytes=0):
        pass
    with endpoint(state) as server:
        more_writes(server)
        return full_state(server)


@pytest.fixture(scope="module")
def _snapshot_then_log_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any]]:
    """``snapshot_then_log`` made once for the module's tests, each of which starts from a
    copy of its files (the files are all a start reads: a copy restores the same state)."""
    state = tmp_path_factory.mktemp("snapshot-then-log") / "state"
    with pytest.MonkeyPatch.context() as monkeypatch:
        _without_endpoint_environment(monkeypatch)
        return state, snapshot_then_log(state)


@pytest.fixture
def snapshot_and_log(
    _snapshot_then_log_once: tuple[Path, dict[str, Any]], tmp_path: Path
) -> tuple[Path, dict[str, Any]]:
    """A copy of ``snapshot_then_log``'s directory, in this test's own, and its full state."""
    made, expected = _snapshot_then_log_once
    state = tmp_path / "state"
    shutil.copytree(made, state)
    return state, copy.deepcopy(expected)


@pytest.mark.parametrize("point", crash_points())
def test_a_crash_in_the_middle_of_a_compaction_loses_nothing_acknowledged(
    snapshot_and_log: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    from moto.core.base_backend import BackendDict

    # GIVEN a state with a snapshot and a log after it, more acknowledged writes on top
    state, expected = snapshot_and_log
    # WHEN the start's compaction dies at ``point`` (the process gone, its files as left)
    BackendDict.reset()
    with monkeypatch.context() as patched:
        _crash_at(point, patched)
        os.environ[persist.COMPACT_BYTES_ENV] = "0"
        try:
            with pytest.raises(Crash):
                EmbeddedAws("127.0.0.1", 0, state_dir=state)
        finally:
            del os.environ[persist.COMPACT_BYTES_ENV]
    # THEN the next start restores every acknowledged write, whichever files it finds
    # (the log's records, if it replays them, make their messages' times anew)
    with endpoint(state) as server:
        assert replayed_view(full_state(server)) == replayed_view(expected)
        dynamodb, _streams, _sqs = clients(server)
        dynamodb.put_item(TableName=INTAKE_TABLE.name, Item=_intake("e4", "after"))
        expected = full_state(server)
    # AND the state goes on: the next restart, and one that compacts, bring it all back
    with endpoint(state, compact_bytes=0) as server:
        assert replayed_view(full_state(server)) == replayed_view(expected)
    with endpoint(state) as server:
        assert replayed_view(full_state(server)) == replayed_view(expected)
        assert server.app.wal.restored["log_records"] == 0
        assert not list(state.glob("*.tmp"))


def test_a_torn_append_after_a_snapshot_is_cut_off_and_the_rest_restored(
    snapshot_and_log: tuple[Path, dict[str, Any]],
) -> None:
    state, expected = snapshot_and_log
    with open(state / WAL_NAME, "ab") as f:  # a SIGKILL in the middle of the next append
        f.write(b"\x00\x00\x01\x00garbage")
    with endpoint(state) as server:
        assert server.app.wal.restored["log_records"] == 7
        assert replayed_view(full_state(server)) == replayed_view(expected)


def test_files_that_do_not_belong_together_stop_the_start(tmp_path: Path) -> None:
    """A log that follows another snapshot than the one beside it, a damaged snapshot,
    a snapshot deleted from under its log: an error, never a state nobody had."""
    a, b = tmp_path / "a", tmp_path / "b"
    for state in (a, b):
        with endpoint(state) as server:
            populate(server)
        with endpoint(state, compact_bytes=0) as server:
            more_writes(server)
    (a / WAL_NAME).write_bytes((b / WAL_NAME).read_bytes())
    with pytest.raises(StateFilesError, match="do not belong together"):
        DurableState(a).restore(lambda *args: [])
    data = bytearray((b / SNAPSHOT_NAME).read_bytes())
    data[-10] ^= 0xFF
    (b / SNAPSHOT_NAME).write_bytes(bytes(data))
    with pytest.raises(StateFilesError, match="damaged"):
        DurableState(b).restore(lambda *args: [])
    (b / SNAPSHOT_NAME).unlink()
    with pytest.raises(StateFilesError, match="do not belong together"):
        DurableState(b).restore(lambda *args: [])


def test_a_log_from_before_snapshots_is_replayed_whole_and_compacted(tmp_path: Path) -> None:
    """A state directory written by the previous version: records, no header."""
    state = tmp_path / "state"
    with endpoint(state) as server:
        populate(server)
        expected = full_state(server)
    # the same records, without the header this version writes first
    records = logged(state)
    (state / WAL_NAME).unlink()
    legacy = b"".join(persist._frame(r) for r in records)
    (state / WAL_NAME).write_bytes(legacy)
    assert WriteAheadLog(state / WAL_NAME).header is None
    with endpoint(state) as server:
        assert server.replayed == len(records)
        assert server.app.wal.compactions == 1  # always: the log gets its header
        compacted = full_state(server)
        assert replayed_view(compacted) == replayed_view(expected)
    assert WriteAheadLog(state / WAL_NAME).header is not None
    with endpoint(state) as server:
        assert server.app.wal.restored["log_records"] == 0
        assert full_state(server) == compacted


def test_a_create_queue_that_changes_nothing_is_not_logged(tmp_path: Path) -> None:
    """Every start's ``ensure_resources`` asks for the failure queue again."""
    state = tmp_path / "state"
    with endpoint(state) as server:
        _dynamodb, _streams, sqs = clients(server)
        sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "40"})
        size = (state / WAL_NAME).stat().st_size
        sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "40"})
        sqs.create_queue(QueueName="q")
        assert (state / WAL_NAME).stat().st_size == size
        with pytest.raises(ClientError):  # other attributes: refused, and not logged
            sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "41"})
        sqs.create_queue(QueueName="q", tags={"new": "tag"})  # a change: logged
        assert (state / WAL_NAME).stat().st_size > size
