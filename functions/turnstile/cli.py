"""The ``turnstile`` command. Errors are one line on stderr and a non-zero exit.

``main`` is the one place where errors become that line (``error_line``); an error it does
not know is still one line, and ``--debug`` (or ``TURNSTILE_DEBUG=1``) adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from http.client import HTTPException
from pathlib import Path
from typing import Any, NoReturn
from urllib.error import URLError

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)

from turnstile.client import ApiError, ApiUnreachableError, NotTurnstileApiError
from turnstile.clock import utc_now
from turnstile.contract import Attr, Status
from turnstile.errors import TurnstileError
from turnstile.jsonable import plain

EXIT_ERROR = 2
EXIT_AUDIT_FAILED = 1
EXIT_STILL_PENDING = 3
#: The audit could not read some event still enough to check it (and found nothing broken).
EXIT_AUDIT_INCONCLUSIVE = 4
#: Ctrl-C, as shells report a command ended by SIGINT.
EXIT_INTERRUPTED = 130

#: ``turnstile local``'s ports: the option, its environment variable and its default.
PORT_SETTINGS = {
    "aws": ("--port", "TURNSTILE_PORT", 4566),
    "api": ("--api-port", "TURNSTILE_API_PORT", 8080),
}


class CliError(Exception):
    """A message for the user, printed as one line."""


def _json_default(value: Any) -> Any:
    converted = plain(value)
    return converted if converted is not value else str(value)


def _print_json(value: Any) -> None:
    print(json.dumps(plain(value), indent=2, default=_json_default))


def _store() -> Any:
    from turnstile.store import SignupStore

    return SignupStore()


def needs_extra(command: str, extra: str, exc: ModuleNotFoundError) -> CliError:
    """A command's optional dependencies (an extra in pyproject.toml) are not installed."""
    if (exc.name or "turnstile").split(".")[0] == "turnstile":
        raise exc  # our own module missing is a bug, not an install to make
    return CliError(
        f"{exc.name} is not installed: `turnstile {command}` needs the {extra} extra "
        f"(pip install -e '.[{extra}]' in the repository)"
    )


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
    except argparse.ArgumentTypeError:
        raise CliError(
            f"{env_var} must be a port number from 0 to 65535, not {raw!r} (or use {option})"
        ) from None


def cmd_local(args: argparse.Namespace) -> int:
    try:
        from turnstile.local.console import Console, configure_logging
        from turnstile.local.stack import LocalStack
    except ModuleNotFoundError as exc:
        raise needs_extra("local", "local", exc) from exc

    if args.in_memory and args.reset:
        raise CliError("--reset and --in-memory: an in-memory stack always starts clean")
    configure_logging(args.log_format, args.log_level)
    console = Console(args.log_format)
    stack = LocalStack(
        host=args.host,
        port=_port_setting("aws", args.port),
        api_port=_port_setting("api", args.api_port),
        worker=not args.no_worker,
        state_dir=_state_dir(args),
        in_memory=args.in_memory,
        reset=args.reset,
        on_decided=console.decided,
        cors_origins=tuple(args.cors_origin or ()),
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
    print(
        f"turnstile local: worker       {'off' if args.no_worker else 'polling the intake stream'}",
        flush=True,
    )
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
        from turnstile.local.stack import Worker
    except ModuleNotFoundError as exc:
        raise needs_extra("worker", "local", exc) from exc

    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    worker = Worker(_state_dir(args), from_start=args.from_start)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop_event.set())
    print(
        f"turnstile worker: polling {worker.poller.stream_arn} as {worker.identity}", flush=True
    )
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
    from turnstile import usecases

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
    )
    _print_json(created.body)
    return 0


def cmd_event_update(args: argparse.Namespace) -> int:
    from turnstile import usecases

    _print_json(usecases.update_capacity(_store(), args.event_id, args.capacity))
    return 0


