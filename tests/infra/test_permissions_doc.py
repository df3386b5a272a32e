"""docs/permissions.md lists exactly what each role may write: its table is the grants'."""

from __future__ import annotations

from pathlib import Path

from turnstile.base.contract import Function
from turnstile_cdk.permissions import (
    API_GRANTS,
    DUE_HOLDS_GRANTS,
    PROCESSOR_GRANTS,
    SWEEPER_GRANTS,
    WAITER_GRANTS,
    TableGrant,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "permissions.md"
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"}
GRANTS = {
    Function.PROCESSOR: PROCESSOR_GRANTS,
    Function.API: API_GRANTS,
    Function.WAITER: WAITER_GRANTS,
    Function.SWEEPER: SWEEPER_GRANTS,
    Function.DUE_HOLDS: DUE_HOLDS_GRANTS,
}

Row = tuple[str, str, frozenset[str], frozenset[str], frozenset[str]]


def _row(role: str, grant: TableGrant) -> Row | None:
    writes = {a.removeprefix("dynamodb:") for a in grant.actions} & WRITES
    if not writes:
        return None
    return (
        role,
        grant.table,
        frozenset(writes),
        frozenset(grant.leading_keys) or frozenset({"any"}),
        frozenset(grant.attributes) or frozenset({"any"}),
    )


def _documented() -> set[Row]:
    text = DOC.read_text()
    table = text.split("<!-- permissions-table")[1].split("<!-- /permissions-table -->")[0]
    rows: set[Row] = set()
    for line in table.splitlines()[3:]:
        if not line.startswith("|"):
            continue
        role, table_name, actions, items, attributes = (
            cell.strip() for cell in line.strip("|").split("|")
        )

        def words(cell: str) -> frozenset[str]:
            return frozenset(w.strip().strip("`") for w in cell.split(","))

        rows.add((role, table_name, words(actions), words(items), words(attributes)))
    return rows


def test_the_doc_lists_every_write_grant_and_nothing_else():
    granted = {
        row
        for role, grants in GRANTS.items()
        for grant in grants
        if (row := _row(role, grant)) is not None
    }
    assert len(granted) >= 10
    assert _documented() == granted
