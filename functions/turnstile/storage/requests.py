"""Requests: a producer asks to confirm or cancel a signup (docs/lifecycle.md, §10).

A part of ``SignupStore`` as ``events`` and ``parking`` are (it needs ``dynamo``,
``intake_table`` and ``main_table``). A request is recorded on the signup's own intake
item, so DynamoDB Streams delivers it after the signup, in order with the event's other
records, and the stream processor judges it. The API and the CLI answer at once, from one
``TransactWriteItems``:

* an ``Update`` of the intake item: ``SET request = :kind, requests =
  list_append(if_not_exists(requests, :empty), :kinds), undecided = :shard ADD
  request_count :one``, conditioned on the item existing (the marker puts it back in the
  sweeper's index until the processor has answered it; ``requests`` is the ordered log a
  recovery from intake answers every request from);
* a ``ConditionCheck`` of the decision item: ``status = HELD AND hold_expires_at > now``
  for a confirm, ``status IN (HELD, ACCEPTED, WAITLISTED)`` for a cancel, with
  ``ReturnValuesOnConditionCheckFailure = ALL_OLD``.

So a request the signup's status refuses is never recorded, and the refusal says why from
the transaction's own answer: the cancellation reason of the failed check carries the
decision item as it was (none: the signup is not decided yet, PENDING). The processor
still judges every recorded request: a confirm recorded a moment before its hold lapses
is refused ``hold_expired`` there, and the decision item's ``last_refusal`` says so.

A commit whose items are not written yet (a processor stopped between the two writes, or
still writing) makes a decision item say less than the event knows: a promoted signup
still reads WAITLISTED. Before refusing, the answer is checked against the event's last
journal, the state the request will be applied to: if that allows it, the request is
recorded (conditioned on the item being as it was read), and the processor, which writes
the journal out before it decides anything new, judges it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnstile.base.contract import Attr, RequestKind, Status, undecided_shard
from turnstile.base.errors import RequestRefusedError, SignupNotFoundError
from turnstile.storage.dynamo import Dynamo, TransactionCancelled, from_item, signup_key

__all__ = ["ALLOWED_FROM", "ANYONE", "RequestRecorded", "SignupRequests", "request_transition"]

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
    #: ``EventItems.last_journal``, which ``SignupStore`` has beside this part.
    last_journal: Callable[[str], Any]


#: ``request_transition``'s ``owner`` when anyone may ask (an organizer, an admin).
ANYONE: Any = object()


def request_transition(
    tables: _Tables,
    event_id: str,
    signup_id: str,
    kind: str,
    now: str,
    owner: Any = ANYONE,
) -> RequestRecorded:
    """Record a confirm or cancel of a signup if its current status allows it.

    ``now`` is ``clock.utc_now()``: a confirm is recorded only while ``hold_expires_at``
    (the same fixed-width ISO-8601 format, so the strings compare as times) is after it.
    Raises ``SignupNotFoundError`` when there is no intake item (or, with ``owner``, when
    it is not that owner's: checked by the same transaction), ``RequestRefusedError`` with
    the signup's current status when the status does not allow the request, and
    ``ValueError`` for a ``kind`` that is not a ``RequestKind``.
    """
    if kind not in ALLOWED_FROM:
        raise ValueError(f"not a request: {kind!r}")
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
    try:
        _record(tables, event_id, signup_id, kind, condition, names, values, owner)
    except TransactionCancelled as exc:
        refusal = _refusal(tables, exc, event_id, signup_id, kind)
        if not isinstance(refusal, RequestRefusedError):
            raise refusal from None
        # The item may lag the event's last commit: judge against what it will be.
        pending = _pending(tables, event_id, signup_id, refusal.status)
        if pending is None or not _allows(kind, pending, now):
            raise (_refused(event_id, signup_id, kind, pending) if pending else refusal) from None
        stale = refusal.status
        if stale == Status.PENDING:
            condition, names, values = "attribute_not_exists(#status)", {"#status": Attr.STATUS}, {}
        else:
            condition = "#status = :stale"
            names, values = {"#status": Attr.STATUS}, {":stale": {"S": stale}}
        try:
            _record(tables, event_id, signup_id, kind, condition, names, values, owner)
        except TransactionCancelled:
            # written out meanwhile: the item now says what the event does
            return request_transition(tables, event_id, signup_id, kind, now, owner)
    return RequestRecorded(event_id=event_id, signup_id=signup_id, request=kind)


def _record(
    tables: _Tables,
    event_id: str,
    signup_id: str,
    kind: str,
    condition: str,
    names: dict[str, str],
    values: dict[str, Any],
    owner: Any = ANYONE,
) -> None:
    """The transaction: the request on intake (its log included), the decision checked;
    the intake record must be ``owner``'s (its ``owner`` equal, or absent for None)."""
    key = signup_key(event_id, signup_id)
    mine, mine_names, mine_values = "", {}, {}
    if owner is not ANYONE:
        mine_names = {"#owner": Attr.OWNER}
        if owner is None:
            mine = " AND attribute_not_exists(#owner)"
        else:
            mine, mine_values = " AND #owner = :owner", {":owner": {"S": str(owner)}}
    actions = [
        {
            "Update": {
                "TableName": tables.intake_table,
                "Key": key,
                "UpdateExpression": (
                    "SET #request = :kind, #requests = list_append(if_not_exists(#requests, "
                    ":empty), :kinds), #undecided = :shard ADD #request_count :one"
                ),
                "ConditionExpression": "attribute_exists(#signup)" + mine,
                "ExpressionAttributeNames": {
                    "#request": Attr.REQUEST,
                    "#requests": Attr.REQUESTS,
                    "#undecided": Attr.UNDECIDED,
                    "#request_count": Attr.REQUEST_COUNT,
                    "#signup": Attr.SIGNUP_ID,
                    **mine_names,
                },
                "ExpressionAttributeValues": {
                    ":kind": {"S": kind},
                    ":kinds": {"L": [{"S": kind}]},
                    ":empty": {"L": []},
                    ":shard": {"S": undecided_shard(event_id, signup_id)},
                    ":one": {"N": "1"},
                    **mine_values,
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
    tables.dynamo.call("transact_write_items", TransactItems=actions)


def _pending(tables: _Tables, event_id: str, signup_id: str, status: str) -> dict[str, Any] | None:
    """The signup as the event's last commit leaves it, when its item (read as
    ``status``) does not say so yet: its status and hold's expiry; None when the item is
    up to date (or there is no such event)."""
    journal = tables.last_journal(event_id)
    if journal is None:
        return None
    if status == Status.PENDING:
        extras = journal.extras or (None,) * len(journal.decisions)
        for decision, extra in zip(journal.decisions, extras, strict=True):
            if decision.signup_id == signup_id:
                expires = (extra or {}).get(Attr.HOLD_EXPIRES_AT, {}).get("S")
                return {Attr.STATUS: decision.status, Attr.HOLD_EXPIRES_AT: expires}
        return None
    for update in journal.updates:
        if update.signup_id == signup_id and update.from_status == status:
            new = update.set.get(Attr.STATUS, {}).get("S", status)
            expires = update.set.get(Attr.HOLD_EXPIRES_AT, {}).get("S")
            return {Attr.STATUS: new, Attr.HOLD_EXPIRES_AT: expires}
    return None


def _allows(kind: str, state: Mapping[str, Any], now: str) -> bool:
    """Whether a signup in ``state`` may be asked ``kind`` at ``now``."""
    status = state.get(Attr.STATUS)
    if status not in ALLOWED_FROM[kind]:
        return False
    if kind == RequestKind.CONFIRM:
        expires = state.get(Attr.HOLD_EXPIRES_AT)
        return isinstance(expires, str) and expires > now
    return True


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
    ``intake_table`` and ``main_table``, as ``Tables`` gives them, and ``last_journal``."""

    dynamo: Dynamo
    intake_table: str
    main_table: str
    last_journal: Callable[[str], Any]

    def request_transition(
        self, event_id: str, signup_id: str, kind: str, now: str, owner: Any = ANYONE
    ) -> RequestRecorded:
        """See ``request_transition``."""
        return request_transition(self, event_id, signup_id, kind, now, owner)