def cmd_event_close(args: argparse.Namespace) -> int:
    from turnstile import usecases

    _print_json(usecases.close_event(_store(), args.event_id))
    return 0


def cmd_event_show(args: argparse.Namespace) -> int:
    from turnstile import usecases

    _print_json(usecases.show_event(_store(), args.event_id))
    return 0


def cmd_event_list(args: argparse.Namespace) -> int:
    from turnstile import usecases

    _print_json(usecases.list_events(_store(), args.limit, args.next))
    return 0


def cmd_signups_list(args: argparse.Namespace) -> int:
    from turnstile import usecases

    _print_json(usecases.list_signups(_store(), args.event_id, args.status, args.limit, args.next))
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
    from turnstile.client import TurnstileClient

    return TurnstileClient(url)


def cmd_submit(args: argparse.Namespace) -> int:
    from turnstile import usecases

    attributes: Any = usecases.ABSENT
    if args.attributes is not None:
        try:
            attributes = json.loads(args.attributes, parse_float=Decimal)
        except json.JSONDecodeError as exc:
            raise CliError(f"--attributes is not JSON: {exc}") from exc
    seats = usecases.ABSENT if args.seats is None else args.seats
    url = _api_url(args)
    if url:
        # The API applies the same use case; its answer is printed as it is.
        body = _api_client(url).submit(
            args.event_id,
            args.signup_id,
            1 if seats is usecases.ABSENT else seats,
            None if attributes is usecases.ABSENT else attributes,
        )
        _print_json(body)
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
    _print_json(submitted.body)
    return 0


def cmd_request(args: argparse.Namespace) -> int:
    """``turnstile confirm`` and ``turnstile cancel``: POST .../confirm (or /cancel)'s use
    case, printing its answer; a refusal is an error line naming the current status."""
    url = _api_url(args)
    if url:
        client = _api_client(url)
        request = client.confirm if args.request == "confirm" else client.cancel
        _print_json(request(args.event_id, args.signup_id))
        return 0
    from turnstile import usecases

    _print_json(usecases.request_signup(_store(), args.event_id, args.signup_id, args.request))
    return 0


def _retention_days(args: argparse.Namespace) -> int:
    """``--retention-days``, else TURNSTILE_INTAKE_RETENTION_DAYS, else 30."""
    from turnstile.personal_data import intake_retention_days

    if args.retention_days is not None:
        if args.retention_days < 1:
            raise CliError("--retention-days must be at least 1")
        return int(args.retention_days)
    try:
        return intake_retention_days()
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _statuses(text: str) -> frozenset[str]:
    """``--until``'s statuses (argparse turns a ValueError into one line and exit 2)."""
    wanted = frozenset(s.strip().upper() for s in text.split(",") if s.strip())
    unknown = sorted(wanted - set(Status.ALL))
    if not wanted or unknown:
        named = ", ".join(unknown) or repr(text)
        raise argparse.ArgumentTypeError(
            f"not a status: {named} (one of {', '.join(Status.ALL)})"
        )
    return wanted


def _status_via_api(args: argparse.Namespace, url: str) -> int:
    from turnstile.client import WaitTimeoutError

    client = _api_client(url)
    if not args.wait:
        _print_json(client.get(args.event_id, args.signup_id))
        return 0
    try:
        _print_json(
            client.wait(args.event_id, args.signup_id, timeout_s=args.wait, statuses=args.until)
        )
        return 0
    except WaitTimeoutError:
        _print_json(client.get(args.event_id, args.signup_id))
        return EXIT_STILL_PENDING


def cmd_status(args: argparse.Namespace) -> int:
    url = _api_url(args)
    if url:
        return _status_via_api(args, url)
    from turnstile import usecases

    # What GET .../signups/{id}?wait= runs, without its 20 s bound.
    status = usecases.await_decision(
        _store(),
        args.event_id,
        args.signup_id,
        args.wait or 0,
        max_delay_s=2.0,
        statuses=args.until,
    )
    _print_json(status)
    waited_in_vain = args.wait and not Status.reached(status[Attr.STATUS], args.until)
    return EXIT_STILL_PENDING if waited_in_vain else 0


