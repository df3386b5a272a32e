"""The benchmark's workload: its knobs, and the signups they produce (seeded, repeatable).

Signups look like a real event sign-up form (name, contact, ticket tier, where the user
came from, consents, a free-text answer) and are sized on purpose: each intake item, as
``SignupStore.put_intake`` writes it (with its ``undecided`` marker), lands in the configured
byte range (at most 1 KB by default, so it costs one write unit, and one more for its entry
in the marker's index).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from turnstile.base.contract import Attr, undecided_shard
from turnstile_bench.metering import item_size

__all__ = [
    "SUBMITTED_AT_EXAMPLE",
    "Signup",
    "Workload",
    "dynamodb_values",
    "event_capacities",
    "generate",
    "intake_item",
    "parse_seats",
]

#: Every ``submitted_at`` has this length (``processor.utc_now``): sizes are exact up front.
SUBMITTED_AT_EXAMPLE = "2026-01-01T00:00:00.000000Z"

_serializer = TypeSerializer()


@dataclass(frozen=True)
class Workload:
    """The knobs of one benchmark run."""

    events: int = 4
    capacity: int = 150
    signups: int = 1200
    producers: int = 8
    #: (seats, weight) pairs: how many seats one signup asks for.
    seats: tuple[tuple[int, float], ...] = ((1, 0.7), (2, 0.2), (4, 0.1))
    #: Share of all signups that go to the first ("hot") event; the rest spread evenly.
    hot_share: float = 0.5
    #: Intake item size range in bytes, drawn uniformly (DynamoDB's sizing rules).
    intake_bytes: tuple[int, int] = (350, 900)
    seed: int = 6

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seats"] = {str(s): w for s, w in self.seats}
        out["intake_bytes"] = list(self.intake_bytes)
        return out


@dataclass(frozen=True)
class Signup:
    """One request for seats, as a producer submits it."""

    event_id: str
    signup_id: str
    seats: int
    attributes: Mapping[str, Any]


def parse_seats(text: str) -> tuple[tuple[int, float], ...]:
    """``"1:70,2:20,4:10"`` -> ((1, 0.7), (2, 0.2), (4, 0.1)); weights need not add to 1."""
    pairs: list[tuple[int, float]] = []
    for part in text.split(","):
        seats, _, weight = part.strip().partition(":")
        if int(seats) < 1 or float(weight or 1) <= 0:
            raise ValueError(f"bad seats weight {part!r}")
        pairs.append((int(seats), float(weight or 1)))
    total = sum(w for _, w in pairs)
    return tuple((s, w / total) for s, w in pairs)


def event_ids(count: int) -> list[str]:
    """Event ids; the first is the hot one."""
    return [f"bench-ev{i:02d}" for i in range(count)]


def event_capacities(workload: Workload) -> dict[str, int]:
    return dict.fromkeys(event_ids(workload.events), workload.capacity)


def dynamodb_values(value: Any) -> Any:
    """Python values as DynamoDB returns them: numbers as Decimal, bools kept."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {k: dynamodb_values(v) for k, v in value.items()}
    return value


def intake_item(
    event_id: str,
    signup_id: str,
    seats: int,
    attributes: Mapping[str, Any],
    submitted_at: str,
    marked: bool = False,
) -> dict[str, Any]:
    """The typed intake item exactly as ``SignupStore.put_intake`` writes it (no TTL, no
    ``undecided`` marker); ``marked=True``: with the marker, as a re-emission, a request or
    a producer that chose to mark it leaves it."""
    values = {
        Attr.EVENT_ID: event_id,
        Attr.SIGNUP_ID: signup_id,
        Attr.SEATS: seats,
        Attr.SUBMITTED_AT: submitted_at,
        Attr.ATTRIBUTES: dynamodb_values(dict(attributes)) if attributes else None,
        Attr.UNDECIDED: undecided_shard(event_id, signup_id) if marked else None,
    }
    return {
        k: _serializer.serialize(dynamodb_values(v)) for k, v in values.items() if v is not None
    }


