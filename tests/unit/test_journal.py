"""The journal: what a commit fixes about each decision item, and the bounds on it."""

from __future__ import annotations

import base64
import random
from dataclasses import replace
from decimal import Decimal

import pytest

from tests.helpers import unordered
from turnstile.base.contract import Reason, Status
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import MAX_DECISION_ITEM_BYTES, Decision, bounded_decision
from turnstile.storage.journal import Journal, copies_digest
from turnstile.storage.store import MAX_JOURNAL_BYTES, SignupStore

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

#: A journal exactly as today's encoder (format 2: bzip2, a format tag, rows with their
#: copied fields in typed form, an expiry) wrote it: version 8, the three decisions above,
#: the first with attributes of several types (binary, a string set), the second with only
#: ``submitted_at``, the third with nothing to copy. Frozen: event items hold these.
V2_JOURNAL = base64.b64decode(
    "QlpoOTFBWSZTWY02/3AAAMr/gFgAAgBQB3/yMAfcGr+nfyowAQzaBqaKG1PUNqNADajI9Q9E9R6j0h6g0ETE0agAAAAG"
    "QAEoRJpkAAaAaAeiGgBJRhdYQuROt1bSzp8smSKQNBq2pKrK/7e8NojpjiB+065AwqVMdVByoooyK03ChmmNwahZ1GWD"
    "aHETdjTPEkQsB5LHWcqH24wl9UIdJEfUKUhKkaElFNh4k56ji97HSeUXlNCLSk9YAxIp1rqqK2JyFIBizBADaiAgQK16"
    "AHFOaCsK6qAeDAxVokR7HPjDlEHmMjYPa9DaFrXjVQPxwDYztcyn6JMBSdAFQFffISE1imRJ9c2diiyGGiA5g08DIAza"
    "Uw/W/nshctOU4xIsVoIaMFg09Y0U0/i7kinChIRpt/uA"
)
V2_COPIES = (
    {
        "submitted_at": {"S": "2026-01-01T00:00:00Z"},
        "attributes": {
            "M": {
                "vip": {"BOOL": True},
                "n": {"N": "1.5"},
                "b": {"B": b"\x00\xff"},
                "tags": {"SS": ["b", "a"]},
            }
        },
    },
    {"submitted_at": {"S": "2025-12-31T23:59:59Z"}},
    {},
)


#: A journal exactly as the format-3 encoder wrote it (the lifecycle's extras and changes,
#: rows with their copied fields): version 9, the decisions and copies above, the first
#: with a hold's expiry, and one change. Frozen: event items written before format 4 hold these.
V3_JOURNAL = base64.b64decode(
    "QlpoOTFBWSZTWSGFTiEAAQb/gFgAAgBQB3/yPkfcGr/n/2owAUzWzBop6oMgaD1NAaGhpkMmnqaNHqZNBoTRoKmxTNQB"
    "iDCHlDJoGCBhSekhPU00eo0MnqNqNAZA2o0DEruAmSmGI87hkhjNTk79tvcb5B4oY3DEB4+9KLp5qZn+XiY08GLcE2EE"
    "RHxIakBQGyyiwE8vhp5pCWUdxFoWdBq13W0Ccs0MZuyZzqkLQYNV+nRQwbK2TyoG4WTJdhGV4KgCMRSuvopVxZxWxi1U"
    "QKMAr4yo9jhpomEcJwXVR6cJ4hvE1AoYsDJPqvZAeff7rVEXRCQLsLaQF2NQE7p4MmaIwbQgb3lpRJhIDFZpNKujzFQA"
    "jQML4ja74OAvC/SurkOJmJUBwSaBWTBUN4reC4CyVAVQdPpIWcAbfwxcqjCTqcUE4q5xWhTRADSAeskXggpkTG7Ht2kX"
    "8dd6hb4iogWVgNOBCZ2WORT/xdyRThQkCGFTiEA="
)


def request(signup_id: str = "u1", **fields) -> IntakeRecord:
    return IntakeRecord("gig", signup_id, "100", **fields)


def accepted(signup_id: str = "u1") -> Decision:
    return Decision(signup_id, "100", Status.ACCEPTED, 1, position=1)


def same(decoded: Journal, built: Journal) -> bool:
    """A journal read back is the one built, its copied fields replaced by their digests."""
    assert built.copies is not None
    return (
        decoded.version == built.version
        and decoded.decided_at == built.decided_at
        and decoded.decisions == built.decisions
        and decoded.expires_at == built.expires_at
        and decoded.extras == built.extras
        and decoded.updates == built.updates
        and decoded.copies is None
        and decoded.digests == tuple(copies_digest(c) for c in built.copies)
    )


