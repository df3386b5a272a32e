"""In-memory stand-ins for turnstile's adapters, held to the real ones by tests/contract."""

from tests.fakes.store import FakeStore, Fault

__all__ = ["FakeStore", "Fault"]
