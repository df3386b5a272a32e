"""The ``turnstile`` command (click). Errors are one line on stderr and a non-zero exit.

``main`` is the one place where errors become that line (``error_line``, ``usage_line``);
an error it does not know is still one line, and ``--debug`` (or ``TURNSTILE_DEBUG=1``)
adds the traceback. Each command's callback hands its options, as an ``argparse.Namespace``,
to a ``cmd_*`` function of this module looked up when it runs (tests replace them); what a
command prints goes through ``turnstile_tools.output`` (``--output json|table|text``).
docs/cli.md is the reference (tests/unit/test_cli_reference.py keeps it in step).
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from http.client import HTTPException
from pathlib import Path
from typing import Any, NoReturn
from urllib.error import URLError

import click
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)
from click.core import ParameterSource

from turnstile.base.clock import utc_now
from turnstile.base.contract import Attr, Status, split_shard_key
from turnstile.base.errors import TurnstileError
from turnstile_tools import output
from turnstile_tools.client import ApiError, ApiUnreachableError, NotTurnstileApiError
from turnstile_tools.extras import CliError, needs_extra

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_AUDIT_FAILED = 1
EXIT_STILL_PENDING = 3
#: The audit could not read some event still enough to check it (and found nothing broken).
EXIT_AUDIT_INCONCLUSIVE = 4
#: Ctrl-C, as shells report a command ended by SIGINT.
EXIT_INTERRUPTED = 130

#: Every exit code and what it means: ``turnstile --help`` and docs/cli.md list them.
EXIT_CODES = {
    EXIT_OK: "done (status --wait: the decision came; audit: nothing broken)",
    EXIT_AUDIT_FAILED: "audit: an invariant is broken, the report says which; bench: a way "
    "other than naive oversold, lost or doubled seats",
    EXIT_ERROR: "an error or a usage mistake, one line on stderr (a refused request, no such "
    "event, ...); sweep: a run failed; redrive: batches left undecided",
    EXIT_STILL_PENDING: "status --wait: the wait ended before the decision (or before a "
    "status of --until); the status is printed still",
    EXIT_AUDIT_INCONCLUSIVE: "audit: nothing broken found, but an event kept changing while "
    "it was read: run it again",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}

#: ``turnstile local``'s ports: the option, its environment variable and its default.
PORT_SETTINGS = {
    "aws": ("--port", "TURNSTILE_PORT", 4566),
    "api": ("--api-port", "TURNSTILE_API_PORT", 8080),
}
#: Set (to 1) by the Makefile's ``run``: the user typed ``make run``, whose variables (PORT,
#: API_PORT) give the ports, so the error lines name those instead of the options.
MAKE_RUN_ENV = "TURNSTILE_MAKE_RUN"
#: ``make run``'s variable for each server's port (the Makefile passes it as the option).
MAKE_RUN_PORTS = {"aws": "PORT", "api": "API_PORT"}


def _port_option(server: str) -> str:
    """How the user gives the server's port: its option, or ``make run``'s variable."""
    if os.environ.get(MAKE_RUN_ENV) == "1":
        return MAKE_RUN_PORTS[server]
    return PORT_SETTINGS[server][0]


def _show(args: argparse.Namespace, value: Any) -> None:
    """Print a command's result in its ``--output`` format (JSON if it has none)."""
    print(output.render(value, getattr(args, "output", None) or "json"))


def _store() -> Any:
    from turnstile.storage.store import SignupStore

    return SignupStore()


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("TURNSTILE_STATE_DIR") or ".turnstile")


# -- commands -------------------------------------------------------------------------


def _port_setting(server: str, given: int | None) -> int:
    """The option's port, else its environment variable's, else the default."""
    option, env_var, default = PORT_SETTINGS[server]
    if given is not None:
        return given
    raw = os.environ.get(env_var, "").strip()
    if not raw:
        return default
    try:
        return _port(raw)
    except ValueError:
        raise CliError(
            f"{env_var} must be a port number from 0 to 65535, not {raw!r} (or use {option})"
        ) from None


def _port_source(server: str, given: int | None) -> str:
    """Where ``_port_setting`` takes the port from, as the user would name it."""
    _, env_var, _ = PORT_SETTINGS[server]
    option = _port_option(server)
    if given is not None:
        return option
    return env_var if os.environ.get(env_var, "").strip() else f"the default {option}"


def _local_ports(given_port: int | None, given_api_port: int | None) -> tuple[int, int]:
    """The AWS endpoint's and the HTTP API's ports; ``CliError`` when they are one port
    (0 for both is fine: each picks a free one)."""
    port = _port_setting("aws", given_port)
    api_port = _port_setting("api", given_api_port)
    if port == api_port != 0:
        raise CliError(
            f"{_port_source('aws', given_port)} and {_port_source('api', given_api_port)} "
            f"are both {port}: the AWS endpoint and the HTTP API need a port each"
        )
    return port, api_port


def _throughput_scale(text: str) -> float:
    """``--partition-throughput-scale``'s value (``turnstile_tools.local.throughput``)."""
    from turnstile_tools.local.throughput import parse_scale

    return parse_scale(text)


def _throughput_scale_setting(given: float | None) -> float:
    """The option's scale, else its environment variable's, else 1 (AWS's rates)."""
    if given is not None:
        return given
    env_var = "TURNSTILE_PARTITION_THROUGHPUT_SCALE"  # throughput.SCALE_ENV
    raw = os.environ.get(env_var, "").strip()
    if not raw:
        return 1.0
    try:
        return _throughput_scale(raw)
    except ValueError as exc:
        raise CliError(f"{env_var}: {exc} (or use --partition-throughput-scale)") from None


def _stream_shards(text: str) -> int:
    """``--stream-shards``' value: how many stream shards the worker emulates."""
    value = int(text) if text.strip().isdigit() else 0
    if not 1 <= value <= 64:
        raise ValueError(f"must be a whole number from 1 to 64, not {text!r}")
    return value


def _use_stream_shards(given: int | None) -> None:
    """The worker reads its stream shards from the environment (TURNSTILE_STREAM_SHARDS)."""
    if given is not None:
        os.environ["TURNSTILE_STREAM_SHARDS"] = str(given)


