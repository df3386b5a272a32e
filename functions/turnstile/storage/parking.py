"""Parked events: the parking marker and the parked records of an event (control table).

An event whose group of records keeps failing is *parked* (docs/arrival-order.md): the
stream processor parks its records under ``ControlKey.parked``, sorted by stream sequence
number, and marks the event (``ControlKey.parking``), so the shard moves on; the records
are released in that order once deciding works again. The parking marker is never
deleted, only cleared: its ``version`` grows for ever, so a release that read version N
can never clear a parking that began after it (no ABA).

The marker item, read with the event item before every group, also keeps, parked or not,
``ParkAttr.MAY_REPEAT``: the event's INSERT records may repeat a signup decided already
(an intake record of it was deleted, or a signup was rejected before its event item
existed), so every one has its decision read (``note_may_repeat``; docs/design.md §4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from turnstile.base.clock import parse_timestamp
from turnstile.base.contract import DUE_HOLDS_SHARD, Attr, ControlKey, ParkAttr
from turnstile.base.personal_data import intake_expiry
from turnstile.storage.dynamo import (
    ConditionFailed,
    Dynamo,
    control_key,
    event_key,
    from_item,
    to_item,
)
from turnstile.storage.events import EventRecord
from turnstile.storage.intake import IntakeRecord

__all__ = ["MAX_PARKING_ERROR_CHARS", "ParkedEvents"]

#: A parking marker keeps this much of its last error: enough for IAM's refusal
#: (``dynamo.error_text``), which names the role, the action and the resource.
MAX_PARKING_ERROR_CHARS = 400


class ParkedEvents:
    """Parked events' items of the control table; a part of ``SignupStore``, which gives it
    ``dynamo`` and ``control_table``."""

    dynamo: Dynamo
    control_table: str

    def get_event_and_parking(
        self, event_id: str
    ) -> tuple[EventRecord | None, dict[str, Any] | None, bool]:
        """The event item, the event's parking marker (None unless parked), and whether the
        marker item says the event's INSERTs may repeat a signup decided already
        (``ParkAttr.MAY_REPEAT``), in one consistent ``BatchGetItem``: the decision path's
        only read before deciding a group."""
        keys = [event_key(event_id), control_key(ControlKey.parking(event_id))]
        event: EventRecord | None = None
        marker: dict[str, Any] | None = None
        may_repeat = False
        for raw in self.dynamo.batch_get(self.control_table, keys):
            if raw[ControlKey.SK]["S"] == ControlKey.EVENT_SK:
                event = EventRecord.from_item(raw)
            else:
                may_repeat = ParkAttr.MAY_REPEAT in raw
                marker = _if_parked(from_item(raw))
        return event, marker, may_repeat

    def note_may_repeat(self, event_id: str) -> None:
        """Note on the event's marker item (made if there is none: the event item need not
        exist) that its INSERT records may repeat a signup decided already: an intake record
        of it was deleted (it may be put again, a new INSERT), or a signup of it was decided
        without an event item. Never removed; noting it again writes the same item. It
        touches neither the event item nor a parking (``parked_since`` stays as it was)."""
        self.dynamo.call(
            "update_item",
            TableName=self.control_table,
            Key=control_key(ControlKey.parking(event_id)),
            UpdateExpression="SET #event = :event, #repeat = :yes",
            ExpressionAttributeNames={"#event": Attr.EVENT_ID, "#repeat": ParkAttr.MAY_REPEAT},
            ExpressionAttributeValues={":event": {"S": event_id}, ":yes": {"BOOL": True}},
        )

    def get_parking(self, event_id: str) -> dict[str, Any] | None:
        """The event's parking marker, read consistently, if the event is parked."""
        marker = self.dynamo.get(self.control_table, control_key(ControlKey.parking(event_id)))
        return _if_parked(marker) if marker is not None else None

    def parking_markers(self, event_id: str | None = None) -> dict[str, dict[str, Any]]:
        """Parking markers of parked events by event id (one event's, or all: a filtered
        Scan)."""
        if event_id is not None:
            marker = self.get_parking(event_id)
            return {event_id: marker} if marker else {}
        markers = self.dynamo.items(
            "scan",
            TableName=self.control_table,
            ConsistentRead=True,
            FilterExpression="begins_with(#pk, :prefix) AND #sk = :marker AND "
            "attribute_exists(#since)",
            ExpressionAttributeNames={
                "#pk": ControlKey.PK,
                "#sk": ControlKey.SK,
                "#since": ParkAttr.PARKED_SINCE,
            },
            ExpressionAttributeValues={
                ":prefix": {"S": ControlKey.PARK_PREFIX},
                ":marker": {"S": ControlKey.PARKED_SK},
            },
        )
        return {item[Attr.EVENT_ID]: item for item in markers}

    def park(
        self, event_id: str, requests: Sequence[IntakeRecord], now: str, error: str | None
    ) -> int:
        """Park records of an event (keeping their sequence numbers) and mark it parked.

        The records are written first and the parking marker bumped second, so a release
        that ran in between either fails to clear the marker (the version moved) or cleared
        it before the bump, which parks the event again. Parking a record twice writes the
        same item. Returns the marker's new version. Raises ``ValueError`` for a record
        without a stream sequence number (it cannot be ordered).
        """
        items: dict[str, dict[str, Any]] = {}
        for request in requests:
            pk, sk = ControlKey.parked(event_id, request.sequence_number)
            items.setdefault(
                sk,
                to_item(
                    {
                        ControlKey.PK: pk,
                        ControlKey.SK: sk,
                        Attr.EVENT_ID: event_id,
                        Attr.SIGNUP_ID: request.signup_id,
                        Attr.SEQUENCE_NUMBER: request.sequence_number,
                        Attr.SEATS: request.seats,
                        Attr.ATTRIBUTES: dict(request.attributes) or None,
                        Attr.SUBMITTED_AT: request.submitted_at,
                        ParkAttr.PROBLEM: request.problem,
                        Attr.REQUEST: request.request,
                        Attr.REQUEST_COUNT: request.request_count,
                        Attr.REQUESTS: list(request.requests) if request.requests else None,
                        ParkAttr.INTAKE_EXPIRES_AT: request.expires_at,
                        Attr.OWNER: request.owner,
                    }
                ),
            )
        self.dynamo.put_all(self.control_table, list(items.values()))
        first = min(requests, key=lambda r: int(r.sequence_number)).sequence_number
        names = {
            "#version": Attr.VERSION,
            "#event": Attr.EVENT_ID,
            "#since": ParkAttr.PARKED_SINCE,
            "#first": ParkAttr.FIRST_SEQUENCE_NUMBER,
            "#due": Attr.HOLD_DUE_AT,
            "#shard": Attr.HOLD_DUE_SHARD,
        }
        values: dict[str, Any] = {
            ":one": {"N": "1"},
            ":event": {"S": event_id},
            ":now": {"S": now},
            ":first": {"S": first},
            ":due": {"N": str(_ms(now))},
            ":shard": {"S": DUE_HOLDS_SHARD},
        }
        # Due at once in the due-holds index: the next period wakes the event, whose
        # processor then releases it (no producer's record needed).
        expression = (
            "ADD #version :one SET #event = :event, #since = if_not_exists(#since, :now), "
            "#first = if_not_exists(#first, :first), #due = :due, #shard = :shard"
        )
        if error:
            expression += ", #error = :error"
            names["#error"] = ParkAttr.ERROR
            values[":error"] = {"S": error[:MAX_PARKING_ERROR_CHARS]}
        response = self.dynamo.call(
            "update_item",
            TableName=self.control_table,
            Key=control_key(ControlKey.parking(event_id)),
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="UPDATED_NEW",
        )
        return int(response["Attributes"][Attr.VERSION]["N"])

    def parked_records(self, event_id: str) -> list[IntakeRecord]:
        """The event's parked records, in arrival order, read consistently."""
        pk, _ = ControlKey.parking(event_id)
        parked = self.dynamo.items(
            "query",
            TableName=self.control_table,
            ConsistentRead=True,
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :prefix)",
            ExpressionAttributeNames={"#pk": ControlKey.PK, "#sk": ControlKey.SK},
            ExpressionAttributeValues={
                ":pk": {"S": pk},
                ":prefix": {"S": ControlKey.PARKED_PREFIX},
            },
        )
        requests: list[IntakeRecord] = []
        for item in parked:
            attributes = item.get(Attr.ATTRIBUTES)
            requests.append(
                IntakeRecord(
                    event_id=event_id,
                    signup_id=str(item[Attr.SIGNUP_ID]),
                    sequence_number=str(item[Attr.SEQUENCE_NUMBER]),
                    seats=int(item.get(Attr.SEATS, 0)),
                    attributes=dict(attributes) if isinstance(attributes, Mapping) else {},
                    submitted_at=item.get(Attr.SUBMITTED_AT),
                    problem=item.get(ParkAttr.PROBLEM),
                    request=item.get(Attr.REQUEST),
                    request_count=(
                        int(item[Attr.REQUEST_COUNT]) if Attr.REQUEST_COUNT in item else None
                    ),
                    requests=(
                        tuple(str(r) for r in item[Attr.REQUESTS])
                        if isinstance(item.get(Attr.REQUESTS), list)
                        else None
                    ),
                    expires_at=intake_expiry(item.get(ParkAttr.INTAKE_EXPIRES_AT)),
                    owner=item.get(Attr.OWNER) if isinstance(item.get(Attr.OWNER), str) else None,
                )
            )
        return requests

    def unpark(self, event_id: str, sequence_numbers: Iterable[str]) -> None:
        """Delete parked records (once they are decided); deleting one twice is harmless."""
        keys = {ControlKey.parked(event_id, s) for s in sequence_numbers}
        requests = [{"DeleteRequest": {"Key": control_key(k)}} for k in sorted(keys)]
        self.dynamo.batch_write(self.control_table, requests)

    def clear_parking(self, event_id: str, version: int) -> bool:
        """Clear the parking marker if its version is still ``version``; False if records
        were parked meanwhile (the event stays parked). The marker stays, cleared, with its
        version."""
        try:
            self.dynamo.call(
                "update_item",
                TableName=self.control_table,
                Key=control_key(ControlKey.parking(event_id)),
                UpdateExpression="REMOVE #since, #first, #error, #due, #shard",
                ConditionExpression="#version = :version",
                ExpressionAttributeNames={
                    "#since": ParkAttr.PARKED_SINCE,
                    "#first": ParkAttr.FIRST_SEQUENCE_NUMBER,
                    "#error": ParkAttr.ERROR,
                    "#version": Attr.VERSION,
                    "#due": Attr.HOLD_DUE_AT,
                    "#shard": Attr.HOLD_DUE_SHARD,
                },
                ExpressionAttributeValues={":version": {"N": str(version)}},
            )
        except ConditionFailed:
            return False
        return True

    def release_due(self, event_id: str, due_ms: int) -> None:
        """When a parked event's release is tried next (after one that failed): its parking
        marker's place in the due-holds index. Nothing if it is not parked any more."""
        with contextlib.suppress(ConditionFailed):
            self.dynamo.call(
                "update_item",
                TableName=self.control_table,
                Key=control_key(ControlKey.parking(event_id)),
                UpdateExpression="SET #due = :due, #shard = :shard",
                ConditionExpression="attribute_exists(#since)",
                ExpressionAttributeNames={
                    "#due": Attr.HOLD_DUE_AT,
                    "#shard": Attr.HOLD_DUE_SHARD,
                    "#since": ParkAttr.PARKED_SINCE,
                },
                ExpressionAttributeValues={
                    ":due": {"N": str(due_ms)},
                    ":shard": {"S": DUE_HOLDS_SHARD},
                },
            )


def _ms(timestamp: str) -> int:
    """Epoch milliseconds of a timestamp turnstile wrote (now, if it is none)."""
    parsed = parse_timestamp(timestamp)
    return int((parsed or datetime.now(UTC)).timestamp() * 1000)


def _if_parked(marker: dict[str, Any]) -> dict[str, Any] | None:
    """A parking marker counts only while it is set (a released one keeps just its
    version)."""
    return marker if ParkAttr.PARKED_SINCE in marker else None
