"""Every command that prints data takes ``--output json|table|text`` (``-o``): JSON that
parses, a table, ``key: value`` text; each keeps the default it always had."""

from __future__ import annotations

import json

import pytest

from turnstile_tools import cli


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


FORMATS = ("json", "table", "text")


@pytest.fixture
def world(aws, capsys) -> dict[str, str]:
    """An event ``gig`` with an ACCEPTED signup per format (to cancel) and a pending one;
    an event ``holds`` with a HELD signup per format (to confirm); an empty on-failure
    queue."""
    from tests.api.helpers import decide_pending
    from tests.helpers import put_decision
    from turnstile.base.clock import utc_now
    from turnstile.storage.store import SignupStore

    assert run(capsys, "event", "create", "gig", "--capacity", "4")[0] == 0
    for fmt in FORMATS:
        assert run(capsys, "submit", "gig", f"a-{fmt}")[0] == 0
    decide_pending(SignupStore(client=aws.client("dynamodb")), "gig", decided_at=utc_now())
    assert run(capsys, "submit", "gig", "p1")[0] == 0
    assert (
        run(capsys, "event", "create", "holds", "--capacity", "4", "--hold-seconds", "60")[0] == 0
    )
    for position, fmt in enumerate(FORMATS, start=1):
        assert run(capsys, "submit", "holds", f"h-{fmt}")[0] == 0
        put_decision(
            aws.client("dynamodb"),
            "holds",
            f"h-{fmt}",
            "HELD",
            position=position,
            hold_expires_at="2999-01-01T00:00:00.000000Z",
        )
    queue_url = aws.client("sqs").create_queue(QueueName="failures")["QueueUrl"]
    return {"queue_url": queue_url}


def data_commands(world: dict[str, str], fmt: str) -> list[list[str]]:
    """Each command that prints data, once per format (each run stands on its own)."""
    return [
        ["event", "create", "gig", "--capacity", "4"],
        ["event", "update", "gig", "--capacity", "5"],
        ["event", "show", "gig"],
        ["event", "list"],
        ["signups", "list", "gig"],
        ["submit", "gig", f"s-{fmt}"],
        ["status", "gig", f"a-{fmt}"],
        ["confirm", "holds", f"h-{fmt}"],
        ["cancel", "gig", f"a-{fmt}"],
        ["audit", "gig"],
        ["sweep", "--run-id", f"by-hand-{fmt}"],
        ["redrive", "--queue-url", world["queue_url"], "--wait", "0"],
        ["event", "close", "gig"],
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_data_command_prints_each_format(world, capsys, fmt):
    for argv in data_commands(world, fmt):
        code, out, err = run(capsys, *argv, "--output", fmt)
        assert (code, err) == (0, ""), (argv, err)
        assert out.strip(), argv
        if fmt == "json":
            json.loads(out)  # parses, whole
        else:
            with pytest.raises(json.JSONDecodeError):
                json.loads(out)


def test_the_short_option_and_the_defaults(world, capsys):
    # most commands print JSON unless told otherwise; the audit a table
    code, out, _ = run(capsys, "event", "show", "gig")
    assert code == 0 and json.loads(out)["event_id"] == "gig"
    code, table, _ = run(capsys, "event", "show", "gig", "-o", "table")
    assert code == 0 and table.splitlines()[0].split() == ["field", "value"]
    assert table.splitlines()[1].split() == ["event_id", "gig"]
    code, text, _ = run(capsys, "status", "holds", "h-text", "-o", "text")
    assert code == 0 and "status: HELD" in text.splitlines()
    code, out, _ = run(capsys, "audit", "gig")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["event", "capacity", "taken"]
    assert out.splitlines()[-1].startswith("audit OK: 1 events, ")


def test_signups_as_a_table_one_row_each(world, capsys):
    code, out, _ = run(capsys, "signups", "list", "gig", "-o", "table")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:2] == ["event_id", "signup_id"]
    assert [line.split()[1] for line in lines[1:-1]] == ["a-json", "a-table", "a-text", "p1"]
    assert lines[-1] == "next: -"


def test_audit_json_is_an_alias_of_output_json(world, capsys):
    code, by_flag, _ = run(capsys, "audit", "gig", "--json")
    assert code == 0
    code, by_option, _ = run(capsys, "audit", "gig", "--output", "json")
    assert code == 0
    by_flag, by_option = json.loads(by_flag), json.loads(by_option)
    assert by_flag["events"][0]["event_id"] == "gig" and by_flag["ok"] is True
    assert by_flag["totals"] == by_option["totals"]
    assert run(capsys, "audit", "gig", "--json", "-o", "json")[0] == 0


def test_status_still_pending_exits_3_in_every_format(world, capsys):
    for fmt in FORMATS:
        code, out, _ = run(capsys, "status", "gig", "p1", "--wait", "0.2", "-o", fmt)
        assert code == cli.EXIT_STILL_PENDING and "PENDING" in out, fmt
