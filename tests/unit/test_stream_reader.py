"""``turnstile_tools.stream_reader`` against a scripted streams client: where a read of pages
stops."""

from __future__ import annotations

from typing import Any

from turnstile_tools.stream_reader import list_shards, read_pages, shard_iterator


class ScriptedStreams:
    """Answers GetRecords from ``pages`` (iterator -> (records, next iterator))."""

    def __init__(self, pages: dict[str, tuple[list[str], str | None]]) -> None:
        self.pages = pages
        self.reads: list[tuple[str, int]] = []
        self.iterator_requests: list[dict[str, Any]] = []

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:
        self.reads.append((ShardIterator, Limit))
        records, following = self.pages[ShardIterator]
        response: dict[str, Any] = {"Records": [{"eventID": r} for r in records]}
        if following is not None:
            response["NextShardIterator"] = following
        return response

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.iterator_requests.append(kwargs)
        return {"ShardIterator": "it-0"}

    def describe_stream(self, StreamArn: str) -> dict[str, Any]:
        return {
            "StreamDescription": {
                "Shards": [
                    {
                        "ShardId": "a",
                        "SequenceNumberRange": {
                            "StartingSequenceNumber": "1",
                            "EndingSequenceNumber": "9",
                        },
                    },
                    {
                        "ShardId": "b",
                        "ParentShardId": "a",
                        "SequenceNumberRange": {"StartingSequenceNumber": "10"},
                    },
                ]
            }
        }


def ids(pages: Any) -> list[list[str]]:
    return [[r["eventID"] for r in page.records] for page in pages]


def test_pages_are_read_until_one_comes_back_empty():
    # GIVEN an open shard: two pages of records, then nothing new (yet)
    streams = ScriptedStreams(
        {"it-0": (["r1", "r2"], "it-1"), "it-1": (["r3"], "it-2"), "it-2": ([], "it-3")}
    )
    # WHEN its pages are read
    pages = list(read_pages(streams, "it-0", limit=2))
    # THEN the reading stops at the empty page (caught up), which it returns too
    assert ids(pages) == [["r1", "r2"], ["r3"], []]
    assert streams.reads == [("it-0", 2), ("it-1", 2), ("it-2", 2)]
    assert pages[-1].next_iterator == "it-3"


def test_pages_of_a_closed_shard_end_with_its_last_one():
    # GIVEN a closed shard: its last page has no next iterator
    streams = ScriptedStreams({"it-0": (["r1"], "it-1"), "it-1": (["r2"], None)})
    # WHEN its pages are read
    pages = list(read_pages(streams, "it-0"))
    # THEN the last one ends the reading, with no further GetRecords
    assert ids(pages) == [["r1"], ["r2"]]
    assert pages[-1].next_iterator is None
    assert [iterator for iterator, _ in streams.reads] == ["it-0", "it-1"]


def test_no_iterator_reads_nothing():
    streams = ScriptedStreams({})
    assert list(read_pages(streams, None)) == []
    assert streams.reads == []


def test_shard_iterator_asks_for_a_sequence_number_only_when_given_one():
    streams = ScriptedStreams({})
    shard_iterator(streams, "arn", "a", "TRIM_HORIZON")
    shard_iterator(streams, "arn", "a", "AFTER_SEQUENCE_NUMBER", "42")
    assert streams.iterator_requests == [
        {"StreamArn": "arn", "ShardId": "a", "ShardIteratorType": "TRIM_HORIZON"},
        {
            "StreamArn": "arn",
            "ShardId": "a",
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "SequenceNumber": "42",
        },
    ]


def test_shards_say_their_parent_and_whether_they_are_closed():
    shards = list_shards(ScriptedStreams({}), "arn")
    assert [(s.shard_id, s.parent_id, s.closed) for s in shards] == [
        ("a", None, True),
        ("b", "a", False),
    ]
