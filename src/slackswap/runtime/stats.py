"""`RunStats`, what the runtime did and measured in one planned step, and the warnings a step
that ended above its budget (or with activations held outside autograd) gets. No torch import:
the checked path (`checked`), the training path and the CLI read these."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from slackswap.console import format_bytes

__all__ = ["BudgetWarning", "HeldTensorWarning", "RunStats", "forward_hooked_modules", "warn_about"]


class BudgetWarning(UserWarning):
    """A planned step's measured peak (`StorageTracker`) ended above its budget."""


class HeldTensorWarning(BudgetWarning):
    """Saved tensors planned to swap or recompute stayed referenced outside autograd (a
    forward hook or a variable keeping activations), so their memory was never freed."""


@dataclass
class RunStats:
    """What the runtime did in one step (bytes); filled when the ``with`` block exits."""

    swapped_bytes: int = 0
    h2d_bytes: int = 0
    recomputed_bytes: int = 0
    rebuilds: int = 0
    unplanned_packs: int = 0
    budget_bytes: int = 0
    simulated_peak_bytes: int = 0
    simulated_step_s: float = 0.0
    runtime: str = ""
    #: The instance index of the operator the step is at (0 before the step starts).
    op_index: Any = None
    #: The tracker's peak of live activation bytes during the step (see ``measured``).
    measured_peak_bytes: int | None = None
    #: How far the measured peak ended above ``budget_bytes`` (0 when within).
    over_budget_bytes: int = 0
    #: CUDA: ``torch.cuda.max_memory_allocated`` over the step, above what was allocated
    #: before it: gradients, kernel workspace and allocator rounding the tracker does not see.
    #: None without CUDA (CPU kernel scratch is seen by neither).
    cuda_peak_bytes: int | None = None
    #: Saved tensors a reference outside autograd (a forward hook, a variable) kept alive past
    #: where the plan frees them (names), and their bytes: swapped or recomputed ones after
    #: their last forward reader (never in ``swapped_bytes`` / ``recomputed_bytes``), kept
    #: ones after their last backward reader when the model has a forward hook of the
    #: caller's (else the holder is taken for a variable of the caller's, such as the output).
    held_tensors: list[str] = field(default_factory=list)
    held_bytes: int = 0
    #: The model's forward ran inside ``torch.autocast`` with its cache of casts on (its
    #: default): each parameter's cast (a saved tensor of the profile) stays referenced by that
    #: cache until the autocast region ends, whatever the plan does with it.
    autocast_cache: bool = False
    #: The model's modules with a forward hook of the caller's (``""``: the model; "global":
    #: a global forward hook), named when tensors were held: the likely holders.
    hooked_modules: list[str] = field(default_factory=list)
    #: A held tensor was saved again by a reentrant ``torch.utils.checkpoint``'s re-run forward
    #: after its last backward reader, or (a swapped or recomputed one) freed during the
    #: backward pass, as a non-reentrant checkpoint's function goes with its block's backward:
    #: the checkpointed function holds it through a closure (``functools.partial`` keyword
    #: arguments, say) from the forward pass on.
    checkpoint_closure: bool = False
    #: What ``measured_peak_bytes`` counts: "operator outputs" (the checked path's
    #: `StorageTracker`: every storage an operator allocates) or "saved tensors, with
    #: modelled transients" (a fast step of the training path, `SavedBytesTracker`: the
    #: storages of the saved tensors it sees, counted in its hooks and taken off when freed,
    #: plus the transient bytes the instance models for the operator the step is at; not what
    #: a ``torch.utils.checkpoint`` block recomputes inside its own hooks).
    measured: str = ""
    #: The operator running when the measured peak was reached ("" when unknown).
    peak_op: str = ""
    #: Saved tensors autograd still held when the step ended, and their bytes: a graph kept
    #: with ``backward(retain_graph=True)`` (or an output still referenced whose graph the
    #: backward pass did not reach) holds each past its last reader, where the plan frees it.
    retained_tensors: int = 0
    retained_bytes: int = 0