def cmd_local(args: argparse.Namespace) -> int:
    port, api_port = _local_ports(args.port, args.api_port)
    try:
        from turnstile_tools.local.console import Console, configure_logging
        from turnstile_tools.local.stack import LocalStack
    except ModuleNotFoundError as exc:
        raise needs_extra("local", "local", exc) from exc

    if args.in_memory and args.reset:
        raise CliError("--reset and --in-memory: an in-memory stack always starts clean")
    configure_logging(args.log_format, args.log_level)
    _use_stream_shards(args.stream_shards)
    console = Console(args.log_format)
    stack = LocalStack(
        host=args.host,
        port=port,
        api_port=api_port,
        worker=not args.no_worker,
        state_dir=_state_dir(args),
        in_memory=args.in_memory,
        reset=args.reset,
        on_decided=console.decided,
        cors_origins=tuple(args.cors_origin or ()),
        throughput_scale=_throughput_scale_setting(args.partition_throughput_scale),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Ctrl-C stops it as SIGTERM does (unless started with SIGINT ignored, as a background
    # job of a script is), and a second one at once, as a kill does (which loses nothing
    # acknowledged: README, "What survives a restart").
    interruptible = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN

    def interrupted(*_: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    if interruptible:
        signal.signal(signal.SIGINT, interrupted)
    try:
        stack.start()
    except BaseException as exc:
        stack.stop()  # what did start (the endpoint, when the API port is taken)
        if isinstance(exc, OSError):  # the state directory unreadable, ...
            raise CliError(f"cannot start the local stack: {exc}") from exc
        raise
    assert stack.aws is not None and stack.api is not None
    # The ports bound: port 0 picks a free one.
    endpoint = f"http://{args.host}:{stack.aws.port}"
    print(f"turnstile local: AWS endpoint {endpoint}", flush=True)
    print(f"turnstile local: HTTP API     http://{args.host}:{stack.api.port}", flush=True)
    polling = "polling the intake stream"
    if stack.worker is not None and stack.worker.stream_shards > 1:
        polling += f" as {stack.worker.stream_shards} stream shards"
    print(f"turnstile local: worker       {'off' if args.no_worker else polling}", flush=True)
    if args.in_memory:
        where = "in memory (lost when it stops)"
    else:
        restored = stack.aws.replayed if stack.aws else 0
        where = f"{stack.state_dir.resolve()} ({restored} writes restored)"
    print(f"turnstile local: state        {where}", flush=True)
    print(
        f"  export AWS_ENDPOINT_URL={endpoint} AWS_ACCESS_KEY_ID=test "
        "AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1",
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        if interruptible:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        console.say("stopping")
        counts = stack.stop(count_budget_s=3.0)
    console.summary(
        counts, in_memory=args.in_memory, state_dir=stack.state_dir, worker=not args.no_worker
    )
    # The clean stop is done: worker, API and endpoint stopped, every write already fsynced.
    # A thread still inside a call to the endpoint that is gone (a batch the worker's stop
    # stopped waiting for, on a loaded machine) must not hold the exit for its retries.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


def cmd_worker(args: argparse.Namespace) -> int:
    try:
        from turnstile_tools.local.stack import Worker
    except ModuleNotFoundError as exc:
        raise needs_extra("worker", "local", exc) from exc

    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    _use_stream_shards(args.stream_shards)
    _worker_logging(tracebacks=_debug(args))
    worker = Worker(_state_dir(args), from_start=args.from_start)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop_event.set())
    print(f"turnstile worker: polling {worker.poller.stream_arn} as {worker.identity}", flush=True)
    try:
        worker.run(until_idle_s=args.until_idle)
    except KeyboardInterrupt:
        worker.stop_event.set()
    stats = worker.poller.stats
    injected = sum(f.injected for f in worker.faults)
    calls = sum(f.calls for f in worker.faults)
    print(
        f"turnstile worker: stopped after {stats.invocations} invocations, "
        f"{stats.records_delivered} records delivered, {injected} faults injected "
        f"in {calls} calls",
        flush=True,
    )
    print(f"turnstile worker: stats {json.dumps(worker.summary())}", flush=True)
    return 0


def _worker_logging(tracebacks: bool) -> None:
    """The worker's own warnings and errors (its pollers', its lanes', its stack's: the
    ``turnstile_tools`` loggers) as one short line each on stderr, an exception as its
    type and message (its traceback with ``--debug``); the stream function's logs stay
    Powertools' JSON on stdout, as on Lambda.

    A handler of their own, as ``turnstile local`` gives them: not the root handler of
    ``main``'s ``basicConfig``, on which the stream handler's ``Logger(service="turnstile")``
    puts Powertools' ``SuppressFilter("turnstile")`` (so that the function's records, which
    its own handler prints, are not printed twice), a filter that drops every record whose
    logger name merely *contains* ``turnstile``: ``turnstile_tools.local.poller``'s too.
    """
    from turnstile_tools.local.console import TextFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter(traceback=tracebacks))
    tools = logging.getLogger("turnstile_tools")
    tools.handlers = [handler]
    tools.setLevel(logging.WARNING)
    tools.propagate = False


def cli_identity() -> str:
    """``created_by`` of an event the CLI creates: ``cli:<local user>``.

    Not the AWS identity: that would cost an STS call on every create (and there is none
    on the local stack); CloudTrail has the AWS principal of every write anyway.
    """
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name in the environment or the password file
        return "cli"


def cmd_event_create(args: argparse.Namespace) -> int:
    from turnstile.service import usecases

    # The same capacity and options again print the event as it is (idempotent, as
    # POST /events); the options are checked by the use case, as the API's are.
    created = usecases.create_event(
        _store(),
        args.event_id,
        args.capacity,
        created_by=cli_identity(),
        waitlist=usecases.ABSENT if args.waitlist is None else args.waitlist,
        hold_seconds=usecases.ABSENT if args.hold_seconds is None else args.hold_seconds,
        max_seats=usecases.ABSENT if args.max_seats is None else args.max_seats,
        shards=usecases.ABSENT if args.shards is None else args.shards,
    )
    _show(args, created.body)
    return 0


def cmd_event_update(args: argparse.Namespace) -> int:
    from turnstile.service import usecases

    _show(args, usecases.update_capacity(_store(), args.event_id, args.capacity))
    return 0


def cmd_event_close(args: argparse.Namespace) -> int:
    from turnstile.service import usecases

    _show(args, usecases.close_event(_store(), args.event_id))
    return 0


def cmd_event_show(args: argparse.Namespace) -> int:
    from turnstile.service import usecases

    _show(args, usecases.show_event(_store(), args.event_id))
    return 0


def cmd_event_list(args: argparse.Namespace) -> int:
    from turnstile.service import usecases

    _show(args, usecases.list_events(_store(), args.limit, args.next))
    return 0


def cmd_signups_list(args: argparse.Namespace) -> int:
    from turnstile.service import usecases

    _show(args, usecases.list_signups(_store(), args.event_id, args.status, args.limit, args.next))
    return 0


def _api_url(args: argparse.Namespace) -> str | None:
    """``--api-url``, else TURNSTILE_API_URL, else None; ``CliError`` if it is no URL."""
    from urllib.parse import urlsplit

    url, source = getattr(args, "api_url", None), "--api-url"
    if not url:
        url, source = os.environ.get("TURNSTILE_API_URL"), "TURNSTILE_API_URL"
    if not url:
        return None
    try:
        split = urlsplit(url)
        valid = split.scheme in ("http", "https") and bool(split.hostname)
        split.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if not valid:
        raise CliError(
            f"{source} {url!r} is not an http:// or https:// URL "
            "(the local stack's API is http://127.0.0.1:8080)"
        )
    return url


def _api_client(url: str) -> Any:
    from turnstile_tools.client import TurnstileClient

    return TurnstileClient(url)


def _attributes(text: str) -> Any:
    """``--attributes``' JSON, read as the API reads a body (``turnstile.web.body``): a key
    given twice, NaN and Infinity refused in its words (``--attributes has the key "a"
    more than once``, ``--attributes is not JSON: NaN is not a JSON number``), fractions
    and long integers as Decimal. What the value must be (a map) is the use case's to say,
    as the API's is."""
    from turnstile.web.body import json_object
    from turnstile.web.errors import RequestError

    try:
        return json_object({"body": text})
    except RequestError as exc:
        said = exc.message
    if said != "body must be a JSON object":  # a key twice, NaN, not JSON, too deep, ...
        said = said.replace("body is not valid JSON:", "body is not JSON:", 1)
        raise CliError("--attributes" + said.removeprefix("body"))
    # JSON (read by the API's rules above), but no object: the use case refuses it as the
    # API refuses it (attributes must be a map ...). Nothing but a map passes, so its
    # numbers need not be exact here.
    try:
        return json.loads(text, parse_float=Decimal, parse_int=Decimal)
    except ValueError as exc:  # nothing at all
        raise CliError(f"--attributes is not JSON: {exc}") from None


def cmd_submit(args: argparse.Namespace) -> int:
    from turnstile.service import usecases

    attributes: Any = usecases.ABSENT
    if args.attributes is not None:
        attributes = _attributes(args.attributes)
    seats = usecases.ABSENT if args.seats is None else args.seats
    url = _api_url(args)
    if url:
        if attributes is None:  # the client leaves out None: a null, the API refuses
            raise CliError(usecases.ATTRIBUTES_RULE)
        # The API applies the same use case; its answer is printed as it is.
        body = _api_client(url).submit(
            args.event_id,
            args.signup_id,
            1 if seats is usecases.ABSENT else seats,
            None if attributes is usecases.ABSENT else attributes,
        )
        _show(args, body)
        return 0
    submitted = usecases.submit_signup(
        _store(),
        args.event_id,
        args.signup_id,
        seats,
        attributes,
        retention_days=_retention_days(args),
        owner=cli_identity(),
    )
    _show(args, submitted.body)
    return 0


def cmd_request(args: argparse.Namespace) -> int:
    """``turnstile confirm`` and ``turnstile cancel``: POST .../confirm (or /cancel)'s use
    case, printing its answer; a refusal is an error line naming the current status."""
    url = _api_url(args)
    if url:
        client = _api_client(url)
        request = client.confirm if args.request == "confirm" else client.cancel
        _show(args, request(args.event_id, args.signup_id))
        return 0
    from turnstile.service import usecases

    _show(args, usecases.request_signup(_store(), args.event_id, args.signup_id, args.request))
    return 0


def _retention_days(args: argparse.Namespace) -> int:
    """``--retention-days``, else TURNSTILE_INTAKE_RETENTION_DAYS, else 30."""
    from turnstile.base.personal_data import intake_retention_days

    if args.retention_days is not None:
        if args.retention_days < 1:
            raise CliError("--retention-days must be at least 1")
        return int(args.retention_days)
    try:
        return intake_retention_days()
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _statuses(text: str) -> frozenset[str]:
    """``--until``'s statuses; ValueError naming what is not one (a usage error, exit 2)."""
    wanted = frozenset(s.strip().upper() for s in text.split(",") if s.strip())
    unknown = sorted(wanted - set(Status.ALL))
    if not wanted or unknown:
        named = ", ".join(unknown) or repr(text)
        raise ValueError(f"not a status: {named} (one of {', '.join(Status.ALL)})")
    return wanted


def _status_via_api(args: argparse.Namespace, url: str) -> int:
    from turnstile_tools.client import WaitTimeoutError

    client = _api_client(url)
    if not args.wait:
        _show(args, client.get(args.event_id, args.signup_id))
        return 0
    try:
        _show(
            args,
            client.wait(args.event_id, args.signup_id, timeout_s=args.wait, statuses=args.until),
        )
        return 0
    except WaitTimeoutError:
        _show(args, client.get(args.event_id, args.signup_id))
        return EXIT_STILL_PENDING


def cmd_status(args: argparse.Namespace) -> int:
    url = _api_url(args)
    if url:
        return _status_via_api(args, url)
    from turnstile.service import usecases

    # What GET .../signups/{id}?wait= runs, without its 20 s bound.
    status = usecases.await_decision(
        _store(),
        args.event_id,
        args.signup_id,
        args.wait or 0,
        max_delay_s=2.0,
        statuses=args.until,
    )
    _show(args, status)
    waited_in_vain = args.wait and not Status.reached(status[Attr.STATUS], args.until)
    return EXIT_STILL_PENDING if waited_in_vain else 0


#: The audit table's columns: the event's counters, then its decided signups by status
#: (``status_counts``), its pending records and those parked behind a failing event.
AUDIT_COLUMNS = (
    "event",
    "capacity",
    "taken",
    "held",
    "accepted",
    "waitlisted",
    "rejected",
    "pending",
    "parked",
)
#: An event id longer than this is cut short in the table (its lines below name it whole).
AUDIT_EVENT_WIDTH = 32


def _status_counts(counts: Mapping[str, Any]) -> dict[str, int]:
    """A report's (or an event's) decided signups by status."""
    return {str(status): int(n or 0) for status, n in counts.get("status_counts", {}).items()}


def _parked(counts: Mapping[str, Any]) -> int:
    """Records parked behind a failing event, not yet decided."""
    return int(counts.get("parked", 0) or 0)


def audit_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The audit table's rows (``AUDIT_COLUMNS``), read from ``AuditReport.to_dict()``.

    A sharded event is one row, its seats and signups summed over its shards (their
    decision items are under the shards' keys, none under the event's own), followed by a
    row per shard, indented, named ``#<shard>``, its capacity the seats dealt to it."""
    events = list(report.get("events", []))
    shards_of: dict[str, list[Mapping[str, Any]]] = {}
    for e in events:
        split = split_shard_key(str(e.get("event_id")))
        if split is not None:
            shards_of.setdefault(split[0], []).append(e)

    def row(name: str, e: Mapping[str, Any], parts: list[Mapping[str, Any]]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for part in [e, *parts]:
            for status, n in _status_counts(part).items():
                counts[status] = counts.get(status, 0) + n
        if len(name) > AUDIT_EVENT_WIDTH:
            name = name[: AUDIT_EVENT_WIDTH - 3] + "..."
        return {
            "event": name,
            "capacity": e.get("capacity"),
            "taken": e.get("taken"),
            "held": counts.get(Status.HELD, 0),
            "accepted": counts.get(Status.ACCEPTED, 0),
            "waitlisted": counts.get(Status.WAITLISTED, 0),
            "rejected": counts.get(Status.REJECTED, 0),
            "pending": sum(int(p.get("pending", 0) or 0) for p in [e, *parts]),
            "parked": sum(_parked(p) for p in [e, *parts]),
        }

    rows = []
    for e in events:
        event_id = str(e.get("event_id"))
        split = split_shard_key(event_id)
        if split is not None and any(p.get("event_id") == split[0] for p in events):
            continue  # shown under its event
        parts = sorted(shards_of.get(event_id, []), key=lambda p: str(p.get("event_id")))
        rows.append(row(event_id, e, parts))
        for part in parts:
            shard = split_shard_key(str(part.get("event_id")))
            assert shard is not None
            rows.append(row(f"  #{shard[1]:02d}", part, []))
    return rows


def audit_summary(report: Mapping[str, Any]) -> str:
    """The audit's closing line, from ``AuditReport.to_dict()``'s totals: ``audit OK: 2
    events, 3 seats taken, 1 accepted, 2 held, 1 rejected, 0 pending, 0 violations``
    (waitlisted, cancelled, expired, parked and inconclusive only when there are some).
    Seats taken: the events' ``taken`` summed."""
    t = report.get("totals", {})
    taken = t.get("taken", 0)
    counts = _status_counts(t)
    violations = int(t.get("violations", 0) or 0)
    inconclusive = int(t.get("inconclusive", 0) or 0)
    verdict = "BROKEN" if violations else "INCONCLUSIVE" if inconclusive else "OK"

    def some(n: int, what: str) -> list[str]:
        return [f"{n} {what}"] if n else []

    parts = [
        f"{t.get('events', 0)} events",
        f"{taken} seats taken",
        f"{counts.get(Status.ACCEPTED, 0)} accepted",
        f"{counts.get(Status.HELD, 0)} held",
        *some(counts.get(Status.WAITLISTED, 0), "waitlisted"),
        f"{counts.get(Status.REJECTED, 0)} rejected",
        *some(counts.get(Status.CANCELLED, 0), "cancelled"),
        *some(counts.get(Status.EXPIRED, 0), "expired"),
        f"{t.get('pending', 0)} pending",
        *some(_parked(t), "parked"),
        f"{violations} violations",
        *some(inconclusive, "inconclusive"),
    ]
    return f"audit {verdict}: {', '.join(parts)}"


def audit_table(report: Mapping[str, Any]) -> str:
    """The audit as a table, each event's violations and notes, the denials and the
    closing line (``--output table``, the default)."""
    lines = [output.table(audit_rows(report), AUDIT_COLUMNS)]
    for e in report.get("events", []):
        for violation in e.get("violations", []):
            lines.append(f"  VIOLATION {e.get('event_id')}: {violation}")
        for note in e.get("notes", []):
            label = "INCONCLUSIVE" if e.get("inconclusive") else "note"
            lines.append(f"  {label} {e.get('event_id')}: {note}")
    for denial in report.get("denials", []):
        lines.append(
            f"  VIOLATION access denied to the {denial.get('role')} role: {denial.get('denied')}"
        )
    lines.append(audit_summary(report))
    return "\n".join(lines)


def cmd_audit(args: argparse.Namespace) -> int:
    from turnstile_tools.audit import audit
    from turnstile_tools.local.roles import endpoint_denials

    report = audit(_store(), args.event_id, pending_grace_s=args.pending_grace)
    report.denials = endpoint_denials()
    if getattr(args, "output", "table") == "table":
        print(audit_table(report.to_dict()))
    else:
        _show(args, report.to_dict())
    if report.broken:
        return EXIT_AUDIT_FAILED
    return EXIT_AUDIT_INCONCLUSIVE if report.inconclusive else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from turnstile.jobs.sweeper import Sweeper

    sweeper = Sweeper(
        _store(),
        lease_s=args.lease,
        min_age_s=args.min_age,
        max_run_s=args.max_run,
        full_scan_every_s=0.0 if args.full_scan else args.full_scan_every,
    )
    if args.replay_failed:
        results = sweeper.replay_failed()
    else:
        # Not the scheduled sweeper's run id (its five-minute slot): that run has most
        # likely happened already, and this one would only answer already_ran.
        run_id = args.run_id or manual_run_id()
        results = [sweeper.sweep(run_id)]
    _show(args, [r.to_dict() for r in results])
    return EXIT_ERROR if any(r.status == "failed" for r in results) else 0


def manual_run_id(now: datetime | None = None) -> str:
    """The run id of a ``turnstile sweep`` without ``--run-id``: its own, to the microsecond."""
    return f"manual-{utc_now(now)}"


def cmd_redrive(args: argparse.Namespace) -> int:
    import boto3

    from turnstile.base.contract import FAILURE_QUEUE_NAME
    from turnstile_tools.redrive import redrive_queue

    sqs = boto3.client("sqs")
    queue_url = args.queue_url or os.environ.get("TURNSTILE_FAILURE_QUEUE_URL")
    if not queue_url:
        queue_url = sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
    result = redrive_queue(
        _store(), sqs, queue_url, boto3.client("dynamodbstreams"), wait_s=args.wait
    )
    _show(args, result.to_dict())
    return 0 if result.kept == 0 else EXIT_ERROR


# -- wiring ---------------------------------------------------------------------------


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"not a port number from 0 to 65535: {text!r}")
    return port


def _seconds(text: str) -> float:
    """A number of seconds (to wait, an age, a lease, ...): whole or decimal, 0 or more (not
    -5, nan, inf, 1e3); every option given in seconds takes it (``SECONDS``)."""
    seconds = float(text) if re.fullmatch(r"\d+(\.\d*)?|\.\d+", text.strip()) else -1.0
    if not 0 <= seconds < math.inf:  # 400 digits are a float too: inf
        raise ValueError(f"not a number of seconds, 0 or more (such as 10 or 2.5): {text!r}")
    return seconds


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("turnstile")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Checked(click.ParamType):
    """A value a function of this module checks: its ValueError is the usage error."""

    def __init__(self, name: str, check: Callable[[str], Any]) -> None:
        self.name = name
        self.check = check

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return self.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default, already converted
        try:
            return self.check(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


PORT = _Checked("PORT", _port)
SECONDS = _Checked("SECONDS", _seconds)
STATUSES = _Checked("STATUS[,STATUS]", _statuses)


class UsageError(click.UsageError):
    """A usage mistake found by this module; ``see_help``: end the line with where the
    command's help is (not when the line already says what to type instead)."""

    def __init__(self, message: str, ctx: click.Context | None = None, see_help: bool = True):
        super().__init__(message, ctx)
        self.see_help = see_help


class Option(click.Option):
    """An option whose help shows its default: ``default_text`` where the default is not
    a value (an environment variable, a behaviour), ``off`` for a flag."""

    def __init__(self, *args: Any, default_text: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("show_default", True)
        super().__init__(*args, **kwargs)
        self.default_text = default_text

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if self.default_text is not None:
            extra["default"] = self.default_text
        elif self.is_flag and not self.secondary_opts and "default" not in extra:
            extra["default"] = "off"
        return extra


class _Documented:
    """Help that ends with the exit codes (``exit_codes``: code -> meaning, or codes whose
    meaning ``EXIT_CODES`` says), and says its help option in the words of the rest."""

    def __init__(
        self, *args: Any, exit_codes: Mapping[int, str] | Sequence[int] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(exit_codes, Mapping):
            exit_codes = {code: EXIT_CODES[code] for code in exit_codes}
        self.exit_codes: dict[int, str] = dict(exit_codes)

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        help_option = super().get_help_option(ctx)  # type: ignore[misc]
        if help_option is not None:
            help_option.help = "show this help and exit"
        return help_option

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)  # type: ignore[misc]
        if self.exit_codes:
            with formatter.section("Exit codes"):
                formatter.write_dl(
                    [(str(code), self.exit_codes[code]) for code in sorted(self.exit_codes)]
                )


class Command(_Documented, click.Command):
    """A command whose missing arguments are named together, as argparse named them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.MissingParameter as exc:
            if not isinstance(exc.param, click.Argument):
                raise
            # Positionals fill from the left: this one and every required one after it.
            required = [p.name for p in self.params if isinstance(p, click.Argument) and p.required]
            missing = required[required.index(exc.param.name) :]
            raise UsageError(
                f"the following arguments are required: {', '.join(map(str, missing))}", ctx
            ) from None


def _one_of(names: Sequence[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class Group(_Documented, click.Group):
    """A group of commands that suggests the closest for a mistyped one, and names its
    commands when none is given."""

    command_class = Command
    group_class = type  # subgroups are Groups too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("invoke_without_command", True)  # the callback says what is missing
        super().__init__(*args, **kwargs)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = click.utils.make_str(args[0])
        if not name.startswith("-") and self.get_command(ctx, name) is None:
            # `turnstile event crate`: name the command as typed, from the group's path.
            prefix = " ".join([*ctx.command_path.split()[1:], ""]).lstrip()
            commands = self.list_commands(ctx)
            close = difflib.get_close_matches(name, commands, n=3, cutoff=0.6)
            if close:
                guess = _one_of([prefix + c for c in close])
                message = f"no such command '{prefix}{name}'; did you mean {guess}?"
            else:
                known = ", ".join(prefix + c for c in commands)
                message = f"no such command '{prefix}{name}' (known: {known})"
            raise UsageError(message, ctx, see_help=False)
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order they were added, as help lists them


def _missing_command(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        assert isinstance(ctx.command, click.Group)
        commands = ", ".join(ctx.command.list_commands(ctx))
        raise UsageError(f"missing command: one of {commands}", ctx)


def option(*decls: str, **kwargs: Any) -> Callable[[Any], Any]:
    """An option of ``Option``'s kind (its default shown in help)."""
    return click.option(*decls, cls=Option, **kwargs)


def output_option(default: str = "json") -> Callable[[Any], Any]:
    return option(
        "--output",
        "-o",
        type=click.Choice(output.FORMATS),
        metavar="FORMAT",
        default=default,
        help="how to print the result: json (as the HTTP API answers it), table (aligned "
        "columns) or text (key: value lines)",
    )


def stream_shards_option() -> Callable[[Any], Any]:
    """``--stream-shards``, on ``turnstile local`` and ``turnstile worker`` alike."""
    return option(
        "--stream-shards",
        type=_Checked("N", _stream_shards),
        default_text="$TURNSTILE_STREAM_SHARDS, else 1",
        help="emulate N stream shards over the intake stream's one, as DynamoDB gives each "
        "partition its own: each event's records go in order to one of N lanes, worked at "
        "once, each by a processor of its own (as Lambda runs one invocation per shard)",
    )


def api_url_option() -> Callable[[Any], Any]:
    return option(
        "--api-url",
        metavar="URL",
        default_text="$TURNSTILE_API_URL, else the tables",
        help="go through the HTTP API at this URL instead of the tables",
    )


def page_options(f: Any) -> Any:
    f = option(
        "--next",
        metavar="TOKEN",
        default_text="the first page",
        help='the page after the one whose "next" this is',
    )(f)
    return option(
        "--limit",
        type=int,
        metavar="N",
        default_text="50",
        help="most items on the page (1 to 100)",
    )(f)


@dataclass
class Invocation:
    """What the run knows beyond a command's options: the top-level options (set before
    the command runs) and the command's ``Namespace`` (for the error line)."""

    stack: str | None = None
    debug: bool = False
    args: argparse.Namespace | None = None


def _run(ctx: click.Context, func_name: str, params: dict[str, Any]) -> int:
    """Run ``cmd_<...>`` (looked up now: tests replace them) with the command's options."""
    state = ctx.find_object(Invocation) or Invocation()
    args = argparse.Namespace(stack=state.stack, debug=state.debug, **params)
    state.args = args
    if state.stack:
        _apply_stack(state.stack)
    return int(globals()[func_name](args) or 0)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"turnstile {_version()}")
        ctx.exit(0)


@click.group(
    "turnstile",
    cls=Group,
    help="Decide who gets a limited resource, exactly once, in arrival order. "
    "--stack and --debug may come anywhere on the line.",
    exit_codes=EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="print the version and exit",
)
@option(
    "--stack",
    metavar="NAME",
    default_text="none: the tables of the AWS configuration",
    help="find a deployed CloudFormation stack's tables from its outputs",
)
@option(
    "--debug",
    is_flag=True,
    default_text="off, or $TURNSTILE_DEBUG=1",
    help="print the traceback of an error too",
)
@click.pass_context
def turnstile_cli(ctx: click.Context, stack: str | None, debug: bool) -> None:
    state = ctx.ensure_object(Invocation)
    state.stack, state.debug = stack, debug
    _missing_command(ctx)


@turnstile_cli.command(
    "local",
    short_help="run the whole system on this machine",
    help="Run the AWS endpoint (tables, streams, queue), the stream worker, the sweeper and "
    "the HTTP API in the foreground, until Ctrl-C or SIGTERM; a line per decision, a summary "
    "when stopped. Ports: --port and --api-port, else $TURNSTILE_PORT and "
    "$TURNSTILE_API_PORT, else 4566 and 8080 (0 picks a free one).",
)
@option("--host", default="127.0.0.1", metavar="HOST", help="the address both servers listen on")
@option(
    "--port",
    type=PORT,
    default_text="$TURNSTILE_PORT, else 4566",
    help="the AWS endpoint's port",
)
@option(
    "--api-port",
    type=PORT,
    default_text="$TURNSTILE_API_PORT, else 8080",
    help="the HTTP API's port",
)
@option("--no-worker", is_flag=True, help="do not poll the stream")
@option(
    "--state-dir",
    metavar="DIR",
    default_text="$TURNSTILE_STATE_DIR, else .turnstile",
    help="where the tables, queue and checkpoints persist",
)
@option("--in-memory", is_flag=True, help="keep no state: everything is lost on stop")
@option("--reset", is_flag=True, help="delete the persisted state and start clean")
@option(
    "--cors-origin",
    multiple=True,
    metavar="ORIGIN",
    default_text="none",
    help="let browsers on ORIGIN (e.g. http://localhost:3000, or *) call the HTTP API; "
    "repeat for more",
)
@option(
    "--partition-throughput-scale",
    type=_Checked("SCALE", _throughput_scale),
    default_text="$TURNSTILE_PARTITION_THROUGHPUT_SCALE, else 1",
    help="the AWS endpoint throttles each partition key value at SCALE times DynamoDB's "
    "1,000 write and 3,000 read units a second, as DynamoDB does (0.02: a fiftieth, which "
    "the local stack can reach; 0: no limit)",
)
@stream_shards_option()
@option(
    "--log-format",
    type=click.Choice(("text", "json")),
    default="text",
    metavar="FORMAT",
    help="text: a line per decision, warnings and errors as short lines; json: the "
    "functions' JSON logs as Lambda writes them",
)
@option(
    "--log-level",
    type=click.Choice(("DEBUG", "INFO", "WARNING", "ERROR"), case_sensitive=False),
    metavar="LEVEL",
    default_text="WARNING; INFO with --log-format json",
    help="the level of turnstile's logs: DEBUG, INFO, WARNING or ERROR; INFO shows every "
    "HTTP request",
)
@click.pass_context
def _local(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_local", params)


@turnstile_cli.command(
    "worker",
    short_help="run only the stream worker against the configured endpoint",
    help="Poll the intake table's stream and run the stream processor on its batches, as "
    "Lambda's event source mapping would, against whatever endpoint the AWS configuration "
    "names (AWS_ENDPOINT_URL for the local one). It resumes from its checkpoints in the "
    "state directory; --from-start replays the whole stream. Stops on Ctrl-C, SIGTERM or "
    "--until-idle, printing what it did.",
)
@option("--from-start", is_flag=True, help="replay the stream from TRIM_HORIZON")
@option(
    "--state-dir",
    metavar="DIR",
    default_text="$TURNSTILE_STATE_DIR, else .turnstile",
    help="where checkpoints live",
)
@option(
    "--until-idle",
    type=SECONDS,
    metavar="SECONDS",
    default_text="never: until stopped",
    help="exit once the stream has had nothing new for SECONDS",
)
@stream_shards_option()
@click.pass_context
def _worker(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_worker", params)


@turnstile_cli.group(
    "event",
    short_help="create, update, close, show or list events",
    help="Create, update, close, show or list events: what the HTTP API's /events routes do.",
)
@click.pass_context
def _event(ctx: click.Context) -> None:
    _missing_command(ctx)


@_event.command(
    "create",
    short_help="create an OPEN event",
    help="Create an OPEN event, with the options of docs/lifecycle.md if given, and print it "
    "(POST /events). The same capacity and options again print the event as it is; others "
    "are an error naming the ones it has.",
)
@click.argument("event_id", help="the new event's id")
@option("--capacity", type=int, required=True, metavar="N", help="seats (or units) to give out")
@option(
    "--waitlist",
    type=int,
    metavar="W",
    default_text="0: no waitlist",
    help="how many signups may wait for seats at once",
)
@option(
    "--hold-seconds",
    type=int,
    metavar="S",
    default_text="0: accepted at once",
    help="a granted signup holds its seats S seconds until confirmed",
)
@option(
    "--max-seats",
    type=int,
    metavar="M",
    default_text="none: only the capacity bounds it",
    help="the most seats one signup may ask for",
)
@option(
    "--shards",
    type=int,
    metavar="K",
    default_text="1: not sharded",
    help="spread a hot event's signups over K shards (1 to 32): each signup is kept and "
    "decided in the shard its id falls in, and a --waitlist bounds the shards' lines "
    "together (docs/hot-events.md)",
)
@output_option()
@click.pass_context
def _event_create(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_event_create", params)


@_event.command(
    "update",
    short_help="change an event's capacity: up at any time, down to the seats taken",
    help="Change an event's capacity: up at any time, down to the seats taken and no lower; "
    "prints what PATCH /events/{id} answers.",
)
@click.argument("event_id", help="the event's id")
@option("--capacity", type=int, required=True, metavar="N", help="the new capacity")
@output_option()
@click.pass_context
def _event_update(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_event_update", params)


@_event.command(
    "close",
    short_help="close an event: later signups are rejected",
    help="Close an event (OPEN -> CLOSED, idempotent): later signups are rejected "
    "event_closed; prints what POST /events/{id}/close answers.",
)
@click.argument("event_id", help="the event's id")
@output_option()
@click.pass_context
def _event_close(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_event_close", params)


@_event.command(
    "show",
    short_help="show an event's counters",
    help="Show an event and its counters, as GET /events/{id} answers.",
)
@click.argument("event_id", help="the event's id")
@output_option()
@click.pass_context
def _event_show(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_event_show", params)


@_event.command(
    "list",
    short_help="a page of events, as GET /events answers it",
    help='A page of events, as GET /events answers it; "next" is the token of the '
    "following page (--next).",
)
@page_options
@output_option()
@click.pass_context
def _event_list(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_event_list", params)


@turnstile_cli.group(
    "signups",
    short_help="list an event's signups",
    help="List an event's signups, as GET /events/{id}/signups does.",
)
@click.pass_context
def _signups(ctx: click.Context) -> None:
    _missing_command(ctx)


@_signups.command(
    "list",
    short_help="a page of an event's signups, as GET /events/{id}/signups answers it",
    help="A page of an event's signups in signup_id order (a sharded event's shard by shard, "
    "each shard's in signup_id order), as GET /events/{id}/signups answers it.",
)
@click.argument("event_id", help="the event's id")
@option(
    "--status",
    metavar="STATUS",
    default_text="every status",
    help="only signups in this status: PENDING, HELD, ACCEPTED, WAITLISTED, REJECTED, "
    "CANCELLED or EXPIRED",
)
@page_options
@output_option()
@click.pass_context
def _signups_list(ctx: click.Context, **params: Any) -> int:
    # --status is checked by the use case (one line, the API's message), not by a Choice.
    return _run(ctx, "cmd_signups_list", params)


@turnstile_cli.command(
    "submit",
    short_help="write a provisional signup into intake",
    help="Write a provisional signup into the intake table (idempotent for the same body), "
    "as POST /events/{id}/signups does, and print what it answers; the stream processor "
    "decides it. An unknown event is an error.",
)
@click.argument("event_id", help="the event's id")
@click.argument("signup_id", help="the signup's id, unique in the event (resubmitting is safe)")
@option("--seats", type=int, metavar="N", default_text="1", help="seats the signup asks for")
@option(
    "--attributes",
    metavar="JSON",
    default_text="none",
    help="a JSON object carried to the decision, read as the API reads a body: no key "
    "twice, no NaN or Infinity",
)
@option(
    "--retention-days",
    type=int,
    metavar="DAYS",
    default_text="$TURNSTILE_INTAKE_RETENTION_DAYS, else 30",
    help="days until TTL deletes the intake record (the API's own setting applies with --api-url)",
)
@api_url_option()
@output_option()
@click.pass_context
def _submit(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_submit", params)


def _request_command(request: str, short_help: str) -> None:
    @turnstile_cli.command(
        request,
        short_help=short_help,
        help=f"Record a {request} request for the stream processor (as POST "
        f"/events/{{id}}/signups/{{sid}}/{request}) and print it. A status that does not "
        "allow it is an error naming the status (exit 2).",
    )
    @click.argument("event_id", help="the event's id")
    @click.argument("signup_id", help="the signup's id")
    @api_url_option()
    @output_option()
    @click.pass_context
    def _request(ctx: click.Context, **params: Any) -> int:
        return _run(ctx, "cmd_request", {**params, "request": request})


_request_command("confirm", "confirm a HELD signup before its hold expires")
_request_command("cancel", "cancel a HELD, ACCEPTED or WAITLISTED signup")


@turnstile_cli.command(
    "status",
    short_help="a signup's status",
    help="A signup's status (PENDING, HELD, ACCEPTED, WAITLISTED, REJECTED, CANCELLED or "
    "EXPIRED), as GET /events/{id}/signups/{id} answers it; --wait waits for the decision.",
    exit_codes={
        EXIT_OK: "the status printed; with --wait, once decided (or in a status of --until)",
        EXIT_STILL_PENDING: "--wait ended before that: the status is printed still",
        EXIT_ERROR: "an error (no such signup, ...)",
    },
)
@click.argument("event_id", help="the event's id")
@click.argument("signup_id", help="the signup's id")
@option(
    "--wait",
    type=SECONDS,
    default=0,
    help="wait up to SECONDS for a decision (0: answer at once)",
)
@option(
    "--until",
    type=STATUSES,
    default_text="any decision",
    help="with --wait: wait for one of these statuses (or a final one: REJECTED, CANCELLED, "
    "EXPIRED), e.g. --until ACCEPTED",
)
@api_url_option()
@output_option()
@click.pass_context
def _status(ctx: click.Context, **params: Any) -> int:
    if params["until"] is not None and not params["wait"]:
        # Without a wait there is nothing to wait until: the status read answers at once.
        raise UsageError("--until needs --wait SECONDS (above 0)", ctx)
    return _run(ctx, "cmd_status", params)


@turnstile_cli.command(
    "audit",
    short_help="check the invariants against the tables",
    help="Check invariants 1-4 against the tables: per event its counters, its decided "
    "signups by status, pending and parked records, then a closing line (audit OK, BROKEN "
    "or INCONCLUSIVE).",
    exit_codes={
        EXIT_OK: "every event checked, nothing broken",
        EXIT_AUDIT_FAILED: "something is broken: the report says what",
        EXIT_ERROR: "an error (such as no such event)",
        EXIT_AUDIT_INCONCLUSIVE: "nothing broken found, but some event kept changing while "
        "it was read and could not be checked: run it again",
    },
)
@click.argument("event_id", required=False, help="only this event  [default: every event]")
@option("--json", "as_json", is_flag=True, help="the same as --output json")
@option(
    "--pending-grace",
    type=SECONDS,
    default=300,
    metavar="SECONDS",
    help="a signup pending longer than this breaks invariant 4",
)
@output_option("table")
@click.pass_context
def _audit(ctx: click.Context, as_json: bool, **params: Any) -> int:
    if as_json:
        given = ctx.get_parameter_source("output") is ParameterSource.COMMANDLINE
        if given and params["output"] != "json":
            raise UsageError(f"--json is --output json, not --output {params['output']}", ctx)
        params["output"] = "json"
    return _run(ctx, "cmd_audit", {**params, "json": as_json})


@turnstile_cli.command(
    "sweep",
    short_help="re-emit undecided intake records into the stream",
    help="Re-emit intake records left undecided past --min-age into the stream, so the "
    "stream processor decides them, under a fenced lease and for at most --max-run "
    "seconds (the next run does the rest). It reads the index of marked records, or the "
    "whole intake table with --full-scan or when the last full scan is older than "
    "--full-scan-every. A run of its own (manual-<UTC time> in the run history), unless "
    "--run-id names one; prints each run's result.",
    exit_codes={
        EXIT_OK: "every run succeeded (or had run already)",
        EXIT_ERROR: "a run failed (its result says why), or an error",
    },
)
@option(
    "--min-age",
    type=SECONDS,
    default=300,
    metavar="SECONDS",
    help="re-emit only records undecided for longer than this",
)
@option(
    "--lease",
    type=SECONDS,
    default=120,
    metavar="SECONDS",
    help="the sweeper's lease: another sweeper may take over a run silent this long",
)
@option(
    "--max-run",
    type=SECONDS,
    default=180,
    metavar="SECONDS",
    help="stop re-emitting after SECONDS; the next run does the rest",
)
@option(
    "--full-scan-every",
    type=SECONDS,
    default=86_400,
    metavar="SECONDS",
    help="read the whole intake table, not just the index of marked records, when the last "
    "full scan is older than this",
)
@option("--full-scan", is_flag=True, help="read the whole intake table now")
@option(
    "--run-id",
    metavar="ID",
    default_text="manual-<UTC time>",
    help="the run's id in the run history; a run id that has run already is not run again "
    "(already_ran)",
)
@option("--replay-failed", is_flag=True, help="rerun only the runs that failed")
@output_option()
@click.pass_context
def _sweep(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_sweep", params)


@turnstile_cli.command(
    "redrive",
    short_help="get the batches in the on-failure queue decided",
    help="Read the on-failure queue (batches the stream processor gave up on), re-emit the "
    "undecided intake records each batch points at, wait for them to be decided and delete "
    "each message whose records all are; prints what it did. A message whose records are "
    "still undecided after --wait is kept for another run.",
    exit_codes={
        EXIT_OK: "every message's records decided and the message deleted (or none)",
        EXIT_ERROR: "some records still undecided after --wait (their messages kept for "
        "another run), or an error",
    },
)
@option(
    "--queue-url",
    metavar="URL",
    default_text="$TURNSTILE_FAILURE_QUEUE_URL, else the stack's or the local queue",
    help="the on-failure queue",
)
@option(
    "--wait",
    type=SECONDS,
    default=60,
    metavar="SECONDS",
    help="wait up to SECONDS for the re-emitted records to be decided",
)
@output_option()
@click.pass_context
def _redrive(ctx: click.Context, **params: Any) -> int:
    return _run(ctx, "cmd_redrive", params)


# -- the benchmark: a package of its own, with an argparse parser of its own -----------


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line like every other error (and exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"turnstile: {message} (see: {self.prog} --help)\n")


class _DefaultsShown(argparse.HelpFormatter):
    """The benchmark's help, with each option's default where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and default not in (None, False, argparse.SUPPRESS)
            and "%(default)" not in text
        ):
            text += " (default: %(default)s)"
        return text


class _BenchParser(_Parser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsShown)
        super().__init__(*args, **kwargs)


def _bench_registered() -> tuple[argparse.ArgumentParser, str]:
    """The benchmark's parser as turnstile_bench registers it, and the help it gives it;
    ``CliError`` saying what to install when the benchmark is not installed."""
    try:  # the benchmark is a package of its own (benchmark/turnstile_bench), not on Lambda
        from turnstile_bench import register
    except ModuleNotFoundError as exc:
        raise needs_extra("bench", "bench", exc) from exc
    parser = _Parser(prog="turnstile")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_BenchParser)
    register(sub)
    listed = [a.help for a in getattr(sub, "_choices_actions", []) if a.dest == "bench"]
    return sub.choices["bench"], str(listed[0] if listed and listed[0] else "the benchmark")


def bench_parser() -> argparse.ArgumentParser:
    """``turnstile bench``'s own parser: its options, its help (``CliError`` when the
    benchmark is not installed)."""
    return _bench_registered()[0]


def _bench_help() -> tuple[str, str]:
    """The bench command's short help and help; the benchmark's own when installed."""
    try:
        parser, short_help = _bench_registered()
    except CliError:
        return "the benchmark (not installed)", "The benchmark: not installed."
    return short_help, f"{parser.description} Its options: turnstile bench --help."


_BENCH_SHORT_HELP, _BENCH_HELP = _bench_help()


@turnstile_cli.command(
    "bench",
    short_help=_BENCH_SHORT_HELP,
    help=_BENCH_HELP,
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument(
    "arguments",
    nargs=-1,
    type=click.UNPROCESSED,
    help="the benchmark's own options (--quick, --hot, --json FILE, ...; --help lists them)",
)
@click.pass_context
def _bench(ctx: click.Context, arguments: tuple[str, ...]) -> int:
    return _run(ctx, "cmd_bench", {"arguments": list(arguments)})


def cmd_bench(args: argparse.Namespace) -> int:
    """``turnstile bench``: the benchmark's parser reads the arguments (its --help, its
    one-line usage errors: SystemExit), then its command runs."""
    bench_args = bench_parser().parse_args(args.arguments)
    bench_args.stack, bench_args.debug = args.stack, args.debug
    return int(bench_args.func(bench_args) or 0)


def _apply_stack(stack_name: str) -> None:
    from turnstile_tools.stack_outputs import environment_for_stack, find_stack_outputs

    os.environ.update(environment_for_stack(find_stack_outputs(stack_name)))


def _debug(args: argparse.Namespace | None) -> bool:
    return bool(args is not None and getattr(args, "debug", False)) or os.environ.get(
        "TURNSTILE_DEBUG", ""
    ) not in ("", "0")


def _hoist(argv: list[str]) -> list[str]:
    """--stack NAME (or --stack=NAME) and --debug are accepted anywhere (`turnstile redrive
    --stack Turnstile`): moved to the front, where the top-level options are."""
    front: list[str] = []
    rest: list[str] = []
    at = 0
    while at < len(argv):
        arg = argv[at]
        if arg == "--":
            rest += argv[at:]
            break
        if arg == "--debug" or arg.startswith("--stack="):
            front.append(arg)
        elif arg == "--stack":
            if at + 1 == len(argv):
                raise UsageError("option --stack needs a NAME")
            front += argv[at : at + 2]
            at += 1
        else:
            rest.append(arg)
        at += 1
    return front + rest


def _param_name(param: click.Parameter | None) -> str:
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return str(getattr(param, "name", None) or "a value")


def usage_line(exc: click.UsageError) -> str:
    """A usage mistake as one line (without ``turnstile: ``): what is wrong, then the
    closest option when one was mistyped, else where the help is."""
    ctx = exc.ctx
    see = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
    if isinstance(exc, click.NoSuchOption):
        if exc.possibilities:
            guess = " or ".join(sorted(exc.possibilities))
            return f"no such option {exc.option_name}; did you mean {guess}?"
        return f"no such option {exc.option_name}{see}"
    if isinstance(exc, UsageError) and not exc.see_help:
        return exc.message
    if isinstance(exc, click.MissingParameter):
        kind = "option" if isinstance(exc.param, click.Option) else "argument"
        return f"missing {kind} {_param_name(exc.param)}{see}"
    message = exc.message.strip().rstrip(".")
    if isinstance(exc, click.BadParameter):
        message = f"invalid value for {_param_name(exc.param)}: {message}"
    elif message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]  # click's own sentences, as ours
    return message + see


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    state = Invocation()
    try:
        try:
            args = _hoist(list(sys.argv[1:] if argv is None else argv))
            with turnstile_cli.make_context("turnstile", args, obj=state) as ctx:
                code = turnstile_cli.invoke(ctx)
        except click.exceptions.Exit as exit_:  # --help, --version
            code = exit_.exit_code
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return int(code or 0)
    except BrokenPipeError:
        # The reader went away (`turnstile status ... | head -1`): nothing more to say to it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (KeyboardInterrupt, click.Abort):
        print("turnstile: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except click.UsageError as exc:
        print("turnstile: " + " ".join(usage_line(exc).split()), file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # the benchmark's parser: its --help, or its one-line error
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR if exc.code else 0
    except Exception as exc:
        args = state.args
        debug = state.debug or _debug(args)
        if debug:
            traceback.print_exc()
        line = error_line(exc, args)
        if line is None:
            hint = "" if debug else " (--debug or TURNSTILE_DEBUG=1 shows the traceback)"
            line = f"unexpected error: {type(exc).__name__}: {exc}{hint}"
        print("turnstile: " + " ".join(line.split()), file=sys.stderr)  # one line, always
        return EXIT_ERROR


def error_line(exc: Exception, args: argparse.Namespace | None) -> str | None:
    """The line that tells the user what went wrong, or None for an error not foreseen."""
    from turnstile_tools.stack_outputs import StackNotFoundError

    # Not imported here: it needs the local extra, and only a server it started can raise it.
    server = sys.modules.get("turnstile_tools.local.server")
    if server is not None and isinstance(exc, server.ListenError):
        return _listen_error_line(exc)
    if isinstance(exc, CliError | TurnstileError | StackNotFoundError):
        return str(exc)
    api_url = _api_url_or_none(args)
    if isinstance(exc, NotTurnstileApiError):
        return (
            f"{api_url or exc.url} is not a turnstile API: it answered HTTP {exc.status} "
            f"with {exc.content_type or 'no Content-Type'}, not the API's JSON "
            "(check --api-url or TURNSTILE_API_URL)"
        )
    if isinstance(exc, ApiUnreachableError):
        return f"cannot reach the turnstile API at {api_url or exc.url}: {exc.reason}"
    if isinstance(exc, ApiError):
        return f"API error {exc}"
    if api_url and isinstance(exc, HTTPException):  # not even HTTP came back
        return f"{api_url} is not a turnstile API: {type(exc).__name__}: {exc}"
    if api_url and isinstance(exc, URLError | TimeoutError | ConnectionError):
        reason = getattr(exc, "reason", None) or exc
        reason = getattr(reason, "strerror", None) or reason
        return f"cannot reach the turnstile API at {api_url}: {reason}"
    if isinstance(exc, ClientError):
        return _aws_error_line(exc)
    if isinstance(exc, EndpointConnectionError):
        return f"cannot reach the AWS endpoint {exc.kwargs.get('endpoint_url')}: " + (
            "is `turnstile local` running, and is AWS_ENDPOINT_URL its endpoint?"
            if os.environ.get("AWS_ENDPOINT_URL")
            else "check the region and the network"
        )
    if isinstance(exc, NoRegionError):
        return (
            "no AWS region: set AWS_DEFAULT_REGION (or AWS_REGION), or run `aws configure` "
            "(for turnstile local: run the export line its banner prints)"
        )
    if isinstance(exc, NoCredentialsError):
        return (
            "no AWS credentials: configure some (`aws configure`, AWS_PROFILE), or for the "
            "local stack set AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test"
        )
    if isinstance(exc, BotoCoreError):
        return str(exc)
    if isinstance(exc, ValueError):
        return _invalid_endpoint_line()  # botocore's "Invalid endpoint", else not foreseen
    if isinstance(exc, OSError):  # a state file unwritable, ...
        return str(exc)
    return None


def _api_url_or_none(args: argparse.Namespace | None) -> str | None:
    try:
        return _api_url(args)
    except CliError:
        return None


def _listen_error_line(exc: Any) -> str:
    option, env_var, _ = PORT_SETTINGS[exc.server]
    what = exc.NAMES[exc.server]
    if exc.in_use:
        holder = "another turnstile local" if exc.by_turnstile else "another program"
        choose = option
        if os.environ.get(MAKE_RUN_ENV) == "1":
            choose = f"make run {MAKE_RUN_PORTS[exc.server]}=N"
        return (
            f"port {exc.port} ({what}) is in use by {holder}: stop it, or choose "
            f"another port with {choose} (or {env_var})"
        )
    return (
        f"{what} cannot listen on {exc.host}:{exc.port}: {exc.reason} (check --host and {option})"
    )


def _aws_region() -> str | None:
    import boto3

    return boto3.session.Session().region_name


def _aws_error_line(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    code, message = error.get("Code"), error.get("Message")
    if code == "ResourceNotFoundException":
        missing = _missing_tables()
        if missing:
            endpoint = os.environ.get("AWS_ENDPOINT_URL")
            where = f"region {_aws_region()}" + (f" at {endpoint}" if endpoint else "")
            noun = "table" if len(missing) == 1 else "tables"
            return (
                f"{noun} {', '.join(missing)} not found in {where}: is the stack deployed "
                "in this region? Set AWS_DEFAULT_REGION (or AWS_REGION) to its region, or "
                "use --stack NAME"
            )
        return f"AWS error {code} in {exc.operation_name} (region {_aws_region()}): {message}"
    if code == "ServiceNotServedLocally":  # turnstile_tools.local.server.UNSERVED_CODE
        return f"{os.environ.get('AWS_ENDPOINT_URL') or 'the AWS endpoint'}: {message}"
    if str(code).isdigit():  # a bare HTTP status: what answered does not speak AWS
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or "the AWS endpoint"
        said = f" ({message})" if message and len(message) <= 120 and "<" not in message else ""
        return (
            f"{endpoint} is not an AWS endpoint: it answered HTTP {code}{said}; "
            "`turnstile local` prints its AWS endpoint (not the HTTP API's port)"
        )
    return f"AWS error {code}: {message}"


def _missing_tables() -> list[str]:
    """The configured tables DynamoDB does not know (in this region), for the error line."""
    import boto3

    from turnstile.base.contract import ALL_TABLES

    missing = []
    try:
        client = boto3.client("dynamodb")
        for spec in ALL_TABLES:
            try:
                client.describe_table(TableName=spec.name)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                    missing.append(spec.name)
    except (BotoCoreError, ClientError, ValueError):
        return []
    return missing


def _invalid_endpoint_line() -> str | None:
    """Which AWS_ENDPOINT_URL* variable botocore cannot use as an endpoint, if any."""
    from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url

    for name, value in sorted(os.environ.items()):
        if name != "AWS_ENDPOINT_URL" and not name.startswith("AWS_ENDPOINT_URL_"):
            continue
        if value and not (is_valid_endpoint_url(value) or is_valid_ipv6_endpoint_url(value)):
            return (
                f"{name}={value!r} is not an endpoint URL "
                "(the local stack's is http://127.0.0.1:4566)"
            )
    return None


if __name__ == "__main__":
    sys.exit(main())
