"""CPU time per decision in the stream handler, apart from I/O.

Two figures, on synthetic batches of 100 Lambda-shaped records for one event:

* ``engine``: the pure work of a decision: parse the image, the lifecycle engine's step,
  encode the journal;
* ``handler``: the whole Lambda handler (Powertools decorators and event parsing, the
  processor, the store building every request) over an in-memory DynamoDB client that
  answers instantly, so what remains is the handler's own CPU.

Measured with ``time.thread_time`` (this thread only), so nothing else in the process
(the embedded endpoint, other threads) is counted. Only the handler's own objects live in
its heap, as in a Lambda container: each batch is parsed from its JSON just before its call
(outside the clock; Lambda's runtime does that), and the in-memory store keeps its items
pickled (DynamoDB keeps them in another process). Held as objects, the 50 batches and the
items written (126,000 objects the garbage collector tracks) made each of its full
collections walk 200,000 objects instead of the process's own 76,000: the same code
measured about 15 % more CPU a decision.
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from turnstile.base.clock import ms_of
from turnstile.base.contract import Attr
from turnstile.engine import lifecycle
from turnstile.engine.lifecycle import Event
from turnstile.engine.lineup import decode_lineup
from turnstile.jobs.processor import StreamProcessor, utc_now
from turnstile.storage.intake import engine_commands, parse_intake
from turnstile.storage.items import outcome_of
from turnstile.storage.journal import Journal
from turnstile.storage.store import SignupStore
from turnstile_bench.endpoint import quiet_handler_environment
from turnstile_bench.scale import lambda_record
from turnstile_bench.workload import Workload, generate, intake_item

__all__ = ["CpuProfile", "MemoryDynamoDB", "cpu_report", "measure_cpu", "render_cpu"]

_deserializer = TypeDeserializer()


def _condition_failed(operation: str) -> ClientError:
    error = {"Code": "ConditionalCheckFailedException", "Message": "condition failed"}
    return ClientError({"Error": error}, operation)


class MemoryDynamoDB:
    """Just enough of a DynamoDB client for the processor's requests, kept in memory.

    Supports plain puts and gets, batches, and UpdateItem with ``SET a = :v, ...`` and
    conditions made of ``#name <op> :value`` comparisons joined by AND. Items are kept
    pickled (bytes: nothing for the garbage collector to walk), each read a fresh copy.
    """

    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple[str, str], bytes]] = {}

    def _stored(self, name: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
        raw = self._table(name).get(self._key(key))
        return pickle.loads(raw) if raw is not None else None

    def _store(self, name: str, item: Mapping[str, Any]) -> None:
        self._table(name)[self._key(item)] = pickle.dumps(dict(item), pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def _key(key: Mapping[str, Any]) -> tuple[str, str]:
        if "pk" in key:  # the control table
            return key["pk"]["S"], key["sk"]["S"]
        return key["event_id"]["S"], key["signup_id"]["S"]

    def _table(self, name: str) -> dict[tuple[str, str], bytes]:
        return self.tables.setdefault(name, {})

    def put_item(self, TableName: str, Item: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        table = self._table(TableName)
        key = self._key(Item)
        if "attribute_not_exists" in kwargs.get("ConditionExpression", "") and key in table:
            raise _condition_failed("PutItem")
        self._store(TableName, Item)
        return {}

    def get_item(self, TableName: str, Key: dict[str, Any], **_: Any) -> dict[str, Any]:
        item = self._stored(TableName, Key)
        return {"Item": item} if item is not None else {}

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        responses = {
            name: [item for key in spec["Keys"] if (item := self._stored(name, key)) is not None]
            for name, spec in RequestItems.items()
        }
        return {"Responses": responses, "UnprocessedKeys": {}}

    def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        for name, requests in RequestItems.items():
            for request in requests:
                self._store(name, request["PutRequest"]["Item"])
        return {"UnprocessedItems": {}}

    def update_item(
        self,
        TableName: str,
        Key: dict[str, Any],
        UpdateExpression: str,
        ExpressionAttributeNames: Mapping[str, str] | None = None,
        ExpressionAttributeValues: Mapping[str, Any] | None = None,
        ConditionExpression: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        names = ExpressionAttributeNames or {}
        values = ExpressionAttributeValues or {}
        existing = self._stored(TableName, Key)
        # Conditions see the item as it is (none yet: no attribute, not even the key).
        if ConditionExpression and not self._holds(
            ConditionExpression, existing or {}, names, values
        ):
            raise _condition_failed("UpdateItem")
        item = existing if existing is not None else dict(Key)
        # SET a = :v, ... [REMOVE b, ...]: what the commit and materialization send.
        sets, _, removes = UpdateExpression.partition(" REMOVE ")
        action, _, assignments = sets.partition(" ")
        if action.upper() != "SET":
            raise NotImplementedError(UpdateExpression)
        for assignment in assignments.split(","):
            target, _, source = (part.strip() for part in assignment.partition("="))
            item[names.get(target, target)] = values[source]
        for name in filter(None, (part.strip() for part in removes.split(","))):
            item.pop(names.get(name, name), None)
        self._store(TableName, item)
        return {}

    @staticmethod
    def _holds(
        condition: str,
        item: Mapping[str, Any],
        names: Mapping[str, str],
        values: Mapping[str, Any],
    ) -> bool:
        operators = {
            ">=": lambda a, b: a >= b,
            "<=": lambda a, b: a <= b,
            "=": lambda a, b: a == b,
            ">": lambda a, b: a > b,
            "<": lambda a, b: a < b,
        }
        for clause in condition.split(" AND "):
            if clause.startswith("(") and clause.endswith(")"):
                # (attribute_not_exists(#a) OR #a = :b): the store's lock on a version
                # that a hand-written item may lack.
                options = clause[1:-1].split(" OR ")
                if not any(
                    MemoryDynamoDB._holds(option, item, names, values) for option in options
                ):
                    return False
                continue
            if clause.startswith("attribute_not_exists(") and clause.endswith(")"):
                name = clause[len("attribute_not_exists(") : -1]
                if names.get(name, name) in item:
                    return False
                continue
            if clause.startswith("attribute_exists(") and clause.endswith(")"):
                name = clause[len("attribute_exists(") : -1]
                if names.get(name, name) not in item:
                    return False
                continue
            for symbol, compare in operators.items():
                if f" {symbol} " in clause:
                    left, right = (p.strip() for p in clause.split(f" {symbol} "))
                    held = item.get(names.get(left, left))
                    wanted = values.get(right) or item.get(names.get(right, right))
                    if held is None or wanted is None:
                        return False
                    a = _deserializer.deserialize(held)
                    b = _deserializer.deserialize(wanted)
                    if not compare(a, b):
                        return False
                    break
            else:
                raise NotImplementedError(clause)
        return True


@dataclass(frozen=True)
class CpuProfile:
    """CPU microseconds per decision: the pure engine, and the whole handler without I/O."""

    batches: int
    decisions: int
    engine_us_per_decision: float
    handler_us_per_decision: float
    handler_ms_per_batch: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": (
                "time.thread_time around each of synthetic batches of 100 records for one "
                "event, each parsed from its JSON outside the clock; engine = parse_intake + "
                "lifecycle.step + Journal.encode; handler = the Lambda handler with an "
                "in-memory DynamoDB client (no I/O) that keeps its items pickled"
            ),
            "batches": self.batches,
            "decisions": self.decisions,
            "engine_us_per_decision": round(self.engine_us_per_decision, 1),
            "handler_us_per_decision": round(self.handler_us_per_decision, 1),
            "handler_ms_per_batch": round(self.handler_ms_per_batch, 2),
        }


def _records(batches: int) -> list[list[dict[str, Any]]]:
    workload = Workload(events=1, signups=batches * 100, hot_share=1.0)
    signups = generate(workload)
    arn = "arn:aws:dynamodb:us-east-1:123456789012:table/cpu/stream/1"
    out: list[list[dict[str, Any]]] = []
    for start in range(0, len(signups), 100):
        out.append(
            [
                lambda_record(
                    intake_item(s.event_id, s.signup_id, s.seats, s.attributes, utc_now()),
                    str(1_100_000_000_000_000_000_000 + start + i),
                    arn,
                )
                for i, s in enumerate(signups[start : start + 100])
            ]
        )
    return out


def _engine(batches: Sequence[str], capacity: int) -> float:
    """Thread CPU seconds for parse + the lifecycle engine's step + journal encode over
    every batch (what the processor does for a chunk, without I/O); each batch is read
    from its JSON outside the clock."""
    event = Event(event_id="bench-ev00", capacity=capacity)
    counts: dict[str, int] | None = None
    lineup = None
    spent = 0.0
    for text in batches:
        batch = json.loads(text)["Records"]
        started = time.thread_time()
        records = [
            parse_intake(
                {k: _deserializer.deserialize(v) for k, v in r["dynamodb"]["NewImage"].items()},
                r["dynamodb"]["SequenceNumber"],
            )
            for r in batch
        ]
        commands, answered = engine_commands(records, {})
        holds, waiting = decode_lineup(lineup)  # as the processor reads its event item
        before = replace(event, holds=holds, waiting=waiting)
        now = utc_now()
        result = lifecycle.step(before, {}, commands, ms_of(now))
        outcome = outcome_of(before, counts, result, {}, answered, {})
        Journal.build(
            event.event_id,
            event.version + 1,
            now,
            outcome.decisions,
            {r.signup_id: r for r in records},
            extras=outcome.extras,
            updates=outcome.updates,
        ).encode()
        assert outcome.state is not None and outcome.lifecycle is not None
        event = outcome.state
        counts = dict(outcome.lifecycle[Attr.STATUS_COUNTS])
        lineup = outcome.lifecycle[Attr.LINEUP]
        spent += time.thread_time() - started
    return spent


def measure_cpu(batches: int = 50, profiler: Any = None) -> CpuProfile:
    """CPU per decision of the engine alone and of the whole handler (in-memory store).

    ``profiler`` (a ``cProfile.Profile``), if given, is on while the handler runs."""
    quiet_handler_environment()
    from turnstile.handlers import stream as stream_module
    from turnstile_bench.strategies import quiet
    from turnstile_tools.local.context import LocalLambdaContext

    # Each batch as Lambda delivers it: JSON, parsed just before its call (outside the
    # clock), so no batch outlives its call in the heap.
    records = _records(batches)
    decisions = sum(len(b) for b in records)
    events = [json.dumps({"Records": batch}) for batch in records]
    del records
    capacity = batches * 50
    engine_s = _engine(events, capacity)

    client = MemoryDynamoDB()
    store = SignupStore(
        client, intake_table="cpu-intake", main_table="cpu-main", control_table="cpu-control"
    )
    store.create_event("bench-ev00", capacity, utc_now())
    previous = stream_module._processor
    stream_module._processor = StreamProcessor(store, chunk_size=100)
    handler = quiet(stream_module.handler)
    # A warm-up call outside the clock (its own event): first-call costs are cold start.
    store.create_event("bench-warm-up", 1, utc_now())
    warm_up = intake_item("bench-warm-up", "warm-up", 1, {}, utc_now())
    handler({"Records": [lambda_record(warm_up, "1", "warm-up")]}, LocalLambdaContext())
    try:
        handler_s = 0.0
        for text in events:
            event = json.loads(text)
            if profiler is not None:
                profiler.enable()
            started = time.thread_time()
            handler(event, LocalLambdaContext())
            handler_s += time.thread_time() - started
            if profiler is not None:
                profiler.disable()
    finally:
        stream_module._processor = previous
    decided = sum(1 for e, _ in client.tables["cpu-main"] if e == "bench-ev00")
    if decided < decisions:
        raise RuntimeError(f"the handler decided {decided} of {decisions} synthetic signups")
    return CpuProfile(
        batches=batches,
        decisions=decisions,
        engine_us_per_decision=engine_s / decisions * 1e6,
        handler_us_per_decision=handler_s / decisions * 1e6,
        handler_ms_per_batch=handler_s / batches * 1e3,
    )


def cpu_report(batches: int = 50, runs: int = 5, top: int = 5) -> dict[str, Any]:
    """``turnstile bench --cpu``: ``measure_cpu`` ``runs`` times, the median of each
    figure, and where the handler's CPU goes: the ``top`` functions by their own CPU time
    (this thread's) in a profiled run (profiling slows a run, so the profiled run is not
    one of the timed ones), each as a share of the profiled handler's whole."""
    import cProfile
    import pstats
    import statistics

    profiles = [measure_cpu(batches) for _ in range(runs)]
    profiler = cProfile.Profile(time.thread_time)  # CPU, as the figures: no waits
    measure_cpu(batches, profiler)
    rows = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(own for _, _, own, _, _ in rows.values()) or 1.0
    ranked = sorted(rows.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return {
        "method": profiles[0].to_dict()["method"],
        "runs": runs,
        "batches": batches,
        "decisions": profiles[0].decisions,
        "engine_us_per_decision": round(
            statistics.median(p.engine_us_per_decision for p in profiles), 1
        ),
        "handler_us_per_decision": round(
            statistics.median(p.handler_us_per_decision for p in profiles), 1
        ),
        "handler_us_per_decision_runs": [round(p.handler_us_per_decision, 1) for p in profiles],
        "top": [
            {
                "function": f"{Path(file).name}:{line}({name})",
                "own_share": round(own / total, 3),
                "calls": calls,
            }
            for (file, line, name), (_, calls, own, _, _) in ranked
        ],
    }


def render_cpu(doc: Mapping[str, Any]) -> str:
    """The ``--cpu`` figures as lines of text."""
    runs = ", ".join(f"{v:.1f}" for v in doc["handler_us_per_decision_runs"])
    lines = [
        f"stream processor CPU per decision, median of {doc['runs']} runs of "
        f"{doc['batches']} batches of 100 records for one event (no I/O):",
        f"  whole handler  {doc['handler_us_per_decision']:>7.1f} us  (runs: {runs})",
        f"  engine alone   {doc['engine_us_per_decision']:>7.1f} us  "
        "(parse + lifecycle.step + journal encode)",
        "where the handler's CPU goes (own time in a profiled run):",
    ]
    lines += [f"  {row['own_share']:>6.1%}  {row['function']}" for row in doc["top"]]
    return "\n".join(lines)