def warn_about(stats: RunStats, *, stacklevel: int = 4) -> None:
    """The `HeldTensorWarning` and `BudgetWarning` ``stats`` calls for (none when neither)."""
    if stats.held_tensors:
        warnings.warn(
            HeldTensorWarning(
                f"{_held(stats)}, so their memory was not freed where the plan frees it"
            ),
            stacklevel=stacklevel,
        )
    if stats.over_budget_bytes > 0:
        at = f" at {stats.peak_op!r}" if stats.peak_op else ""
        causes = [c for c in (_held(stats), _retained(stats)) if c]
        warnings.warn(
            BudgetWarning(
                f"the step peaked at {format_bytes(stats.measured_peak_bytes or 0)}{at} by the "
                f"tracker ({stats.measured or 'operator outputs'}), "
                f"{format_bytes(stats.over_budget_bytes)} over the budget "
                f"{format_bytes(stats.budget_bytes)} (simulated "
                f"{format_bytes(stats.simulated_peak_bytes)})" + "".join(f"; {c}" for c in causes)
            ),
            stacklevel=stacklevel,
        )


def _held(stats: RunStats) -> str:
    """Why: references outside autograd kept saved tensors alive (naming the hooks)."""
    if not stats.held_tensors:
        return ""
    names = ", ".join(repr(n) for n in stats.held_tensors[:3])
    more = f" and {len(stats.held_tensors) - 3} more" if len(stats.held_tensors) > 3 else ""
    cause = _known_holder(stats)
    if cause:
        who = cause + (", or a forward hook?" if stats.hooked_modules else "?")
    elif stats.hooked_modules:
        hooks = ", ".join(
            "a global forward hook"
            if m == "global"
            else f"the forward hook on {m or 'the model'!r}"
            for m in stats.hooked_modules[:3]
        )
        who = f"{hooks}?"
    else:
        who = "a forward hook or a variable keeping activations?"
    return (
        f"{len(stats.held_tensors)} saved tensor(s) ({format_bytes(stats.held_bytes)}) stayed "
        f"referenced outside autograd ({who}): {names}{more}"
    )


def _known_holder(stats: RunStats) -> str:
    """A holder the step noted itself (not a guess among hooks and variables), with the fix."""
    if stats.checkpoint_closure:
        return (
            "a torch.utils.checkpoint whose function holds it through a closure, such as "
            "keyword arguments bound with functools.partial, until that block's backward: "
            "pass it to checkpoint as a positional argument"
        )
    if stats.autocast_cache:
        return (
            "torch.autocast's cache of casts, which keeps each parameter's cast for the whole "
            "autocast region: pass torch.autocast(..., cache_enabled=False)"
        )
    return ""


def _retained(stats: RunStats) -> str:
    """Why a step may end above its budget that no plan can help: autograd held on."""
    if not stats.retained_tensors:
        return ""
    return (
        f"autograd still held {stats.retained_tensors} saved tensor(s) "
        f"({format_bytes(stats.retained_bytes)}) when the step ended (backward(retain_graph="
        "True) keeps each until the graph goes; the plan frees it after its last reader)"
    )


def forward_hooked_modules(model: Any) -> list[str]:
    """The modules of ``model`` (paths; ``""`` the model itself) with a forward hook that is
    not slackswap's own, and "global" for a global forward hook: what may hold activations."""
    out = []
    if model is not None:
        for name, m in model.named_modules():
            if any(_theirs(h) for h in getattr(m, "_forward_hooks", {}).values()):
                out.append(name)
    try:
        from torch.nn.modules import module as torch_module  # a module's own registry
    except ImportError:  # pragma: no cover - a model means torch is there
        return out
    if any(_theirs(h) for h in torch_module._global_forward_hooks.values()):
        out.append("global")
    return out


def _theirs(hook: Any) -> bool:
    return not str(getattr(hook, "__module__", "") or "").startswith("slackswap.")
