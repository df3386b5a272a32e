"""The local HTTP API on the API port: ``GET /health`` (the full API is served here too)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ApiServer"]


class ApiServer:
    """Serves the API on ``host:port`` in a background thread.

    ``health`` returns a dict of checks; the server answers 200 when every value is true.
    """

    def __init__(self, host: str, port: int, health: Callable[[], dict[str, bool]]) -> None:
        self._health = health
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/health":
                    checks = outer._health()
                    outer._send(self, 200 if all(checks.values()) else 503, checks)
                else:
                    outer._send(self, 404, {"error": "not_found", "message": self.path})

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
