"""The journal: what a commit fixes about each decision item, and the bounds on it."""

from __future__ import annotations

import base64
import random
from decimal import Decimal

import pytest

from turnstile.contract import Reason, Status
from turnstile.domain import Decision, SignupRequest
from turnstile.store import (
    MAX_DECISION_ITEM_BYTES,
    MAX_JOURNAL_BYTES,
    Journal,
    SignupStore,
    bounded_decision,
)

NOW = "2026-01-01T00:00:00.000000Z"

#: A journal exactly as the format-1 encoder wrote it (positional rows, zlib, no copied
#: fields): version 7, three decisions. Frozen: event items written before format 2 hold these.
V1_JOURNAL = base64.b64decode(
    "eNqNjMEKwjAQRH8lzHmVTdSKufkL4slSSmwjFGJRkxRE/HeX1oMXxWEWBmbnPTDArgkJFoZNMWMt3jPb0XMedQChhS1L"
    "ZJa4BfU5BDK0Iiw3BX+Tnh4rkqFk7OQad3FNl+71SRqQnlA/MeYDY96Yrh9c6Nr65q/ZxwTiP0ALGUbvUlTnHJM6euWS"
    "Ct5J1qiq5wtGAER9"
)

V1_DECISIONS = (
    Decision("u0", "49600000000000000000000000001", Status.ACCEPTED, 2, position=5),
    Decision("u1", "49600000000000000000000000002", Status.REJECTED, 1, Reason.CAPACITY_FULL),
    Decision(
        "u2",
        "49600000000000000000000000003",
        Status.REJECTED,
        0,
        Reason.INVALID_REQUEST,
        detail="seats must be at least 1",
    ),
)


def request(signup_id: str = "u1", **fields) -> SignupRequest:
    return SignupRequest("gig", signup_id, "100", **fields)


def accepted(signup_id: str = "u1") -> Decision:
    return Decision(signup_id, "100", Status.ACCEPTED, 1, position=1)


def test_a_format_1_journal_still_decodes_without_copied_fields():
    journal = Journal.decode(V1_JOURNAL)
    assert (journal.version, journal.decided_at) == (7, NOW)
    assert journal.decisions == V1_DECISIONS
    # None: its items take attributes and submitted_at from intake, as they always did.
    assert journal.copies is None


def test_copied_fields_are_fixed_in_typed_form_binary_sets_and_numbers_included():
    # GIVEN attributes of every DynamoDB type, binary and sets among them
    attributes = {
        "photo": b"\x00\xff\x10binary",
        "keys": {b"\x01", b"\x02\x03"},
        "tags": {"b", "a"},
        "scores": {Decimal("1.50"), Decimal("-7")},
        "price": Decimal("12.340"),
        "nested": {"list": [b"\xfe", None, True, "text", {"deep": Decimal("1E+2")}]},
        "name": "山田 太郎",
    }
    journal = Journal.build(
        "gig", 3, NOW, [accepted()], {"u1": request(attributes=attributes, submitted_at=NOW)}
    )
    (copies,) = journal.copies
    # THEN the journal holds the typed values, and decoding gives them back unchanged
    assert copies["attributes"]["M"]["photo"] == {"B": b"\x00\xff\x10binary"}
    assert sorted(copies["attributes"]["M"]["keys"]["BS"]) == [b"\x01", b"\x02\x03"]
    assert copies["attributes"]["M"]["price"] == {"N": "12.340"}
    assert copies["submitted_at"] == {"S": NOW}
    decoded = Journal.decode(journal.encode())
    assert decoded == journal
    # and so do the items: the same bytes from the journal as from the request
    store = SignupStore(client=object())
    assert store.journal_items("gig", decoded) == [
        store.decision_item("gig", d, NOW, request(attributes=attributes, submitted_at=NOW))
        for d in decoded.decisions
    ]


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"attributes": {"blob": b"x" * (MAX_DECISION_ITEM_BYTES + 1)}}, "item over"),
        ({"submitted_at": "9" * 390_000}, "item over"),
        # every character an escape in JSON: small as an item, long as a journal row
        ({"attributes": {"c": "\x01" * 30_000}}, "journal row over"),
        ({"attributes": {"ratio": 0.5}}, "not storable"),  # floats: boto3 refuses them
        ({"attributes": {"empty": set()}}, "not storable"),  # DynamoDB refuses empty sets
    ],
)
def test_copied_fields_that_cannot_be_stored_are_dropped_and_the_detail_says_so(fields, why):
    decision, copies = bounded_decision("gig", accepted(), NOW, request(**fields))
    # THEN the decision stands, without copied fields, and says why
    assert copies == {}
    assert decision.status == Status.ACCEPTED and decision.position == 1
    assert decision.detail is not None
    assert decision.detail.startswith("attributes and submitted_at not stored")
    assert why in decision.detail


def test_a_bounded_decision_keeps_its_own_detail():
    rejected = Decision("u1", "100", Status.REJECTED, 0, Reason.INVALID_REQUEST, detail="bad")
    decision, _ = bounded_decision("gig", rejected, NOW, request(submitted_at="9" * 100_000))
    assert decision.detail is not None and decision.detail.startswith("bad; attributes")


def test_the_longest_prefix_of_a_big_journal_fits_and_one_more_does_not():
    # GIVEN 100 decisions of ~4 KB of incompressible binary each (~400 KB together)
    rng = random.Random(7)
    requests = {
        f"u{i}": request(f"u{i}", attributes={"blob": rng.randbytes(4000)}) for i in range(100)
    }
    decisions = [accepted(f"u{i}") for i in range(100)]
    journal = Journal.build("gig", 1, NOW, decisions, requests)
    assert len(journal.encode()) > MAX_JOURNAL_BYTES
    # WHEN we ask how many fit
    fits = journal.longest_prefix(MAX_JOURNAL_BYTES)
    # THEN that many fit and one more does not
    assert 1 <= fits < 100
    assert len(journal.encode(fits)) <= MAX_JOURNAL_BYTES < len(journal.encode(fits + 1))
