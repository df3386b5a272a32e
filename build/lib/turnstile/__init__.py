"""turnstile: decide who gets a limited resource, exactly once, in arrival order."""

__version__ = "0.1.0"