def test_a_format_1_journal_still_decodes_without_copied_fields():
    journal = Journal.decode(V1_JOURNAL)
    assert (journal.version, journal.decided_at) == (7, NOW)
    assert journal.decisions == V1_DECISIONS
    # None: its items take attributes and submitted_at from intake, as they always did.
    assert journal.copies is None


def test_a_format_2_journal_as_stored_today_still_decodes_and_encodes_the_same():
    # GIVEN the bytes of a journal an event item holds today
    journal = Journal.decode(V2_JOURNAL)
    # THEN it decodes to its decisions, each with its copied fields, and its expiry
    assert (journal.version, journal.decided_at, journal.expires_at) == (8, NOW, 1_790_000_000)
    assert journal.decisions == V1_DECISIONS
    assert journal.copies == V2_COPIES
    # ... and this code writes it again as format 4: the same decisions, and in place of
    # the copied fields their digests (None where there is nothing to copy)
    assert Journal.FORMAT == 4
    again = Journal.decode(journal.encode())
    assert (again.version, again.decided_at, again.expires_at) == (8, NOW, 1_790_000_000)
    assert (again.decisions, again.copies, again.updates) == (V1_DECISIONS, None, ())
    assert again.digests == tuple(copies_digest(c) for c in V2_COPIES)
    assert again.digests[2] is None and len(again.digests[0]) == 11


def test_a_format_3_journal_as_stored_before_format_4_still_decodes():
    # GIVEN the bytes of a journal of format 3 (copied fields, extras, a change)
    journal = Journal.decode(V3_JOURNAL)
    # THEN it decodes whole, its items carry the copied fields it fixed
    assert (journal.version, journal.decided_at, journal.expires_at) == (9, NOW, 1_790_000_000)
    assert journal.decisions == V1_DECISIONS and journal.copies == V2_COPIES
    assert journal.extras[0] == {"hold_expires_at": {"S": "2026-01-01T00:00:04.000000Z"}}
    assert journal.extras[1:] == (None, None)
    assert [u.signup_id for u in journal.updates] == ["u9"]
    items = journal.items("gig")
    assert items[0]["attributes"] == V2_COPIES[0]["attributes"]
    assert items[0]["hold_expires_at"] == {"S": "2026-01-01T00:00:04.000000Z"}
    assert journal.digests is None


def test_a_digest_does_not_depend_on_the_order_of_keys_or_set_members():
    fields = V2_COPIES[0]
    attrs = fields["attributes"]["M"]
    shuffled = {
        "attributes": {"M": {**dict(reversed(list(attrs.items()))), "tags": {"SS": ["a", "b"]}}},
        "submitted_at": fields["submitted_at"],
    }
    assert copies_digest(shuffled) == copies_digest(fields)
    # ... but any value that differs does, and an empty copy has none
    changed = {**shuffled, "submitted_at": {"S": "2026-01-01T00:00:01Z"}}
    assert copies_digest(changed) != copies_digest(fields)
    listed = {"attributes": {"M": {"l": {"L": [{"S": "a"}, {"S": "b"}]}}}}
    reordered = {"attributes": {"M": {"l": {"L": [{"S": "b"}, {"S": "a"}]}}}}
    assert copies_digest(listed) != copies_digest(reordered)
    assert copies_digest({}) is None


