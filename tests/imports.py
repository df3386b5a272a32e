"""What Python source imports and what a set of requirements installs, read without running
any of it: the modules' imports from their syntax trees (function bodies included), the
requirements from pyproject.toml and the installed distributions' metadata."""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "turnstile"
#: The extras of pyproject.toml, each with what it is for.
EXTRAS = ("local", "bench", "dev")


@dataclass(frozen=True)
class Import:
    """One imported module: ``import a.b`` or ``from a.b import c`` (``names`` = ``("c",)``)."""

    module: str
    names: tuple[str, ...]
    line: int
    #: Inside ``try: ... except ImportError`` (or ModuleNotFoundError): optional by design;
    #: or under ``if TYPE_CHECKING:``, which never runs (type stubs of the dev extra).
    guarded: bool

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(
        isinstance(n, ast.Name) and n.id in {"ImportError", "ModuleNotFoundError"} for n in names
    )


def _type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``: false whenever the code runs."""
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def imports_of(path: Path, module: str) -> list[Import]:
    """Every import in the file of ``module`` (its dotted name, to resolve relative imports)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        optional = isinstance(node, ast.Try) and any(
            _catches_import_error(h) for h in node.handlers
        )
        never_run = isinstance(node, ast.If) and _type_checking(node.test)
        if optional or never_run:
            guarded.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(a.name, (), node.lineno, id(node) in guarded) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            names = tuple(a.name for a in node.names)
            found.append(Import(base, names, node.lineno, id(node) in guarded))
    return found


def module_file(root: Path, module: str) -> Path | None:
    """The file that defines ``module`` under the source directory ``root``, if any."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(root: Path, package: str) -> Iterator[tuple[str, Path]]:
    """(module name, file) of every module of ``package`` under ``root``."""
    for path in sorted((root / package).rglob("*.py")):
        yield module_name(root, path), path


@dataclass
class Closure:
    #: The files the modules need: theirs, their packages' __init__, what they import, and on.
    files: set[Path]
    #: First-party modules imported (unguarded) that are not under the root: (importer, module).
    missing: list[tuple[str, str]]


def import_closure(
    root: Path, modules: Iterable[str], first_party: str = PROJECT, source: Path | None = None
) -> Closure:
    """Follow ``first_party`` imports from ``modules`` through the files under ``root``.
    ``source`` is the full source tree (default ``root``), which tells whether the name in
    ``from package import name`` is a module (that must be under ``root``) or an attribute."""
    source = source or root
    files: set[Path] = set()
    missing: list[tuple[str, str]] = []
    todo = [(m, m, False) for m in modules]
    seen: set[str] = set()
    while todo:
        importer, module, guarded = todo.pop()
        if module in seen:
            continue
        path = module_file(root, module)
        if path is None:
            if not guarded:
                missing.append((importer, module))
            continue
        seen.add(module)
        files.add(path)
        parts = module.split(".")
        # Importing a.b.c runs a/__init__ and a/b/__init__ first.
        todo += [(module, ".".join(parts[:i]), guarded) for i in range(1, len(parts))]
        for imp in imports_of(path, module):
            if imp.top != first_party:
                continue
            todo.append((module, imp.module, imp.guarded))
            # `from package import submodule` imports the submodule; other names are attributes.
            todo += [
                (module, f"{imp.module}.{name}", imp.guarded)
                for name in imp.names
                if module_file(source, f"{imp.module}.{name}")
            ]
    return Closure(files, missing)


def third_party(imp: Import) -> bool:
    ours = {PROJECT, f"{PROJECT}_tools", f"{PROJECT}_bench"}
    return imp.top not in sys.stdlib_module_names and imp.top not in ours


def undeclared(files: Mapping[str, Path], allowed: set[str]) -> list[str]:
    """``module:line imports top (distribution)`` for each import no allowed distribution gives."""
    providers = distributions_by_import()
    wrong = []
    for module, path in sorted(files.items()):
        for imp in imports_of(path, module):
            if imp.guarded or not third_party(imp):
                continue
            dists = providers.get(imp.top, {f"<{imp.top}: not installed>"})
            if not dists & allowed:
                wrong.append(f"{module}:{imp.line} imports {imp.top} ({', '.join(sorted(dists))})")
    return wrong


# -- requirements ---------------------------------------------------------------------------


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def declared(extras: Iterable[str] = ()) -> list[Requirement]:
    """The project's requirements with ``extras``, its self-references (turnstile[local])
    expanded: what ``pip install -e '.[extras]'`` asks for by name."""
    project = pyproject()["project"]
    optional = project.get("optional-dependencies", {})
    found: list[Requirement] = []
    todo, done = [*extras], set()
    for text in project["dependencies"]:
        found.append(Requirement(text))
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        done.add(extra)
        for text in optional[extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == PROJECT:
                todo += sorted(req.extras)
            else:
                found.append(req)
    return found


def declared_names(extras: Iterable[str] = ()) -> set[str]:
    return {canonicalize_name(r.name) for r in declared(extras)}


def installed_closure(requirements: Iterable[Requirement]) -> set[str]:
    """Every distribution that installing ``requirements`` brings, as this environment's
    metadata says (each requirement's extras and environment markers followed)."""
    names: set[str] = set()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        names.add(name)
        for text in metadata.distribution(name).requires or ():
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (*extras, "")):
                continue
            todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return names


@functools.cache
def distributions_by_import() -> dict[str, set[str]]:
    """Top-level import name -> the (canonical) distributions installed that provide it."""
    return {
        top: {canonicalize_name(d) for d in dists}
        for top, dists in metadata.packages_distributions().items()
    }
