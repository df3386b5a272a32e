"""The turnstile command in-process against moto: output, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.helpers import NO_LIFECYCLE_FIELDS
from turnstile.base.contract import MAX_LINEUP_ENTRIES
from turnstile_tools import cli


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_event_create_show_submit_status(aws, capsys):
    code, out, _ = run(capsys, "event", "create", "gig", "--capacity", "2")
    assert code == 0 and json.loads(out)["capacity"] == 2
    code, out, _ = run(capsys, "submit", "gig", "u1", "--seats", "2", "--attributes", '{"a": 1.5}')
    assert code == 0 and json.loads(out)["status"] == "PENDING"
    code, out, _ = run(capsys, "status", "gig", "u1")
    assert code == 0 and json.loads(out)["status"] == "PENDING"
    # still pending after --wait: exit 3, the JSON still printed
    code, out, _ = run(capsys, "status", "gig", "u1", "--wait", "0.3")
    assert code == cli.EXIT_STILL_PENDING and json.loads(out)["status"] == "PENDING"


def test_event_create_records_the_local_user_as_creator(aws, capsys, monkeypatch):
    # GIVEN a local user name (getpass reads LOGNAME first)
    monkeypatch.setenv("LOGNAME", "ada")
    # WHEN the CLI creates an event THEN the event item says who did
    code, out, _ = run(capsys, "event", "create", "gig", "--capacity", "2")
    assert code == 0 and json.loads(out)["created_by"] == "cli:ada"
    code, out, _ = run(capsys, "event", "show", "gig")
    assert json.loads(out)["created_by"] == "cli:ada"


DAY_S = 86_400


@pytest.mark.parametrize(
    ("env_days", "argv", "days"),
    [
        (None, [], 30),
        ("7", [], 7),
        ("7", ["--retention-days", "2"], 2),
    ],
)
def test_submit_sets_expires_at_on_the_intake_record(
    aws, capsys, monkeypatch, env_days, argv, days
):
    import time

    if env_days is None:
        monkeypatch.delenv("TURNSTILE_INTAKE_RETENTION_DAYS", raising=False)
    else:
        monkeypatch.setenv("TURNSTILE_INTAKE_RETENTION_DAYS", env_days)
    assert run(capsys, "event", "create", "gig", "--capacity", "2")[0] == 0
    before = int(time.time())
    assert run(capsys, "submit", "gig", "u1", *argv)[0] == 0
    after = int(time.time())
    item = aws.client("dynamodb").get_item(
        TableName="turnstile-intake",
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "u1"}},
    )["Item"]
    # THEN TTL deletes the record that many days after it was written
    assert before + days * DAY_S <= int(item["expires_at"]["N"]) <= after + days * DAY_S


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["submit", "gig", "u1", "--retention-days", "0"], "--retention-days must be at least 1"),
        (["event", "create", "bad id", "--capacity", "1"], "event_id must match"),
        (["event", "create", "gig", "--capacity", "-1"], "capacity must be an integer from 0"),
        (["event", "create", "gig", "--capacity", str(2**53)], "capacity must be an integer"),
        (["event", "update", "nope", "--capacity", "3"], "no such event 'nope'"),
        (["event", "update", "gig", "--capacity", "-1"], "capacity must be an integer from 0"),
        (["event", "show", "nope"], "no such event 'nope'"),
        (["submit", "gig", "u1", "--seats", "0"], "seats must be an integer from 1 to 1000000"),
        (
            ["submit", "gig", "u1", "--seats", "1000001"],
            "seats must be an integer from 1 to 1000000",
        ),
        (["submit", "gig", "u1", "--attributes", "[1]"], "attributes must be a map"),
        (["submit", "gig", "u1", "--attributes", "{"], "--attributes is not JSON"),
        (
            ["submit", "gig", "u1", "--attributes", json.dumps({"l": [{}] * 1300})],
            "attributes are 5208 bytes by DynamoDB's item-size rules, over 4096",
        ),
        (["submit", "gig", "u1", "--attributes", '{"": 1}'], "attribute names must be non-empty"),
        (["submit", "gig", "u 1"], "signup_id must match"),
        (["status", "gig", "ghost"], "no signup 'ghost' for event 'gig'"),
        (["signups", "list", "nope"], "no such event 'nope'"),
        (["signups", "list", "gig", "--status", "accepted"], "status must be one of PENDING"),
        (["signups", "list", "gig", "--limit", "0"], "limit must be an integer from 1 to 100"),
        (["event", "list", "--limit", "101"], "limit must be an integer from 1 to 100"),
        (["event", "list", "--next", "bm9wZQ"], "next is not a token this listing gave out"),
        (
            [
                "event",
                "create",
                "g2",
                "--capacity",
                str(MAX_LINEUP_ENTRIES + 1),
                "--hold-seconds",
                "5",
            ],
            "an event with holds (hold_seconds above 0) may have capacity + waitlist of at most",
        ),
        (
            ["event", "create", "g2", "--capacity", "5", "--waitlist", str(MAX_LINEUP_ENTRIES + 1)],
            f"waitlist must be an integer from 0 to {MAX_LINEUP_ENTRIES}",
        ),
        (["confirm", "gig", "ghost"], "no signup 'ghost' for event 'gig'"),
        (["cancel", "gig", "u 1"], "signup_id must match"),
    ],
)
def test_errors_are_one_line_and_exit_2(aws, capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == cli.EXIT_ERROR
    assert err.startswith(f"turnstile: {message}") and err.count("\n") == 1


def test_a_bad_retention_setting_is_a_one_line_error(aws, capsys, monkeypatch):
    monkeypatch.setenv("TURNSTILE_INTAKE_RETENTION_DAYS", "a month")
    code, _, err = run(capsys, "submit", "gig", "u1")
    assert code == cli.EXIT_ERROR
    assert err == (
        "turnstile: TURNSTILE_INTAKE_RETENTION_DAYS must be a whole number of days, not 'a month'\n"
    )


def test_event_update_changes_capacity_down_to_taken(aws, capsys):
    # GIVEN an event with 2 of 5 seats taken
    assert run(capsys, "event", "create", "gig", "--capacity", "5")[0] == 0
    aws.client("dynamodb").update_item(
        TableName="turnstile-control",
        Key={"pk": {"S": "EVENT#gig"}, "sk": {"S": "EVENT"}},
        UpdateExpression="SET taken = :two",
        ExpressionAttributeValues={":two": {"N": "2"}},
    )
    # WHEN raised, THEN the event is shown with its new capacity
    code, out, _ = run(capsys, "event", "update", "gig", "--capacity", "8")
    assert code == 0 and (json.loads(out)["capacity"], json.loads(out)["remaining"]) == (8, 6)
    # WHEN lowered below taken, THEN one line that names what is taken, exit 2
    code, out, err = run(capsys, "event", "update", "gig", "--capacity", "1")
    assert (code, out) == (cli.EXIT_ERROR, "")
    assert err == (
        "turnstile: capacity 1 is below the 2 seats already taken of event 'gig'; "
        "it can go down to 2\n"
    )
    # WHEN lowered to taken, THEN it is full
    code, out, _ = run(capsys, "event", "update", "gig", "--capacity", "2")
    assert code == 0 and json.loads(out)["remaining"] == 0


def test_event_create_again_is_idempotent_for_the_same_capacity(aws, capsys):
    code, first, _ = run(capsys, "event", "create", "gig", "--capacity", "2")
    assert code == 0
    # the same again: the event as it is, exit 0
    code, again, err = run(capsys, "event", "create", "gig", "--capacity", "2")
    assert (code, err) == (0, "")
    assert json.loads(again) == json.loads(first)
    # another capacity: one line naming the one it has, exit 2
    code, out, err = run(capsys, "event", "create", "gig", "--capacity", "3")
    assert (code, out) == (cli.EXIT_ERROR, "")
    assert err == "turnstile: event 'gig' already exists with capacity 2, not 3\n"


def test_event_create_again_with_other_options_names_the_fields(aws, capsys):
    assert run(capsys, "event", "create", "gig", "--capacity", "5")[0] == 0
    code, out, err = run(
        capsys, "event", "create", "gig", "--capacity", "5", "--hold-seconds", "30"
    )
    assert (code, out) == (cli.EXIT_ERROR, "")
    # each value named by its field, none as Python's None
    assert err == (
        "turnstile: event 'gig' already exists with capacity 5, waitlist 0, hold_seconds 0, "
        "not hold_seconds 30\n"
    )


def test_lists_print_what_the_api_answers(aws, capsys):
    from tests.api.helpers import decide_pending
    from turnstile.storage.store import SignupStore

    assert run(capsys, "event", "create", "gig", "--capacity", "1")[0] == 0
    assert run(capsys, "event", "create", "fest", "--capacity", "1")[0] == 0
    for signup in ("u1", "u2", "u3"):
        assert run(capsys, "submit", "gig", signup)[0] == 0
    decide_pending(SignupStore(client=aws.client("dynamodb")), "gig")
    assert run(capsys, "submit", "gig", "u0")[0] == 0
    # events, a page at a time
    code, out, _ = run(capsys, "event", "list", "--limit", "1")
    first = json.loads(out)
    assert code == 0 and set(first) == {"events", "next"} and len(first["events"]) == 1
    code, out, _ = run(capsys, "event", "list", "--next", first["next"])
    rest = json.loads(out)
    assert {e["event_id"] for e in first["events"] + rest["events"]} == {"gig", "fest"}
    # signups, by status, a page at a time
    code, out, _ = run(capsys, "signups", "list", "gig", "--status", "REJECTED", "--limit", "1")
    page = json.loads(out)
    assert code == 0 and [s["signup_id"] for s in page["signups"]] == ["u2"]
    code, out, _ = run(
        capsys, "signups", "list", "gig", "--status", "REJECTED", "--next", page["next"]
    )
    assert [s["signup_id"] for s in json.loads(out)["signups"]] == ["u3"]
    code, out, _ = run(capsys, "signups", "list", "gig", "--status", "PENDING")
    assert json.loads(out) == {
        "signups": [json.loads(run(capsys, "status", "gig", "u0")[1])],
        "next": None,
    }
    code, out, _ = run(capsys, "signups", "list", "gig")
    assert [s["signup_id"] for s in json.loads(out)["signups"]] == ["u0", "u1", "u2", "u3"]
    # a token of another listing: one line, exit 2
    code, _, err = run(capsys, "signups", "list", "gig", "--next", page["next"])
    assert code == cli.EXIT_ERROR
    assert err.startswith("turnstile: next is not a token") and err.count("\n") == 1


def test_conflicting_resubmission_is_an_error(aws, capsys):
    assert run(capsys, "event", "create", "gig", "--capacity", "2")[0] == 0
    assert run(capsys, "submit", "gig", "u1", "--seats", "1")[0] == 0
    code, _, err = run(capsys, "submit", "gig", "u1", "--seats", "2")
    assert code == cli.EXIT_ERROR and "another body" in err


def test_stack_option_is_accepted_after_the_command(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cli, "_apply_stack", seen.append)
    monkeypatch.setattr(cli, "cmd_audit", lambda args: 0)
    assert cli.main(["audit", "--stack", "Prod"]) == 0
    assert cli.main(["--stack", "Prod2", "audit"]) == 0
    assert seen == ["Prod", "Prod2"]


def test_audit_reports_a_broken_table(aws, capsys):
    from turnstile.storage.store import SignupStore

    store = SignupStore(aws.client("dynamodb"))
    store.create_event("gig", 1, "2026-01-01T00:00:00Z")
    aws.client("dynamodb").put_item(
        TableName=store.main_table,
        Item={
            "event_id": {"S": "gig"},
            "signup_id": {"S": "forged"},
            "status": {"S": "ACCEPTED"},
            "seats": {"N": "3"},
            "position": {"N": "1"},
            "sequence_number": {"N": "1"},
        },
    )
    code, out, _ = run(capsys, "audit")
    assert code == cli.EXIT_AUDIT_FAILED
    assert "oversold: 3 seats held or accepted, capacity 1" in out
    assert "audit BROKEN" in out


def test_status_of_a_raw_pending_signup_is_bounded(aws, capsys):
    # GIVEN a producer's own intake item with 100 KB of submitted_at
    aws.client("dynamodb").put_item(
        TableName="turnstile-intake",
        Item={
            "event_id": {"S": "gig"},
            "signup_id": {"S": "raw"},
            "submitted_at": {"S": "x" * 100_000},
        },
    )
    code, out, _ = run(capsys, "status", "gig", "raw")
    assert code == 0
    assert json.loads(out) == {
        "event_id": "gig",
        "signup_id": "raw",
        "status": "PENDING",
        "seats": 1,
        "reason": None,
        "detail": None,
        "position": None,
        "submitted_at": None,
        "decided_at": None,
        "attributes": {},
        **NO_LIFECYCLE_FIELDS,
    }


def test_status_prints_binary_and_set_attributes_as_the_api_does(aws, capsys):
    # GIVEN a decision whose attributes a producer wrote with binary and a set (DynamoDB types)
    aws.client("dynamodb").put_item(
        TableName="turnstile-main",
        Item={
            "event_id": {"S": "gig"},
            "signup_id": {"S": "bin"},
            "status": {"S": "ACCEPTED"},
            "seats": {"N": "1"},
            "position": {"N": "1"},
            "attributes": {"M": {"b": {"B": b"\x00\x01\xff"}, "tags": {"SS": ["z", "a"]}}},
        },
    )
    # THEN `turnstile status` prints it as GET /events/{id}/signups/{id} does: binary as
    # base64, a set as a sorted list; no traceback
    code, out, err = run(capsys, "status", "gig", "bin")
    assert (code, err) == (0, "")
    assert json.loads(out)["attributes"] == {"b": "AAH/", "tags": ["a", "z"]}


def test_status_until_waits_for_the_statuses_asked_or_a_final_one(aws, capsys):
    from tests.helpers import put_decision

    assert run(capsys, "event", "create", "gig", "--capacity", "1", "--hold-seconds", "60")[0] == 0
    assert run(capsys, "submit", "gig", "h")[0] == 0
    put_decision(aws.client("dynamodb"), "gig", "h", "HELD", seats=1, position=1)
    # decided (HELD), but not what was asked: still waiting at the deadline, exit 3
    code, out, _ = run(capsys, "status", "gig", "h", "--wait", "0.3", "--until", "accepted")
    assert (code, json.loads(out)["status"]) == (3, "HELD")
    code, out, _ = run(capsys, "status", "gig", "h", "--wait", "0.3", "--until", "HELD,ACCEPTED")
    assert (code, json.loads(out)["status"]) == (0, "HELD")
    # it keeps polling past the first decision until the status asked for comes
    import threading

    confirm = threading.Timer(
        0.4, put_decision, (aws.client("dynamodb"), "gig", "h", "ACCEPTED"), {"position": 1}
    )
    confirm.start()
    code, out, _ = run(capsys, "status", "gig", "h", "--wait", "10", "--until", "ACCEPTED")
    confirm.join()
    assert (code, json.loads(out)["status"]) == (0, "ACCEPTED")
    # a final status ends any wait
    put_decision(aws.client("dynamodb"), "gig", "h", "EXPIRED", seats=1, position=1)
    code, out, _ = run(capsys, "status", "gig", "h", "--wait", "5", "--until", "ACCEPTED")
    assert (code, json.loads(out)["status"]) == (0, "EXPIRED")
    # a status that is none: a usage error, one line, exit 2 (returned, not raised)
    assert cli.main(["status", "gig", "h", "--until", "DONE"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("turnstile: invalid value for --until: not a status: DONE")
    assert err.count("\n") == 1
