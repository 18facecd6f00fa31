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
