"""What the ``turnstile`` command and the benchmark say when something optional is missing:
one line for the user (``CliError``), naming the extra to install. Both import it; neither
imports the other for it."""

from __future__ import annotations

__all__ = ["CliError", "needs_extra"]


class CliError(Exception):
    """A message for the user, printed as one line."""


def needs_extra(command: str, extra: str, exc: ModuleNotFoundError) -> CliError:
    """A command's optional dependencies (an extra in pyproject.toml) are not installed."""
    if (exc.name or "turnstile").split(".")[0] in ("turnstile", "turnstile_tools"):
        raise exc  # our own module missing is a bug, not an install to make
    return CliError(
        f"{exc.name} is not installed: `turnstile {command}` needs the {extra} extra "
        f"(pip install -e '.[{extra}]' in the repository)"
    )