def test_a_format_3_journal_carries_lifecycle_attributes_and_changes():
    from turnstile.storage.dynamo import to_item
    from turnstile.storage.items import ItemUpdate

    held = Decision("u1", "100", Status.HELD, 2, position=1)
    waiting = Decision("u2", "101", Status.WAITLISTED, 1)
    extras = [
        to_item({"hold_expires_at": "2026-01-01T00:00:04.000000Z"}),
        to_item({"waitlist_position": 1}),
    ]
    change = ItemUpdate(
        "u0",
        Status.HELD,
        to_item({"status": Status.CANCELLED, "history": [{"from": "HELD", "to": "CANCELLED"}]}),
        ("hold_expires_at",),
        3,
    )
    journal = Journal.build(
        "gig", 5, NOW, [held, waiting], {"u1": request("u1")}, extras=extras, updates=[change]
    )
    again = Journal.decode(journal.encode())
    assert again.decisions == (held, waiting)
    assert again.updates == (change,)
    # read back, its items take the copied fields from the records at hand
    with pytest.raises(ValueError, match="items_from"):
        again.items("gig")
    # two changes round-trip too, and a journal without any stores no list of them
    other = ItemUpdate("u9", Status.WAITLISTED, to_item({"status": Status.REJECTED}), (), None)
    both = Journal.build("gig", 6, NOW, [], {}, updates=[change, other])
    assert Journal.decode(both.encode()).updates == (change, other)
    import bz2
    import json

    plain = Journal.build("gig", 7, NOW, [held], {"u1": request("u1")})
    assert "u" not in json.loads(bz2.decompress(plain.encode()))
    items = again.items_from("gig", {"u1": request("u1")})
    assert items == journal.items("gig")
    assert items[0]["hold_expires_at"] == {"S": "2026-01-01T00:00:04.000000Z"}
    assert items[0]["status"] == {"S": Status.HELD}
    assert items[1]["waitlist_position"] == {"N": "1"}
    assert "hold_expires_at" not in items[1]


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
    assert same(decoded, journal)
    # and so do the items read back, from the request at hand: the same bytes as from the
    # request, their digest the journal's
    store = SignupStore(client=object())
    at_hand = {"u1": request(attributes=attributes, submitted_at=NOW)}
    assert store.journal_items("gig", decoded, at_hand) == journal.items("gig")
    assert journal.items("gig") == [
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
    # GIVEN 100 decisions of ~4 KB of incompressible detail each (~400 KB together; copied
    # fields are no longer in a journal, only their digests)
    rng = random.Random(7)
    requests = {
        f"u{i}": request(f"u{i}", attributes={"blob": rng.randbytes(4000)}) for i in range(100)
    }
    decisions = [
        replace(accepted(f"u{i}"), detail=base64.b64encode(rng.randbytes(3000)).decode())
        for i in range(100)
    ]
    journal = Journal.build("gig", 1, NOW, decisions, requests)
    assert len(journal.encode()) > MAX_JOURNAL_BYTES
    # WHEN we ask how many fit
    fits = journal.longest_prefix(MAX_JOURNAL_BYTES)
    # THEN that many fit and one more does not
    assert 1 <= fits < 100
    assert len(journal.encode(fits)) <= MAX_JOURNAL_BYTES < len(journal.encode(fits + 1))


# --- The bounds to the byte, the journal's own round trips, and batching (mutation tests) ---

LONG_EVENT = "concert-hall-2026-spring-tour"
EXPIRES = 1_900_000_000


def _item_at(size: int, event_id: str = LONG_EVENT, expires_at: int | None = None):
    """A request whose decision item (base + copied fields) is exactly ``size`` bytes."""
    from turnstile.base.itemsize import typed_item_size
    from turnstile.storage.dynamo import to_item
    from turnstile.storage.items import base_item

    def total(pad: int) -> int:
        req = request(attributes={"pad": "x" * pad}, submitted_at=NOW)
        copies = to_item({"submitted_at": req.submitted_at, "attributes": req.attributes})
        base = base_item(event_id, accepted(), NOW, expires_at)
        return typed_item_size(base) + typed_item_size(copies)

    pad = size - total(0)  # ASCII text: one byte per character
    assert total(pad) == size
    return request(attributes={"pad": "x" * pad}, submitted_at=NOW)


@pytest.mark.parametrize("expires_at", [None, EXPIRES])
def test_an_item_of_exactly_the_limit_keeps_its_copies_and_one_byte_more_drops_them(expires_at):
    # The base item counts the event id, decided_at and expires_at as written: a bound that
    # left any of them out (or counted "None") would keep copies one byte over the limit.
    store = SignupStore(client=object())
    from turnstile.base.itemsize import typed_item_size

    at_limit = _item_at(MAX_DECISION_ITEM_BYTES, expires_at=expires_at)
    over = _item_at(MAX_DECISION_ITEM_BYTES + 1, expires_at=expires_at)
    for req, kept in ((at_limit, True), (over, False)):
        decision, copies = bounded_decision(LONG_EVENT, accepted(), NOW, req, expires_at)
        assert bool(copies) is kept
        assert (decision.detail is None) is kept
        item = store.decision_item(LONG_EVENT, accepted(), NOW, req, expires_at)
        assert ("attributes" in item) is kept
        assert typed_item_size(item) <= MAX_DECISION_ITEM_BYTES
        if kept:
            assert typed_item_size(item) == MAX_DECISION_ITEM_BYTES
        (journal_copies,) = Journal.build(
            LONG_EVENT, 1, NOW, [accepted()], {"u1": req}, expires_at
        ).copies
        assert bool(journal_copies) is kept
    assert "item over 65536 bytes" in (
        bounded_decision(LONG_EVENT, accepted(), NOW, over, expires_at)[0].detail or ""
    )


def test_the_largest_base_item_without_extras_is_within_its_bound():
    """Copies are sized against the base item only when the base could matter: that skip
    holds only if no base item without extras is over ``MAX_BASE_ITEM_BYTES``. The largest
    one: keys at DynamoDB's limits, a detail of four-byte characters at its bound, the
    longest reason, and every number and timestamp at its longest."""
    from turnstile.base.itemsize import typed_item_size
    from turnstile.engine.rules import MAX_DETAIL_CHARS
    from turnstile.storage.items import MAX_BASE_ITEM_BYTES, base_item

    decision = Decision(
        signup_id="s" * 1024,
        sequence_number="9" * 40,
        status=Status.WAITLISTED,
        seats=10**6,
        reason=max((*Reason.REJECTIONS, *Reason.REFUSALS), key=len),
        position=2**53 - 1,
        detail="\U0001f600" * MAX_DETAIL_CHARS,
    )
    item = base_item("e" * 2048, decision, "9999-12-31T23:59:59.999999+00:00", 2**63)
    assert typed_item_size(item) <= MAX_BASE_ITEM_BYTES


def test_the_lifecycle_attributes_count_toward_the_items_limit():
    """A decision's extras (a history, a place in line) are part of its item: copies that
    fit beside the base item alone are dropped when the extras push the item over."""
    from turnstile.base.itemsize import typed_item_size
    from turnstile.storage.dynamo import to_item

    extras = to_item({"history": [{"from": "PENDING", "to": "HELD", "n": "x" * 9000}]})
    decision = accepted()
    (copies,) = Journal.build(
        LONG_EVENT,
        1,
        NOW,
        [decision],
        {"u1": _item_at(MAX_DECISION_ITEM_BYTES - 4000)},
        extras=[extras],
    ).copies
    assert copies == {}  # 9 KB of extras on top: over the limit, dropped
    journal = Journal.build(
        LONG_EVENT, 1, NOW, [decision], {"u1": _item_at(MAX_DECISION_ITEM_BYTES - 4000)}
    )
    (kept,) = journal.copies
    assert kept != {}  # without them the same copies fit
    assert all(typed_item_size(i) <= MAX_DECISION_ITEM_BYTES for i in journal.items(LONG_EVENT))


def test_a_journal_encoded_once_still_encodes_its_prefixes():
    """``encoded`` keeps the whole journal made once; a prefix is still its own."""
    decisions = [accepted(f"u{i}") for i in range(40)]
    journal = Journal.build(LONG_EVENT, 1, NOW, decisions, {})
    whole = journal.encoded
    assert journal.encode() == whole
    assert len(Journal.decode(journal.encode(5)).decisions) == 5
    assert journal.longest_prefix(len(whole) - 1) < 40


def _row_of(json_bytes: int):
    """A request whose copied fields are exactly ``json_bytes`` of journal JSON, while the
    item stays far under its limit (two-byte binaries: seven bytes of JSON each)."""
    from turnstile.storage.dynamo import to_item, typed_json

    binaries = {i.to_bytes(2, "big") for i in range(18_000)}

    def text(pad: int) -> str:
        req = request(attributes={"keys": binaries, "pad": "y" * pad}, submitted_at=NOW)
        return typed_json(to_item({"submitted_at": req.submitted_at, "attributes": req.attributes}))

    pad = json_bytes - len(text(0).encode())
    assert len(text(pad).encode()) == json_bytes
    return request(attributes={"keys": binaries, "pad": "y" * pad}, submitted_at=NOW)


def test_a_journal_row_of_exactly_its_bound_is_kept_and_one_byte_more_is_dropped():
    from turnstile.storage.items import MAX_JOURNAL_ROW_BYTES

    bound = MAX_JOURNAL_ROW_BYTES - 1024  # room for the row's own fields
    _, kept = bounded_decision("gig", accepted(), NOW, _row_of(bound))
    decision, dropped = bounded_decision("gig", accepted(), NOW, _row_of(bound + 1))
    assert kept and not dropped
    assert decision.detail is not None
    assert decision.detail.endswith(f"journal row over {MAX_JOURNAL_ROW_BYTES} bytes")


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"attributes": {"empty": set()}}, "not storable in DynamoDB (an empty set)"),
        ({"attributes": {"l": [1, set()]}}, "not storable in DynamoDB (an empty set)"),
        ({"attributes": {"m": {"deep": [set()]}}}, "not storable in DynamoDB (an empty set)"),
        ({"attributes": {"blob": b"x" * MAX_DECISION_ITEM_BYTES}}, "item over 65536 bytes"),
        ({"attributes": {"c": "\x01" * 30_000}}, "journal row over 131072 bytes"),
    ],
)
def test_a_decision_whose_copies_were_dropped_round_trips_through_its_journal(fields, why):
    # Every way of dropping the copies leaves a row the journal can read back: {} as copies.
    journal = Journal.build("gig", 2, NOW, [accepted(), accepted("u2")], {"u1": request(**fields)})
    assert journal.copies == ({}, {})
    decoded = Journal.decode(journal.encode())
    assert same(decoded, journal)
    assert decoded.digests == (None, None)
    assert decoded.decisions[0].detail == f"attributes and submitted_at not stored: {why}"
    # ... and read back, the item copies nothing, whatever the record at hand holds
    items = decoded.items_from("gig", {"u1": request(**fields)})
    assert items == journal.items("gig")


