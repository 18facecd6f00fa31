"""The errors a user's input raises: the CLI prints their one-line message and exits 2."""

from __future__ import annotations

from typing import Any


class UserError(Exception):
    """Bad input from the user (file, name, option): the CLI prints one line and exits 2."""


class InstanceError(ValueError, UserError):
    """An instance (or an instance file) breaks the format; the message names field, index, value."""

    def __init__(
        self, message: str, *, field: str = "", index: int | None = None, value: Any = None
    ):
        super().__init__(message)
        self.field = field
        self.index = index
        self.value = value


class ArgumentError(ValueError, UserError):
    """A Python API argument out of its range (the CLI's wording for the same option)."""


class ArgumentTypeError(TypeError, UserError):
    """A Python API argument of the wrong type (a seed that is not an integer, a solver None)."""


#: Longest time limit or job timeout accepted (seconds): one day. A search honours its time
#: limit even when its first plan is already ideal, so a larger one would run for days.
MAX_SECONDS = 86_400.0
#: Seeds are 32-bit (what every random generator here takes as is, and a results column holds).
MAX_SEED = 2**32 - 1
