"""`make synth`'s command: the pinned CDK CLI synthesizes offline, without credentials."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    not (ROOT / "node_modules" / ".bin" / "cdk").exists(),
    reason="the pinned CDK CLI is installed by `make test` (npm ci)",
)
def test_pinned_cdk_cli_synthesizes_without_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    out = tmp_path / "cdk.out"
    result = subprocess.run(
        [shutil.which("npx") or "npx", "--no-install", "cdk", "synth", "--quiet", "-o", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    template = json.loads((out / "Turnstile.template.json").read_text())
    assert "AWS::Lambda::EventSourceMapping" in {
        r["Type"] for r in template["Resources"].values()
    }
    version = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert version.startswith("2.1148.")
