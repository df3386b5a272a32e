"""A signup belongs to whoever made it, an event to whoever runs it (docs/operations.md,
"Who may do what"): every route that touches one, called through the real handler by
each kind of caller, IAM-signed and with a token, allowed or refused as documented; a
refused call changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.helpers import Invoke, decide_pending
from turnstile.base.contract import ADMIN_PRINCIPALS_ENV, ADMIN_SCOPE
from turnstile.storage.store import SignupStore

ACCOUNT = "arn:aws:sts::123456789012:assumed-role"
#: name -> (IAM caller ARN, token subject)
PEOPLE = {
    "owner": (f"{ACCOUNT}/shop-a/s1", "client-shop-a"),
    "other producer": (f"{ACCOUNT}/shop-b/s1", "client-shop-b"),
    "organizer": (f"{ACCOUNT}/box-office/s1", "client-box-office"),
    "other organizer": (f"{ACCOUNT}/theatre/s1", "client-theatre"),
    "reader": (f"{ACCOUNT}/dashboard/s1", "client-dashboard"),
    "admin": (f"{ACCOUNT}/ops-admin/s1", "client-ops"),
}
KINDS = ("iam", "jwt")


def caller(name: str, kind: str) -> dict[str, Any]:
    """The request context's authorizer API Gateway passes for ``name``."""
    arn, subject = PEOPLE[name]
    if kind == "iam":
        return {"iam": {"userArn": arn, "accessKey": "ASIA" + name.upper().replace(" ", "")}}
    scopes = ["turnstile/producer", "turnstile/organizer", "turnstile/reader"]
    if name == "admin":
        scopes = [ADMIN_SCOPE]
    return {"jwt": {"claims": {"sub": subject, "scope": " ".join(scopes)}, "scopes": scopes}}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    # IAM admins are named by the stack's turnstile:adminPrincipals (a pattern here)
    monkeypatch.setenv(ADMIN_PRINCIPALS_ENV, f"{ACCOUNT}/ops-admin/*")
    return str(request.param)


@pytest.fixture
def scene(invoke: Invoke, store: SignupStore, kind: str) -> Invoke:
    """gig, the organizer's (2 seats); other, the other organizer's; the owner's signup
    ``mine`` accepted; the other producer's ``theirs`` accepted."""

    def as_(name: str) -> Any:
        return lambda *a, **k: invoke(*a, authorizer=caller(name, kind), **k)

    assert as_("organizer")("POST", "/events", {"event_id": "gig", "capacity": 2}).status == 201
    other = {"event_id": "other", "capacity": 2}
    assert as_("other organizer")("POST", "/events", other).status == 201
    assert as_("owner")("POST", "/events/gig/signups", {"signup_id": "mine"}).status == 202
    theirs = {"signup_id": "theirs"}
    assert as_("other producer")("POST", "/events/gig/signups", theirs).status == 202
    decide_pending(store, "gig")
    return as_  # type: ignore[return-value]


def snapshot(store: SignupStore) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    event = store.client.get_item(
        TableName=store.control_table,
        Key={"pk": {"S": "EVENT#gig"}, "sk": {"S": "EVENT"}},
        ConsistentRead=True,
    )["Item"]
    return (store.get_intake("gig", "mine"), store.get_decision("gig", "mine"), event)


#: name -> may it (read, ask of) the owner's signup; (list, resize, close) the event
RIGHTS = {
    "owner": (True, False),
    "other producer": (False, False),
    "organizer": (True, True),
    "other organizer": (False, False),
    "reader": (False, False),
    "admin": (True, True),
}


@pytest.mark.parametrize("name", list(RIGHTS))
def test_reading_a_signup(scene: Any, store: SignupStore, name: str):
    answer = scene(name)("GET", "/events/gig/signups/mine")
    if RIGHTS[name][0]:
        assert answer.status == 200
        assert answer.body["status"] == "ACCEPTED"
    else:
        # Not found, as if it did not exist: a stranger learns nothing of another's signup.
        assert answer.status == 404
        assert answer.body["error"] == "signup_not_found"
    waited = scene(name)("GET", "/events/gig/signups/mine/decision", query="wait=1")
    assert waited.status == answer.status


@pytest.mark.parametrize("name", list(RIGHTS))
def test_cancelling_a_signup(scene: Any, store: SignupStore, name: str):
    before = snapshot(store)
    answer = scene(name)("POST", "/events/gig/signups/mine/cancel")
    if RIGHTS[name][0]:
        assert answer.status == 202
        intake = store.get_intake("gig", "mine")
        assert (intake["request"], intake["request_count"]) == ("cancel", 1)
    else:
        assert answer.status == 404
        assert answer.body["error"] == "signup_not_found"
        assert snapshot(store) == before


