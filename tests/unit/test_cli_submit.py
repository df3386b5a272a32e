"""``turnstile submit --attributes JSON`` reads its JSON as the HTTP API reads a body: a key
given twice, NaN and Infinity are refused in the API's words, before anything is written
(or sent: with --api-url the CLI parses first, so the API would only see the last "a")."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from turnstile.web.body import json_object
from turnstile.web.errors import RequestError
from turnstile_tools import cli


def api_message(body: str) -> str:
    """What the API answers (400 invalid_request) for this request body."""
    with pytest.raises(RequestError) as refused:
        json_object({"body": body})
    return refused.value.message


def refused(monkeypatch, capsys, attributes: str, *more: str) -> str:
    """The one error line of ``turnstile submit gig u1 --attributes ATTRIBUTES``, which
    must not reach the tables (nor the API)."""

    def no_store() -> None:
        raise AssertionError("--attributes was accepted")

    monkeypatch.setattr(cli, "_store", no_store)
    monkeypatch.setattr(cli, "_api_client", no_store)
    argv = ["submit", "gig", "u1", "--attributes", attributes, *more]
    assert cli.main(argv) == cli.EXIT_ERROR
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("turnstile: "), err
    return err.removeprefix("turnstile: ").rstrip("\n")


@pytest.mark.parametrize("api_url", [[], ["--api-url", "http://127.0.0.1:1"]])
@pytest.mark.parametrize(
    "attributes",
    ['{"a": 1, "a": 2}', '{"vip": true, "tags": {"x": 1, "x": 1}}', '[{"a": 1, "a": 1}]'],
)
def test_a_key_given_twice_is_refused_as_the_api_refuses_it(
    monkeypatch, capsys, attributes, api_url
):
    line = refused(monkeypatch, capsys, attributes, *api_url)
    key = "a" if '"a"' in attributes else "x"
    assert line == f'--attributes has the key "{key}" more than once'
    # the API's words for the same JSON as a body
    assert line.removeprefix("--attributes") == api_message(attributes).removeprefix("body")


@pytest.mark.parametrize("api_url", [[], ["--api-url", "http://127.0.0.1:1"]])
@pytest.mark.parametrize(
    ("attributes", "constant"),
    [
        ('{"x": NaN}', "NaN"),
        ('{"x": [Infinity]}', "Infinity"),
        ('{"x": -Infinity}', "-Infinity"),
    ],
)
def test_nan_and_infinity_are_refused_as_the_api_refuses_them(
    monkeypatch, capsys, attributes, constant, api_url
):
    line = refused(monkeypatch, capsys, attributes, *api_url)
    assert line == f"--attributes is not JSON: {constant} is not a JSON number"
    assert api_message(attributes) == f"body is not valid JSON: {constant} is not a JSON number"


@pytest.mark.parametrize(
    ("attributes", "line"),
    [
        ("{", "--attributes is not JSON: Expecting property name enclosed in double quotes"),
        ("", "--attributes is not JSON: Expecting value"),
        ("[" * 100_000 + "]" * 100_000, "--attributes is nested too deeply"),
    ],
)
def test_what_is_not_json_is_one_line(monkeypatch, capsys, attributes, line):
    assert refused(monkeypatch, capsys, attributes).startswith(line)


def test_json_that_is_no_object_is_left_to_the_use_case(monkeypatch, capsys):
    # its refusal is the API's own (attributes must be a map ...), as before
    assert cli._attributes("[1]") == [1]
    assert cli._attributes("null") is None
    assert cli._attributes('"vip"') == "vip"


def test_attributes_are_read_exactly():
    value = cli._attributes('{"price": 1.10, "n": 2, "big": ' + "1" * 5000 + "}")
    assert value["price"] == Decimal("1.10") and str(value["price"]) == "1.10"
    assert value["n"] == 2 and isinstance(value["n"], int)
    assert value["big"] == Decimal("1" * 5000)  # the rules refuse it by name, not a crash
    assert cli._attributes(json.dumps({"name": "Ada"})) == {"name": "Ada"}


class Answer:
    """What urlopen returns: the API's 202 to a submit."""

    status = 202
    headers = {"Content-Type": "application/json"}

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self) -> bytes:
        return json.dumps(
            {
                "status": "PENDING",
                "event_id": "gig",
                "signup_id": "u1",
                "seats": 1,
                "submitted_at": "2026-11-21T21:24:27.123456Z",
            }
        ).encode()


def sent_through_the_api(monkeypatch, capsys, attributes: str) -> bytes:
    """The body ``turnstile submit gig u1 --attributes ATTRIBUTES --api-url ...`` sends."""
    import urllib.request

    sent: list[bytes] = []

    def urlopen(request: urllib.request.Request, timeout: float) -> Answer:
        sent.append(request.data)
        return Answer()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    argv = ["submit", "gig", "u1", "--attributes", attributes, "--api-url", "http://api.test"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["status"] == "PENDING"
    (body,) = sent
    return body


def test_fractions_go_to_the_api_as_written(monkeypatch, capsys):
    # a fraction was a Decimal json.dumps refused: "unexpected error: TypeError"
    attributes = '{"price": 1.10, "big": 12345678901234567890123456789012345678, "e": [1e2]}'
    body = sent_through_the_api(monkeypatch, capsys, attributes)
    assert json.loads(body, parse_float=Decimal)["attributes"] == {
        "price": Decimal("1.10"),
        "big": 12345678901234567890123456789012345678,
        "e": [Decimal("1E+2")],
    }
    assert b'"price":1.10' in body


def test_a_null_is_refused_through_the_api_too(monkeypatch, capsys):
    # the client left a None out: the API accepted the signup with no attributes
    line = refused(monkeypatch, capsys, "null", "--api-url", "http://api.test")
    assert line == "attributes must be a map (a JSON object), or left out"
