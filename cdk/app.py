#!/usr/bin/env python3
"""The CDK app (cdk.json runs it): ``npx cdk synth`` / ``npx cdk deploy`` from the repo root.

Also runs as plain ``.venv/bin/python cdk/app.py``, synthesizing into ./cdk.out.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# turnstile_cdk lives beside this file; the turnstile package (contract, output keys) in
# functions/, importable even where the editable install is missing.
for path in (ROOT / "cdk", ROOT / "functions"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

#: What the app needs beyond the runtime package: the `dev` extra (`make setup`).
_CDK_MODULES = frozenset({"aws_cdk", "constructs", "jsii", "cdk_nag", "typeguard"})

# Node 20 is past jsii's support window; the warning is noise on every synth (set before
# aws_cdk starts its node process).
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

try:
    from turnstile_cdk.application import cdk_json_context, create_app
except ModuleNotFoundError as missing:  # `make run` installs the local stack, not the CDK
    if missing.name and missing.name.split(".")[0] in _CDK_MODULES:
        sys.exit(
            f"turnstile: the CDK libraries are not installed ({missing.name} is missing): "
            "run `make setup` (or `make synth`, which installs them and synthesizes)"
        )
    raise


def main() -> None:
    if os.environ.get("CDK_OUTDIR"):
        # Run by the CDK CLI: it passes cdk.json's context and `-c` values, and the outdir.
        app, _stack = create_app()
    else:
        # Plain python: the same context the CLI would pass, and a real directory (the
        # default one is temporary and deleted at exit).
        app, _stack = create_app(context=cdk_json_context(), outdir=str(ROOT / "cdk.out"))
    app.synth()


if __name__ == "__main__":
    main()
