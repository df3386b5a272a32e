"""Personal data: decisions expire when a retention is set, and no log line carries a
signup's id or its attributes."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.api.helpers import v2_event
from tests.helpers import decisions, put_raw_intake
from turnstile.base.contract import INTAKE_TABLE
from turnstile.base.personal_data import TTL_LAG_S, signup_ref
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.dynamo import signup_key
from turnstile.storage.journal import Journal
from turnstile.storage.store import SignupStore
from turnstile.web.api import create_app
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-01-01T00:00:00.000000Z"
DAY_S = 86_400
NOW_EPOCH = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())


@pytest.fixture(autouse=True)
def fresh_processor():
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def invoke(records: list[dict[str, Any]]) -> dict[str, Any]:
    return stream_handler.handler({"Records": records}, LocalLambdaContext())


# -- decisions expire ------------------------------------------------------------------


@pytest.mark.parametrize(("days", "expires_at"), [(400, NOW_EPOCH + 400 * DAY_S), (None, None)])
def test_decisions_expire_counted_from_when_they_were_decided(
    client, store, stream, days, expires_at
):
    # GIVEN a processor with (or without) a decision retention, and signups of every kind
    stream_handler._processor = StreamProcessor(
        store, clock=lambda: NOW, decision_retention_days=days
    )
    store.create_event("gig", 1, NOW)
    kept = {"expires_at": {"N": str(NOW_EPOCH + 30 * DAY_S)}}  # as the API writes them
    for signup_id in ("a", "b"):
        put_raw_intake(client, "gig", signup_id, submitted_at={"S": NOW}, **kept)
    put_raw_intake(client, "gig", "bad", seats={"S": "many"}, **kept)
    put_raw_intake(client, "nowhere", "c", **kept)
    # WHEN they are decided
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN every decision item (accepted, rejected, unknown event) carries expires_at ...
    items = decisions(client)
    assert len(items) == 4
    found = {int(i["expires_at"]["N"]) if "expires_at" in i else None for i in items.values()}
    assert found == {expires_at}
    # ... fixed by the journal, so writing its items again writes the same bytes
    event = store.get_event("gig")
    assert event is not None and event.journal is not None
    assert event.journal.expires_at == expires_at
    assert Journal.decode(event.journal.encode()) == event.journal
    store.materialize("gig", event.journal)
    assert decisions(client) == items


def test_the_stream_handler_reads_the_decision_retention(client, store, stream, monkeypatch):
    monkeypatch.setenv("TURNSTILE_DECISION_RETENTION_DAYS", "45")
    store.create_event("gig", 1, NOW)
    put_raw_intake(client, "gig", "a", submitted_at={"S": NOW}, expires_at={"N": "1"})
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    (item,) = decisions(client).values()
    decided = datetime.fromisoformat(item["decided_at"]["S"]).timestamp()
    assert int(item["expires_at"]["N"]) == int(decided) + 45 * DAY_S


@pytest.mark.parametrize(
    ("intake_expires", "kept_until"),
    [
        (None, None),  # a record that never expires keeps its decision for good
        ({"S": "2027-01-01"}, None),  # TTL ignores what is no number: kept for good
        ({"N": str(NOW_EPOCH + 500 * DAY_S)}, NOW_EPOCH + 500 * DAY_S + TTL_LAG_S),
        ({"N": str(NOW_EPOCH + 10 * DAY_S)}, NOW_EPOCH + 400 * DAY_S),
    ],
)
def test_a_decision_never_expires_before_its_intake_record(
    client, store, stream, intake_expires, kept_until
):
    """With decision retention on, a decision whose intake record outlives it would be
    decided again by the sweeper once TTL removed it: it is kept as long as its record
    (and TTL's lag), or for good."""
    stream_handler._processor = StreamProcessor(
        store, clock=lambda: NOW, decision_retention_days=400
    )
    store.create_event("gig", 1, NOW)
    extra = {"expires_at": intake_expires} if intake_expires else {}
    put_raw_intake(client, "gig", "a", submitted_at={"S": NOW}, **extra)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    item = decisions(client)[("gig", "a")]
    assert (int(item["expires_at"]["N"]) if "expires_at" in item else None) == kept_until


def test_a_record_made_to_outlive_its_decision_afterwards_keeps_it_longer(
    client, store, stream
):
    """A producer that extends (or removes) its record's expires_at after the decision:
    the sweeper's full read sees the record outlive its decision and re-emits it, and the
    processor keeps the decision longer (never shorter), without deciding it again."""
    from turnstile.jobs.sweeper import Sweeper

    stream_handler._processor = StreamProcessor(
        store, clock=lambda: NOW, decision_retention_days=400
    )
    store.create_event("gig", 5, NOW)
    short = {"expires_at": {"N": str(NOW_EPOCH + DAY_S)}}
    for signup_id in ("a", "b"):
        put_raw_intake(client, "gig", signup_id, submitted_at={"S": NOW}, **short)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    before = decisions(client)
    assert int(before[("gig", "a")]["expires_at"]["N"]) == NOW_EPOCH + 400 * DAY_S
    # WHEN the producers change their records: a's lives for 1,000 days, b's for good
    key = {"event_id": {"S": "gig"}}
    client.update_item(
        TableName="turnstile-intake",
        Key={**key, "signup_id": {"S": "a"}},
        UpdateExpression="SET expires_at = :e",
        ExpressionAttributeValues={":e": {"N": str(NOW_EPOCH + 1000 * DAY_S)}},
    )
    client.update_item(
        TableName="turnstile-intake",
        Key={**key, "signup_id": {"S": "b"}},
        UpdateExpression="REMOVE expires_at",
    )
    stream.read_new()  # (no marker: the event source filters these out)
    # ... and the sweeper's daily full read runs, then the stream is delivered
    result = Sweeper(store, owner="s", min_age_s=0, full_scan_every_s=0).sweep("full")
    assert result.re_emitted == 2
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN each decision is kept as long as its record, and decided only once
    after = decisions(client)
    assert int(after[("gig", "a")]["expires_at"]["N"]) == NOW_EPOCH + 1000 * DAY_S + TTL_LAG_S
    assert "expires_at" not in after[("gig", "b")]
    for k in before:
        assert {n: v for n, v in after[k].items() if n != "expires_at"} == {
            n: v for n, v in before[k].items() if n != "expires_at"
        }
    # ... and the next full read finds nothing more to do
    again = Sweeper(store, owner="s", min_age_s=0, full_scan_every_s=0).sweep("again")
    assert again.re_emitted == 0


# -- logs -------------------------------------------------------------------------------

SIGNUP_ID = "ada.lovelace@example.org"
ATTRIBUTES = {"name": "Ada Lovelace", "phone": "+44 20 7946 0958"}
#: Whole values: a bare run of digits could turn up in a timestamp or a request id.
SECRETS = [SIGNUP_ID, "Lovelace", "+44 20 7946 0958"]


class Collect(logging.Handler):
    """Every record, with all its fields (Powertools keys included), as text."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = {k: v for k, v in record.__dict__.items() if k not in ("args", "msg")}
        text = json.dumps(fields, default=str)
        self.lines.append(f"{record.levelname} {record.getMessage()} {text}")


@pytest.fixture
def logs_at_info() -> Iterator[Collect]:
    """The functions' loggers (Powertools' ``turnstile`` and ``turnstile-api``, and the
    modules' own ``turnstile.*``) at INFO, as deployed, collected."""
    import turnstile.web.api  # noqa: F401  (its child logger, turnstile-api.turnstile.api)

    collect = Collect()
    roots = [logging.getLogger("turnstile"), logging.getLogger("turnstile-api")]
    loggers = [
        logging.getLogger(name)
        for name in sorted(logging.Logger.manager.loggerDict)
        if name.split(".")[0] in ("turnstile", "turnstile-api")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
    for logger in roots:
        logger.addHandler(collect)
    yield collect
    for logger in roots:
        logger.removeHandler(collect)
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def test_logs_carry_no_signup_id_and_no_attributes(client, store, stream, logs_at_info):
    # GIVEN a signup submitted through the API, with an id and attributes that are personal
    app = create_app(store=lambda: store)

    def call(method: str, path: str, body: Any = None) -> int:
        return app.resolve(v2_event(method, path, body), LocalLambdaContext())["statusCode"]

    assert call("POST", "/events", {"event_id": "gala", "capacity": 1}) == 201
    body = {"signup_id": SIGNUP_ID, "attributes": ATTRIBUTES}
    assert call("POST", "/events/gala/signups", body) == 202
    assert call("POST", "/events/gala/signups", body) == 202
    assert call("GET", f"/events/gala/signups/{SIGNUP_ID}") == 200
    # ... one written straight into intake, invalid, and one for an event that fails
    put_raw_intake(
        client,
        "gala",
        f"{SIGNUP_ID}.2",
        seats={"N": "0"},
        attributes={"M": {"x": {"S": "+44 20 7946 0958"}}},
    )
    store.create_event("flaky", 1, NOW)
    put_raw_intake(client, "flaky", SIGNUP_ID, attributes={"M": {"n": {"S": "Lovelace"}}})

    class Flaky(SignupStore):
        def commit(self, expected, *args: Any, **kwargs: Any):
            if expected.event_id == "flaky":
                raise RuntimeError("DynamoDB is down")
            return super().commit(expected, *args, **kwargs)

    stream_handler._processor = StreamProcessor(Flaky(client, sleep=lambda _: None))
    # WHEN the stream processor decides the batch (one event parked)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN the logs refer to the signup by its reference only, and name no attribute value
    logged = "\n".join(logs_at_info.lines)
    assert "signup submitted" in logged and "batch processed" in logged
    assert "event parked" in logged and "event group failed" in logged
    assert signup_ref("gala", SIGNUP_ID) in logged
    # ... and so do they when a put again after a deletion the processor never saw is taken
    # back (docs/design.md, section 4)
    client.delete_item(TableName=INTAKE_TABLE.name, Key=signup_key("gala", SIGNUP_ID))
    stream.read_new()  # the deletion, lost
    put_raw_intake(client, "gala", SIGNUP_ID, attributes={"M": {"n": {"S": "Lovelace"}}})
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    logged = "\n".join(logs_at_info.lines)
    assert "taken back out of the event" in logged
    for secret in SECRETS:
        assert secret not in logged, f"{secret!r} in the logs"