@pytest.mark.parametrize(
    "attributes",
    [
        {"photo": b"\x00\x01"},  # a binary and no binary set
        {"keys": {b"\x00", b"\x01"}},  # a binary set and no binary
        {"nested": {"deep": [b"\xff"]}},
    ],
)
def test_binary_alone_or_a_binary_set_alone_comes_back_as_bytes(attributes):
    from turnstile.storage.dynamo import from_item, to_item
    from turnstile.storage.intake import parse_intake

    journal = Journal.build("gig", 1, NOW, [accepted()], {"u1": request(attributes=attributes)})
    decoded = Journal.decode(journal.encode())
    # GIVEN the intake item as boto3 reads it back (binary as boto3's Binary)
    stored = from_item(to_item({"event_id": "gig", "signup_id": "u1", "attributes": attributes}))
    read = parse_intake(stored, "", {"event_id": "gig", "signup_id": "u1"})
    # THEN its copied fields have the journal's digest, and the item holds bytes
    items = decoded.items_from("gig", {"u1": read})
    assert unordered(items) == unordered(journal.items("gig"))  # a set's order is its own
    assert "b'" in str(items[0]["attributes"])  # bytes, not their base64 text


def test_text_with_lone_surrogates_round_trips():
    # Python text may hold a lone surrogate (JSON's "\ud800"); the journal keeps it whole.
    odd = "a\ud800b"
    journal = Journal.build(
        "gig", 1, NOW, [accepted(odd)], {odd: request(odd, attributes={"k": odd})}
    )
    decoded = Journal.decode(journal.encode())
    assert same(decoded, journal)
    assert decoded.decisions[0].signup_id == odd
    items = decoded.items_from("gig", {odd: request(odd, attributes={"k": odd})})
    assert items[0]["attributes"]["M"]["k"] == {"S": odd}


