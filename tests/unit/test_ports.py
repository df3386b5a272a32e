"""``ProcessorStore`` is exactly what the processor calls, and both stores match it.

No type checker runs in this repository, so this checks by hand what one would: the
protocol names every store method the processor calls and nothing else, and
``SignupStore`` and ``FakeStore`` have each of those methods with the same parameters
(names, kinds, defaults) and the same annotations.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from tests.fakes import FakeStore
from turnstile import processor
from turnstile.ports import ProcessorStore
from turnstile.store import SignupStore

MEMBERS = sorted(
    name
    for name, value in vars(ProcessorStore).items()
    if not name.startswith("_") and inspect.isfunction(value)
)


def store_calls() -> set[str]:
    """Every ``self.store.<name>`` in the processor's source."""
    tree = ast.parse(Path(inspect.getfile(processor)).read_text())
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "store"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    }


def test_the_protocol_is_exactly_the_methods_the_processor_calls():
    assert sorted(store_calls()) == MEMBERS
    assert len(MEMBERS) == 11


@pytest.mark.parametrize("implementation", [SignupStore, FakeStore])
@pytest.mark.parametrize("name", MEMBERS)
def test_each_store_has_each_method_with_the_protocols_signature(implementation, name):
    wanted = getattr(ProcessorStore, name)
    got = getattr(implementation, name)
    assert inspect.signature(got).parameters.keys() == inspect.signature(wanted).parameters.keys()
    for have, want in zip(
        inspect.signature(got).parameters.values(),
        inspect.signature(wanted).parameters.values(),
        strict=True,
    ):
        assert (have.name, have.kind, have.default) == (want.name, want.kind, want.default)
    assert typing.get_type_hints(got) == typing.get_type_hints(wanted)


def test_both_stores_are_processor_stores_at_run_time():
    assert isinstance(FakeStore(), ProcessorStore)
    assert isinstance(SignupStore(client=object()), ProcessorStore)
    assert not isinstance(object(), ProcessorStore)
