"""The one error type of the migration: which step failed and why, in words an operator can act on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class MigrationError(Exception):
    """A step refused to go on; ``step`` is one of preflight, target, load, verify (or snapshot, reset)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.message = message


class PsqlError(Exception):
    """psql failed (connection, SQL, timeout); a step turns it into a MigrationError naming itself."""


@contextmanager
def step_errors(step: str) -> Iterator[None]:
    """Report psql failures inside ``step`` as that step's MigrationError."""
    try:
        yield
    except PsqlError as error:
        raise MigrationError(step, str(error)) from error
