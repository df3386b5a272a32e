"""How soon an event takes a step with no record of its own: ``python -m turnstile_bench.wakeups``.

Starts a whole local stack in this process (in memory, free ports, every function under its
role) and measures, ``--rounds`` times each, from the moment it could happen to the moment
a client reads it:

* a hold's expiry to the seat reaching the waitlisted signup (the due-holds loop wakes the
  event; the processor lapses the hold and promotes);
* an organizer's capacity raise to the waitlisted signup's acceptance;
* an organizer's close to the waitlisted signup's rejection.

docs/lifecycle.md (§10, bounds) quotes its output. Timings, not a test: a busy machine is
slower, and nothing here fails on a figure.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from turnstile_bench.inprocess import free_port, local_environment
from turnstile_bench.options import whole

__all__ = ["main"]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m turnstile_bench.wakeups")
    parser.add_argument("--rounds", type=whole(1, "1 round or more"), default=5)
    args = parser.parse_args(argv)
    local_environment()
    from turnstile.storage.store import SignupStore
    from turnstile_tools.local.stack import LocalStack

    with tempfile.TemporaryDirectory() as state:
        stack = LocalStack(
            port=free_port(), api_port=free_port(), state_dir=Path(state), in_memory=True
        )
        stack.start()
        try:
            store = SignupStore(sleep=lambda _: None)

            def reached(event_id: str, signup_id: str, status: str) -> float:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    item = store.get_decision(event_id, signup_id)
                    if item is not None and item["status"] == status:
                        return time.time()
                    time.sleep(0.02)
                raise SystemExit(f"{event_id}/{signup_id} never reached {status}")

            def waiting(event_id: str, **options: int) -> None:
                store.create_event(event_id, 1, _now(), waitlist=1, **options)
                store.put_intake(event_id, "a", 1, None, _now())
                reached(event_id, "a", "HELD" if options else "ACCEPTED")
                store.put_intake(event_id, "b", 1, None, _now())
                reached(event_id, "b", "WAITLISTED")

            figures: dict[str, list[float]] = {"lapse": [], "capacity": [], "close": []}
            for n in range(args.rounds):
                waiting(f"hold-{n}", hold_seconds=4)
                expires = store.get_decision(f"hold-{n}", "a")["hold_expires_at"]
                at = datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
                figures["lapse"].append(reached(f"hold-{n}", "b", "HELD") - at)
                waiting(f"capacity-{n}")
                started = time.time()
                store.update_capacity(f"capacity-{n}", 2)
                figures["capacity"].append(reached(f"capacity-{n}", "b", "ACCEPTED") - started)
                waiting(f"close-{n}")
                started = time.time()
                store.close_event(f"close-{n}")
                figures["close"].append(reached(f"close-{n}", "b", "REJECTED") - started)
            denied = stack.aws.enforcement.denials if stack.aws else []
        finally:
            stack.stop()
    names = {
        "lapse": "a hold's expiry -> its seat held by the one waiting",
        "capacity": "a capacity raised -> the one waiting accepted",
        "close": "an event closed -> the one waiting rejected",
    }
    for key, values in figures.items():
        print(
            f"{names[key]}: median {statistics.median(values):.2f} s, "
            f"max {max(values):.2f} s ({len(values)} rounds)"
        )
    print(f"requests refused a function's role: {len(denied)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
