"""``turnstile redrive``: get the batches in the on-failure queue decided.

A message holds only shard and sequence metadata (as on AWS). The records it points at are
read from the stream while it retains them, else found in the intake table (which outlives
the stream); the undecided ones are re-emitted into the stream, and the message is deleted
only once every one of them is decided.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from turnstile.base.contract import Attr
from turnstile.jobs.sweeper import find_undecided
from turnstile.storage.store import SignupStore
from turnstile_tools.stream_reader import read_pages, shard_iterator

__all__ = ["RedriveResult", "redrive_queue"]

log = logging.getLogger(__name__)


@dataclass
class RedriveResult:
    messages: int = 0
    deleted: int = 0
    kept: int = 0
    from_stream: int = 0
    from_intake: int = 0
    re_emitted: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _keys_from_stream(streams: Any, info: dict[str, Any]) -> list[tuple[str, str]] | None:
    """The (event_id, signup_id) of the batch's records, or None if the stream lost them."""
    start, end = int(info["startSequenceNumber"]), int(info["endSequenceNumber"])
    try:
        iterator = shard_iterator(
            streams,
            info["streamArn"],
            info["shardId"],
            "AT_SEQUENCE_NUMBER",
            info["startSequenceNumber"],
        )
        keys: list[tuple[str, str]] = []
        for page in read_pages(streams, iterator):
            for record in page.records:
                if int(record["dynamodb"]["SequenceNumber"]) > end:
                    return keys
                if record.get("eventName") in {"INSERT", "MODIFY"}:
                    k = record["dynamodb"]["Keys"]
                    keys.append((k[Attr.EVENT_ID]["S"], k[Attr.SIGNUP_ID]["S"]))
            if not page.records:
                return keys
        return keys if keys or start > end else None
    except (BotoCoreError, ClientError, KeyError, AssertionError) as exc:
        log.warning("stream no longer holds the batch (%s): reading intake instead", exc)
        return None


def redrive_queue(
    store: SignupStore,
    sqs: Any,
    queue_url: str,
    streams: Any,
    wait_s: float = 60.0,
    poll_s: float = 0.5,
    max_messages: int = 1000,
    sleep: Callable[[float], None] = time.sleep,
) -> RedriveResult:
    """Drain the on-failure queue once; keep any message whose records are not decided.

    Every message is read once per call (a kept one becomes visible again later, for the
    next call); all their undecided records are re-emitted together, then awaited together.
    """
    result = RedriveResult()
    seen: set[str] = set()
    batches: list[tuple[dict[str, Any], list[tuple[str, str]]]] = []
    intake_fallback: list[tuple[str, str]] | None = None
    while len(seen) < max_messages:
        response = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=int(wait_s) + 60
        )
        fresh = [m for m in response.get("Messages", []) if m["MessageId"] not in seen]
        if not fresh:
            break
        for message in fresh:
            seen.add(message["MessageId"])
            result.messages += 1
            try:
                info = json.loads(message["Body"])["DDBStreamBatchInfo"]
            except (KeyError, ValueError, TypeError):
                result.errors.append(f"not an on-failure record: {message['Body'][:200]}")
                result.kept += 1
                continue
            keys = _keys_from_stream(streams, info)
            if keys is None:
                # Past retention: everything still undecided in intake is what it pointed
                # at (or a superset of it, which re-emitting cannot harm).
                if intake_fallback is None:
                    intake_fallback = [
                        (u.event_id, u.signup_id) for u in find_undecided(store, min_age_s=0)
                    ]
                keys = intake_fallback
                result.from_intake += len(keys)
            else:
                result.from_stream += len(keys)
            batches.append((message, keys))

    pending = _undecided(store, sorted({k for _, keys in batches for k in keys}))
    for event_id, signup_id in pending:
        if store.re_emit(event_id, signup_id):
            result.re_emitted += 1
    deadline = time.monotonic() + wait_s
    while pending and time.monotonic() < deadline:
        sleep(poll_s)
        pending = _undecided(store, pending)
    still = set(pending)
    for message, keys in batches:
        left = [k for k in keys if k in still]
        if left:
            result.kept += 1
            result.errors.append(f"{len(left)} records still undecided; message kept")
            continue
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        result.deleted += 1
    return result


def _undecided(store: SignupStore, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    by_event: dict[str, list[str]] = {}
    for event_id, signup_id in keys:
        by_event.setdefault(event_id, []).append(signup_id)
    left: list[tuple[str, str]] = []
    for event_id, signup_ids in by_event.items():
        decided = set(store.get_decisions(event_id, signup_ids))
        exists = set(store.get_intakes(event_id, signup_ids))
        left += [(event_id, s) for s in signup_ids if s not in decided and s in exists]
    return left
