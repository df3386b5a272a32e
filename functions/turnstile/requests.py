"""Requests: a producer asks to confirm or cancel a signup (docs/lifecycle.md, §10).

A part of ``SignupStore`` as ``events`` and ``hold`` are (it needs ``dynamo``,
``intake_table`` and ``main_table``). A request is recorded on the signup's own intake
item, so DynamoDB Streams delivers it after the signup, in order with the event's other
records, and the stream processor judges it. The API and the CLI answer at once, from one
``TransactWriteItems``:

* an ``Update`` of the intake item: ``SET request = :kind, undecided = :shard ADD
  request_count :one``, conditioned on the item existing (the marker puts it back in the
  sweeper's index until the processor has answered it);
* a ``ConditionCheck`` of the decision item: ``status = HELD AND hold_expires_at > now``
  for a confirm, ``status IN (HELD, ACCEPTED, WAITLISTED)`` for a cancel, with
  ``ReturnValuesOnConditionCheckFailure = ALL_OLD``.

So a request the signup's status refuses is never recorded, and the refusal says why from
the transaction's own answer: the cancellation reason of the failed check carries the
decision item as it was (none: the signup is not decided yet, PENDING). The processor
still judges every recorded request: a confirm recorded a moment before its hold lapses
is refused ``hold_expired`` there, and the decision item's ``last_refusal`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnstile.contract import Attr, RequestKind, Status, undecided_shard
from turnstile.dynamo import Dynamo, TransactionCancelled, from_item, signup_key
from turnstile.errors import RequestRefusedError, SignupNotFoundError

__all__ = ["ALLOWED_FROM", "RequestRecorded", "SignupRequests", "request_transition"]

#: The statuses a request may be recorded from (docs/lifecycle.md, §3): a confirm only
#: from HELD (before ``hold_expires_at``), a cancel from HELD, ACCEPTED or WAITLISTED.
ALLOWED_FROM: Mapping[str, tuple[str, ...]] = {
    RequestKind.CONFIRM: (Status.HELD,),
    RequestKind.CANCEL: (Status.HELD, Status.ACCEPTED, Status.WAITLISTED),
}

#: The transaction's actions, in order: the cancellation reasons come in this order too.
_INTAKE, _DECISION = 0, 1
_FAILED = "ConditionalCheckFailed"


@dataclass(frozen=True)
class RequestRecorded:
    """A request written to the signup's intake item; the processor will answer it."""

    event_id: str
    signup_id: str
    request: str


class _Tables(Protocol):
    dynamo: Dynamo
    intake_table: str
    main_table: str


def request_transition(
    tables: _Tables, event_id: str, signup_id: str, kind: str, now: str
) -> RequestRecorded:
    """Record a confirm or cancel of a signup if its current status allows it.

    ``now`` is ``clock.utc_now()``: a confirm is recorded only while ``hold_expires_at``
    (the same fixed-width ISO-8601 format, so the strings compare as times) is after it.
    Raises ``SignupNotFoundError`` when there is no intake item, ``RequestRefusedError``
    with the signup's current status when the status does not allow the request, and
    ``ValueError`` for a ``kind`` that is not a ``RequestKind``.
    """
    if kind not in ALLOWED_FROM:
        raise ValueError(f"not a request: {kind!r}")
    key = signup_key(event_id, signup_id)
    names = {"#status": Attr.STATUS}
    values: dict[str, Any] = {}
    if kind == RequestKind.CONFIRM:
        condition = "#status = :held AND #exp > :now"
        names["#exp"] = Attr.HOLD_EXPIRES_AT
        values = {":held": {"S": Status.HELD}, ":now": {"S": now}}
    else:
        allowed = ALLOWED_FROM[kind]
        placeholders = [f":s{i}" for i in range(len(allowed))]
        condition = f"#status IN ({', '.join(placeholders)})"
        values = {p: {"S": s} for p, s in zip(placeholders, allowed, strict=True)}
    actions = [
        {
            "Update": {
                "TableName": tables.intake_table,
                "Key": key,
                "UpdateExpression": (
                    "SET #request = :kind, #undecided = :shard ADD #request_count :one"
                ),
                "ConditionExpression": "attribute_exists(#signup)",
                "ExpressionAttributeNames": {
                    "#request": Attr.REQUEST,
                    "#undecided": Attr.UNDECIDED,
                    "#request_count": Attr.REQUEST_COUNT,
                    "#signup": Attr.SIGNUP_ID,
                },
                "ExpressionAttributeValues": {
                    ":kind": {"S": kind},
                    ":shard": {"S": undecided_shard(event_id, signup_id)},
                    ":one": {"N": "1"},
                },
            }
        },
        {
            "ConditionCheck": {
                "TableName": tables.main_table,
                "Key": key,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
    ]
    try:
        tables.dynamo.call("transact_write_items", TransactItems=actions)
    except TransactionCancelled as exc:
        raise _refusal(tables, exc, event_id, signup_id, kind) from None
    return RequestRecorded(event_id=event_id, signup_id=signup_id, request=kind)


def _refusal(
    tables: _Tables, exc: TransactionCancelled, event_id: str, signup_id: str, kind: str
) -> Exception:
    """Why the transaction was cancelled, as the error to raise, from its own answer.

    DynamoDB answers one cancellation reason per action, in order; a failed
    ``ConditionCheck`` with ``ALL_OLD`` carries the decision item as it was, and none when
    there is no decision item (moto does the same). Only an endpoint that names no reasons
    at all leaves the answer unknown: then, and only then, one consistent read of each
    item tells (the state it shows may be a moment later than the refusal's).
    """
    reasons = exc.response.get("CancellationReasons") or []
    if len(reasons) > _DECISION:
        if reasons[_INTAKE].get("Code") == _FAILED:
            return _not_found(event_id, signup_id)
        if reasons[_DECISION].get("Code") == _FAILED:
            item = reasons[_DECISION].get("Item")
            decision = from_item(item) if item else None
            return _refused(event_id, signup_id, kind, decision)
        return exc  # pragma: no cover - a cancellation for any other reason
    if tables.dynamo.get(tables.intake_table, signup_key(event_id, signup_id)) is None:
        return _not_found(event_id, signup_id)
    decision = tables.dynamo.get(tables.main_table, signup_key(event_id, signup_id))
    return _refused(event_id, signup_id, kind, decision)


def _not_found(event_id: str, signup_id: str) -> SignupNotFoundError:
    return SignupNotFoundError(f"no signup {signup_id!r} for event {event_id!r}")


def _refused(
    event_id: str, signup_id: str, kind: str, decision: Mapping[str, Any] | None
) -> RequestRefusedError:
    decision = decision or {}
    status = decision.get(Attr.STATUS)
    expires = decision.get(Attr.HOLD_EXPIRES_AT)
    reason = decision.get(Attr.REASON)
    return RequestRefusedError(
        event_id,
        signup_id,
        kind,
        status if isinstance(status, str) else Status.PENDING,
        hold_expires_at=expires if isinstance(expires, str) else None,
        reason=reason if isinstance(reason, str) else None,
    )


class SignupRequests:
    """The requests part of ``SignupStore`` (``request_transition``); it needs ``dynamo``,
    ``intake_table`` and ``main_table``, as ``Tables`` gives them."""

    dynamo: Dynamo
    intake_table: str
    main_table: str

    def request_transition(
        self, event_id: str, signup_id: str, kind: str, now: str
    ) -> RequestRecorded:
        """See ``request_transition``."""
        return request_transition(self, event_id, signup_id, kind, now)
