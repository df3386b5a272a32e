"""What persistence costs the local stack: ``python -m turnstile_bench.persist``.

Starts ``turnstile local --no-worker`` as a user would (a subprocess on free ports), and
measures: PutItem and GetItem requests/s against the embedded endpoint, in memory and
persisted (each write fsynced before its response); then, persisted, the time from start
to healthy with ``--items`` items in intake (written with BatchWriteItem, or PutItem with
``--batch 1``; ``--updates`` rewrites of them after), after a SIGKILL, and again after a
second SIGKILL (the first restart compacts: the second one loads the snapshot). The sizes
of the write log and the snapshot are taken after each kill. ``--only restart`` measures
only the restarts, ``--only rates`` only the request rates.

``--only idle``: ``turnstile local`` with its worker (the sweeper and due-holds jobs run)
left alone for ``--idle-s`` seconds: how much its write log grew (``--sweep-interval``
shortens the sweeper's period from its default of 60 s).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3

from turnstile.base.contract import INTAKE_TABLE
from turnstile_bench.options import positive_seconds, whole


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Local:
    def __init__(
        self, state_dir: Path, *extra: str, worker: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.port, api_port = _free_port(), _free_port()
        self.api_url = f"http://127.0.0.1:{api_port}"
        self.started = time.monotonic()
        exe = Path(sys.executable).parent / "turnstile"
        no_worker = () if worker else ("--no-worker",)
        self.process = subprocess.Popen(
            [
                str(exe),
                "local",
                *no_worker,
                "--port",
                str(self.port),
                "--api-port",
                str(api_port),
                "--state-dir",
                str(state_dir),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        self.healthy_after = self._wait_healthy()

    def _wait_healthy(self) -> float:
        while True:
            if self.process.poll() is not None:
                raise RuntimeError("turnstile local exited")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                    if r.status == 200 and all(json.load(r).values()):
                        return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.05)

    def client(self) -> Any:
        return boto3.client(
            "dynamodb",
            endpoint_url=f"http://127.0.0.1:{self.port}",
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def _rate(local: _Local, requests: int, threads: int, op: str) -> float:
    def work(t: int) -> None:
        c = local.client()
        for i in range(t, requests, threads):
            key = {"event_id": {"S": "bench"}, "signup_id": {"S": f"s{i}"}}
            if op == "put":
                c.put_item(TableName=INTAKE_TABLE.name, Item={**key, "seats": {"N": "1"}})
            else:
                c.get_item(TableName=INTAKE_TABLE.name, Key=key)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    start = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return round(requests / (time.monotonic() - start), 1)


def _load(local: _Local, items: int, threads: int = 4, batch_size: int = 25) -> None:
    def item(i: int) -> dict[str, Any]:
        return {"event_id": {"S": f"e{i % 100}"}, "signup_id": {"S": f"s{i}"}, "seats": {"N": "1"}}

    def work(t: int) -> None:
        c = local.client()
        for base in range(t * batch_size, items, threads * batch_size):
            if batch_size == 1:
                c.put_item(TableName=INTAKE_TABLE.name, Item=item(base))
                continue
            batch = [
                {"PutRequest": {"Item": item(i)}}
                for i in range(base, min(base + batch_size, items))
            ]
            c.batch_write_item(RequestItems={INTAKE_TABLE.name: batch})

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _update(local: _Local, items: int, updates: int, threads: int = 4) -> None:
    """``updates`` UpdateItems spread over the loaded items (each one a logged write)."""

    def work(t: int) -> None:
        c = local.client()
        for n in range(t, updates, threads):
            i = (n * 7919) % items
            c.update_item(
                TableName=INTAKE_TABLE.name,
                Key={"event_id": {"S": f"e{i % 100}"}, "signup_id": {"S": f"s{i}"}},
                UpdateExpression="SET touched = :n",
                ExpressionAttributeValues={":n": {"N": str(n)}},
            )

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _sizes(state: Path) -> dict[str, float]:
    """The state directory's write log and snapshot, in MB (0: none)."""
    return {
        name: round(os.path.getsize(state / f"aws.{name}") / 1e6, 2)
        if (state / f"aws.{name}").exists()
        else 0.0
        for name in ("wal", "snapshot")
    }


def _count(local: _Local) -> int:
    count = local.client().scan(TableName=INTAKE_TABLE.name, Select="COUNT")
    return count["Count"] + _rest(local, count)