def test_a_journal_of_a_newer_format_is_refused_by_name():
    import bz2

    blob = bz2.compress(b'{"f":5,"v":1,"t":"x","d":[]}')
    with pytest.raises(ValueError, match=r"^journal format 5 is newer than this code$"):
        Journal.decode(blob)


def test_the_longest_prefix_is_exactly_what_fits_at_every_limit():
    rng = random.Random(11)
    requests = {f"u{i}": request(f"u{i}", attributes={"b": rng.randbytes(300)}) for i in range(9)}
    journal = Journal.build("gig", 1, NOW, [accepted(f"u{i}") for i in range(9)], requests)
    sizes = [len(journal.encode(k)) for k in range(1, 10)]
    assert sizes == sorted(sizes) and len(set(sizes)) == 9
    # at every size a prefix can have, exactly, and one byte under it
    for limit in sorted({s for s in sizes} | {s - 1 for s in sizes[1:]}):
        expected = max(k for k in range(1, 10) if sizes[k - 1] <= limit)
        assert journal.longest_prefix(limit) == expected, limit
    assert journal.longest_prefix(0) == 1  # never less than one decision


def test_an_event_record_reads_its_lowest_capacity():
    from turnstile.storage.events import EventRecord

    base = {"event_id": "gig", "capacity": 5, "taken": 0, "accepted": 0, "version": 1}
    assert EventRecord.from_values({**base, "min_capacity": Decimal(3)}).min_capacity == 3
    assert EventRecord.from_values({**base, "min_capacity": 0}).min_capacity == 0
    assert EventRecord.from_values(base).min_capacity is None


