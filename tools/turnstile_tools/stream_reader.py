"""Reading a DynamoDB stream through the public DynamoDB Streams API, against any endpoint:
its shards, an iterator into a shard, and the shard's records a page (one GetRecords) at a
time.

The local stack's poller (``turnstile_tools.local.poller``) and ``turnstile redrive``
(``turnstile_tools.redrive``) read streams with it; the benchmark reads through the poller. Records
come as GetRecords returns them (boto3's shapes): the poller turns them into what Lambda
delivers (``to_lambda_record``). Nothing here retries or checkpoints: that is the caller's.
Not in the Lambda asset: no function reads a stream itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

__all__ = [
    "MAX_RECORDS_PER_READ",
    "Page",
    "Shard",
    "error_code",
    "list_shards",
    "read_page",
    "read_pages",
    "shard_iterator",
]

#: The most records one GetRecords call may return.
MAX_RECORDS_PER_READ = 1000


@dataclass(frozen=True)
class Shard:
    shard_id: str
    #: The shard this one split from: its records come first, for each key.
    parent_id: str | None
    #: The shard has an ending sequence number: no record will be added to it.
    closed: bool


@dataclass(frozen=True)
class Page:
    """What one GetRecords returned."""

    records: list[dict[str, Any]]
    #: Where the next read starts; None once a closed shard has been read to its end.
    next_iterator: str | None


def list_shards(client: Any, stream_arn: str) -> list[Shard]:
    """The stream's shards, as one DescribeStream lists them."""
    description = client.describe_stream(StreamArn=stream_arn)["StreamDescription"]
    return [
        Shard(
            shard_id=shard["ShardId"],
            parent_id=shard.get("ParentShardId"),
            closed="EndingSequenceNumber" in shard.get("SequenceNumberRange", {}),
        )
        for shard in description.get("Shards", [])
    ]


def shard_iterator(
    client: Any,
    stream_arn: str,
    shard_id: str,
    position: str,
    sequence_number: str | None = None,
) -> str:
    """An iterator into the shard at ``position``: ``TRIM_HORIZON`` (its oldest record),
    ``LATEST``, or ``AT_SEQUENCE_NUMBER``/``AFTER_SEQUENCE_NUMBER`` ``sequence_number``."""
    kwargs: dict[str, Any] = {
        "StreamArn": stream_arn,
        "ShardId": shard_id,
        "ShardIteratorType": position,
    }
    if sequence_number is not None:
        kwargs["SequenceNumber"] = sequence_number
    return str(client.get_shard_iterator(**kwargs)["ShardIterator"])


def read_page(client: Any, iterator: str, limit: int = MAX_RECORDS_PER_READ) -> Page:
    """One GetRecords of at most ``limit`` records from ``iterator``."""
    response = client.get_records(ShardIterator=iterator, Limit=limit)
    return Page(response.get("Records", []), response.get("NextShardIterator"))


def read_pages(
    client: Any, iterator: str | None, limit: int = MAX_RECORDS_PER_READ
) -> Iterator[Page]:
    """Page after page from ``iterator``, up to and including the first empty one (the reader
    has caught up with the shard) or the closed shard's last one."""
    while iterator:
        page = read_page(client, iterator, limit)
        yield page
        if not page.records:
            return
        iterator = page.next_iterator


def error_code(exc: ClientError) -> str | None:
    """The service's error code (``ExpiredIteratorException``, ``TrimmedDataAccessException``)."""
    return exc.response.get("Error", {}).get("Code")
