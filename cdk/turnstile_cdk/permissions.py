"""Exactly what each function may do on each table, and on which items and attributes.

No ``dynamodb:*``, and no action the code does not call. Where two writers share a table,
IAM conditions keep each to its own items and attributes, so the trust boundary of
docs/design.md (§5) holds in IAM, not only in the code:

- ``dynamodb:LeadingKeys`` (the partition key) keeps a role to its items of the control
  table: the API and the stream processor to ``EVENT#``/``PARK#`` items, the sweeper to
  its lease (``SWEEPER``) and run history (``SWEEP-RUN``).
- ``dynamodb:Attributes`` keeps an ``UpdateItem`` to the attributes listed (keys included;
  an attribute a condition reads counts too), with ``dynamodb:ReturnValues`` limited to
  NONE/UPDATED_*, so it cannot read the item's other attributes back either. The API
  may name only an event's configuration (``contract.EVENT_CONFIG_ATTRIBUTES``), never the
  processor's ``taken``, ``accepted``, ``version`` or ``journal``, and of an intake record
  only a confirm or cancel request (``request``, ``request_count``, the marker), never its
  seats; the sweeper only the intake record's re-emission counter, and a parking marker's
  fields when it clears an empty one. Neither gets ``PutItem`` on control (a put replaces
  every attribute).
- The main table's decisions are written by the stream processor alone; the others only
  read them (the API's ConditionCheck of a confirm or cancel is a read).
- ``dynamodb:Select`` (``SPECIFIC_ATTRIBUTES``) with ``dynamodb:Attributes`` keeps a Scan
  to the attributes it projects: the API lists events by scanning the control table (each
  event is a partition of its own, so no Query can), but may read nothing there beyond
  ``contract.EVENT_LIST_ATTRIBUTES``: no journal, no parked record's attributes.

IAM has no TransactWriteItems/TransactGetItems actions: a transaction is authorized per item
by the action it performs (PutItem, UpdateItem, DeleteItem, ConditionCheckItem), with that
item's conditions. This module is plain data (no CDK): ``FunctionConstruct.grant_tables``
turns it into policy statements, and the infrastructure tests pin the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnstile.base.contract import (
    DECISION_ATTRIBUTES,
    DUE_HOLDS_INDEX,
    EVENT_CONFIG_ATTRIBUTES,
    EVENT_LIST_ATTRIBUTES,
    INTAKE_SUBMIT_ATTRIBUTES,
    ORGANIZER_ATTRIBUTES,
    UNDECIDED_INDEX,
    Attr,
    ControlKey,
    ParkAttr,
    WakeAttr,
)

__all__ = [
    "API_GRANTS",
    "CONTROL",
    "DUE_HOLDS_GRANTS",
    "INTAKE",
    "MAIN",
    "PROCESSOR_GRANTS",
    "SWEEPER_GRANTS",
    "WAITER_GRANTS",
    "TableGrant",
]

#: The tables, as ``TableGrant.table`` names them.
INTAKE = "intake"
MAIN = "main"
CONTROL = "control"

#: What an attribute-restricted write may return: nothing, or only what it named.
NARROW_RETURN_VALUES = ("NONE", "UPDATED_OLD", "UPDATED_NEW")

_EVENT_ITEMS = f"{ControlKey.EVENT_PREFIX}*"
_PARKED_EVENTS = f"{ControlKey.PARK_PREFIX}*"
_WAKE_ITEMS = f"{ControlKey.WAKE_PREFIX}*"
_LINEUP_PAGES = f"{ControlKey.LINEUP_PREFIX}*"
#: What waking an event names of its wake-up item.
WAKE_ATTRIBUTES = (
    ControlKey.PK,
    ControlKey.SK,
    WakeAttr.WAKES,
    WakeAttr.WOKEN_AT,
    WakeAttr.REASON,
    Attr.HOLD_DUE_AT,
    Attr.HOLD_DUE_SHARD,
)


def _wakes(who: str) -> TableGrant:
    """Waking events: an update of their wake-up items (``EventItems.wake``) only."""
    return TableGrant(
        CONTROL,
        ("dynamodb:UpdateItem",),
        leading_keys=(_WAKE_ITEMS,),
        attributes=WAKE_ATTRIBUTES,
        why=f"wakes events (EventItems.wake: {who}): the wake-up item's counter, time and "
        "reason (and it leaves the due-holds index, if a failed step had put it there), "
        "whose record on the control table's stream makes the processor take a step",
    )


@dataclass(frozen=True)
class TableGrant:
    """``actions`` on one table; with ``leading_keys`` (``StringLike`` patterns of the
    partition key) only on those items, with ``attributes`` only naming those attributes."""

    table: str
    actions: tuple[str, ...]
    leading_keys: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    #: An index of the table: the grant is on that index only (its ARN), not the table.
    index: str = ""
    #: ``dynamodb:Select`` a read must state (``SPECIFIC_ATTRIBUTES``: it projects only
    #: ``attributes``; without it a read names no attributes and ``ForAllValues`` holds).
    select: str = ""
    #: Why the role needs it (which call sites).
    why: str = ""

    @property
    def conditions(self) -> dict[str, dict[str, Any]]:
        """The IAM ``Condition`` block; empty for an unconditioned grant."""
        conditions: dict[str, dict[str, Any]] = {}
        # ForAllValues holds for a request that has no value for the key at all; every
        # action granted with leading keys or attributes has them, and "Null": "false"
        # says so, so a request without them is not let through by the empty set.
        present: dict[str, str] = {}
        if self.leading_keys:
            conditions["ForAllValues:StringLike"] = {
                "dynamodb:LeadingKeys": list(self.leading_keys)
            }
            present["dynamodb:LeadingKeys"] = "false"
        if self.attributes:
            conditions["ForAllValues:StringEquals"] = {"dynamodb:Attributes": list(self.attributes)}
            present["dynamodb:Attributes"] = "false"
            if self.select:
                conditions["StringEquals"] = {"dynamodb:Select": self.select}
            else:
                conditions["StringEqualsIfExists"] = {
                    "dynamodb:ReturnValues": list(NARROW_RETURN_VALUES)
                }
        if present:
            conditions["Null"] = present
        return conditions


#: The stream processor: the only writer of decisions and of an event's counters, version
#: and journal, and of parked events' records.
PROCESSOR_GRANTS = (
    TableGrant(
        INTAKE,
        ("dynamodb:BatchGetItem",),
        why="writes out a journal it did not commit itself (a crash, a cold start): its "
        "decisions' copied fields come from their intake records, checked against the "
        "journal's digests (store.get_intakes); it never writes intake",
    ),
    TableGrant(
        MAIN,
        ("dynamodb:BatchGetItem",),
        why="reads which signups are decided and how (get_decisions, strongly consistent)",
    ),
    TableGrant(
        MAIN,
        ("dynamodb:PutItem", "dynamodb:UpdateItem"),
        attributes=DECISION_ATTRIBUTES,
        why="writes decision items (materialize: a first decision's conditional PutItem, a "
        "later move's conditional UpdateItem: a confirmation, cancellation, lapse, promotion "
        "or a refused request's answer) and the unknown-event rejections' conditional puts "
        "(reject_without_event, a transaction), each naming a decision's fields only; "
        "nothing that deletes a decision (no DeleteItem, no BatchWriteItem)",
    ),
    TableGrant(
        CONTROL,
        (
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:Query",
            "dynamodb:UpdateItem",
            "dynamodb:ConditionCheckItem",
        ),
        leading_keys=(_EVENT_ITEMS, _PARKED_EVENTS),
        why="reads the event item with its parking marker (get_event_and_parking, "
        "get_event, get_parking), commits counters and journal (commit), checks an unknown "
        "event still has no item (ConditionCheck), reads a parked event's records in order "
        "(Query), sets and clears the parking marker",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"),
        leading_keys=(_LINEUP_PAGES,),
        why="reads a long lineup's pages (load_lineup) and writes and deletes them in its "
        "commit's transaction (commit): never an event item, which is under another prefix",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:BatchWriteItem",),
        leading_keys=(_PARKED_EVENTS,),
        why="parks and unparks a parked event's records (park, unpark): never an event item",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:UpdateItem",),
        leading_keys=(_WAKE_ITEMS,),
        attributes=(
            ControlKey.PK,
            ControlKey.SK,
            Attr.EVENT_ID,
            Attr.HOLD_DUE_AT,
            Attr.HOLD_DUE_SHARD,
        ),
        why="puts a wake-up whose step failed in the due-holds index, to be written again "
        "(wake_later): never its counter",
    ),
    _wakes(
        "a shard's commit that gives seats back wakes the shards of its event where "
        "someone waits, in the commit's transaction"
    ),
)

#: The HTTP API: creates, re-sizes and closes events, writes intake, reads everything it
#: shows. On event items only their configuration, never the processor's attributes.
API_GRANTS = (
    TableGrant(
        INTAKE,
        ("dynamodb:GetItem", "dynamodb:Query"),
        why="reads a signup back for status and the 409 check (get_intake), and lists an "
        "event's pending signups (Query of the event's partition, listing.signup_rows)",
    ),
    TableGrant(
        INTAKE,
        ("dynamodb:PutItem",),
        attributes=INTAKE_SUBMIT_ATTRIBUTES,
        why="submits signups (put_intake, a conditional PutItem) naming what a submission "
        "writes and nothing else",
    ),
    TableGrant(
        INTAKE,
        ("dynamodb:UpdateItem",),
        attributes=(
            Attr.EVENT_ID,
            Attr.SIGNUP_ID,
            Attr.REQUEST,
            Attr.REQUESTS,
            Attr.REQUEST_COUNT,
            Attr.UNDECIDED,
            Attr.OWNER,
        ),
        why="records a confirm or cancel on the signup's intake record (request_transition, "
        "a transaction): the request, the requests' log, their count and the undecided "
        "marker, conditioned on the record existing and being the caller's (owner, named "
        "in the condition only); never the signup's seats or attributes",
    ),
    TableGrant(
        MAIN,
        ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"),
        why="reads a decision (get_decision, also while a status read waits), lists an "
        "event's decisions (Query of the event's partition, listing.signup_rows), and "
        "checks that a signup's status allows a confirm or cancel (request_transition's "
        "ConditionCheck, which returns the decision item when it fails)",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:GetItem",),
        leading_keys=(_EVENT_ITEMS,),
        why="reads event items (get_event)",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:Scan",),
        attributes=EVENT_LIST_ATTRIBUTES,
        select="SPECIFIC_ATTRIBUTES",
        why="lists events (listing.event_items): a Scan, as every event is a partition of "
        "its own, projecting an event's public fields only",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:UpdateItem",),
        leading_keys=(_EVENT_ITEMS,),
        attributes=EVENT_CONFIG_ATTRIBUTES,
        why="creates (attribute_not_exists), re-sizes and closes events: create_event, "
        "update_capacity, close_event",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:UpdateItem",),
        leading_keys=(f"{ControlKey.ORGANIZER_PREFIX}*",),
        attributes=ORGANIZER_ATTRIBUTES,
        why="counts the events an organizer creates, in the creation's transaction, while "
        "turnstile:maxEventsPerOrganizer caps them (create_event's quota)",
    ),
    _wakes("a close or a capacity change is acted on at once"),
)

#: The waiter: the waiting status read (await_decision), point reads and nothing else.
WAITER_GRANTS = (
    TableGrant(
        INTAKE,
        ("dynamodb:GetItem",),
        why="reads a signup still undecided, and its owner (signup_status: get_intake)",
    ),
    TableGrant(
        MAIN,
        ("dynamodb:GetItem",),
        why="reads the decision, again and again while it waits (await_decision: get_decision)",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:GetItem",),
        leading_keys=(_EVENT_ITEMS,),
        why="reads the signup's event, whose creator may see it (signup_status: get_event)",
    ),
)

#: The sweeper: its own lease and run history, re-emission of intake records, reads.
SWEEPER_GRANTS = (
    TableGrant(
        INTAKE,
        ("dynamodb:Scan",),
        index=UNDECIDED_INDEX.name,
        why="finds undecided intake records: every run scans the sparse undecided index "
        "(undecided_marked)",
    ),
    TableGrant(
        INTAKE,
        ("dynamodb:Scan",),
        why="reads intake whole once a day, the backstop for records written without the "
        "marker (find_undecided)",
    ),
    TableGrant(
        INTAKE,
        ("dynamodb:UpdateItem",),
        attributes=(
            Attr.EVENT_ID,
            Attr.SIGNUP_ID,
            Attr.RE_EMITS,
            Attr.RE_EMITTED_AT,
            Attr.UNDECIDED,
            Attr.REQUEST_COUNT,
        ),
        why="re-emits a record by bumping its re-emission counter and time (redrive, "
        "redriven_at) and setting the undecided marker (Ledger.fenced_re_emit_many, in "
        "transactions), and removes the marker from a record it finds decided, conditioned "
        "on its request_count being answered (clear_undecided: a condition names it, so IAM "
        "counts it; the code never writes it); it never deletes or replaces one",
    ),
    TableGrant(MAIN, ("dynamodb:BatchGetItem",), why="reads which records are decided"),
    TableGrant(
        CONTROL,
        ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan"),
        why="reads event items' journals (get_event), its lease (get_lease), run history "
        "(run_history), parked events (parking_markers, a filtered Scan) and their parked "
        "records",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:ConditionCheckItem"),
        leading_keys=(ControlKey.SWEEPER_LEASE[0], ControlKey.SWEEP_RUNS),
        why="takes, renews and releases its lease (UpdateItem), fences re-emissions "
        "with it (ConditionCheck), and appends its run history (UpdateItem, PutItem)",
    ),
    TableGrant(
        CONTROL,
        ("dynamodb:UpdateItem",),
        leading_keys=(_PARKED_EVENTS,),
        attributes=(
            ControlKey.PK,
            ControlKey.SK,
            ParkAttr.PARKED_SINCE,
            ParkAttr.FIRST_SEQUENCE_NUMBER,
            ParkAttr.ERROR,
            Attr.VERSION,
            Attr.HOLD_DUE_AT,
            Attr.HOLD_DUE_SHARD,
        ),
        why="clears a parking marker with nothing parked under it (clear_parking: its "
        "fields, its place in the due-holds index included, conditioned on its version); "
        "it never writes a parked record's content",
    ),
    _wakes("a parked event is released"),
)

#: Releasing due holds (``turnstile.jobs.due_holds``): it reads the control table's ``due-holds``
#: index and wakes the events due; it touches no intake record.
DUE_HOLDS_GRANTS = (
    TableGrant(
        CONTROL,
        ("dynamodb:Query",),
        index=DUE_HOLDS_INDEX.name,
        why="finds the events with a step due (due_events: a Query of the index, which "
        "projects an event's id; an event item's earliest hold, a parked event's release)",
    ),
    _wakes("a hold lapsed, a release to try"),
)
