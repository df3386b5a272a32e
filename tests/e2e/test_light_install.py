"""What `make run` installs is enough: the package and its extra ``local`` run ``turnstile
local`` whole, and the README's first session with it, on a machine with no AWS CLI of its
own (the extra brings one into .venv); the Lambda handlers import with the dependencies
alone (Lambda's runtime and the Powertools layer). Each runs in an interpreter that cannot
import any installed module the other installs (dev, bench; for the handlers local too)
would have added.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.e2e.conftest import BIN, running_local_stack
from tests.e2e.test_readme import (
    FRESH_PATH,
    ROOT,
    check_first_session,
    run_first_session,
    session_environment,
)
from tests.imports import (
    PROJECT,
    declared,
    distributions_by_import,
    installed_closure,
)

pytestmark = pytest.mark.e2e

#: A fresh venv has these (python3 -m venv), whatever the project installs.
VENV_OWN = {"pip", "setuptools", "_distutils_hack", "pkg_resources"}

SITECUSTOMIZE = """\
import sys
from importlib.abc import MetaPathFinder

BLOCKED = frozenset({blocked!r})


class NotInThisInstall(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None


sys.meta_path.insert(0, NotInThisInstall())
"""


def blocked_modules(extras: Iterable[str]) -> set[str]:
    """Every installed top-level module that ``pip install '.[extras]'`` would not bring."""
    allowed = installed_closure(declared(extras)) | {PROJECT}
    return {
        top
        for top, dists in distributions_by_import().items()
        if not dists & allowed and top not in VENV_OWN
    }


def only(extras: Iterable[str], tmp_path: Path, *also: str) -> dict[str, str]:
    """The environment of a process that can import only what installing ``extras`` brings
    (less the modules ``also``)."""
    blocked = blocked_modules(extras) | set(also)
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=sorted(blocked)))
    path = [str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path)}


def test_the_blocker_blocks(tmp_path: Path) -> None:
    """The check can fail: under it, what only dev installs cannot be imported."""
    assert {"pytest", "hypothesis", "matplotlib", "aws_cdk", "moto"} <= blocked_modules([])
    assert "moto" not in blocked_modules(["local"])
    env = {**os.environ, **only(["local"], tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", "import hypothesis"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "No module named 'hypothesis' (blocked)" in done.stderr


def test_handlers_import_with_the_dependencies_alone(tmp_path: Path) -> None:
    """As on Lambda: the three handlers, with tracing on (the X-Ray SDK of the Powertools
    layer) and no moto, werkzeug, matplotlib or anything else of the extras."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "TURNSTILE_"))},
        **only([], tmp_path),
        "AWS_LAMBDA_FUNCTION_NAME": "turnstile-stream-processor",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "TURNSTILE_XRAY_SDK": "1",
    }
    code = (
        "import sys\n"
        "import turnstile.handlers.api, turnstile.handlers.stream, turnstile.handlers.sweeper\n"
        "print(sorted({m.partition('.')[0] for m in sys.modules}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.replace("'", '"')))
    assert {"turnstile", "aws_lambda_powertools", "boto3", "aws_xray_sdk"} <= loaded
    assert not loaded & {"moto", "werkzeug", "flask", "matplotlib"}


def test_turnstile_local_runs_on_the_local_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`turnstile local` started as `make run` starts it, with only the dependencies and the
    extra local importable: healthy, and a signup submitted through the CLI is decided by the
    worker (the handler) and read back through the HTTP API."""
    for key, value in only(["local"], tmp_path).items():
        monkeypatch.setenv(key, value)
    with running_local_stack(tmp_path / "state", "--in-memory") as stack:
        created = stack.turnstile("event", "create", "light", "--capacity", "1")
        assert created.returncode == 0, created.stderr
        submitted = stack.turnstile("submit", "light", "ada", "--seats", "1")
        assert submitted.returncode == 0, submitted.stderr
        status = stack.turnstile(
            "status", "light", "ada", "--wait", "60", "--api-url", stack.api_url
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["status"] == "ACCEPTED"
        log = (tmp_path / "state" / "local.log").read_text()
        assert "blocked" not in log


def path_without_aws(tmp_path: Path) -> str:
    """A fresh shell's PATH (``FRESH_PATH``) on which no ``aws`` can be found: a directory of
    it that holds one stands in as a directory of links to everything else it holds."""
    directories = []
    for number, name in enumerate(FRESH_PATH.split(os.pathsep)):
        directory = Path(name)
        if not (directory / "aws").exists():
            directories.append(name)
            continue
        copy = tmp_path / f"path{number}"
        copy.mkdir()
        for entry in directory.iterdir():
            if not entry.name.startswith("aws"):
                (copy / entry.name).symlink_to(entry)
        directories.append(str(copy))
    return os.pathsep.join(directories)


def test_first_session_on_the_local_extra_with_no_aws_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's first session, verbatim, on what `make run` installs and with no AWS CLI
    on PATH: the `aws` it runs is the one the extra local put into .venv, which the session's
    `source .venv/bin/activate` finds, and everything it imports is the extra's."""
    for key, value in only(["local"], tmp_path).items():
        monkeypatch.setenv(key, value)
    path = path_without_aws(tmp_path)
    assert shutil.which("aws", path=path) is None
    with running_local_stack(tmp_path / "state", "--in-memory") as stack:
        env = session_environment(stack, path, keep=("PYTHONPATH",))
        found = subprocess.run(
            ["bash", "-c", "command -v aws; source .venv/bin/activate && command -v aws"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert found.stdout.splitlines() == [str(ROOT / ".venv" / "bin" / "aws")], found
        result = run_first_session(stack, env)
    check_first_session(result)
    assert "blocked" not in result.stderr
    assert "blocked" not in (tmp_path / "state" / "local.log").read_text()


def turnstile(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "turnstile"), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    return line


def test_local_without_its_extra_says_what_to_install(tmp_path: Path) -> None:
    """Installed without the extra local: one line naming it, not moto's traceback."""
    env = only([], tmp_path)
    for command in (["local", "--in-memory", "--port", "1", "--api-port", "2"], ["worker"]):
        line = one_line(turnstile(env, *command))
        assert line == (
            f"turnstile: moto is not installed: `turnstile {command[0]}` needs the local extra "
            "(pip install -e '.[local]' in the repository)"
        )
    # The commands that need only the dependencies still answer.
    assert turnstile(env, "--help").returncode == 0


def test_bench_without_its_extra_says_what_to_install(tmp_path: Path) -> None:
    """The benchmark's drawing needs matplotlib (the extra bench): said before any run."""
    plot = tmp_path / "bench.png"
    line = one_line(turnstile(only(["local"], tmp_path), "bench", "--quick", "--plot", str(plot)))
    assert line == (
        "turnstile: matplotlib is not installed: `turnstile bench` needs the bench extra "
        "(pip install -e '.[bench]' in the repository)"
    )
    assert not plot.exists()


def test_bench_not_installed_says_so(tmp_path: Path) -> None:
    """Without the benchmark's package, `turnstile bench` (any arguments) is one line."""
    env = only(["dev"], tmp_path, "turnstile_bench")
    for args in (["bench"], ["bench", "--quick", "--json", "x.json"], ["bench", "--help"]):
        assert one_line(turnstile(env, *args)) == (
            "turnstile: turnstile_bench is not installed: `turnstile bench` needs the bench "
            "extra (pip install -e '.[bench]' in the repository)"
        )
    listed = turnstile(env, "--help")
    assert listed.returncode == 0 and "the benchmark (not installed)" in listed.stdout
