"""`npx cdk synth` (cdk/app.py) on a checkout where only `make run` ran: the CDK libraries
are missing, and the app says so in one line, naming the command that installs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["aws_cdk", "constructs", "jsii"])
def test_the_app_without_the_cdk_libraries_is_one_line(module: str):
    # The module made unimportable, as on an install without the dev extra.
    code = (
        f"import sys; sys.modules[{module!r}] = None; import runpy; "
        f"runpy.run_path({str(ROOT / 'cdk' / 'app.py')!r}, run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("turnstile: the CDK libraries are not installed")
    assert "make setup" in lines[0]
