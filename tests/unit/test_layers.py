"""The shape of the code: the runtime package's layers import only downwards, no module
imports itself back through others, and the Lambda asset (functions/) never imports the
operator's tools (tools/turnstile_tools) or the benchmark.

Layers, lowest first (docs/architecture.md draws them): ``base`` (the contract and shared
rules), ``engine`` (pure), ``storage`` (DynamoDB), then ``jobs`` and ``service`` side by
side, ``web`` (the HTTP edge), ``handlers`` (the Lambda entry points). A module may import
its own layer's modules and any lower layer's, nothing else.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "turnstile": ROOT / "functions" / "turnstile",
    "turnstile_tools": ROOT / "tools" / "turnstile_tools",
    "turnstile_bench": ROOT / "benchmark" / "turnstile_bench",
}
#: The runtime's layers and their rank; side-by-side layers share a rank and may not import
#: each other.
RANKS = {"base": 0, "engine": 1, "storage": 2, "jobs": 3, "service": 3, "web": 4, "handlers": 5}


def modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS.values():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = modules()


def imports_of(name: str) -> Iterator[tuple[str, int, bool]]:
    """(module imported, line, at module level) for every import of one of the packages."""
    tree = ast.parse(MODULES[name].read_text())
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module
            # ``from turnstile.engine import lifecycle`` imports the module lifecycle
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for target in targets:
            if target.split(".")[0] in FOLDERS:
                yield target, node.lineno, id(node) in top_level


def layer_of(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "turnstile" and len(parts) > 1 else None


RUNTIME = [m for m in MODULES if m.split(".")[0] == "turnstile"]


def test_every_runtime_module_is_in_a_layer():
    loose = [m for m in RUNTIME if m != "turnstile" and layer_of(m) not in RANKS]
    assert loose == [], "every module of functions/turnstile belongs to a layer package"


@pytest.mark.parametrize("name", RUNTIME)
def test_a_runtime_module_imports_only_its_layer_and_lower_ones(name):
    own = layer_of(name)
    wrong = []
    for target, line, _ in imports_of(name):
        if target.split(".")[0] != "turnstile":
            wrong.append(f"line {line}: {target} (the Lambda asset never imports it)")
            continue
        theirs = layer_of(target)
        if own is None or theirs is None or theirs == own:
            continue
        if RANKS[theirs] >= RANKS[own]:
            wrong.append(f"line {line}: {target} ({theirs} is not below {own})")
    assert wrong == [], f"{name} imports upwards or sideways"


def test_the_tools_import_the_benchmark_only_as_the_bench_command_plug_in():
    """The benchmark builds on the tools (the local stack); the one way back is the CLI's
    ``bench`` command, which imports the benchmark when it is asked for, inside it."""
    found = [
        (name, target, line, top)
        for name in MODULES
        if name.startswith("turnstile_tools")
        for target, line, top in imports_of(name)
        if target.startswith("turnstile_bench")
    ]
    assert found and all(name == "turnstile_tools.cli" and not top for name, _, _, top in found)


def test_no_module_imports_itself_back():
    """No cycle among the modules, counting the imports made at module level."""
    graph = {
        name: {
            target if target in MODULES else target.rsplit(".", 1)[0]
            for target, _, top in imports_of(name)
            if top
        }
        - {name}
        for name in MODULES
    }
    # a package's __init__ imported on the way to its modules is not an edge of the cycle
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_check_sees_a_wrong_import(tmp_path, monkeypatch):
    """The layer rule is not vacuous: an engine module importing storage is caught."""
    fake = tmp_path / "lifecycle.py"
    fake.write_text("from turnstile.storage import store\n")
    monkeypatch.setitem(MODULES, "turnstile.engine.lifecycle", fake)
    with pytest.raises(AssertionError, match="upwards or sideways"):
        test_a_runtime_module_imports_only_its_layer_and_lower_ones("turnstile.engine.lifecycle")
