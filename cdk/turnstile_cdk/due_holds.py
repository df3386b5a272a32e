"""Releasing due holds: every minute, re-emit the holding signup of each event whose
earliest hold is due, so the stream processor lapses it (docs/lifecycle.md §10)."""

from __future__ import annotations

from aws_cdk import Duration
from constructs import Construct

from turnstile.base.contract import FUNCTION_HANDLERS, Function

from .functions import FunctionConstruct, FunctionConstructProps
from .permissions import DUE_HOLDS_GRANTS
from .schedule import schedule_function

__all__ = ["DUE_HOLDS_INTERVAL", "DueHoldsConstruct"]

#: A due hold is re-emitted within this (plus the stream's delivery) of its expiry.
DUE_HOLDS_INTERVAL = Duration.minutes(1)


class DueHoldsConstruct(Construct):
    """Deploys ``turnstile.handlers.due_holds`` on its schedule. It decides nothing: it
    bumps ``redrive`` on an intake record (``SignupStore.re_emit``), a MODIFY the stream
    filter lets through, which the processor passes as a tick of the record's event.

    Parts: ``function``, ``schedule`` and its invoke-only ``schedule_role``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: FunctionConstructProps,
        *,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = FunctionConstruct(
            self,
            "DueHolds",
            props,
            handler=FUNCTION_HANDLERS[Function.DUE_HOLDS],
            description="turnstile due holds: re-emits the holder of each event whose hold is due",
            # Less than the interval; overlapping runs are harmless (one more tick each).
            timeout=Duration.seconds(50),
            memory_size=256,
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        self.handler.grant_tables(DUE_HOLDS_GRANTS)
        # A missed minute is not retried: the next one re-emits whatever is still due.
        self.schedule, self.schedule_role = schedule_function(
            self,
            self.function,
            what="due holds",
            rate=DUE_HOLDS_INTERVAL,
            max_event_age=Duration.minutes(1),
        )