def _items(*sizes: int) -> list[dict]:
    return [{"k": {"S": "x" * (s - 1)}} for s in sizes]  # "k" is one byte of the size


@pytest.mark.parametrize(
    ("sizes", "count", "limit", "expected"),
    [
        ((), 25, 100, []),
        ((10,) * 60, 25, 10_000, [25, 25, 10]),  # by count, three runs
        ((10,) * 3, 25, 30, [3]),  # exactly the size limit: one run
        ((10,) * 4, 25, 30, [3, 1]),
        ((10, 21), 25, 30, [1, 1]),  # one byte over: cut
        ((200,), 25, 100, [1]),  # one item over the limit alone: a run of its own
        ((200, 10, 10), 25, 100, [1, 2]),
        ((50, 50, 1), 25, 100, [2, 1]),
        ((30, 10, 10, 10), 25, 30, [1, 3]),  # a later run filling the bytes exactly
    ],
)
def test_batches_are_the_longest_runs_within_count_and_bytes(sizes, count, limit, expected):
    from turnstile.storage.dynamo import chunks_within

    items = _items(*sizes)
    runs = [list(run) for run in chunks_within(items, count, limit)]
    assert [len(run) for run in runs] == expected
    assert [item for run in runs for item in run] == items


def test_a_journal_keeps_its_expiry_through_encode_and_decode():
    journal = Journal.build("gig", 1, NOW, [accepted()], {}, expires_at=EXPIRES)
    decoded = Journal.decode(journal.encode())
    assert decoded.expires_at == EXPIRES and same(decoded, journal)
    kept = Journal.build("gig", 1, NOW, [accepted()], {})
    assert Journal.decode(kept.encode()).expires_at is None


@pytest.mark.parametrize(
    "rewritten",
    [
        {"attributes": {"name": "Mallory"}, "submitted_at": NOW, "owner": "alice"},
        {"attributes": {"name": "Alice"}, "submitted_at": NOW, "owner": "mallory"},
        {"attributes": {"name": "Alice"}, "submitted_at": "2026-01-01T00:00:01Z", "owner": "alice"},
        {"attributes": {"name": "Alice"}, "submitted_at": NOW},
    ],
    ids=["attributes", "owner", "submitted_at", "owner-dropped"],
)
def test_a_record_rewritten_after_the_commit_is_told_and_nothing_is_copied_from_it(rewritten):
    # GIVEN a commit of Alice's signup, and a journal read back (its items unwritten)
    fields = {"attributes": {"name": "Alice"}, "submitted_at": NOW, "owner": "alice"}
    journal = Journal.build("gig", 1, NOW, [accepted()], {"u1": request(**fields)})
    decoded = Journal.decode(journal.encode())
    # WHEN its record is the one committed, the item is the committed one
    assert decoded.items_from("gig", {"u1": request(**fields)}) == journal.items("gig")
    # WHEN it was rewritten (or is gone), the item copies none of its fields, and says so
    for source in ({"u1": request(**rewritten)}, {}):
        (item,) = decoded.items_from("gig", source)
        assert not {"attributes", "submitted_at", "owner"} & set(item)
        assert item["status"] == {"S": Status.ACCEPTED} and item["position"] == {"N": "1"}
        assert item["detail"]["S"] == (
            "attributes and submitted_at not stored: "
            "the intake record changed after the decision was committed"
        )


@pytest.mark.parametrize(
    "attributes",
    [
        {"name": "Ada", "n": Decimal("1.5"), "deep": {"b": 1, "a": [1, "x"]}},
        {"tags": {"b", "a"}, "name": "Ada"},
        {"SS": "a key named like a set", "photo": b"\x00"},
        {"nested": {"keys": {b"\x02", b"\x01"}}},
    ],
)
def test_a_digest_from_the_journal_s_text_is_the_digest_from_the_fields(attributes):
    # The build's fast path (no set in the typed JSON: no sorting) gives the same digest
    # as the fields alone, so a journal read back matches the records it was built from.
    journal = Journal.build("gig", 1, NOW, [accepted()], {"u1": request(attributes=attributes)})
    (copies,), (text,) = journal.copies, journal.copies_json
    assert copies_digest(copies, text) == copies_digest(copies)
    decoded = Journal.decode(journal.encode())
    assert decoded.items_from("gig", {"u1": request(attributes=attributes)}) == journal.items("gig")
