"""The on-failure queue, as the sweeper reads it: the event source's notes of the batches it
gave up on.

When the stream processor fails a batch past the event source's retries (or its records
grow too old), Lambda sends a note of it to the on-failure queue: the stream, the shard and
the sequence range, never the records. A first put carries no ``undecided`` marker (it would
cost an index entry and its removal for every signup), so these notes are how the sweeper
learns at once that records were dropped: any note makes its next run read the whole intake
table and re-emit every undecided record, whatever its age; the notes it read are deleted
once that run has re-emitted everything it found (a re-emitted record is marked, so the
index follows it from then on). A record lost in any other way (a stream that trimmed it
before any delivery) is found by the daily full scan.

Only ``ReceiveMessage`` and ``DeleteMessage`` are used (the sweeper's grant on the queue).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FAILURE_QUEUE_URL_ENV", "FailureNote", "FailureQueue"]

#: Where the deployed sweeper (and the local stack) finds the queue's URL.
FAILURE_QUEUE_URL_ENV = "TURNSTILE_FAILURE_QUEUE_URL"

#: The most messages one ReceiveMessage or DeleteMessageBatch takes (SQS's limit).
_SQS_BATCH = 10


@dataclass(frozen=True)
class FailureNote:
    """One message of the queue, as received: what deleting it needs."""

    message_id: str
    receipt: str


class FailureQueue:
    """The on-failure queue at ``url``, through an SQS client."""

    def __init__(self, sqs: Any, url: str) -> None:
        self.sqs = sqs
        self.url = url

    @classmethod
    def from_environment(cls, session: Any = None) -> FailureQueue | None:
        """The queue named by ``$TURNSTILE_FAILURE_QUEUE_URL``, or None when it is unset."""
        url = os.environ.get(FAILURE_QUEUE_URL_ENV)
        if not url:
            return None
        if session is None:
            import boto3

            session = boto3.Session()
        return cls(session.client("sqs"), url)

    def receive(self, limit: int, hide_s: int) -> list[FailureNote]:
        """Up to ``limit`` notes, each hidden from other readers for ``hide_s`` seconds
        (0: a look that leaves them visible). Stops at the first empty answer."""
        notes: dict[str, FailureNote] = {}
        while len(notes) < limit:
            answer = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=min(_SQS_BATCH, limit - len(notes)),
                VisibilityTimeout=hide_s,
                WaitTimeSeconds=0,
            )
            fresh = [m for m in answer.get("Messages", []) if m["MessageId"] not in notes]
            if not fresh:
                break
            for message in fresh:
                notes[message["MessageId"]] = FailureNote(
                    message["MessageId"], message["ReceiptHandle"]
                )
            if hide_s == 0:
                break  # the same messages would come back: one look is enough
        return list(notes.values())

    def delete(self, notes: Sequence[FailureNote]) -> int:
        """Delete these notes; how many SQS deleted (a note whose receipt expired, because
        another reader received it since, stays for that reader)."""
        deleted = 0
        for start in range(0, len(notes), _SQS_BATCH):
            chunk = notes[start : start + _SQS_BATCH]
            answer = self.sqs.delete_message_batch(
                QueueUrl=self.url,
                Entries=[{"Id": str(i), "ReceiptHandle": n.receipt} for i, n in enumerate(chunk)],
            )
            deleted += len(answer.get("Successful", []))
        return deleted
