"""The sweeper's read units follow what is undecided, not the size of intake.

Against the embedded endpoint (moto's server), metered by DynamoDB's rules from the items'
sizes (turnstile_bench/metering.py). No timing is asserted: units only, bounded from item sizes.
"""

from __future__ import annotations

import pytest

from turnstile.base.contract import ALL_TABLES, Attr
from turnstile.storage.dynamo import default_client
from turnstile_bench.metering import ItemSizes, read_units
from turnstile_bench.sweep import MIN_AGE_S, SWEEP_AT, Tables, index_entry_size, load, measure

#: What every run reads besides intake and the undecided records' decisions: the lease
#: (``full_scan_at``), the run history, the scan for parked events and the event item, each
#: one consistent read of under 4 KB.
FIXED_READS = 4 * read_units(0)
#: The most the sweeper's own attributes add to an index entry (redrive, redriven_at).
RE_EMITTED_BYTES = len("redrive") + 2 + len("redriven_at") + 12
#: Undecided records in a run. Read units are counted per item from its size, however the
#: reads are batched, so they scale with the counts: a few dozen records show every relation
#: the tests check (each record costs moto milliseconds to load and, on the full read, to
#: serialize).
UNDECIDED = 20


def fast_path_bound(entries: list[int]) -> float:
    """Read units a run through the index may take for undecided records whose entries
    are ``entries`` bytes (before re-emission): the index, read eventually consistent
    (at least a 4 KB block per page), one consistent read of each one's (absent) decision,
    and the fixed reads. Nothing in it depends on how many records are decided."""
    index_bytes = sum(e + RE_EMITTED_BYTES for e in entries)
    return read_units(index_bytes, consistent=False) + len(entries) * read_units(0) + FIXED_READS


@pytest.fixture
def world(endpoint):
    client = default_client(endpoint)
    for spec in ALL_TABLES:
        client.create_table(**spec.create_table_kwargs())
    return client, ItemSizes(), Tables()


def undecided_entries(client, tables: Tables) -> list[int]:
    items = []
    kwargs = {"TableName": tables.intake, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items += [i for i in page["Items"] if Attr.UNDECIDED in i]
        if "LastEvaluatedKey" not in page:
            return [index_entry_size(i) for i in items]
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def test_a_run_reads_in_proportion_to_the_undecided_records_not_the_decided(world):
    client, sizes, tables = world
    at = SWEEP_AT
    decided, undecided = 3 * UNDECIDED, UNDECIDED
    # GIVEN three times as many decided records as undecided ones, all an hour old
    load(client, sizes, tables, decided=decided, undecided=undecided)
    small = measure(client, sizes, tables, "index", at, decided, undecided)
    bound = fast_path_bound(undecided_entries(client, tables))
    assert small.found_undecided == undecided
    # WHEN intake grows fivefold in decided records
    load(client, sizes, tables, decided=4 * decided, undecided=0, first=decided)
    decided *= 5
    at += 2 * MIN_AGE_S  # past the last re-emission: the records count as old again
    large = measure(client, sizes, tables, "index", at, decided, undecided)
    # THEN a run through the index reads no more than the undecided records account for
    assert large.found_undecided == undecided
    assert small.read_units <= bound and large.read_units <= bound
    # and reading intake whole, as every run did before, reads every decided record and
    # its decision (at least one consistent read each): the bound above is far below it
    at += 2 * MIN_AGE_S
    full = measure(client, sizes, tables, "full scan", at, decided, undecided)
    assert full.found_undecided == undecided
    assert full.read_units >= decided * read_units(0) > 5 * bound


def test_a_run_reads_more_as_undecided_records_grow(world):
    client, sizes, tables = world
    decided, undecided = 10 * UNDECIDED, UNDECIDED
    load(client, sizes, tables, decided=decided, undecided=undecided)
    before = measure(client, sizes, tables, "index", SWEEP_AT, decided, undecided)
    # GIVEN as many undecided records again
    load(client, sizes, tables, decided=0, undecided=undecided, first=undecided)
    # WHEN the next run looks (past the last re-emission)
    at = SWEEP_AT + 2 * MIN_AGE_S
    twice = measure(client, sizes, tables, "index", at, decided, 2 * undecided)
    # THEN it found them all, and read about one decision more for each
    assert twice.found_undecided == 2 * undecided
    assert twice.read_units <= fast_path_bound(undecided_entries(client, tables))
    assert twice.read_units - before.read_units >= undecided * read_units(0)
