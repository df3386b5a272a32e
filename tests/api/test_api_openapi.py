"""The OpenAPI document: valid, identical to the committed docs/openapi.json, and exactly
the routes the resolver serves (no undocumented route, no documented one missing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openapi_spec_validator import validate

from tests.api.helpers import Invoke
from turnstile.web.api import OPENAPI, ROUTES

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
REGENERATE = "python -m turnstile.web.api > docs/openapi.json"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def test_document_is_valid_openapi():
    validate(OPENAPI)


def test_committed_copy_is_current():
    committed = json.loads(COMMITTED.read_text())
    assert committed == json.loads(json.dumps(OPENAPI)), f"stale: run `{REGENERATE}`"


def test_document_lists_exactly_the_routes():
    documented = {
        (method.upper(), path) for path, item in OPENAPI["paths"].items() for method in item
    }
    assert documented == {(r.method, r.path) for r in ROUTES}


def _concrete(path: str) -> str:
    return path.replace("{event_id}", "e1").replace("{signup_id}", "u1")


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_every_documented_operation_is_served(invoke: Invoke, route):
    answer = invoke(route.method, _concrete(route.path), {} if route.method == "POST" else None)
    # Served means routed: never the "no route" 404 nor a 405.
    assert answer.status != 405
    assert answer.body.get("error") != "not_found"
    assert str(answer.status) in OPENAPI["paths"][route.path][route.method.lower()]["responses"]


@pytest.mark.parametrize("path", sorted({r.path for r in ROUTES}))
def test_every_undocumented_method_is_405(invoke: Invoke, path: str):
    documented = {method.upper() for method in OPENAPI["paths"][path]}
    for method in set(METHODS) - documented:
        answer = invoke(method, _concrete(path))
        assert answer.status == 405, (method, path)
        assert set(answer.headers["allow"].split(", ")) == documented


def test_no_operation_documents_an_answer_the_api_never_gives():
    """Powertools documents a 422 for every validated route; this API answers 400."""
    for item in OPENAPI["paths"].values():
        for operation in item.values():
            assert "422" not in operation["responses"]
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    (schema,) = (c["schema"] for c in response["content"].values())
                    assert schema["$ref"].rsplit("/", 1)[1] in ("Error", "RequestRefused")
    assert not {"HTTPValidationError", "ValidationError"} & set(OPENAPI["components"]["schemas"])
