"""A request cut short by its sender's death (a worker killed mid-request) is no request a
role was refused: the endpoint answers it as malformed and records no denial (a run whose
worker was SIGKILLed would otherwise read as one where a grant was missing)."""

from __future__ import annotations

import io
import json
from typing import Any

from turnstile_tools.local.roles import access_key
from turnstile_tools.local.server import RoleEnforcement


def environ(body: bytes, length: int) -> dict[str, Any]:
    key = access_key("processor")
    return {
        "PATH_INFO": "/",
        "REQUEST_METHOD": "POST",
        "CONTENT_LENGTH": str(length),
        "CONTENT_TYPE": "application/x-amz-json-1.0",
        "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.PutItem",
        "HTTP_AUTHORIZATION": (
            f"AWS4-HMAC-SHA256 Credential={key}/20261126/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0"
        ),
        "wsgi.input": io.BytesIO(body),
    }


def answer(enforcement: RoleEnforcement, env: dict[str, Any]) -> tuple[str | None, Any]:
    status: list[str] = []
    out = enforcement.answer(env, lambda s, headers: status.append(s))
    return (status[0] if status else None), out


def test_a_request_cut_short_is_malformed_not_denied():
    enforcement = RoleEnforcement()
    status, out = answer(enforcement, environ(b'{"TableName": "turnstile-ma', 200))
    assert status == "400 Bad Request"
    assert json.loads(out[0])["__type"].endswith("SerializationException")
    assert enforcement.denials == []


def test_a_whole_request_outside_the_role_is_still_denied():
    enforcement = RoleEnforcement()
    body = json.dumps({"TableName": "turnstile-control", "Item": {"pk": {"S": "X"}}}).encode()
    status, _ = answer(enforcement, environ(body, len(body)))
    assert status == "400 Bad Request"
    assert [d.request.action for d in enforcement.denials] == ["dynamodb:PutItem"]
