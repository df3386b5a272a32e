"""The embedded AWS endpoint: moto's server, one request at a time.

moto is not atomic under concurrent requests (conditional writes lose updates,
``attribute_not_exists`` can have two winners, stream sequence numbers collide). DynamoDB
serializes writes per item; here one lock around request handling does it for everything,
which costs nothing measurable at moto's few hundred requests per second.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

__all__ = ["EmbeddedAws", "SerializedApp"]


class SerializedApp:
    """WSGI middleware that runs one request at a time, body included."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            # Drain the response inside the lock: moto may build it lazily.
            return [b"".join(self.app(environ, start_response))]


class EmbeddedAws:
    """moto's server on ``host:port`` (port 0 picks a free one), in a background thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4566) -> None:
        app = SerializedApp(DomainDispatcherApplication(create_backend_app))
        self._server: BaseWSGIServer = make_server(
            host, port, app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="embedded-aws", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