def cmd_audit(args: argparse.Namespace) -> int:
    from turnstile.audit import audit
    from turnstile.local.roles import endpoint_denials

    report = audit(_store(), args.event_id, pending_grace_s=args.pending_grace)
    report.denials = endpoint_denials()
    if args.json:
        _print_json(report.to_dict())
    else:
        header = ("event", "capacity", "taken", "acc.seats", "accepted", "rejected", "pending")
        print("{:<24} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8}".format(*header))
        for e in report.events:
            print(
                f"{e.event_id[:24]:<24} {e.capacity if e.capacity is not None else '-':>9} "
                f"{e.taken if e.taken is not None else '-':>7} {e.accepted_seats:>9} "
                f"{e.accepted:>9} {e.rejected:>9} {e.pending:>8}"
            )
            for violation in e.violations:
                print(f"  VIOLATION {e.event_id}: {violation}")
            for note in e.notes:
                label = "INCONCLUSIVE" if e.inconclusive else "note"
                print(f"  {label} {e.event_id}: {note}")
        for denial in report.denials:
            print(f"  VIOLATION access denied to the {denial['role']} role: {denial['denied']}")
        t = report.totals
        verdict = "BROKEN" if report.broken else "INCONCLUSIVE" if report.inconclusive else "OK"
        inconclusive = f", {t['inconclusive']} inconclusive" if t["inconclusive"] else ""
        held = f", {t['held']} held" if t["held"] else ""  # parked behind a failing event
        print(
            f"audit {verdict}: {t['events']} events, {t['accepted']} accepted, "
            f"{t['rejected']} rejected, {t['pending']} pending{held}, "
            f"{t['violations']} violations{inconclusive}"
        )
    if report.broken:
        return EXIT_AUDIT_FAILED
    return EXIT_AUDIT_INCONCLUSIVE if report.inconclusive else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from turnstile.sweeper import Sweeper

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
    _print_json([r.to_dict() for r in results])
    return EXIT_ERROR if any(r.status == "failed" for r in results) else 0


def manual_run_id(now: datetime | None = None) -> str:
    """The run id of a ``turnstile sweep`` without ``--run-id``: its own, to the microsecond."""
    return f"manual-{utc_now(now)}"


def cmd_redrive(args: argparse.Namespace) -> int:
    import boto3

    from turnstile.contract import FAILURE_QUEUE_NAME
    from turnstile.redrive import redrive_queue

    sqs = boto3.client("sqs")
    queue_url = args.queue_url or os.environ.get("TURNSTILE_FAILURE_QUEUE_URL")
    if not queue_url:
        queue_url = sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
    result = redrive_queue(
        _store(), sqs, queue_url, boto3.client("dynamodbstreams"), wait_s=args.wait
    )
    _print_json(result.to_dict())
    return 0 if result.kept == 0 else EXIT_ERROR


