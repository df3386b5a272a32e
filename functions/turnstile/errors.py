"""Domain errors. Adapters translate AWS error codes into these; nothing branches on text."""

from __future__ import annotations

__all__ = [
    "CapacityBelowTakenError",
    "CommitConflictError",
    "DuplicateRunError",
    "EventExistsError",
    "EventNotFoundError",
    "JournalTooLargeError",
    "LeaseLostError",
    "SignupConflictError",
    "StoreUnavailableError",
    "TurnstileError",
]


class TurnstileError(Exception):
    """Base of every error turnstile raises on purpose."""


class StoreUnavailableError(TurnstileError):
    """DynamoDB throttled or failed past our retries: transient, try the work again later."""


class CommitConflictError(TurnstileError):
    """The event item changed under us (its version moved on): reload and decide again."""


class EventExistsError(TurnstileError):
    """An event with this id already exists."""


class EventNotFoundError(TurnstileError):
    """No event item with this id."""


class CapacityBelowTakenError(TurnstileError):
    """A capacity lower than the seats already taken: it can go down to ``taken``, no lower."""

    def __init__(self, event_id: str, capacity: int, taken: int) -> None:
        super().__init__(
            f"capacity {capacity} is below the {taken} seats already taken of event "
            f"{event_id!r}; it can go down to {taken}"
        )
        self.event_id = event_id
        self.capacity = capacity
        self.taken = taken


class SignupConflictError(TurnstileError):
    """The signup id was already submitted with a different body."""


class LeaseLostError(TurnstileError):
    """The sweeper's lease expired or was taken over: it must stop writing at once."""


class DuplicateRunError(TurnstileError):
    """The same sweep run was started twice at the same moment; this start must stop."""


class JournalTooLargeError(TurnstileError):
    """One commit's journal would make the event item too big; ``fits`` decisions would fit."""

    def __init__(self, message: str, fits: int) -> None:
        super().__init__(message)
        self.fits = fits
