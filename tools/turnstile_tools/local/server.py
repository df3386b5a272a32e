"""The embedded AWS endpoint: moto's server, one request at a time.

moto is not atomic under concurrent requests (conditional writes lose updates,
``attribute_not_exists`` can have two winners, stream sequence numbers collide). DynamoDB
serializes writes per item; here one lock around request handling does it for everything,
which costs nothing measurable at moto's few hundred requests per second.
"""

from __future__ import annotations

import base64
import copy
import errno
import fcntl
import html
import io
import json
import logging
import os
import re
import socket
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import (
    LISTEN_QUEUE,
    BaseWSGIServer,
    get_sockaddr,
    make_server,
    select_address_family,
)

from turnstile.base.errors import TurnstileError
from turnstile_tools.local import limits
from turnstile_tools.local.roles import DENIALS_PATH
from turnstile_tools.local.throughput import PartitionThroughput, region_of

WAL_NAME = "aws.wal"

log = logging.getLogger(__name__)

__all__ = [
    "SERVED_SERVICES",
    "UNSERVED_CODE",
    "BackgroundServer",
    "EmbeddedAws",
    "ListenError",
    "RoleEnforcement",
    "SerializedApp",
    "StateDirInUseError",
    "StateDirLock",
    "patch_moto",
    "patch_moto_attribute_values",
    "patch_moto_module_listing",
    "patch_moto_transactions",
    "unserved_refusal",
]


class ListenError(TurnstileError):
    """One of the local stack's servers cannot listen on its address.

    ``server`` is ``"aws"`` (the AWS endpoint) or ``"api"`` (the HTTP API); ``in_use`` says
    whether another program has the port; ``reason`` is the system's word for it.
    """

    NAMES = {"aws": "the AWS endpoint", "api": "the HTTP API"}

    def __init__(
        self, server: str, host: str, port: int, cause: OSError, by_turnstile: bool = False
    ) -> None:
        """``by_turnstile``: what holds the port answered as a ``turnstile local`` does."""
        self.server, self.host, self.port = server, host, port
        self.in_use = cause.errno == errno.EADDRINUSE
        self.by_turnstile = by_turnstile
        self.reason = cause.strerror or str(cause)
        super().__init__(f"{self.NAMES[server]} cannot listen on {host}:{port}: {self.reason}")


class StateDirInUseError(TurnstileError):
    """Another ``turnstile local`` runs on this state directory (it holds its lock)."""

    def __init__(self, state_dir: Path, pid: str) -> None:
        self.state_dir, self.pid = state_dir, pid
        held = f" (pid {pid})" if pid else ""
        super().__init__(
            f"the state directory {state_dir} is in use by another turnstile local{held}: "
            "stop it, or give this one another --state-dir (or --in-memory)"
        )


class StateDirLock:
    """The lock a ``turnstile local`` holds on its state directory while it runs: two
    processes appending to one write log would each replay a history the other wrote half
    of. An advisory ``flock`` on ``<state_dir>/local.lock`` (holding the owner's pid), freed
    by the kernel when the process ends, however it ends."""

    NAME = "local.lock"

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / self.NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            raise StateDirInUseError(self.path.parent, pid) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor frees the lock
            self._fd = None


