"""``turnstile bench --drop``: a tiny drop end to end, and its figures from made-up runs.

No timing is asserted: the smoke run checks what must hold whatever the machine's speed
(every signup decided once, none oversold or undersold, the table and the goals printed);
the figures are checked on runs whose answers are known.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from turnstile.base.contract import Reason, Status
from turnstile_bench.drop import QUICK_DROP, DropWorkload, figures, render_drop, run_drop
from turnstile_bench.progress import Progress

A = (Status.ACCEPTED, None)
FULL = (Status.REJECTED, Reason.CAPACITY_FULL)


@pytest.fixture(scope="module")
def drop() -> dict:
    workload = DropWorkload(
        capacity=12,
        shard_counts=(1, 4),
        producers=4,
        duration_s=3.0,
        scale=0.05,
        stream_shards=4,
        batch_size=10,
    )
    return run_drop(workload, Progress(enabled=False))


def test_a_tiny_drop_decides_every_signup_once_and_exactly_the_capacity(drop):
    for shards, run in drop["runs"].items():
        assert run["submitted"] > run["given"], f"K={shards}: demand never passed capacity"
        assert run["decided"] == run["submitted"] and run["lost"] == 0, run
        assert (run["given"], run["oversold"], run["undersold"]) == (12, 0, 0), run
        assert run["write_units_per_decision"] > 0
    assert drop["checks"] == {
        "drop_k1_never_oversold_or_undersold": True,
        "drop_k4_never_oversold_or_undersold": True,
    }
    table = render_drop(drop)
    assert "| decisions/s (plateau) |" in table and "K = 4" in table and "speedup" in table


def _figures(rows: dict, write_units: float = 10.0) -> dict:
    """One run's figures: five signups acknowledged a second apart, each decided a second
    later, on an event of 3 seats, ``rows`` what the tables say of them."""
    acked = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}
    decided = {s: t + 1 for s, t in acked.items()}
    workload = replace(QUICK_DROP, capacity=3)
    return figures(
        workload,
        4,
        acked,
        decided,
        rows,
        0.0,
        10.0,
        write_units=write_units,
        throttled=0,
        throttled_puts=0,
    )


def test_figures_count_inversions_oversold_and_undersold_from_the_rows():
    # b was refused while c and e, who came later, were given seats: two inversions
    got = _figures({"a": A, "b": FULL, "c": A, "d": FULL, "e": A})
    assert (got["given"], got["oversold"], got["undersold"], got["inversions"]) == (3, 0, 0, 2)
    assert got["inversions_share"] == pytest.approx(2 / 3)
    assert got["write_units_per_decision"] == pytest.approx(2.0)
    assert got["p50_s"] == pytest.approx(1.0)
    # in arrival order: none
    assert _figures({"a": A, "b": A, "c": A, "d": FULL, "e": FULL})["inversions"] == 0
    # four given of three: oversold; two given and one refused capacity_full: undersold
    assert _figures({"a": A, "b": A, "c": A, "d": A, "e": FULL}, 1.0)["oversold"] == 1
    assert _figures({"a": A, "b": A, "c": FULL}, 1.0)["undersold"] == 1
    # a signup acknowledged and never decided is lost
    assert _figures({"a": A, "b": A}, 1.0)["lost"] == 3