@pytest.mark.parametrize("name", list(RIGHTS))
def test_listing_an_events_signups(scene: Any, store: SignupStore, name: str):
    answer = scene(name)("GET", "/events/gig/signups")
    if RIGHTS[name][1]:
        assert answer.status == 200
        assert [s["signup_id"] for s in answer.body["signups"]] == ["mine", "theirs"]
    else:
        assert answer.status == 403
        assert answer.body["error"] == "forbidden"


@pytest.mark.parametrize("name", list(RIGHTS))
def test_resizing_and_closing_an_event(scene: Any, store: SignupStore, name: str):
    before = snapshot(store)
    resized = scene(name)("PATCH", "/events/gig", {"capacity": 5})
    closed = scene(name)("POST", "/events/gig/close")
    if RIGHTS[name][1]:
        assert (resized.status, resized.body["capacity"]) == (200, 5)
        assert (closed.status, closed.body["state"]) == (200, "CLOSED")
        assert closed.body["closed_now"] is True
    else:
        assert (resized.status, closed.status) == (403, 403)
        assert resized.body["error"] == closed.body["error"] == "forbidden"
        assert snapshot(store) == before


def test_a_signup_id_taken_by_another_caller_is_a_conflict(scene: Any, store: SignupStore):
    answer = scene("other producer")("POST", "/events/gig/signups", {"signup_id": "mine"})
    assert answer.status == 409
    assert store.get_intake("gig", "mine")["owner"] == PEOPLE["owner"][0 if _iam(store) else 1]


def _iam(store: SignupStore) -> bool:
    return str(store.get_intake("gig", "mine")["owner"]).startswith("arn:")


def test_the_owner_is_recorded_on_intake_and_on_the_decision(scene: Any, store: SignupStore):
    owner = store.get_intake("gig", "mine")["owner"]
    assert owner in PEOPLE["owner"]
    assert store.get_decision("gig", "mine")["owner"] == owner
    event = store.get_event("gig")
    assert event is not None and event.created_by in PEOPLE["organizer"]


def test_the_event_itself_is_public_to_every_caller(scene: Any):
    for name in RIGHTS:
        assert scene(name)("GET", "/events/gig").status == 200


def test_an_organizer_creates_at_most_its_quota_of_events(
    invoke: Invoke, store: SignupStore, kind: str, monkeypatch: pytest.MonkeyPatch
):
    from turnstile.base.contract import MAX_EVENTS_ENV

    monkeypatch.setenv(MAX_EVENTS_ENV, "2")

    def create(name: str, event_id: str) -> Any:
        body = {"event_id": event_id, "capacity": 1}
        return invoke("POST", "/events", body, authorizer=caller(name, kind))

    assert [create("organizer", e).status for e in ("e1", "e2")] == [201, 201]
    assert create("organizer", "e1").status == 200  # a retry creates nothing, counts nothing
    third = create("organizer", "e3")
    assert (third.status, third.body["error"]) == (403, "event_quota_exceeded")
    assert store.get_event("e3") is None
    # another organizer has a quota of its own; an admin has none
    assert create("other organizer", "e3").status == 201
    assert [create("admin", e).status for e in ("a1", "a2", "a3")] == [201, 201, 201]


@pytest.mark.parametrize("length", [600, 3000])
def test_identities_that_share_a_long_prefix_are_still_two_callers(
    invoke: Invoke, store: SignupStore, length: int
):
    """An identity is recorded whole (a very long one as its hash), never cut short."""
    me = {"jwt": {"claims": {"sub": "s" * length + "1"}}}
    other = {"jwt": {"claims": {"sub": "s" * length + "2"}}}
    event = {"event_id": "big", "capacity": 1}
    assert invoke("POST", "/events", event, authorizer=me).status == 201
    assert invoke("PATCH", "/events/big", {"capacity": 2}, authorizer=me).status == 200
    assert invoke("PATCH", "/events/big", {"capacity": 3}, authorizer=other).status == 403
    signup = {"signup_id": "mine"}
    assert invoke("POST", "/events/big/signups", signup, authorizer=me).status == 202
    assert invoke("GET", "/events/big/signups/mine", authorizer=me).status == 200
    assert invoke("GET", "/events/big/signups/mine", authorizer=other).status == 404
