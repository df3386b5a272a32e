"""Fixtures of the HTTP API tests: v2 events for the handler, and a live local API.

The live API is an ``ApiServer`` serving ``handlers.api`` handlers (``new_instance``, as the
local stack does) over real HTTP, recording each request, backed by a moto server on its own
port (``AWS_ENDPOINT_URL`` points the handler's boto3 at it).
It is module-scoped: a module that uses it must not also use the in-process ``aws``
fixture, whose ``mock_aws`` resets the moto backends the server shares.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.api.helpers import Answer, Invoke, LiveApi, v2_event
from turnstile.base.contract import ALL_TABLES
from turnstile.handlers import api as api_handler
from turnstile.storage.dynamo import default_client
from turnstile.storage.store import SignupStore
from turnstile_tools.local.api_server import ApiServer
from turnstile_tools.local.context import LocalLambdaContext

#: Waiting reads the live API holds at once (the waiter's reserved concurrency, locally).
MAX_WAITERS = 2


@pytest.fixture
def store(aws: boto3.Session) -> Iterator[SignupStore]:
    """A store on the in-process moto tables; the handler builds its own on them too."""
    api_handler.get_store.cache_clear()
    yield SignupStore(client=aws.client("dynamodb"))
    api_handler.get_store.cache_clear()


@pytest.fixture
def invoke(store: SignupStore) -> Invoke:
    """Call the Lambda handler as API Gateway would; returns status, headers, JSON body."""

    def call(method: str, path: str, body: Any = None, **kwargs: Any) -> Answer:
        event = v2_event(method, path, body, **kwargs)
        response = api_handler.handler(event, LocalLambdaContext.api())
        raw = response.get("body") or ""
        return Answer(
            status=response["statusCode"],
            headers={k.lower(): v for k, v in (response.get("headers") or {}).items()},
            body=json.loads(raw) if raw else None,
        )

    return call


@pytest.fixture(scope="module")
def live_api() -> Iterator[LiveApi]:
    """The handler behind a real ``ApiServer`` on a free port, DynamoDB from a moto server."""
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    moto_url = f"http://{host}:{port}"
    # The server's moto is this process's: a module set up twice on one worker (pytest-xdist
    # may split it) finds the tables of its first setup. Start from none.
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"))
    server: ApiServer | None = None
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", moto_url)
        api_handler.get_store.cache_clear()
        try:
            client = default_client()
            for spec in ALL_TABLES:
                client.create_table(**spec.create_table_kwargs())
            requests: list[dict[str, Any]] = []

            def recorded(factory: Callable[[], Any]) -> Callable[[], Any]:
                # As the local stack serves it (an instance per concurrent request),
                # each invocation recorded.
                def new() -> Any:
                    handler = factory()

                    def invoke(event: dict[str, Any], context: Any) -> Any:
                        requests.append(event)
                        return handler(event, context)

                    return invoke

                return new

            server = ApiServer(
                "127.0.0.1",
                0,
                lambda: {"ok": True},
                new_instance=recorded(api_handler.new_instance),
                new_waiter=recorded(api_handler.new_waiter_instance),
                max_waiters=MAX_WAITERS,
            )
            server.start()
            yield LiveApi(
                url=server.url,
                moto_url=moto_url,
                store=SignupStore(client=client),
                requests=requests,
            )
        finally:
            if server is not None:
                server.stop()
            api_handler.get_store.cache_clear()
            moto.stop()
