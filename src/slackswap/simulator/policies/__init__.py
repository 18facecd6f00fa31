"""Execution policies: how the simulator executes a plan's actions (the paper's runtimes,
not the PyTorch runtime `slackswap.runtime`). The one registry: compiled (`RuntimeSpec`) and
Python (`Runtime`) policies by name; each other module of this package is one policy."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar

from slackswap import plugins
from slackswap.plan import PlanError
from slackswap.simulator.policies.base import ExecutionMode, Runtime
from slackswap.simulator.policies.compiled import (
    FWD_WAIT_EVERY_OP,
    FWD_WAIT_LAYER,
    FWD_WAIT_NONE,
    H2D_ALL_AT_BACKWARD,
    H2D_LAYER_AHEAD,
    H2D_LAYER_AHEAD_BARRIER,
    H2D_ON_DEMAND,
    RuntimeSpec,
)

__all__ = [
    "FWD_WAIT_EVERY_OP",
    "FWD_WAIT_LAYER",
    "FWD_WAIT_NONE",
    "H2D_ALL_AT_BACKWARD",
    "H2D_LAYER_AHEAD",
    "H2D_LAYER_AHEAD_BARRIER",
    "H2D_ON_DEMAND",
    "RUNTIMES",
    "ExecutionMode",
    "Runtime",
    "RuntimeSpec",
    "execution_modes",
    "get_runtime",
    "register_runtime",
    "runtime_names",
]

R = TypeVar("R", bound=Runtime)

_REGISTRY: dict[str, Runtime] = {}


def _registered() -> dict[str, Runtime]:
    """The registry as every lookup below reads it (the one place plug-in discovery hooks in)."""
    # Each module of this package but the base class and the compiled kernel's is one
    # policy and registers itself when imported: a new one is one new module here.
    plugins.import_modules(__package__ or "slackswap.simulator.policies", skip={"base", "compiled"})
    plugins.load_group(plugins.RUNTIMES, _REGISTRY.keys)  # once per process; raises on a bad one
    return _REGISTRY


def register_runtime(runtime: R) -> R:
    """Add a runtime: a `RuntimeSpec` (the compiled kernel's switches) or an instance of a
    `Runtime` subclass (its own ``simulate``); refuses a name already taken.

    ``register_runtime(RuntimeSpec("eager-sync", "one line", fwd_wait=FWD_WAIT_EVERY_OP))``
    recombines the kernel's switches; a Python runtime is a class::

        class MyRuntime(Runtime):
            name, description = "my-runtime", "one line for the CLI"
            def simulate(self, instance, actions, budget_bytes, timeline=False) -> SimResult: ...
        register_runtime(MyRuntime())

    Either is then taken by ``simulate(..., runtime=name)``, ``simulate_many``, ``score_many``,
    ``Plan(..., runtime=name)`` and ``--runtime``.
    """
    if not isinstance(runtime, Runtime):
        raise TypeError(
            "register_runtime: expected a RuntimeSpec or an instance of a Runtime subclass, "
            f"got {type(runtime).__name__}"
        )
    name = getattr(runtime, "name", None)
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"runtime name {name!r}: expected a non-empty name without blanks")
    if not isinstance(getattr(runtime, "description", None), str):
        raise ValueError(f"runtime {name!r}: description must be a string")
    if name in _REGISTRY:
        raise ValueError(f"runtime {name!r} is already registered")
    _REGISTRY[name] = runtime
    return runtime


def runtime_names() -> list[str]:
    """The registered runtimes' names, in registration order."""
    return list(_registered())


def get_runtime(name: str) -> Runtime:
    """The registered runtime called ``name``; a `UserError` naming the choices otherwise."""
    found = _registered().get(name)
    if found is None:
        raise PlanError(f"runtime = {name!r}: unknown (one of {', '.join(runtime_names())})")
    return found


def execution_modes() -> dict[str, ExecutionMode]:
    """The registered runtimes the real PyTorch runtime (`slackswap.runtime`) can run, by name."""
    return {n: rt.execution for n, rt in _registered().items() if rt.execution is not None}


class _Descriptions(Mapping[str, str]):
    """Runtime name -> one-line description, read from the registry at each use."""

    def __getitem__(self, name: str) -> str:
        return _registered()[name].description

    def __iter__(self) -> Iterator[str]:
        return iter(runtime_names())

    def __len__(self) -> int:
        return len(_registered())

    def __repr__(self) -> str:
        return repr(dict(self))


#: Runtime name -> one-line description (what the CLI lists), derived from the registry.
RUNTIMES: Mapping[str, str] = _Descriptions()

register_runtime(
    RuntimeSpec(
        "barrier-free",
        "SlackSwap (Sec. 3.4): eager D2H, deadline-ordered H2D from the start of backward "
        "with a three-operator memory look-ahead, no barriers",
        execution=ExecutionMode(overlap=True, prefetch=True),
    )
)
register_runtime(
    RuntimeSpec(
        "barriers",
        "vDNN per-layer synchronisation: an offload overlaps the layer that reads its tensor "
        "last and the next layer waits for it; backward prefetches the closest layer with "
        "offloads and a layer waits for its own prefetches",
        fwd_wait=FWD_WAIT_LAYER,
        h2d_release=H2D_LAYER_AHEAD_BARRIER,
    )
)
register_runtime(
    RuntimeSpec(
        "layer-prefetch",
        "side streams, eager D2H; backward prefetches one layer ahead; compute waits only "
        "for the tensors it reads",
        h2d_release=H2D_LAYER_AHEAD,
        # The offload-overlap solver's runtime. Live (CUDA) the real runtime prefetches by the
        # look-ahead rule, not one layer ahead; replayed (CPU) it follows this runtime's schedule.
        execution=ExecutionMode(overlap=True, prefetch=True),
    )
)
register_runtime(
    RuntimeSpec(
        "sync",
        "copies on the compute stream: each D2H blocks compute right after its producer, "
        "each H2D right before first use; no prefetch",
        fwd_wait=FWD_WAIT_EVERY_OP,
        h2d_release=H2D_ON_DEMAND,
        lookahead_ops=0,
        execution=ExecutionMode(overlap=False, prefetch=False),  # offload-sync, as save_on_cpu
    )
)