class _TransactionBackup:
    """Stands in for the ``copy`` module inside moto's ``transact_write_items``.

    moto backs up a whole table (items, stream records and all) by deep copy once per
    action, so a 100-action transaction copies the table 100 times: slow, and on tables of
    thousands of items it drove the local stack out of memory. On rollback it puts the copy
    in place, whose new stream shard the pollers' iterators never see again. Here a table
    is backed up once and keeps its stream shard; records that the cancelled writes added
    to the stream are cut off again (DynamoDB never streams them). Only the items the
    transaction names are copied (moto updates an item in place, and puts or deletes only
    the item named): the rest of the backup shares the table's item objects, so a
    transaction costs the same on a table of ten items as on one of ten thousand.
    """

    def __init__(self, transact_items: list[dict[str, Any]]) -> None:
        self.tables: dict[int, tuple[Any, int]] = {}
        self.keys: dict[str, list[Mapping[str, Any]]] = {}
        for action in transact_items:
            for op_type, op in action.items():
                key = op.get("Item") if op_type == "Put" else op.get("Key")
                if isinstance(op, dict) and isinstance(key, dict) and op.get("TableName"):
                    self.keys.setdefault(op["TableName"], []).append(key)

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        from moto.dynamodb.models.table import Table

        if not isinstance(value, Table):
            return copy.deepcopy(value, memo)
        if id(value) not in self.tables:
            backup = copy.copy(value)
            backup.items = self._items(value)
            shard = value.stream_shard
            self.tables[id(value)] = (backup, len(shard.items) if shard else 0)
        return self.tables[id(value)][0]

    def _items(self, table: Any) -> Any:
        """The table's items as they are now: the containers copied, the items named by
        the transaction deep-copied, every other item shared."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        items: Any = defaultdict(dict)
        for hash_value, held in table.items.items():
            items[hash_value] = dict(held) if table.has_range_key else held
        for key in self.keys.get(table.name, []):
            try:
                hash_value = DynamoType(key[table.hash_key_attr])
                range_value = DynamoType(key[table.range_key_attr]) if table.has_range_key else None
                # (a key of a list, map or set does not hash: no item has it)
                if hash_value not in table.items or (
                    range_value is not None and range_value not in table.items[hash_value]
                ):
                    continue
            except (KeyError, TypeError, AttributeError):
                continue  # moto refuses the action itself; nothing of it is written
            if range_value is None:
                items[hash_value] = copy.deepcopy(table.items[hash_value])
            else:
                items[hash_value][range_value] = copy.deepcopy(table.items[hash_value][range_value])
        return items

    def rollback_streams(self) -> None:
        for backup, length in self.tables.values():
            if backup.stream_shard is not None:
                del backup.stream_shard.items[length:]


class _Copying:
    """Stands in for the ``copy`` module inside moto's DynamoDB models: on a thread running a
    transaction, that transaction's backup does its deep copies; everywhere else (and for
    anything but a table) the ``copy`` module does. Each thread has its own, so two
    transactions on two threads (in-process moto, whose requests are not serialized)
    never use each other's backup."""

    def __init__(self) -> None:
        self._running = threading.local()

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        backup: _TransactionBackup | None = getattr(self._running, "backup", None)
        return (backup or copy).deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @contextmanager
    def backing_up(self, backup: _TransactionBackup) -> Iterator[None]:
        outer = getattr(self._running, "backup", None)
        self._running.backup = backup
        try:
            yield
        finally:
            self._running.backup = outer


_COPYING = _Copying()
_ONE_TRANSACTION_AT_A_TIME = threading.Lock()


def patch_moto_transactions() -> None:
    """Make moto's TransactWriteItems back tables up once and keep streams continuous.

    Used by the local stack (whose requests are serialized) and by the tests' in-process
    moto, whose requests run on many threads at once: there, transactions run one at a
    time, each with its own backup (two at once each restored the other's items as it had
    left them), as DynamoDB isolates transactions from each other.
    """
    from moto.dynamodb import models

    backend = models.DynamoDBBackend
    if getattr(backend.transact_write_items, "turnstile_patched", False):
        return
    original = backend.transact_write_items
    models.copy = _COPYING  # type: ignore[attr-defined]

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        backup = _TransactionBackup(transact_items)
        with _ONE_TRANSACTION_AT_A_TIME, _COPYING.backing_up(backup):
            try:
                return original(self, transact_items)
            except Exception:
                backup.rollback_streams()
                raise

    transact_write_items.turnstile_patched = True  # type: ignore[attr-defined]
    backend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def _attribute_value(value: Any) -> Any:
    """An item's attribute value as moto's JSON serializer writes it (binaries in base64),
    written directly; None for any value of a shape this does not know (moto's own
    serializer then writes it, as it always did)."""
    if type(value) is not dict or len(value) != 1:
        return None
    ((kind, inner),) = value.items()
    if kind in ("S", "N"):
        return value if type(inner) is str else None
    if kind in ("BOOL", "NULL"):
        return value if type(inner) is bool else None
    if kind == "B":
        return {kind: _base64(inner)} if isinstance(inner, bytes) else None
    if type(inner) is not list and kind != "M":
        return None
    if kind in ("SS", "NS"):
        return value if all(type(v) is str for v in inner) else None
    if kind == "BS":
        if not all(isinstance(v, bytes) for v in inner):
            return None
        return {kind: [_base64(v) for v in inner]}
    if kind == "L":
        items = [_attribute_value(v) for v in inner]
        return None if None in items else {kind: items}
    if kind == "M" and type(inner) is dict and all(type(k) is str and k for k in inner):
        members = {k: _attribute_value(v) for k, v in inner.items()}
        return None if None in members.values() else {kind: members}
    return None


