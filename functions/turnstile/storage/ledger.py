"""The sweeper's ledger: its lease, its fenced re-emissions, its run history, its index.

The sweeper never decides; it *re-emits* intake records that stayed undecided, so that the
stream delivers them to the processor again (docs/design.md, section 7). What it writes,
and the one index it reads, are here:

* **The lease** (control table, ``ControlKey.SWEEPER_LEASE``): one sweeper at a time. It
  is taken with ``attribute_not_exists OR lease_until < :now`` (or renewed by its owner),
  and every acquisition moves the fencing token up by one. TTL never decides expiry.
* **Fenced re-emission**: a transaction of up to 99 intake updates and a ConditionCheck
  that the lease still has the same owner and token and has not expired, so a sweeper
  whose lease lapsed cannot write. A re-emission bumps ``Attr.RE_EMITS``, sets
  ``Attr.RE_EMITTED_AT`` and the ``undecided`` marker: a MODIFY the stream filter lets
  through.
* **Run history** (``ControlKey.sweep_run``): immutable items, one per start and one per
  outcome; an atomic counter on the start item catches a duplicate concurrent start.
* **The undecided index**: the sparse index of intake records that carry the marker, and
  the removal of the marker from records found decided, with every request they carry
  answered (``Attr.REQUEST_COUNT``, docs/lifecycle.md §10).
* **The full-scan note** on the lease item: when the last full scan of intake finished.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from turnstile.base.contract import (
    UNDECIDED_INDEX,
    Attr,
    ControlKey,
    LeaseAttr,
    RunAttr,
    RunStatus,
    undecided_shard,
)
from turnstile.base.errors import DuplicateRunError, LeaseLostError
from turnstile.storage.dynamo import (
    TRANSACTION_LIMIT,
    ConditionFailed,
    Tables,
    TransactionCancelled,
    chunks,
    control_key,
    error_code,
    signup_key,
    to_item,
)

__all__ = ["Ledger"]

_LEASE_KEY = control_key(ControlKey.SWEEPER_LEASE)


class Ledger(Tables):
    """The sweeper's items and writes. Built like ``SignupStore`` (a client, the tables'
    names, the retry budget); ``Ledger.beside(store)`` shares a store's connection."""

    @classmethod
    def beside(cls, tables: Tables) -> Ledger:
        """A ledger on ``tables``' connection and tables (one retry budget and count)."""
        return cls(
            intake_table=tables.intake_table,
            main_table=tables.main_table,
            control_table=tables.control_table,
            dynamo=tables.dynamo,
        )

    # -- the lease ----------------------------------------------------------------------

    def acquire_lease(self, owner: str, duration_s: float, now: float) -> int | None:
        """Take the sweeper lease if free, expired or already ours.

        Returns the new fencing token (it grows with every acquisition), or None while
        another owner holds an unexpired lease. TTL never decides expiry: the condition does.
        """
        try:
            response = self.dynamo.call(
                "update_item",
                TableName=self.control_table,
                Key=_LEASE_KEY,
                UpdateExpression="SET #owner = :owner, #until = :until ADD #fence :one",
                ConditionExpression=(
                    "attribute_not_exists(#pk) OR #until < :now OR #owner = :owner"
                ),
                ExpressionAttributeNames={
                    "#owner": LeaseAttr.OWNER,
                    "#until": LeaseAttr.UNTIL,
                    "#fence": LeaseAttr.FENCE,
                    "#pk": ControlKey.PK,
                },
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":until": {"N": repr(now + duration_s)},
                    ":now": {"N": repr(now)},
                    ":one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
            )
        except ConditionFailed:
            return None
        return int(response["Attributes"][LeaseAttr.FENCE]["N"])

    def _lease_check(self, owner: str, token: int, now: float) -> dict[str, Any]:
        return {
            "ConditionCheck": {
                "TableName": self.control_table,
                "Key": _LEASE_KEY,
                "ConditionExpression": "#owner = :owner AND #fence = :token AND #until >= :now",
                "ExpressionAttributeNames": {
                    "#owner": LeaseAttr.OWNER,
                    "#fence": LeaseAttr.FENCE,
                    "#until": LeaseAttr.UNTIL,
                },
                "ExpressionAttributeValues": {
                    ":owner": {"S": owner},
                    ":token": {"N": str(token)},
                    ":now": {"N": repr(now)},
                },
            }
        }

    def get_lease(self) -> dict[str, Any] | None:
        """The lease item (``LeaseAttr``: owner, fence, lease_until, full_scan_at), read
        consistently, or None."""
        return self.dynamo.get(self.control_table, _LEASE_KEY)

    def release_lease(self, owner: str, token: int) -> None:
        """Give the lease up early (only if it is still ours, with the same token)."""
        self._set_on_own_lease(owner, token, LeaseAttr.UNTIL, {"N": "0"})

    def note_full_scan(self, owner: str, token: int, at: float) -> bool:
        """Record on the lease item (while it is ours) that a full scan of intake finished
        at ``at``; False if the lease moved on. ``get_lease()[LeaseAttr.FULL_SCAN_AT]``
        reads it."""
        return self._set_on_own_lease(owner, token, LeaseAttr.FULL_SCAN_AT, {"N": repr(at)})

    def _set_on_own_lease(
        self, owner: str, token: int, attribute: str, value: dict[str, str]
    ) -> bool:
        """Set one attribute of the lease item only while ``owner`` holds it with ``token``;
        False if the lease moved on."""
        try:
            self.dynamo.call(
                "update_item",
                TableName=self.control_table,
                Key=_LEASE_KEY,
                UpdateExpression="SET #attribute = :value",
                ConditionExpression="#owner = :owner AND #fence = :token",
                ExpressionAttributeNames={
                    "#owner": LeaseAttr.OWNER,
                    "#fence": LeaseAttr.FENCE,
                    "#attribute": attribute,
                },
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":token": {"N": str(token)},
                    ":value": value,
                },
            )
        except ConditionFailed:
            return False
        return True

    # -- fenced re-emission -------------------------------------------------------------

    def fenced_re_emit_many(
        self,
        owner: str,
        token: int,
        now: float,
        keys: Sequence[tuple[str, str]],
        junk_counters: Collection[tuple[str, str]] = (),
    ) -> int:
        """Re-emit intake records, up to 99 per transaction, each transaction fenced by a
        ConditionCheck on our lease and token. Returns how many were re-emitted.

        Raises ``LeaseLostError`` the moment the lease has moved on. A record that no longer
        exists cancels its transaction; that chunk is then re-emitted one record at a time.
        So does one whose ``Attr.RE_EMITS`` counter a producer wrote as something other than
        a number (``ADD`` refuses it): that record is then re-emitted by its
        ``Attr.RE_EMITTED_AT`` alone, as are the ``junk_counters`` the caller already knows of.
        """
        done = 0
        junk = set(junk_counters)
        plain = [k for k in keys if k not in junk]
        for chunk in chunks(plain, TRANSACTION_LIMIT - 1):
            done += self._fenced_chunk(owner, token, now, chunk, overwrite=False)
        for chunk in chunks([k for k in keys if k in junk], TRANSACTION_LIMIT - 1):
            done += self._fenced_chunk(owner, token, now, chunk, overwrite=True)
        return done

    def _fenced_chunk(
        self,
        owner: str,
        token: int,
        now: float,
        chunk: Sequence[tuple[str, str]],
        overwrite: bool,
    ) -> int:
        try:
            self.dynamo.call(
                "transact_write_items",
                TransactItems=[
                    self._lease_check(owner, token, now),
                    *(self._re_emit_update(e, s, now, overwrite) for e, s in chunk),
                ],
            )
            return len(chunk)
        except ClientError as exc:
            reasons = exc.reasons if isinstance(exc, TransactionCancelled) else []
            invalid = error_code(exc) == "ValidationException" or "ValidationError" in reasons
            if not invalid:
                if not isinstance(exc, TransactionCancelled):
                    raise
                self._raise_if_lease_lost(exc, owner, token, now)
            if len(chunk) > 1:
                return sum(self._fenced_chunk(owner, token, now, [key], overwrite) for key in chunk)
            if invalid and not overwrite:
                return self._fenced_chunk(owner, token, now, chunk, overwrite=True)
            return 0  # the one record is gone (or cannot be written): nothing to re-emit

    def _re_emit_update(
        self, event_id: str, signup_id: str, now: float, overwrite: bool
    ) -> dict[str, Any]:
        names = {"#at": Attr.RE_EMITTED_AT, "#sk": Attr.SIGNUP_ID, "#mark": Attr.UNDECIDED}
        values: dict[str, Any] = {
            ":at": {"N": repr(now)},
            ":shard": {"S": undecided_shard(event_id, signup_id)},
        }
        # The marker (a string, whatever the producer wrote) lets the MODIFY through the
        # stream filter, and keeps the record in the sweeper's index until it is decided.
        mark = "#mark = :shard"
        if overwrite:
            # A new re-emission time alone is a MODIFY too: the way for a record whose
            # counter a producer wrote as something ADD refuses.
            bump = f"SET #at = :at, {mark}"
        else:
            bump = f"ADD #count :one SET #at = :at, {mark}"
            names["#count"] = Attr.RE_EMITS
            values[":one"] = {"N": "1"}
        return {
            "Update": {
                "TableName": self.intake_table,
                "Key": signup_key(event_id, signup_id),
                "UpdateExpression": bump,
                "ConditionExpression": "attribute_exists(#sk)",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _raise_if_lease_lost(
        self, exc: TransactionCancelled, owner: str, token: int, now: float
    ) -> None:
        """Which condition cancelled the transaction: the lease's (raise) or a record's."""
        reasons = exc.reasons
        if reasons:
            if reasons[0] == "ConditionalCheckFailed":
                raise LeaseLostError(f"sweeper lease of {owner!r} (token {token}) lapsed") from exc
            return
        # moto gives no per-item reasons: read the lease to tell.
        lease = self.get_lease() or {}
        if lease.get(LeaseAttr.OWNER) != owner or int(lease.get(LeaseAttr.FENCE, -1)) != token:
            raise LeaseLostError(f"sweeper lease of {owner!r} (token {token}) lapsed") from exc
        if float(lease.get(LeaseAttr.UNTIL, 0)) < now:
            raise LeaseLostError(f"sweeper lease of {owner!r} expired") from exc

    # -- run history --------------------------------------------------------------------

    def start_run(self, run_id: str, now: str, replay: bool = False) -> int | None:
        """Record that a sweep run starts, immutably; the history item's number.

        None when the run already started or succeeded (unless ``replay`` and it failed).
        A concurrent duplicate start of the same entry is caught by an atomic counter:
        the second starter sees a count above 1 and raises ``DuplicateRunError``.
        """
        history = self.run_history(run_id)
        latest = history[-1] if history else None
        if latest is not None and (not replay or latest[RunAttr.STATUS] != RunStatus.FAILED):
            return None  # this run happened; only a replay reruns it, and only if it failed
        seq = int(latest[RunAttr.SEQ]) + 1 if latest else 1
        response = self.dynamo.call(
            "update_item",
            TableName=self.control_table,
            Key=control_key(ControlKey.sweep_run(run_id, seq)),
            UpdateExpression=(
                "ADD #counter :one SET #status = if_not_exists(#status, :started), "
                "#created = if_not_exists(#created, :now), #run = :run, #seq = :seq"
            ),
            ExpressionAttributeNames={
                "#counter": RunAttr.COUNTER,
                "#status": RunAttr.STATUS,
                "#created": Attr.CREATED_AT,
                "#run": RunAttr.RUN_ID,
                "#seq": RunAttr.SEQ,
            },
            ExpressionAttributeValues={
                ":one": {"N": "1"},
                ":started": {"S": RunStatus.STARTED},
                ":now": {"S": now},
                ":run": {"S": run_id},
                ":seq": {"N": str(seq)},
            },
            ReturnValues="UPDATED_NEW",
        )
        if int(response["Attributes"][RunAttr.COUNTER]["N"]) > 1:
            raise DuplicateRunError(f"sweep run {run_id!r} was started twice at once")
        return seq

    def finish_run(
        self, run_id: str, seq: int, status: str, now: str, detail: Mapping[str, Any]
    ) -> None:
        """Append the run's outcome (``succeeded`` or ``failed``) as a new immutable item."""
        pk, sk = ControlKey.sweep_run(run_id, seq + 1)
        self.dynamo.call(
            "put_item",
            TableName=self.control_table,
            Item=to_item(
                {
                    ControlKey.PK: pk,
                    ControlKey.SK: sk,
                    RunAttr.RUN_ID: run_id,
                    RunAttr.SEQ: seq + 1,
                    RunAttr.STATUS: status,
                    RunAttr.COUNTER: 1,
                    Attr.CREATED_AT: now,
                    RunAttr.DETAIL: json.dumps(dict(detail), default=str),
                }
            ),
            ConditionExpression="attribute_not_exists(#pk)",
            ExpressionAttributeNames={"#pk": ControlKey.PK},
        )

    def run_history(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """History items of one run (or all runs), oldest first."""
        names = {"#pk": ControlKey.PK}
        values: dict[str, Any] = {":pk": {"S": ControlKey.SWEEP_RUNS}}
        condition = "#pk = :pk"
        if run_id is not None:
            condition += " AND begins_with(#sk, :prefix)"
            names["#sk"] = ControlKey.SK
            values[":prefix"] = {"S": f"{run_id}#"}
        return list(
            self.dynamo.items(
                "query",
                TableName=self.control_table,
                ConsistentRead=True,
                KeyConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        )

    # -- the undecided index ------------------------------------------------------------

    def undecided_marked(self) -> Iterator[dict[str, Any]]:
        """Every entry of the sparse ``undecided`` index: the key, the marker and what the
        sweeper reads to judge age (``submitted_at`` and the re-emissions' counter and time).

        Only records carrying the marker are there, so this reads what is (or was until
        lately) undecided, not the table. A Scan, not a Query per shard: any marker value a
        producer writes is found. Eventually consistent (an index has no other kind): a
        record written a moment ago may be missing, and is young anyway.
        """
        return self.dynamo.items(
            "scan", TableName=self.intake_table, IndexName=UNDECIDED_INDEX.name
        )

    def clear_undecided(
        self,
        answered: Mapping[tuple[str, str], Decimal | int],
        workers: int = 8,
        unanswered: list[tuple[str, str]] | None = None,
    ) -> int:
        """Remove the ``undecided`` marker from these decided intake records, each only if
        every request it carries is answered; how many carried the marker.

        ``answered`` maps a record's key to its decision item's ``request_count`` (the
        requests the processor answered; absent on the decision item: 0). The removal is
        conditioned on the record existing (an update never creates an item that is gone)
        and on its own ``request_count`` (a producer's) being absent, not a number, or at
        most that: a string or a negative count is no request the processor can answer, so
        it never keeps a record marked. A record whose condition fails has a request not
        answered yet (or is gone): its key is appended to ``unanswered``, for the caller to
        re-emit. Each removal is a MODIFY without the marker, which the stream filter drops.
        """

        def clear(item: tuple[tuple[str, str], Decimal | int]) -> tuple[bool, bool]:
            """(carried the marker, answered)"""
            key, count = item
            try:
                response = self.dynamo.call(
                    "update_item",
                    TableName=self.intake_table,
                    Key=signup_key(*key),
                    UpdateExpression="REMOVE #mark",
                    ConditionExpression=(
                        "attribute_exists(#sk) AND (attribute_not_exists(#requests) "
                        "OR NOT attribute_type(#requests, :number) OR #requests <= :answered)"
                    ),
                    ExpressionAttributeNames={
                        "#mark": Attr.UNDECIDED,
                        "#sk": Attr.SIGNUP_ID,
                        "#requests": Attr.REQUEST_COUNT,
                    },
                    ExpressionAttributeValues={
                        ":number": {"S": "N"},
                        ":answered": {"N": str(count)},
                    },
                    # Only what it removed comes back: whether the record carried the marker.
                    ReturnValues="UPDATED_OLD",
                )
            except ConditionFailed:
                return False, False
            return Attr.UNDECIDED in response.get("Attributes", {}), True

        items = list(answered.items())
        if len(items) <= 1 or workers <= 1:
            outcomes = [clear(i) for i in items]
        else:
            # One UpdateItem per record (BatchWriteItem has no update): a few at a time.
            with ThreadPoolExecutor(max_workers=workers) as pool:
                outcomes = list(pool.map(clear, items))
        if unanswered is not None:
            pairs = zip(items, outcomes, strict=True)
            unanswered.extend(key for (key, _), (_, ok) in pairs if not ok)
        return sum(carried for carried, _ in outcomes)