def _restarts(tmp: Path, args: argparse.Namespace, figures: dict[str, Any]) -> None:
    state = tmp / "restart"
    local = _Local(state)
    figures["empty_start_s"] = round(local.healthy_after, 2)
    start = time.monotonic()
    _load(local, args.items, args.threads, args.batch)
    figures["items"] = args.items
    figures["batch"] = args.batch
    figures["load_s"] = round(time.monotonic() - start, 1)
    if args.updates:
        start = time.monotonic()
        _update(local, args.items, args.updates, args.threads)
        figures["updates"] = args.updates
        figures["update_s"] = round(time.monotonic() - start, 1)
    local.kill()
    figures["restarts"] = []
    for _ in range(args.restarts):
        before = _sizes(state)
        local = _Local(state)
        figures["restarts"].append(
            {
                "wal_mb_before": before["wal"],
                "snapshot_mb_before": before["snapshot"],
                "restart_s": round(local.healthy_after, 2),
                "items_after": _count(local),
            }
        )
        local.kill()
    after = _sizes(state)
    figures["wal_mb_at_end"], figures["snapshot_mb_at_end"] = after["wal"], after["snapshot"]


def _idle(tmp: Path, args: argparse.Namespace, figures: dict[str, Any]) -> None:
    state = tmp / "idle"
    env = {"TURNSTILE_SWEEP_INTERVAL_S": str(args.sweep_interval)}
    local = _Local(state, worker=True, env=env)
    try:
        time.sleep(2)  # start-up writes (the tables, the queue) are done
        size = os.path.getsize(state / "aws.wal")
        time.sleep(args.idle_s)
        grown = os.path.getsize(state / "aws.wal") - size
    finally:
        local.kill()
    figures["idle_s"] = args.idle_s
    figures["sweep_interval_s"] = args.sweep_interval
    figures["idle_wal_growth_bytes"] = grown
    figures["idle_wal_growth_bytes_per_min"] = round(grown / args.idle_s * 60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m turnstile_bench.persist")
    parser.add_argument("--only", choices=["all", "rates", "restart", "idle"], default="all")
    parser.add_argument(
        "--requests", type=whole(1, "1 request or more"), default=2000, help="per measurement"
    )
    parser.add_argument(
        "--threads", type=whole(1, "1 thread or more"), default=4, help="concurrent clients"
    )
    parser.add_argument(
        "--items", type=whole(1, "1 item or more"), default=100_000, help="items for the restart"
    )
    parser.add_argument(
        "--batch", type=int, default=25, help="items per write request (1: PutItem)"
    )
    parser.add_argument(
        "--updates",
        type=whole(0, "0 updates or more"),
        default=0,
        help="UpdateItems after the load",
    )
    parser.add_argument(
        "--restarts", type=whole(0, "0 restarts or more"), default=2, help="restarts after the load"
    )
    parser.add_argument("--idle-s", type=positive_seconds, default=180.0, help="idle measurement")
    parser.add_argument(
        "--sweep-interval", type=positive_seconds, default=60.0, help="idle: seconds"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.batch <= 25:
        parser.error("--batch must be from 1 to 25")
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-persist-bench"))
    figures: dict[str, Any] = {"requests": args.requests, "threads": args.threads}
    try:
        if args.only in ("all", "rates"):
            for mode, extra in (("in_memory", ("--in-memory",)), ("persisted", ())):
                local = _Local(tmp / mode, *extra)
                try:
                    figures[f"{mode}_put_per_s"] = _rate(local, args.requests, args.threads, "put")
                    figures[f"{mode}_get_per_s"] = _rate(local, args.requests, args.threads, "get")
                finally:
                    local.kill()
        if args.only in ("all", "restart"):
            _restarts(tmp, args, figures)
        if args.only == "idle":
            _idle(tmp, args, figures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures, indent=1))
    return 0


def _rest(local: _Local, page: dict[str, Any]) -> int:
    total = 0
    while "LastEvaluatedKey" in page:
        page = local.client().scan(
            TableName=INTAKE_TABLE.name, Select="COUNT", ExclusiveStartKey=page["LastEvaluatedKey"]
        )
        total += page["Count"]
    return total


if __name__ == "__main__":
    raise SystemExit(main())