def _base64(value: bytes) -> str:
    return base64.b64encode(value).strip().decode("utf-8")


def patch_moto_attribute_values() -> None:
    """Make moto's JSON serializer write an item's attribute values directly.

    moto 5 serializes every response by walking the service's shapes member by member: for
    a DynamoDB item that is a lookup for each of an attribute value's ten members, for
    every attribute of every item, a sixth of a busy local stack's time. An attribute value
    is one of ten known forms; those are written as they are (binaries in base64, as moto
    writes them), anything else by moto's walk.
    """
    from moto.core.serialize import BaseJSONSerializer

    original = BaseJSONSerializer._serialize_type_structure
    if getattr(original, "turnstile_patched", False):
        return

    def _serialize_type_structure(
        self: Any, serialized: Any, value: Any, shape: Any, key: str
    ) -> None:
        if key and shape.name == "AttributeValue":
            written = _attribute_value(value)
            if written is not None:
                self._default_serialize(serialized, written, shape, key)
                return
        original(self, serialized, value, shape, key)

    _serialize_type_structure.turnstile_patched = True  # type: ignore[attr-defined]
    _serialize_type_structure.moto_original = original  # type: ignore[attr-defined]
    BaseJSONSerializer._serialize_type_structure = _serialize_type_structure  # type: ignore[method-assign]


def patch_moto_module_listing() -> None:
    """Make moto list its service modules once, not on every request.

    moto's server finds the service a request is for by first asking whether its host is
    the name of one of moto's modules, which lists moto's package directory (a listdir and
    a stat for each of its 150-odd folders) on every request: a twentieth of a busy local
    stack's time. The folders of an installed package do not change while it runs.
    """
    from moto import backends

    listing = backends.list_of_moto_modules
    if getattr(listing, "turnstile_patched", False):
        return
    modules = tuple(listing())

    def list_of_moto_modules() -> tuple[str, ...]:
        return modules

    list_of_moto_modules.turnstile_patched = True  # type: ignore[attr-defined]
    backends.list_of_moto_modules = list_of_moto_modules  # type: ignore[assignment]


def patch_moto() -> None:
    """Every repair turnstile makes to moto, for the embedded endpoint and in-process moto
    alike: transactions (``patch_moto_transactions``), attribute values
    (``patch_moto_attribute_values``), its list of modules (``patch_moto_module_listing``).
    Idempotent."""
    patch_moto_transactions()
    patch_moto_attribute_values()
    patch_moto_module_listing()


