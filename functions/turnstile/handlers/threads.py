"""Handlers run as threads of one process (the local stack), as Lambda runs them in
containers of their own: what each must not share with another."""

from __future__ import annotations

import threading
from collections.abc import Iterator, MutableMapping
from typing import Any

from aws_lambda_powertools import Metrics

__all__ = ["metrics_per_thread"]


class _PerThread(MutableMapping[str, Any]):
    """A dict of each thread's own."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _own(self) -> dict[str, Any]:
        own: dict[str, Any] | None = getattr(self._local, "own", None)
        if own is None:
            own = self._local.own = {}
        return own

    def __getitem__(self, key: str) -> Any:
        return self._own()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._own()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._own()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._own())

    def __len__(self) -> int:
        return len(self._own())

    def clear(self) -> None:
        self._own().clear()


_swapping = threading.Lock()


def metrics_per_thread(metrics: Metrics) -> None:
    """Give each thread its own of what ``metrics`` collects for one invocation (metrics,
    dimensions, metadata).

    Powertools keeps it in dicts every ``Metrics`` of a process shares (class attributes),
    as a Lambda container runs one invocation at a time and one function. The local stack
    runs its containers, and its functions, as threads of one process: one's flush
    published what another's invocation had added, and that one's found nothing. Called
    only where handlers run as threads (the local containers and API instances): on Lambda
    nothing changes. Once per ``Metrics``.
    """
    with _swapping:
        provider = metrics.provider
        if isinstance(provider.metric_set, _PerThread):
            return
        for name in ("metric_set", "dimension_set", "metadata_set"):
            per_thread = _PerThread()
            setattr(provider, name, per_thread)
            setattr(metrics, name, per_thread)
