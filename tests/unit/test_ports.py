"""Each protocol of ``turnstile.storage.ports`` is exactly what its user calls, and the
implementations match it.

No type checker runs in this repository, so this checks by hand what one would: each
protocol names every method its user calls on it and nothing else (read from the user's
source), and each implementation (``SignupStore``, ``FakeStore``, ``Ledger``) has each of
those methods with the same parameters (names, kinds, defaults) and the same annotations.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path
from types import ModuleType

import pytest

from tests.fakes import FakeStore
from turnstile.jobs import processor, sweeper
from turnstile.storage.failures import FailureQueue
from turnstile.storage.ledger import Ledger
from turnstile.storage.ports import (
    AuditStore,
    FailureNotes,
    ProcessorStore,
    SweeperLedger,
    SweeperStore,
)
from turnstile.storage.store import SignupStore
from turnstile_tools import audit


def members(protocol: type) -> list[str]:
    return sorted(
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    )


def calls_on(module: ModuleType, holder: str) -> set[str]:
    """Every ``<holder>.<name>`` and ``self.<holder>.<name>`` in the module's source."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())

    def is_holder(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id == holder
        return (
            isinstance(node, ast.Attribute)
            and node.attr == holder
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        )

    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and is_holder(node.value)
    }


#: (protocol, the module that uses it, the name it holds it by, its implementations)
PORTS = [
    (ProcessorStore, processor, "store", [SignupStore, FakeStore]),
    (SweeperStore, sweeper, "store", [SignupStore]),
    (SweeperLedger, sweeper, "ledger", [Ledger]),
    (FailureNotes, sweeper, "failures", [FailureQueue]),
    (AuditStore, audit, "store", [SignupStore]),
]
CASES = [
    pytest.param(protocol, implementation, name, id=f"{protocol.__name__}-{impl_name}-{name}")
    for protocol, _, _, implementations in PORTS
    for implementation in implementations
    for impl_name in [implementation.__name__]
    for name in members(protocol)
]


@pytest.mark.parametrize(
    ("protocol", "module", "holder"),
    [pytest.param(p, m, h, id=p.__name__) for p, m, h, _ in PORTS],
)
def test_each_protocol_is_exactly_the_methods_its_user_calls(protocol, module, holder):
    assert sorted(calls_on(module, holder)) == members(protocol)


def test_the_processor_store_is_its_eighteen_methods():
    assert len(members(ProcessorStore)) == 18


@pytest.mark.parametrize(("protocol", "implementation", "name"), CASES)
def test_each_implementation_has_each_method_with_the_protocols_signature(
    protocol, implementation, name
):
    wanted = getattr(protocol, name)
    got = getattr(implementation, name)
    assert inspect.signature(got).parameters.keys() == inspect.signature(wanted).parameters.keys()
    for have, want in zip(
        inspect.signature(got).parameters.values(),
        inspect.signature(wanted).parameters.values(),
        strict=True,
    ):
        assert (have.name, have.kind, have.default) == (want.name, want.kind, want.default)
    assert typing.get_type_hints(got) == typing.get_type_hints(wanted)


def test_the_implementations_are_their_protocols_at_run_time():
    store = SignupStore(client=object())
    assert isinstance(FakeStore(), ProcessorStore)
    assert all(isinstance(store, p) for p in (ProcessorStore, SweeperStore, AuditStore))
    assert isinstance(Ledger(client=object()), SweeperLedger)
    assert not isinstance(object(), ProcessorStore)
    assert not isinstance(store, SweeperLedger)