class SerializedApp:
    """WSGI middleware that runs one request at a time, body included.

    Given a ``DurableState``, every successful request that changes state (and did change
    it) is appended to its write log and fsynced before its response is returned
    (``turnstile_tools.local.persist``), which compacts the log into a snapshot when due. Given
    ``RoleEnforcement``, a request signed by a function's local key that its deployed role
    does not allow is answered ``AccessDeniedException`` and never reaches moto. Given
    ``PartitionThroughput``, a DynamoDB request over a partition's throughput is answered
    as AWS answers it (``turnstile_tools.local.throughput``): refused, or the admitted part
    of a batch served (and logged) and the rest returned unprocessed.
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        wal: Any = None,
        enforcement: RoleEnforcement | None = None,
        throughput: PartitionThroughput | None = None,
    ) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.wal = wal
        self.enforcement = enforcement
        self.throughput = throughput

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        refused = unserved_refusal(environ, start_response)
        if refused is not None:
            return refused
        if self.enforcement is not None:
            refused = self.enforcement.answer(environ, start_response)
            if refused is not None:
                return refused
        # DynamoDB's key and item limits, which moto does not hold reads to: a request that
        # breaks one is answered ValidationException for every caller, as AWS answers it,
        # and never reaches moto (``turnstile_tools.local.limits``).
        refused = limits.wsgi_refusal(environ, start_response)
        if refused is not None:
            return refused
        with self.lock:
            target = environ.get("HTTP_X_AMZ_TARGET", "")
            if (
                self.throughput is not None
                and self.throughput.enabled
                and target.startswith(limits.TARGET_PREFIX)
            ):
                return self._throttled(target, environ, start_response)
            return self._serve(environ, start_response)

    def _serve(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if self.wal is None:
            # Drain the response inside the lock: moto may build it lazily.
            return [b"".join(self.app(environ, start_response))]
        return [self._logged(environ, start_response)]

    def _throttled(
        self, target: str, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> list[bytes]:
        """A DynamoDB request through the partition throughput limit (the lock held)."""
        assert self.throughput is not None
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        served: list[Any] = []

        def call(sent: bytes) -> tuple[int, dict[str, str], bytes]:
            environ["wsgi.input"] = io.BytesIO(sent)
            environ["CONTENT_LENGTH"] = str(len(sent))

            def capture(status: str, headers: Any, exc_info: Any = None) -> Any:
                served[:] = [status, headers]
                return lambda data: None

            payload = b"".join(self._serve(environ, capture))
            return int(served[0].split()[0]), dict(served[1]), payload

        status, headers, payload = self.throughput.serve(
            target, body, region_of(environ.get("HTTP_AUTHORIZATION", "")), call
        )
        line = served[0] if served and int(served[0].split()[0]) == status else None
        start_response(line or f"{status} {HTTPStatus(status).phrase}", list(headers.items()))
        return [payload]

    def _logged(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> bytes:
        from turnstile_tools.local import persist

        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        kind = persist.classify(environ, body)
        if kind is None:
            return b"".join(self.app(environ, start_response))
        service, action = kind
        unchanged = persist.unchanged_probe(service, action, body)
        record = persist.request_record(environ, body)
        if service == "sqs" and action in ("DeleteMessage", "DeleteMessageBatch"):
            record = persist.sqs_delete_record(body) or record
        status: list[Any] = []

        def capture(s: str, headers: Any, exc_info: Any = None) -> Any:
            status[:] = [s, headers, exc_info]
            return lambda data: None

        response = b"".join(self.app(environ, capture))
        if status and status[0].startswith("2") and not (unchanged and unchanged()):
            if service == "sqs" and action in ("SendMessage", "SendMessageBatch"):
                record["sqs_sent"] = persist.sqs_sent_ids(action, response)
            if service == "dynamodb" and action in ("CreateTable", "UpdateTable"):
                record["table"] = persist.table_identity(response)
            self.wal.append(record)  # fsynced: acknowledged means durable
        start_response(*status)
        return response

    def replay(self) -> int:
        """Rebuild the state from the snapshot and the log, before the server takes
        requests; the writes it holds."""
        with self.lock:
            return int(self.wal.restore(self.app))


class RoleEnforcement:
    """Authorizes each request signed by a function's local key against the function's
    deployed role (``turnstile_tools.local.roles``, ``turnstile_tools.local.iam``); keeps every
    denial, logs it as an error, and lists them at ``DENIALS_PATH``. Anyone else's key
    passes."""

    def __init__(self, roles: Any = None) -> None:
        from turnstile_tools.local.roles import LocalRoles

        self.roles = roles or LocalRoles.load()
        self.denials: list[Any] = []
        self._lock = threading.Lock()

    def answer(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> list[bytes] | None:
        """A response for a denied request or for ``DENIALS_PATH``; None: serve it."""
        if environ.get("PATH_INFO") == DENIALS_PATH and environ.get("REQUEST_METHOD") == "GET":
            with self._lock:
                listed = [d.to_dict() for d in self.denials]
            body = json.dumps({"count": len(listed), "denials": listed}).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        credential = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
        if credential is None:
            return None
        from turnstile_tools.local.iam import Denial, Request, body_params
        from turnstile_tools.local.roles import role_of_key

        key, region, scope_service = credential.groups()
        role = role_of_key(key)
        if role is None:
            return None
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if len(body) < length:
            # Cut short (its sender died mid-request): no request to authorize, and nothing
            # a role was refused; answered as the malformed request it is.
            start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0")])
            cut = {
                "__type": "com.amazon.coral.service#SerializationException",
                "message": f"the request body ended after {len(body)} of {length} bytes",
            }
            return [json.dumps(cut).encode()]
        account = "123456789012"
        denial: Any
        try:
            form_action, params = body_params(environ.get("CONTENT_TYPE", ""), body)
            prefix, _, action = target.partition(".")
            service = _TARGET_SERVICES.get(prefix) if target else scope_service
            action = action or form_action or ""
            if service is None or not action:
                denial = Denial(role, Request(f"{scope_service}:{action or '?'}", "*"), account)
            else:
                denial = self.roles.authorizer().check(
                    role, service, action, params, region, account
                )
        except Exception as exc:  # a request the model cannot read is refused, not passed
            log.error("cannot authorize a request of role %s: %s", role, exc)
            denial = Denial(role, Request(f"{scope_service}:{target or '?'}", "*"), account)
        if denial is None:
            return None
        with self._lock:
            self.denials.append(denial)
        log.error("ACCESS DENIED to role %s: %s", role, denial.request.describe())
        query_protocol = not target
        if query_protocol:
            start_response("403 Forbidden", [("Content-Type", "text/xml")])
            return [_query_error("AccessDenied", denial.message)]
        payload = {
            "__type": "com.amazon.coral.service#AccessDeniedException",
            "Message": denial.message,
            "message": denial.message,
        }
        headers = [("Content-Type", "application/x-amz-json-1.0")]
        if target.startswith("AmazonSQS."):  # SQS's JSON protocol names its query-era code
            headers.append(("x-amzn-query-error", "AccessDenied;Sender"))
        start_response("400 Bad Request", headers)
        return [json.dumps(payload).encode()]


#: The services the embedded endpoint serves (as a SigV4 credential scope names them: the
#: stream API signs as ``dynamodb``). moto's server would try any other, and fail with a
#: traceback (its module for it is not installed) and an HTML 500 the caller cannot read.
SERVED_SERVICES = ("dynamodb", "sqs")
#: The error code of a request for a service the endpoint does not serve.
UNSERVED_CODE = "ServiceNotServedLocally"


#: What an unsigned request gets, as DynamoDB answers one.
MISSING_TOKEN_CODE = "MissingAuthenticationTokenException"


def unserved_refusal(
    environ: dict[str, Any], start_response: Callable[..., Any]
) -> list[bytes] | None:
    """One AWS error, in the protocol of the service asked for, naming what is served, for a
    signed request to any other service, and DynamoDB's answer to a request that is not
    signed at all (an HTTP client pointed at this port instead of the HTTP API's: moto would
    take it for S3 and fail with a traceback); None: serve it."""
    credential = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if credential is None:
        credential = _QUERY_CREDENTIAL.search(environ.get("QUERY_STRING", ""))
    if credential is None and environ.get("PATH_INFO") != DENIALS_PATH:
        return _unsigned_refusal(environ, start_response)
    if credential is None or credential.group(3) in SERVED_SERVICES:
        return None
    service = credential.group(3)
    message = (
        f"turnstile local serves DynamoDB, DynamoDB Streams and SQS only, not {service}; "
        "unset AWS_ENDPOINT_URL to reach AWS"
    )
    log.warning("refused a request for %s: the local endpoint does not serve it", service)
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)  # drained: the connection stays usable
    if environ.get("HTTP_X_AMZ_TARGET") or "json" in environ.get("CONTENT_TYPE", ""):
        body = json.dumps({"__type": UNSERVED_CODE, "message": message}).encode()
        start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.1")])
        return [body]
    start_response("400 Bad Request", [("Content-Type", "text/xml")])
    return [_query_error(UNSERVED_CODE, message)]


def _unsigned_refusal(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
    shown = json.dumps(f"{method} {path}"[:120])
    log.warning("refused an unsigned request %s: not an AWS request", shown)
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)  # drained: the connection stays usable
    message = (
        "Request is missing Authentication Token: turnstile local's AWS endpoint answers "
        "signed requests for DynamoDB, DynamoDB Streams and SQS; the HTTP API has a port of "
        "its own (turnstile local prints both)"
    )
    error = f"com.amazon.coral.service#{MISSING_TOKEN_CODE}"
    body = json.dumps({"__type": error, "message": message})
    start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0")])
    return [body.encode()]


def _query_error(code: str, message: str) -> bytes:
    """A sender's error as the query (XML) protocol spells it."""
    return (
        f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code>"
        f"<Message>{html.escape(message)}</Message></Error>"
        "<RequestId>turnstile-local</RequestId></ErrorResponse>"
    ).encode()


