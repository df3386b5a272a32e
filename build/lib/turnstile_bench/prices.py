"""DynamoDB on-demand prices: the one place the benchmark takes them from."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ON_DEMAND_US_EAST_1", "Prices"]


@dataclass(frozen=True)
class Prices:
    """USD per million request units, and where the figures come from."""

    region: str
    write_per_million_usd: float
    read_per_million_usd: float
    source: str

    def cost_usd(self, write_units: float, read_units: float) -> float:
        """What these units cost."""
        return (
            write_units * self.write_per_million_usd + read_units * self.read_per_million_usd
        ) / 1_000_000

    def per_million_decisions_usd(
        self, write_per_decision: float, read_per_decision: float
    ) -> float:
        """The cost of a million decisions at these units per decision."""
        return self.cost_usd(write_per_decision, read_per_decision) * 1_000_000

    def describe(self) -> str:
        return (
            f"DynamoDB on-demand, {self.region}: ${self.write_per_million_usd} per million write "
            f"request units, ${self.read_per_million_usd} per million read request units "
            f"({self.source})"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Standard table class. AWS halved on-demand prices on 1 November 2024.
ON_DEMAND_US_EAST_1 = Prices(
    region="us-east-1",
    write_per_million_usd=0.625,
    read_per_million_usd=0.125,
    source=(
        "AWS DynamoDB on-demand pricing page, standard table class, in force since "
        "2024-11-01; DynamoDB Streams reads by a Lambda trigger are free, Lambda not included"
    ),
)
