"""The ``turnstile`` command. Errors are one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from turnstile.client import ApiError
from turnstile.contract import Attr, Status
from turnstile.errors import TurnstileError
from turnstile.jsonable import plain

EXIT_ERROR = 2
EXIT_AUDIT_FAILED = 1
EXIT_STILL_PENDING = 3
#: The audit could not read some event still enough to check it (and found nothing broken).
EXIT_AUDIT_INCONCLUSIVE = 4


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


def cmd_local(args: argparse.Namespace) -> int:
    try:
        from turnstile.local.stack import LocalStack
    except ModuleNotFoundError as exc:
        raise needs_extra("local", "local", exc) from exc

    stack = LocalStack(
        host=args.host,
        port=args.port,
        api_port=args.api_port,
        worker=not args.no_worker,
        state_dir=_state_dir(args),
        in_memory=args.in_memory,
        reset=args.reset,
    )
    if args.in_memory and args.reset:
        raise CliError("--reset and --in-memory: an in-memory stack always starts clean")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stack.start()
    except OSError as exc:
        raise CliError(f"cannot start the local stack: {exc}") from exc
    endpoint = f"http://{args.host}:{args.port}"
    print(f"turnstile local: AWS endpoint {endpoint}", flush=True)
    print(f"turnstile local: HTTP API     http://{args.host}:{args.api_port}", flush=True)
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
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    try:
        from turnstile.local.stack import Worker
    except ModuleNotFoundError as exc:
        raise needs_extra("worker", "local", exc) from exc

    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    worker = Worker(_state_dir(args), from_start=args.from_start)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop_event.set())
    print(f"turnstile worker: polling {worker.poller.stream_arn}", flush=True)
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

    _print_json(
        usecases.create_event(_store(), args.event_id, args.capacity, created_by=cli_identity())
    )
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


def _api_url(args: argparse.Namespace) -> str | None:
    return getattr(args, "api_url", None) or os.environ.get("TURNSTILE_API_URL") or None


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
    )
    _print_json(submitted.body)
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


def _status_via_api(args: argparse.Namespace, url: str) -> int:
    from turnstile.client import WaitTimeoutError

    client = _api_client(url)
    if not args.wait:
        _print_json(client.get(args.event_id, args.signup_id))
        return 0
    try:
        _print_json(client.wait(args.event_id, args.signup_id, timeout_s=args.wait))
        return 0
    except WaitTimeoutError:
        _print_json(client.get(args.event_id, args.signup_id))
        return EXIT_STILL_PENDING


def cmd_status(args: argparse.Namespace) -> int:
    url = _api_url(args)
    if url:
        return _status_via_api(args, url)
    from turnstile import usecases

    store = _store()
    deadline = time.monotonic() + (args.wait or 0)
    delay = 0.1
    while True:
        status = usecases.signup_status(store, args.event_id, args.signup_id)
        if status[Attr.STATUS] != Status.PENDING or time.monotonic() >= deadline:
            break
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 2.0)
    _print_json(status)
    return EXIT_STILL_PENDING if status[Attr.STATUS] == Status.PENDING and args.wait else 0


def cmd_audit(args: argparse.Namespace) -> int:
    from turnstile.audit import audit

    report = audit(_store(), args.event_id, pending_grace_s=args.pending_grace)
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
    results = sweeper.replay_failed() if args.replay_failed else [sweeper.sweep(args.run_id)]
    _print_json([r.to_dict() for r in results])
    return EXIT_ERROR if any(r.status == "failed" for r in results) else 0


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnstile",
        description="Decide who gets a limited resource, exactly once, in arrival order.",
    )
    parser.add_argument(
        "--stack",
        help="find a deployed CloudFormation stack's tables from its outputs",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("local", help="run the whole system on this machine")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4566, help="AWS endpoint port")
    p.add_argument("--api-port", type=int, default=8080)
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

    event = sub.add_parser("event", help="create, update or show an event").add_subparsers(
        dest="event_command", required=True
    )
    p = event.add_parser("create", help="create an OPEN event")
    p.add_argument("event_id")
    p.add_argument("--capacity", type=int, required=True)
    p.set_defaults(func=cmd_event_create)
    p = event.add_parser(
        "update",
        help="change an event's capacity: up at any time, down to the seats taken",
    )
    p.add_argument("event_id")
    p.add_argument("--capacity", type=int, required=True)
    p.set_defaults(func=cmd_event_update)
    p = event.add_parser("close", help="close an event: later signups are rejected")
    p.add_argument("event_id")
    p.set_defaults(func=cmd_event_close)
    p = event.add_parser("show", help="show an event's counters")
    p.add_argument("event_id")
    p.set_defaults(func=cmd_event_show)

    p = sub.add_parser("submit", help="write a provisional signup into intake")
    p.add_argument("event_id")
    p.add_argument("signup_id")
    p.add_argument("--seats", type=int, help="default 1")
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

    p = sub.add_parser("status", help="a signup's status as JSON")
    p.add_argument("event_id")
    p.add_argument("signup_id")
    p.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait up to SECONDS for a decision"
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
    p.add_argument("event_id", nargs="?")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--pending-grace",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a signup pending longer than this breaks invariant 4 (default 300)",
    )
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("sweep", help="re-emit undecided intake records into the stream")
    p.add_argument("--min-age", type=float, default=300.0, metavar="SECONDS")
    p.add_argument("--lease", type=float, default=120.0, metavar="SECONDS")
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
    p.add_argument("--run-id", help="default: the current five-minute slot")
    p.add_argument("--replay-failed", action="store_true", help="rerun only the runs that failed")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("redrive", help="get the batches in the on-failure queue decided")
    p.add_argument("--queue-url", help="default: the stack's or the local queue")
    p.add_argument("--wait", type=float, default=60.0, metavar="SECONDS")
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


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    # --stack NAME is accepted anywhere (`turnstile redrive --stack Turnstile` reads well).
    if "--stack" in argv[1:]:
        at = argv.index("--stack")
        argv = ["--stack", *argv[at + 1 : at + 2], *argv[:at], *argv[at + 2 :]]
    args = build_parser().parse_args(argv)
    try:
        if args.stack:
            _apply_stack(args.stack)
        return int(args.func(args) or 0)
    except (CliError, TurnstileError) as exc:
        print(f"turnstile: {exc}", file=sys.stderr)
    except ApiError as exc:
        print(f"turnstile: API error {exc}", file=sys.stderr)
    except OSError as exc:  # the API unreachable, a state file unwritable
        print(f"turnstile: {exc}", file=sys.stderr)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        print(f"turnstile: AWS error {error.get('Code')}: {error.get('Message')}", file=sys.stderr)
    except BotoCoreError as exc:
        print(f"turnstile: {exc}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
