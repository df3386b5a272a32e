"""The embedded AWS endpoint: moto's server, one request at a time.

moto is not atomic under concurrent requests (conditional writes lose updates,
``attribute_not_exists`` can have two winners, stream sequence numbers collide). DynamoDB
serializes writes per item; here one lock around request handling does it for everything,
which costs nothing measurable at moto's few hundred requests per second.
"""

from __future__ import annotations

import copy
import io
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

WAL_NAME = "aws.wal"

__all__ = ["BackgroundServer", "EmbeddedAws", "SerializedApp", "patch_moto_transactions"]


class _TransactionBackup:
    """Stands in for the ``copy`` module inside moto's ``transact_write_items``.

    moto backs up a whole table (items, stream records and all) by deep copy once per
    action, so a 100-action transaction copies the table 100 times: slow, and on tables of
    thousands of items it drove the local stack out of memory. On rollback it puts the copy
    in place, whose new stream shard the pollers' iterators never see again. Here a table
    is backed up once, items only, and keeps its stream shard; records that the cancelled
    writes added to the stream are cut off again (DynamoDB never streams them).
    """

    def __init__(self) -> None:
        self.tables: dict[int, tuple[Any, int]] = {}

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        from moto.dynamodb.models.table import Table

        if not isinstance(value, Table):
            return copy.deepcopy(value, memo)
        if id(value) not in self.tables:
            backup = copy.copy(value)
            backup.items = copy.deepcopy(value.items)
            shard = value.stream_shard
            self.tables[id(value)] = (backup, len(shard.items) if shard else 0)
        return self.tables[id(value)][0]

    def rollback_streams(self) -> None:
        for backup, length in self.tables.values():
            if backup.stream_shard is not None:
                del backup.stream_shard.items[length:]


def patch_moto_transactions() -> None:
    """Make moto's TransactWriteItems back tables up once and keep streams continuous.

    Safe only where requests are serialized (``SerializedApp``), as the local stack does.
    """
    from moto.dynamodb import models

    backend = models.DynamoDBBackend
    if getattr(backend.transact_write_items, "turnstile_patched", False):
        return
    original = backend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        backup = _TransactionBackup()
        models.copy = backup  # type: ignore[attr-defined]
        try:
            return original(self, transact_items)
        except Exception:
            backup.rollback_streams()
            raise
        finally:
            models.copy = copy  # type: ignore[attr-defined]

    transact_write_items.turnstile_patched = True  # type: ignore[attr-defined]
    backend.transact_write_items = transact_write_items  # type: ignore[method-assign]


class SerializedApp:
    """WSGI middleware that runs one request at a time, body included.

    Given a ``WriteAheadLog``, every successful request that changes state is appended to
    it and fsynced before its response is returned (``turnstile.local.persist``).
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], wal: Any = None) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.wal = wal

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            if self.wal is None:
                # Drain the response inside the lock: moto may build it lazily.
                return [b"".join(self.app(environ, start_response))]
            return [self._logged(environ, start_response)]

    def _logged(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> bytes:
        from turnstile.local import persist

        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        kind = persist.classify(environ, body)
        if kind is None:
            return b"".join(self.app(environ, start_response))
        service, action = kind
        record = persist.request_record(environ, body)
        if service == "sqs" and action in ("DeleteMessage", "DeleteMessageBatch"):
            record = persist.sqs_delete_record(body) or record
        status: list[Any] = []

        def capture(s: str, headers: Any, exc_info: Any = None) -> Any:
            status[:] = [s, headers, exc_info]
            return lambda data: None

        response = b"".join(self.app(environ, capture))
        if status and status[0].startswith("2"):
            if service == "sqs" and action in ("SendMessage", "SendMessageBatch"):
                record["sqs_sent"] = persist.sqs_sent_ids(action, response)
            if service == "dynamodb" and action in ("CreateTable", "UpdateTable"):
                record["table"] = persist.table_identity(response)
            self.wal.append(record)  # fsynced: acknowledged means durable
        start_response(*status)
        return response

    def replay(self) -> int:
        """Rebuild the state from the log, before the server takes requests."""
        from turnstile.local import persist

        with self.lock:
            return persist.replay(self.wal.records(), self.app)


class BackgroundServer:
    """A ``socketserver`` server (``self._server``) run by ``self._thread``: its lifecycle."""

    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class EmbeddedAws(BackgroundServer):
    """moto's server on ``host:port`` (port 0 picks a free one), in a background thread."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 4566, state_dir: Path | None = None
    ) -> None:
        """``state_dir``: persist to its write-ahead log and replay it now (None: memory)."""
        patch_moto_transactions()
        wal = None
        if state_dir is not None:
            from turnstile.local.persist import WriteAheadLog

            wal = WriteAheadLog(state_dir / WAL_NAME)
        self.app = SerializedApp(DomainDispatcherApplication(create_backend_app), wal)
        self.replayed = self.app.replay() if wal is not None else 0
        self._server: BaseWSGIServer = make_server(
            host, port, self.app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="embedded-aws", daemon=True
        )
