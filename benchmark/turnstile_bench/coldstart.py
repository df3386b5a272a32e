"""Cold start of the stream handler: how long ``import turnstile.handlers.stream`` takes.

Each figure is the median of fresh interpreters (``sys.executable``), timing only the
import (not the interpreter's own start-up, which Lambda's runtime pays either way). The
Lambda-like environment sets what the Lambda runtime sets; it matters: outside Lambda the
X-Ray SDK builds a sampler with two botocore clients at import time, inside it does not.
The measurement writes no bytecode (Lambda's /var/task is read-only too): turnstile's own
modules are compiled on every start unless the checkout already holds their .pyc files.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from turnstile_bench.progress import Progress

__all__ = ["IMPORT_TARGET_MS", "ColdStart", "measure_cold_start"]

IMPORT_TARGET_MS = 300.0

#: What the Lambda runtime sets that changes what gets imported or built at import time.
LAMBDA_ENVIRONMENT = {
    "AWS_LAMBDA_FUNCTION_NAME": "turnstile-stream-processor",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
    "LAMBDA_TASK_ROOT": "/var/task",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "_X_AMZN_TRACE_ID": "Root=1-00000000-000000000000000000000000;Sampled=1",
}

_TIMER = "import time as _t\n_s = _t.perf_counter()\n{body}\nprint(_t.perf_counter() - _s)\n"

_DEPENDENCIES = (
    "from aws_lambda_powertools import Logger, Metrics\n"
    "from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent\n"
    "import turnstile.jobs.processor, turnstile.storage.store\n"
    "Logger(service='turnstile'); Metrics(namespace='Turnstile', service='turnstile')\n"
)

#: Snippets timed in fresh interpreters: name -> (code, Lambda-like?, extra environment).
VARIANTS: dict[str, tuple[str, bool, dict[str, str]]] = {
    "handler": ("import turnstile.handlers.stream", True, {}),
    "handler_outside_lambda": ("import turnstile.handlers.stream", False, {}),
    # The handler's opt-in X-Ray SDK (where the handler offers one; else the same).
    "handler_xray_sdk_on": ("import turnstile.handlers.stream", True, {"TURNSTILE_XRAY_SDK": "1"}),
    # What the handler imports and builds at module level, plus a Powertools Tracer built
    # at import as the handler first did: patching every library X-Ray knows (requests,
    # sqlite3, httplib... are imported for it), or botocore only.
    "deps_with_tracer": (
        _DEPENDENCIES + "from aws_lambda_powertools import Tracer\nTracer(service='turnstile')",
        True,
        {},
    ),
    "deps_with_tracer_botocore_only": (
        _DEPENDENCIES + "from aws_lambda_powertools import Tracer\n"
        "Tracer(service='turnstile', patch_modules=['botocore'])",
        True,
        {},
    ),
    "deps_without_tracer": (_DEPENDENCIES, True, {}),
    "boto3_only": ("import boto3", True, {}),
}


@dataclass
class ColdStart:
    """Median import times in milliseconds, and where the handler's import time goes."""

    runs: int
    medians_ms: dict[str, float]
    samples_ms: dict[str, list[float]]
    by_package_ms: dict[str, float] = field(default_factory=dict)
    first_client_ms: float | None = None

    @property
    def handler_ms(self) -> float:
        return self.medians_ms["handler"]

    def to_dict(self) -> dict[str, Any]:
        m = self.medians_ms
        return {
            "method": (
                "median of fresh interpreters timing only the import; Lambda-like "
                "environment (AWS_LAMBDA_FUNCTION_NAME, LAMBDA_TASK_ROOT, ...) unless noted"
            ),
            "runs": self.runs,
            "target_ms": IMPORT_TARGET_MS,
            "handler_import_ms": round(self.handler_ms, 1),
            "within_target": self.handler_ms <= IMPORT_TARGET_MS,
            "medians_ms": {k: round(v, 1) for k, v in self.medians_ms.items()},
            "tracer_cost_ms": round(m["deps_with_tracer"] - m["deps_without_tracer"], 1),
            "tracer_botocore_only_cost_ms": round(
                m["deps_with_tracer_botocore_only"] - m["deps_without_tracer"], 1
            ),
            "samples_ms": self.samples_ms,
            "self_time_by_package_ms": self.by_package_ms,
            "first_boto3_client_ms": self.first_client_ms,
        }


def _environment(lambda_like: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POWERTOOLS_")}
    for key in ("AWS_ENDPOINT_URL", *LAMBDA_ENVIRONMENT):
        env.pop(key, None)
    env.setdefault("AWS_ACCESS_KEY_ID", "test")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if lambda_like:
        env.update(LAMBDA_ENVIRONMENT)
    return env


def _time(code: str, lambda_like: bool, extra: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _TIMER.format(body=code)],
        env={**_environment(lambda_like), **extra},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return float(done.stdout.strip().splitlines()[-1]) * 1000


def _by_package(lambda_like: bool = True) -> dict[str, float]:
    """Self time of every module under ``-X importtime``, added up by top-level package."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import turnstile.handlers.stream"],
        env=_environment(lambda_like),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    totals: dict[str, float] = defaultdict(float)
    line = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|(\s*)(\S+)")
    for row in done.stderr.splitlines():
        match = line.match(row)
        if match:
            package = match.group(3).split(".")[0]
            totals[package] += int(match.group(1)) / 1000
    top = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    named = dict(top[:8])
    named["other"] = sum(v for _, v in top[8:])
    return {k: round(v, 1) for k, v in named.items()}


def _first_client_ms() -> float:
    """The processor's first boto3 client, built on the first invocation (after import)."""
    code = (
        "import turnstile.handlers.stream as h\n_s = _t.perf_counter()\nh.get_processor()\n"
        "print(_t.perf_counter() - _s)\nraise SystemExit\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import time as _t\n" + code],
        env=_environment(True),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return round(float(done.stdout.strip().splitlines()[-1]) * 1000, 1)


def measure_cold_start(runs: int, progress: Progress) -> ColdStart:
    """Median import times of each variant over ``runs`` fresh interpreters (interleaved,
    so a busy moment of the machine does not land on one variant only)."""
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    progress.phase("cold start: imports", runs * len(VARIANTS) + 2)
    for _ in range(runs):
        for name, (code, lambda_like, extra) in VARIANTS.items():
            samples[name].append(_time(code, lambda_like, extra))
            progress.advance()
    by_package = _by_package()
    progress.advance()
    first_client = _first_client_ms()
    progress.advance()
    progress.finish()
    return ColdStart(
        runs=runs,
        medians_ms={k: statistics.median(v) for k, v in samples.items()},
        samples_ms={k: [round(x, 1) for x in v] for k, v in samples.items()},
        by_package_ms=by_package,
        first_client_ms=first_client,
    )
