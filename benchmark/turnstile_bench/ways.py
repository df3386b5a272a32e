"""Every way the benchmark runs, by name, and running one on its own fresh endpoint.

The ways are built in ``strategies`` (naive, optimistic, turnstile) and ``lock_targets``
(transactional, slots), which builds on ``strategies``; this registry imports both, so
neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnstile_bench.endpoint import LocalEndpoint
from turnstile_bench.lock_targets import run_transactional, slots_picked
from turnstile_bench.progress import Progress
from turnstile_bench.strategies import StrategyRun, run_naive, run_optimistic, run_turnstile
from turnstile_bench.workload import Signup, Workload

__all__ = ["STRATEGIES", "run_strategy"]

STRATEGIES: dict[
    str, Callable[[LocalEndpoint, Workload, Sequence[Signup], Progress], StrategyRun]
] = {
    "naive": run_naive,
    "optimistic": run_optimistic,
    "transactional": run_transactional,
    "slots": slots_picked("random"),
    "turnstile": run_turnstile,
    # A variant, not a way of its own: slots claimed lowest first, to show what the pick
    # does to conflicts (the hot preset runs it).
    "slots:order": slots_picked("order"),
}


def run_strategy(
    name: str, workload: Workload, signups: Sequence[Signup], progress: Progress
) -> StrategyRun:
    """Run one way on its own fresh endpoint and tables."""
    progress.phase(f"{name}: decisions", len(signups))
    with LocalEndpoint(name.replace(":", "-")) as endpoint:
        run = STRATEGIES[name](endpoint, workload, signups, progress)
    progress.finish()
    return run