_FIRST = ["Aiko", "Haruto", "Yui", "Sota", "Maria", "James", "Chen", "Fatima", "Lucas", "Emma"]
_LAST = ["Tanaka", "Suzuki", "Sato", "Garcia", "Smith", "Wang", "Khan", "Silva", "Muller"]
_KANJI = ["山田 太郎", "佐藤 花子", "鈴木 一郎", "高橋 美咲", "田中 健"]
_LOCALES = ["ja-JP", "en-US", "en-GB", "pt-BR", "zh-TW", "de-DE"]
_TIERS = [("standard", 5500), ("student", 3000), ("vip", 12000)]
_CHANNELS = ["ios", "android", "web", "partner"]
_DIETS = ["none", "vegetarian", "vegan", "halal", "gluten-free"]
_COMMENT = (
    "looking forward to the show could you seat us near the aisle my friend uses a "
    "wheelchair we will arrive by train please send the invoice to my company thanks"
)
_WORDS = _COMMENT.split(" ")


def _attributes(rng: random.Random, index: int) -> dict[str, Any]:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    tier, price = rng.choice(_TIERS)
    attributes: dict[str, Any] = {
        "name": rng.choice(_KANJI) if rng.random() < 0.3 else f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}{index}@example.com",
        "phone": f"+81-90-{rng.randrange(10000):04d}-{rng.randrange(10000):04d}",
        "locale": rng.choice(_LOCALES),
        "ticket": {"tier": tier, "price_jpy": price},
        "source": {
            "channel": rng.choice(_CHANNELS),
            "campaign": "spring-2026",
            "referrer": f"https://news.example.org/articles/{rng.randrange(10**6)}",
        },
        "consent": {"terms": "2026-04", "marketing": rng.random() < 0.4},
        "answers": {"dietary": rng.choice(_DIETS), "tshirt": rng.choice("SMLX"), "comment": ""},
    }
    return attributes


def _fit(attributes: dict[str, Any], base: int, target: int, rng: random.Random) -> None:
    """Grow the free-text answer until the intake item is ``target`` bytes (ASCII: exact)."""
    missing = max(0, target - base)
    words: list[str] = []
    length = 0
    while length < missing:
        words.append(rng.choice(_WORDS))
        length += len(words[-1]) + 1
    attributes["answers"]["comment"] = " ".join(words)[:missing]


def generate(workload: Workload) -> list[Signup]:
    """The signups in arrival order (seeded): hot-event share, seats and sizes as asked."""
    rng = random.Random(workload.seed)
    ids = event_ids(workload.events)
    hot = round(workload.signups * workload.hot_share) if workload.events > 1 else 0
    targets = [ids[0]] * hot + [
        rng.choice(ids[1:]) if workload.events > 1 else ids[0]
        for _ in range(workload.signups - hot)
    ]
    rng.shuffle(targets)
    seat_values = [s for s, _ in workload.seats]
    seat_weights = [w for _, w in workload.seats]
    low, high = workload.intake_bytes
    signups: list[Signup] = []
    for index, event_id in enumerate(targets):
        # Real ids are not a tidy counter; this keeps the journal's compression honest.
        signup_id = f"u{index:06d}-{rng.getrandbits(40):010x}"
        seats = rng.choices(seat_values, seat_weights)[0]
        attributes = _attributes(rng, index)
        item = intake_item(event_id, signup_id, seats, attributes, SUBMITTED_AT_EXAMPLE)
        _fit(attributes, item_size(item), rng.randint(low, high), rng)
        signups.append(Signup(event_id, signup_id, seats, attributes))
    return signups


def sizes_of(signups: Sequence[Signup]) -> list[int]:
    """Intake item sizes in bytes, as they will be written."""
    return [
        item_size(intake_item(s.event_id, s.signup_id, s.seats, s.attributes, SUBMITTED_AT_EXAMPLE))
        for s in signups
    ]