#: ``Credential=KEY/date/region/service/aws4_request`` of a SigV4 Authorization header.
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")
#: The same in a presigned URL's query string (``X-Amz-Credential=KEY%2Fdate%2F...``).
_QUERY_CREDENTIAL = re.compile(
    r"X-Amz-Credential=([^%&]+)%2F\d{8}%2F([^%&]+)%2F([^%&]+)%2Faws4_request", re.I
)
#: The X-Amz-Target prefix of each service the local stack serves.
_TARGET_SERVICES = {
    "DynamoDB_20120810": "dynamodb",
    "DynamoDBStreams_20120810": "dynamodbstreams",
    "AmazonSQS": "sqs",
}


class BackgroundServer:
    """A ``socketserver`` server (``self._server``) run by ``self._thread``: its lifecycle."""

    _server: Any
    _thread: threading.Thread

    @property
    def port(self) -> int:
        """The port listened on (the one picked when asked for port 0)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that never ran
            self._server.shutdown()
        self._server.server_close()


def _listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, as werkzeug would bind it, or ``ListenError``."""
    family = select_address_family(host, port)
    listening = socket.socket(family, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(get_sockaddr(host, int(port), family))
        listening.listen(LISTEN_QUEUE)
    except OSError as exc:
        listening.close()
        raise ListenError("aws", host, port, exc) from exc
    return listening


class EmbeddedAws(BackgroundServer):
    """moto's server on ``host:port`` (port 0 picks a free one), in a background thread."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 4566,
        state_dir: Path | None = None,
        enforcement: RoleEnforcement | None = None,
        throughput: PartitionThroughput | None = None,
    ) -> None:
        """``state_dir``: persist to its snapshot and write-ahead log, and restore them now
        (None: memory). ``enforcement``: how the functions' roles are enforced (default: as
        deployed). ``throughput``: the per-partition throughput limit (default: AWS's
        rates, ``PartitionThroughput()``)."""
        patch_moto()
        wal = None
        if state_dir is not None:
            from turnstile_tools.local.persist import DurableState

            wal = DurableState(state_dir, WAL_NAME)
        self.enforcement = enforcement or RoleEnforcement()
        self.throughput = throughput if throughput is not None else PartitionThroughput()
        self.app = SerializedApp(
            DomainDispatcherApplication(create_backend_app),
            wal,
            self.enforcement,
            self.throughput,
        )
        self.replayed = self.app.replay() if wal is not None else 0
        # The socket is bound here, not by werkzeug: werkzeug prints to stderr and exits
        # when the port is taken; this raises the OSError for the caller to report.
        with _listening_socket(host, port) as listening:
            self._server: BaseWSGIServer = make_server(
                host,
                port,
                self.app,
                threaded=True,
                request_handler=MotoRequestHandler,
                fd=listening.fileno(),  # werkzeug serves a duplicate of it
            )
        # A short poll interval so stop() returns promptly (shutdown waits for one poll;
        # at the default 0.5 s every restart of the endpoint, in a test or Ctrl-C, waited).
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="embedded-aws",
            daemon=True,
        )

    def stop(self) -> None:
        super().stop()
        if self.app.wal is not None:
            with self.app.lock:  # a request still being served finishes its append first
                self.app.wal.close()
