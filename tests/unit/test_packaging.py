"""Each part of the code imports only what its install brings.

pyproject.toml: the dependencies are what the Lambda functions import (boto3 from Lambda's
runtime, Powertools from its layer); the extra ``local`` adds what ``turnstile local`` needs,
``bench`` what the benchmark needs, ``dev`` the rest (tests, CDK, lint). ``make run`` installs
only ``local``, so a module of functions/turnstile importing, say, matplotlib or pytest would
break it; a handler importing moto would break on Lambda. Read from the sources' imports
(function bodies included; an import inside ``try/except ImportError`` is optional).
"""

from __future__ import annotations

import re

import pytest
from packaging.utils import canonicalize_name

from tests.imports import (
    EXTRAS,
    ROOT,
    declared,
    declared_names,
    import_closure,
    imports_of,
    module_name,
    python_files,
    undeclared,
)

FUNCTIONS = ROOT / "functions"
TOOLS = ROOT / "tools"
BENCHMARK = ROOT / "benchmark"
HANDLERS = ("turnstile.handlers.stream", "turnstile.handlers.api", "turnstile.handlers.sweeper")


def test_lambda_code_imports_only_the_dependencies() -> None:
    """What the three handlers import, as far as it goes, needs nothing but the dependencies
    (what Lambda's runtime and the Powertools layer provide): no moto, no matplotlib."""
    closure = import_closure(FUNCTIONS, HANDLERS)
    assert not closure.missing
    files = {module_name(FUNCTIONS, p): p for p in closure.files}
    assert "turnstile.handlers.stream" in files and "turnstile.storage.store" in files
    assert undeclared(files, declared_names()) == []


def test_runtime_package_imports_only_the_dependencies() -> None:
    """Everything in functions/turnstile (the Lambda asset, whole) runs on the dependencies
    alone: what Lambda's runtime and the Powertools layer provide."""
    files = dict(python_files(FUNCTIONS, "turnstile"))
    assert "turnstile.web.api" in files
    assert undeclared(files, declared_names()) == []


def test_tools_import_only_the_dependencies_and_local() -> None:
    """Everything in tools/turnstile_tools (the CLI, turnstile local) runs on what `make run`
    installs: the dependencies and the extra local."""
    files = dict(python_files(TOOLS, "turnstile_tools"))
    assert "turnstile_tools.local.stack" in files
    assert undeclared(files, declared_names(["local"])) == []


def test_an_import_for_type_checking_only_needs_no_install(tmp_path) -> None:
    """Type stubs (the dev extra's mypy-boto3-dynamodb) are imported under
    ``if TYPE_CHECKING:``, which never runs: such an import needs nothing installed."""
    path = tmp_path / "m.py"
    path.write_text(
        "import typing\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import stubs_a\n"
        "if typing.TYPE_CHECKING:\n    from stubs_b import C\n"
        "if not TYPE_CHECKING:\n    import runs\n"
        "import real\n"
    )
    guarded = {imp.module: imp.guarded for imp in imports_of(path, "m")}
    assert guarded == {"typing": False, "stubs_a": True, "stubs_b": True, "runs": False,
                       "real": False}


def test_runtime_and_tools_never_need_the_benchmark() -> None:
    """functions/turnstile and tools/turnstile_tools import turnstile_bench only where it is
    optional (the CLI's `bench` command, which says what to install when it is not there)."""
    needing = [
        f"{module}:{imp.line}"
        for root, package in ((FUNCTIONS, "turnstile"), (TOOLS, "turnstile_tools"))
        for module, path in python_files(root, package)
        for imp in imports_of(path, module)
        if imp.top == "turnstile_bench" and not imp.guarded
    ]
    assert needing == []


def test_benchmark_imports_only_the_bench_extra() -> None:
    files = dict(python_files(BENCHMARK, "turnstile_bench"))
    assert "turnstile_bench.plot" in files
    assert undeclared(files, declared_names(["bench"])) == []


def test_each_extra_adds_to_the_one_it_builds_on() -> None:
    base, local, bench, dev = (declared_names(e) for e in ((), ["local"], ["bench"], ["dev"]))
    assert base < local < bench < dev
    # the README's first session writes into intake with the AWS CLI: make run installs it
    assert {"moto", "flask", "awscli"} <= local - base
    assert "matplotlib" in bench - local
    assert {"pytest", "aws-cdk-lib"} <= dev - bench
    # make run stays light: nothing of the tests', the CDK's or the benchmark's.
    assert not {"pytest", "hypothesis", "aws-cdk-lib", "matplotlib", "cfn-lint"} & local


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9._-]+)==([0-9][A-Za-z0-9.+!-]*)", line)
            assert match, f"requirements.txt: {line!r} is not NAME==VERSION (no extras, no ranges)"
            pins[canonicalize_name(match[1])] = match[2]
    return pins


@pytest.mark.parametrize("extra", ["", *EXTRAS])
def test_every_requirement_is_pinned(extra: str) -> None:
    """pyproject.toml names what, requirements.txt which version: every name has its pin."""
    pins = _constraints()
    unpinned = [
        str(r) for r in declared([extra] if extra else []) if canonicalize_name(r.name) not in pins
    ]
    assert unpinned == []
