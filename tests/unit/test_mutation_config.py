"""``make mutants``'s configuration names code that exists.

``tests/mutation/config.toml`` names, per module, a source file, the functions of it to
mutate (mutmut's mangled names: ``x_name``, ``xǁClassǁname``) and the tests that cover
them; ``tests/mutation/equivalent.toml`` explains surviving mutants by name. mutmut mutates
nothing and explains nothing for a name that is not there, silently, so a function renamed
or moved would drop out of the mutation run unnoticed. This reads both files against the
sources (their syntax trees; nothing is mutated or run).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where each package's sources are (a config's ``source`` starts with its package).
FOLDERS = {"turnstile": ROOT / "functions", "turnstile_tools": ROOT / "tools"}
CONFIG = tomllib.loads((ROOT / "tests/mutation/config.toml").read_text())["modules"]
EQUIVALENT = tomllib.loads((ROOT / "tests/mutation/equivalent.toml").read_text())["equivalent"]


def mangled_functions(path: Path) -> set[str]:
    """mutmut's names of the module's functions and of its classes' methods."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(f"x_{node.name}")
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"xǁ{node.name}ǁ{f.name}"
                for f in node.body
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


def source_file(source: str) -> Path:
    """A config's ``source`` (``turnstile/engine/domain.py``): its file."""
    return FOLDERS[source.split("/", 1)[0]] / source


def dotted(source: str) -> str:
    """``turnstile_tools/local/poller.py`` -> ``turnstile_tools.local.poller``, as mutmut
    names mutants."""
    return source.removesuffix(".py").replace("/", ".")


@pytest.mark.parametrize("name", sorted(CONFIG))
def test_each_module_names_a_source_its_functions_and_tests_that_exist(name):
    module = CONFIG[name]
    source = source_file(module["source"])
    assert source.is_file(), module["source"]
    missing = [f for f in module["functions"] if f != "*" and f not in mangled_functions(source)]
    assert missing == [], f"{name}: not in {module['source']}"
    assert [t for t in module["tests"] if not (ROOT / t).is_file()] == []


def test_each_equivalent_mutant_is_of_a_function_that_is_mutated():
    mutated = set()
    for module in CONFIG.values():
        functions = module["functions"]
        if functions == ["*"]:
            functions = mangled_functions(source_file(module["source"]))
        mutated |= {f"{dotted(module['source'])}.{f}" for f in functions}
    unknown = [name for name in EQUIVALENT if name.rpartition("__mutmut_")[0] not in mutated]
    assert unknown == []
