"""Domain errors. Adapters translate AWS error codes into these; nothing branches on text."""

from __future__ import annotations

__all__ = [
    "CapacityBelowTakenError",
    "CommitConflictError",
    "ConflictError",
    "DuplicateRunError",
    "EventExistsError",
    "EventNotFoundError",
    "EventQuotaError",
    "ForbiddenError",
    "InvalidRequestError",
    "JournalTooLargeError",
    "LeaseLostError",
    "NotFoundError",
    "RequestRefusedError",
    "SignupConflictError",
    "SignupNotFoundError",
    "StoreUnavailableError",
    "TurnstileError",
]


class TurnstileError(Exception):
    """Base of every error turnstile raises on purpose."""


class StoreUnavailableError(TurnstileError):
    """DynamoDB throttled or failed past our retries: transient, try the work again later."""


class CommitConflictError(TurnstileError):
    """The event item changed under us (its version moved on): reload and decide again."""


class InvalidRequestError(TurnstileError):
    """A request that breaks the contract; ``problems`` names every way it does."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


class NotFoundError(TurnstileError):
    """What the request names does not exist."""


class ConflictError(TurnstileError):
    """The request contradicts what was already recorded under the same id."""


class EventQuotaError(TurnstileError):
    """The organizer has created as many events as it may (403 event_quota_exceeded)."""


class ForbiddenError(TurnstileError):
    """The caller may not do this: the event is another organizer's (403)."""


class EventExistsError(ConflictError):
    """An event with this id already exists."""


class EventNotFoundError(NotFoundError):
    """No event item with this id."""


class SignupNotFoundError(NotFoundError):
    """No decision and no intake record for this signup."""


class CapacityBelowTakenError(TurnstileError):
    """A capacity lower than the seats already taken: it can go down to ``taken``, no lower."""

    def __init__(self, event_id: str, capacity: int, taken: int, dealt: bool = False) -> None:
        # ``dealt``: a sharded event, whose floor is the seats its pool dealt to its shards
        # (given, or held by a shard to give next: docs/hot-events.md).
        what = "dealt to its shards" if dealt else "already taken"
        super().__init__(
            f"capacity {capacity} is below the {taken} seats {what} of event "
            f"{event_id!r}; it can go down to {taken}"
        )
        self.event_id = event_id
        self.capacity = capacity
        self.taken = taken


class SignupConflictError(ConflictError):
    """The signup id was already submitted with a different body."""


class RequestRefusedError(ConflictError):
    """A confirm or cancel the signup's current status does not allow (docs/lifecycle.md,
    §7): nothing was recorded. ``status`` is the signup's status as the refusal saw it
    (PENDING when not decided yet), with its ``hold_expires_at`` and ``reason`` if any."""

    def __init__(
        self,
        event_id: str,
        signup_id: str,
        request: str,
        status: str,
        hold_expires_at: str | None = None,
        reason: str | None = None,
    ) -> None:
        why = f"it is {status}"
        if hold_expires_at and status == "HELD":
            # Only a confirm is refused while HELD: its hold lapsed (the processor will
            # mark it EXPIRED at its next step).
            why += f", but its hold expired at {hold_expires_at}"
        elif reason:
            why += f" ({reason})"
        super().__init__(f"cannot {request} signup {signup_id!r} of event {event_id!r}: {why}")
        self.event_id = event_id
        self.signup_id = signup_id
        self.request = request
        self.status = status
        self.hold_expires_at = hold_expires_at
        self.reason = reason


class LeaseLostError(TurnstileError):
    """The sweeper's lease expired or was taken over: it must stop writing at once."""


class DuplicateRunError(TurnstileError):
    """The same sweep run was started twice at the same moment; this start must stop."""


class JournalTooLargeError(TurnstileError):
    """One commit's journal would make the event item too big; ``fits`` decisions would fit."""

    def __init__(self, message: str, fits: int) -> None:
        super().__init__(message)
        self.fits = fits
