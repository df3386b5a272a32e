"""Read cdk-nag's results back: findings from the validation report, acknowledgments from the tree.

cdk-nag 3 is a CDK policy-validation plugin: a finding that is not acknowledged fails
``app.synth()`` and is written to ``validation-report.json`` in the cloud assembly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import Validations
from constructs import IConstruct

__all__ = [
    "VALIDATION_REPORT",
    "Acknowledged",
    "Finding",
    "acknowledgments",
    "findings_in_report",
    "read_findings",
]

#: Where CDK writes the plugins' report, inside the assembly directory (outdir).
VALIDATION_REPORT = "validation-report.json"


@dataclass(frozen=True)
class Finding:
    plugin: str
    rule: str
    path: str
    description: str

    def __str__(self) -> str:
        return f"{self.rule} at {self.path}: {self.description}"


@dataclass(frozen=True)
class Acknowledged:
    path: str
    rule: str
    reason: str


def findings_in_report(report: dict[str, Any]) -> list[Finding]:
    """Every violation of every plugin in a CDK validation report."""
    return [
        Finding(
            plugin=plugin.get("pluginName", ""),
            rule=violation.get("ruleName", ""),
            path=construct.get("constructPath", ""),
            description=violation.get("description", ""),
        )
        for plugin in report.get("pluginReports", [])
        for violation in plugin.get("violations", [])
        for construct in violation.get("violatingConstructs", [])
    ]


def read_findings(outdir: str | Path) -> list[Finding]:
    """Findings of the last synthesis into ``outdir``; raises if no report was written."""
    report = json.loads((Path(outdir) / VALIDATION_REPORT).read_text())
    return findings_in_report(report)


def acknowledgments(scope: IConstruct) -> list[Acknowledged]:
    """Every ``Validations.of(...).acknowledge`` under ``scope``, with its reason."""
    key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    found = []
    for construct in scope.node.find_all():
        for entry in construct.node.metadata:
            if entry.type != key or not isinstance(entry.data, dict):
                continue
            for rule, reason in entry.data.items():
                # Stored as "Annotation::<rule id>" (see Validations.acknowledge).
                found.append(
                    Acknowledged(
                        path=construct.node.path,
                        rule=str(rule).split("::", 1)[-1],
                        reason=str(reason),
                    )
                )
    return found
