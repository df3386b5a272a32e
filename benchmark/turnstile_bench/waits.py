"""What one caller's waits cost everyone else: ``python -m turnstile_bench.waits``.

Starts the local stack's endpoint and tables in this process (in memory, free ports, every
function under its role, no stream worker: nothing is decided, so every wait lasts its
whole ``wait``) and serves the HTTP API twice, as the local stack does, in two layouts:

* ``shared``: the waiting read on the API function's own instances (turnstile before the
  waiter: one function for every route);
* ``waiter``: the waiting read on the waiter's instances, the rest on the API's (today).

In each, one greedy caller keeps ``--greedy`` waits open (each ``wait=--wait-s``, asked
again as soon as it ends) while an honest caller reads a signup's status and submits
signups one after the other for ``--seconds``. It prints, side by side, the honest calls'
latency (median, 99th percentile, slowest) and failures, and how many of the greedy
caller's waits were served or throttled. docs/operations.md ("Waiting reads") quotes it.
Timings, not a test: a busy machine is slower, and nothing here fails on a figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnstile_bench.inprocess import free_port, local_environment
from turnstile_bench.options import seconds, whole

__all__ = ["main"]

#: The API's instances, as the local stack starts them (``DEFAULT_MAX_INSTANCES``).
API_INSTANCES = 8


def _call(url: str, method: str = "GET", body: Any = None, timeout: float = 60) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as error:
        error.read()
        return int(error.code)


@dataclass
class Outcome:
    layout: str
    reads: list[float] = field(default_factory=list)
    submits: list[float] = field(default_factory=list)
    honest_failures: int = 0
    waits_served: int = 0
    waits_throttled: int = 0


def _run(api_url: str, layout: str, greedy: int, wait_s: float, seconds: float) -> Outcome:
    outcome = Outcome(layout)
    _call(f"{api_url}/events", "POST", {"event_id": layout, "capacity": 1})
    for n in range(greedy):
        _call(f"{api_url}/events/{layout}/signups", "POST", {"signup_id": f"g{n}"})
    _call(f"{api_url}/events/{layout}/signups", "POST", {"signup_id": "honest"})
    stop = threading.Event()
    lock = threading.Lock()

    def hog(n: int) -> None:
        url = f"{api_url}/events/{layout}/signups/g{n}/decision?wait={wait_s}"
        while not stop.is_set():
            status = _call(url)
            with lock:
                if status == 200:
                    outcome.waits_served += 1
                else:
                    outcome.waits_throttled += 1
                    stop.wait(0.05)  # a throttled client pauses, as client.wait does

    hogs = [threading.Thread(target=hog, args=(n,), daemon=True) for n in range(greedy)]
    for thread in hogs:
        thread.start()
    time.sleep(1.0)  # every hog's first wait is in
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        started = time.monotonic()
        status = _call(f"{api_url}/events/{layout}/signups/honest")
        outcome.reads.append(time.monotonic() - started)
        outcome.honest_failures += status != 200
        started = time.monotonic()
        status = _call(f"{api_url}/events/{layout}/signups", "POST", {"signup_id": f"h{n}"})
        outcome.submits.append(time.monotonic() - started)
        outcome.honest_failures += status != 202
        n += 1
    stop.set()
    for thread in hogs:
        thread.join(timeout=wait_s + 30)
    return outcome


def _figures(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"median {statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"slowest {ordered[-1] * 1000:.0f} ms ({len(ordered)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m turnstile_bench.waits")
    parser.add_argument(
        "--greedy",
        type=whole(0, "0 waits or more"),
        default=24,
        help="waits the greedy caller holds",
    )
    parser.add_argument("--wait-s", type=seconds, default=10.0, help="each wait's seconds")
    parser.add_argument(
        "--waiters", type=whole(1, "1 instance or more"), default=16, help="the waiter's instances"
    )
    parser.add_argument("--seconds", type=seconds, default=8.0, help="the honest caller's run")
    args = parser.parse_args(argv)
    local_environment()
    # Each throttled wait is logged as an error by the local API: thousands of lines here.
    logging.getLogger("turnstile_tools.local.api_server").setLevel(logging.CRITICAL)
    from turnstile.handlers.api import new_instance, new_waiter_instance
    from turnstile_tools.local.api_server import ApiServer
    from turnstile_tools.local.stack import LocalStack

    outcomes = []
    with tempfile.TemporaryDirectory() as state:
        stack = LocalStack(
            port=free_port(),
            api_port=free_port(),
            state_dir=Path(state),
            in_memory=True,
            worker=False,
        )
        stack.start()
        try:
            api = functools.partial(new_instance, store=lambda: stack.api_store)
            waiter = functools.partial(new_waiter_instance, store=lambda: stack.waiter_store)
            layouts = {
                "shared": {},
                "waiter": {"new_waiter": waiter, "max_waiters": args.waiters},
            }
            for layout, extra in layouts.items():
                server = ApiServer(
                    "127.0.0.1",
                    free_port(),
                    lambda: {"ok": True},
                    new_instance=api,
                    max_instances=API_INSTANCES,
                    **extra,  # type: ignore[arg-type]
                )
                server.start()
                try:
                    outcomes.append(
                        _run(server.url, layout, args.greedy, args.wait_s, args.seconds)
                    )
                finally:
                    server.stop()
            denied = stack.aws.enforcement.denials if stack.aws else []
        finally:
            stack.stop()
    print(
        f"one greedy caller holding {args.greedy} waits of {args.wait_s:g} s; API instances "
        f"{API_INSTANCES}, waiter instances {args.waiters} (layout 'waiter' only)"
    )
    for outcome in outcomes:
        print(f"[{outcome.layout}]")
        print(f"  honest status read:  {_figures(outcome.reads)}")
        print(f"  honest submission:   {_figures(outcome.submits)}")
        print(f"  honest calls failed: {outcome.honest_failures}")
        print(f"  greedy waits: {outcome.waits_served} served, {outcome.waits_throttled} throttled")
    print(f"requests refused a function's role: {len(denied)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