# -- wiring ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line like every other error (and exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"turnstile: {message} (see: {self.prog} --help)\n")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number from 0 to 65535: {text!r}")
    return port


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("turnstile")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _page_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit", type=int, metavar="N", help="most items on the page (1 to 100, default 50)"
    )
    parser.add_argument(
        "--next", metavar="TOKEN", help='the page after the one whose "next" this is'
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="turnstile",
        description="Decide who gets a limited resource, exactly once, in arrival order.",
    )
    parser.add_argument(
        "--version", action="version", version=f"turnstile {_version()}", help="print the version"
    )
    parser.add_argument(
        "--stack",
        metavar="NAME",
        help="find a deployed CloudFormation stack's tables from its outputs",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error too (or set TURNSTILE_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "local",
        help="run the whole system on this machine",
        description="Run the AWS endpoint (tables, streams, queue), the stream worker, the "
        "sweeper and the HTTP API in the foreground. Ports: --port and --api-port, else "
        "$TURNSTILE_PORT and $TURNSTILE_API_PORT, else 4566 and 8080 (0 picks a free one).",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address both servers listen on (default %(default)s)",
    )
    p.add_argument(
        "--port",
        type=_port,
        help="the AWS endpoint's port (default $TURNSTILE_PORT, else 4566)",
    )
    p.add_argument(
        "--api-port",
        type=_port,
        help="the HTTP API's port (default $TURNSTILE_API_PORT, else 8080)",
    )
    p.add_argument("--no-worker", action="store_true", help="do not poll the stream")
    p.add_argument(
        "--state-dir",
        help="where the tables, queue and checkpoints persist (default .turnstile)",
    )
    p.add_argument(
        "--in-memory", action="store_true", help="keep no state: everything is lost on stop"
    )
    p.add_argument(
        "--reset", action="store_true", help="delete the persisted state and start clean"
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="let browsers on ORIGIN (e.g. http://localhost:3000, or *) call the HTTP API; "
        "repeat for more (default: none)",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text (default): a line per decision, warnings and errors as short lines; "
        "json: the functions' JSON logs as Lambda writes them",
    )
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="the level of turnstile's logs (default WARNING; INFO with --log-format json); "
        "INFO shows every HTTP request",
    )
    p.set_defaults(func=cmd_local)

    p = sub.add_parser("worker", help="run only the stream worker against the configured endpoint")
    p.add_argument("--from-start", action="store_true", help="replay the stream from TRIM_HORIZON")
    p.add_argument("--state-dir", help="where checkpoints live (default .turnstile)")
    p.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="exit once the stream has had nothing new for SECONDS",
    )
    p.set_defaults(func=cmd_worker)

    event = sub.add_parser("event", help="create, update, show or list events").add_subparsers(
        dest="event_command", required=True
    )
    p = event.add_parser("create", help="create an OPEN event")
    p.add_argument("event_id", help="the new event's id")
    p.add_argument("--capacity", type=int, required=True, help="seats (or units) to give out")
    p.add_argument(
        "--waitlist",
        type=int,
        metavar="W",
        help="how many signups may wait for seats at once (default 0: no waitlist)",
    )
    p.add_argument(
        "--hold-seconds",
        type=int,
        metavar="S",
        help="a granted signup holds its seats S seconds until confirmed (default 0: "
        "accepted at once)",
    )
    p.add_argument(
        "--max-seats",
        type=int,
        metavar="M",
        help="the most seats one signup may ask for (default: only the capacity bounds it)",
    )
    p.set_defaults(func=cmd_event_create)
    p = event.add_parser(
        "update",
        help="change an event's capacity: up at any time, down to the seats taken",
    )
    p.add_argument("event_id", help="the event's id")
    p.add_argument("--capacity", type=int, required=True, help="the new capacity")
    p.set_defaults(func=cmd_event_update)
    p = event.add_parser("close", help="close an event: later signups are rejected")
    p.add_argument("event_id", help="the event's id")
    p.set_defaults(func=cmd_event_close)
    p = event.add_parser("show", help="show an event's counters")
    p.add_argument("event_id", help="the event's id")
    p.set_defaults(func=cmd_event_show)
    p = event.add_parser("list", help="a page of events, as GET /events answers it")
    _page_arguments(p)
    p.set_defaults(func=cmd_event_list)

    signups = sub.add_parser("signups", help="list an event's signups").add_subparsers(
        dest="signups_command", required=True
    )
    p = signups.add_parser(
        "list", help="a page of an event's signups, as GET /events/{id}/signups answers it"
    )
    p.add_argument("event_id", help="the event's id")
    # Checked by the use case (one line, the API's message), not by argparse's choices.
    p.add_argument(
        "--status",
        metavar="STATUS",
        help="only signups in this status: PENDING, HELD, ACCEPTED, WAITLISTED, REJECTED, "
        "CANCELLED or EXPIRED",
    )
    _page_arguments(p)
    p.set_defaults(func=cmd_signups_list)

    p = sub.add_parser("submit", help="write a provisional signup into intake")
    p.add_argument("event_id", help="the event's id")
    p.add_argument("signup_id", help="the signup's id, unique in the event (resubmitting is safe)")
    p.add_argument("--seats", type=int, help="seats the signup asks for (default 1)")
    p.add_argument("--attributes", help="a JSON object carried to the decision")
    p.add_argument(
        "--retention-days",
        type=int,
        metavar="DAYS",
        help="days until TTL deletes the intake record (default $TURNSTILE_INTAKE_RETENTION_DAYS,"
        " else 30; the API's own setting applies with --api-url)",
    )
    p.add_argument(
        "--api-url",
        help="go through the HTTP API at this URL (default $TURNSTILE_API_URL, else the tables)",
    )
    p.set_defaults(func=cmd_submit)

    for request, help_text in (
        ("confirm", "confirm a HELD signup before its hold expires"),
        ("cancel", "cancel a HELD, ACCEPTED or WAITLISTED signup"),
    ):
        p = sub.add_parser(
            request,
            help=help_text,
            description=(
                f"Record a {request} request for the stream processor (as POST "
                f"/events/{{id}}/signups/{{sid}}/{request}): prints it as JSON. A status "
                "that does not allow it is an error naming the status (exit 2)."
            ),
        )
        p.add_argument("event_id", help="the event's id")
        p.add_argument("signup_id", help="the signup's id")
        p.add_argument(
            "--api-url",
            help="go through the HTTP API at this URL (default $TURNSTILE_API_URL, else the "
            "tables)",
        )
        p.set_defaults(func=cmd_request, request=request)

    p = sub.add_parser("status", help="a signup's status as JSON")
    p.add_argument("event_id", help="the event's id")
    p.add_argument("signup_id", help="the signup's id")
    p.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait up to SECONDS for a decision"
    )
    p.add_argument(
        "--until",
        type=_statuses,
        metavar="STATUS[,STATUS]",
        help="with --wait: wait for one of these statuses (or a final one: REJECTED, "
        "CANCELLED, EXPIRED) instead of any decision, e.g. --until ACCEPTED",
    )
    p.add_argument(
        "--api-url",
        help="go through the HTTP API at this URL (default $TURNSTILE_API_URL, else the tables)",
    )
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "audit",
        help="check the invariants against the tables",
        description=(
            "Check invariants 1-4 against the tables. Exit 0: all checked, nothing broken; "
            "1: something is broken (the report says what); 2: an error (such as no such "
            "event); 4: nothing broken found, but some event kept changing while it was "
            "read and could not be checked (inconclusive): run it again."
        ),
    )
    p.add_argument("event_id", nargs="?", help="only this event (default every event)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--pending-grace",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a signup pending longer than this breaks invariant 4 (default 300)",
    )
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("sweep", help="re-emit undecided intake records into the stream")
    p.add_argument(
        "--min-age",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="re-emit only records undecided for longer than this (default 300)",
    )
    p.add_argument(
        "--lease",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="the sweeper's lease: another sweeper may take over a run silent this long "
        "(default 120)",
    )
    p.add_argument(
        "--max-run",
        type=float,
        default=180.0,
        metavar="SECONDS",
        help="stop re-emitting after SECONDS; the next run does the rest",
    )
    p.add_argument(
        "--full-scan-every",
        type=float,
        default=86_400.0,
        metavar="SECONDS",
        help="read the whole intake table, not just the index of marked records, when the "
        "last full scan is older than this (default a day)",
    )
    p.add_argument("--full-scan", action="store_true", help="read the whole intake table now")
    p.add_argument(
        "--run-id",
        help="the run's id in the run history (default manual-<UTC time>, a run of its own); "
        "a run id that has run already is not run again (already_ran)",
    )
    p.add_argument("--replay-failed", action="store_true", help="rerun only the runs that failed")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("redrive", help="get the batches in the on-failure queue decided")
    p.add_argument("--queue-url", help="default: the stack's or the local queue")
    p.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wait up to SECONDS for the re-emitted records to be decided (default 60)",
    )
    p.set_defaults(func=cmd_redrive)

    try:  # the benchmark is a package of its own (benchmark/turnstile_bench), not on Lambda
        from turnstile_bench import register as register_bench
    except ModuleNotFoundError as exc:
        _register_bench_missing(sub, exc)
    else:
        register_bench(sub)
    return parser


