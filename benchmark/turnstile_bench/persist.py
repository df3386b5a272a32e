"""What persistence costs the local stack: ``python -m turnstile_bench.persist``.

Starts ``turnstile local --no-worker`` as a user would (a subprocess on free ports), and
measures: PutItem and GetItem requests/s against the embedded endpoint, in memory and
persisted (each write fsynced before its response); then, persisted, the time from start
to healthy with ``--items`` items in intake (written with BatchWriteItem), after a SIGKILL.
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

from turnstile.contract import INTAKE_TABLE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Local:
    def __init__(self, state_dir: Path, *extra: str) -> None:
        self.port, api_port = _free_port(), _free_port()
        self.api_url = f"http://127.0.0.1:{api_port}"
        self.started = time.monotonic()
        exe = Path(sys.executable).parent / "turnstile"
        self.process = subprocess.Popen(
            [str(exe), "local", "--no-worker", "--port", str(self.port), "--api-port",
             str(api_port), "--state-dir", str(state_dir), *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.healthy_after = self._wait_healthy()

    def _wait_healthy(self) -> float:
        while True:
            if self.process.poll() is not None:
                raise RuntimeError("turnstile local exited")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                    if r.status == 200:
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


def _load(local: _Local, items: int, threads: int = 4) -> None:
    def work(t: int) -> None:
        c = local.client()
        for base in range(t * 25, items, threads * 25):
            batch = [
                {"PutRequest": {"Item": {"event_id": {"S": f"e{i % 100}"},
                                         "signup_id": {"S": f"s{i}"}, "seats": {"N": "1"}}}}
                for i in range(base, min(base + 25, items))
            ]
            c.batch_write_item(RequestItems={INTAKE_TABLE.name: batch})

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m turnstile_bench.persist")
    parser.add_argument("--requests", type=int, default=2000, help="per measurement")
    parser.add_argument("--threads", type=int, default=4, help="concurrent clients")
    parser.add_argument("--items", type=int, default=100_000, help="items for the restart")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-persist-bench"))
    figures: dict[str, Any] = {"requests": args.requests, "threads": args.threads}
    try:
        for mode, extra in (("in_memory", ("--in-memory",)), ("persisted", ())):
            local = _Local(tmp / mode, *extra)
            try:
                figures[f"{mode}_put_per_s"] = _rate(local, args.requests, args.threads, "put")
                figures[f"{mode}_get_per_s"] = _rate(local, args.requests, args.threads, "get")
            finally:
                local.kill()
        state = tmp / "restart"
        local = _Local(state)
        figures["empty_start_s"] = round(local.healthy_after, 2)
        start = time.monotonic()
        _load(local, args.items)
        figures["items"] = args.items
        figures["load_s"] = round(time.monotonic() - start, 1)
        local.kill()
        figures["wal_mb"] = round(os.path.getsize(state / "aws.wal") / 1e6, 1)
        local = _Local(state)
        figures["restart_s"] = round(local.healthy_after, 2)
        count = local.client().scan(TableName=INTAKE_TABLE.name, Select="COUNT")
        figures["items_after_restart"] = count["Count"] + _rest(local, count)
        local.kill()
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
