"""`StepObserver`: what the checked path tells whoever watches its step (no torch import).

`slackswap.runtime.apply` takes one (``observer=``); the executor calls each method at the
moment its name says. The base class does nothing, so an observer overrides only what it needs.
The training path's first step is one (`training.learning.FirstStepObserver`): it learns each
saved tensor's pack and the RNG state of random operators from the checked path, without
extending the executor.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StepObserver"]


class StepObserver:
    """Told of one checked step as it runs; every method is a no-op here."""

    def started(self, executor: Any) -> None:
        """The step's executor is made (`executor.PlanExecutor`), before its first operator."""

    def before_forward_op(self, func: Any, args: Any, kwargs: Any) -> Any:
        """A forward operator of the step is about to run; what is returned is handed to
        `after_forward_op` (so an observer can compare before and after)."""
        return None

    def after_forward_op(self, token: Any, index: int, func: Any, args: Any, kwargs: Any) -> None:
        """The forward call ``func`` ran; ``index``: the step's operator count before it (its
        operator number, when it was a profiled operator)."""

    def packed(self, t: Any, entry: int) -> None:
        """Autograd saved ``t`` for backward: the plan's tensor ``entry`` (-1: not planned)."""

    def packed_earlier(self, t: Any, entry: int) -> None:
        """Autograd saved ``t``, which holds an earlier value of plan tensor ``entry``'s
        storage: an in-place update changes it before the step saves ``entry`` itself, and
        autograd reads ``t``'s view of the storage as the step leaves it, i.e. from ``entry``.
        Told as `packed` unless overridden."""
        self.packed(t, entry)

    def closing(self, executor: Any) -> None:
        """The step is over; the executor still holds its records (it drops them next)."""