def _register_bench_missing(sub: Any, missing: ModuleNotFoundError) -> None:
    """``bench`` without the benchmark installed: any arguments, one line saying so."""

    def refuse(args: argparse.Namespace) -> int:
        raise needs_extra("bench", "bench", missing)

    # No option prefix: every argument (--quick, --help) is taken, and the line is printed.
    p = sub.add_parser(
        "bench", help="the benchmark (not installed)", prefix_chars="\0", add_help=False
    )
    p.add_argument("arguments", nargs="*")
    p.set_defaults(func=refuse)


def _apply_stack(stack_name: str) -> None:
    from turnstile.stack_outputs import environment_for_stack, find_stack_outputs

    os.environ.update(environment_for_stack(find_stack_outputs(stack_name)))


def _debug(args: argparse.Namespace | None) -> bool:
    return bool(args is not None and args.debug) or os.environ.get("TURNSTILE_DEBUG", "") not in (
        "",
        "0",
    )


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    # --stack NAME and --debug are accepted anywhere (`turnstile redrive --stack Turnstile`).
    if "--stack" in argv[1:]:
        at = argv.index("--stack")
        argv = ["--stack", *argv[at + 1 : at + 2], *argv[:at], *argv[at + 2 :]]
    if "--debug" in argv[1:]:
        argv = ["--debug", *(arg for arg in argv if arg != "--debug")]
    args = build_parser().parse_args(argv)
    try:
        if args.stack:
            _apply_stack(args.stack)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # The reader went away (`turnstile status ... | head -1`): nothing more to say to it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("turnstile: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        debug = _debug(args)
        if debug:
            traceback.print_exc()
        line = error_line(exc, args)
        if line is None:
            hint = "" if debug else " (--debug or TURNSTILE_DEBUG=1 shows the traceback)"
            line = f"unexpected error: {type(exc).__name__}: {exc}{hint}"
        print("turnstile: " + " ".join(line.split()), file=sys.stderr)  # one line, always
        return EXIT_ERROR


def error_line(exc: Exception, args: argparse.Namespace) -> str | None:
    """The line that tells the user what went wrong, or None for an error not foreseen."""
    from turnstile.stack_outputs import StackNotFoundError

    # Not imported here: it needs the local extra, and only a server it started can raise it.
    server = sys.modules.get("turnstile.local.server")
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
        return "no AWS region: set AWS_DEFAULT_REGION (or AWS_REGION), or run `aws configure`"
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


def _api_url_or_none(args: argparse.Namespace) -> str | None:
    try:
        return _api_url(args)
    except CliError:
        return None


def _listen_error_line(exc: Any) -> str:
    option, env_var, _ = PORT_SETTINGS[exc.server]
    what = exc.NAMES[exc.server]
    if exc.in_use:
        holder = "another turnstile local" if exc.by_turnstile else "another program"
        return (
            f"port {exc.port} ({what}) is in use by {holder}: stop it, or choose "
            f"another port with {option} (or {env_var})"
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
    if code == "ServiceNotServedLocally":  # turnstile.local.server.UNSERVED_CODE
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

    from turnstile.contract import ALL_TABLES

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
