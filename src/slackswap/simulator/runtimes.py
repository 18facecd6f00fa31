"""Runtimes the event model knows: each is a set of policy switches of the one compiled kernel."""

from __future__ import annotations

from dataclasses import dataclass

from slackswap import plugins
from slackswap.plan import PlanError

#: Forward-pass waits for offloads (``RuntimeSpec.fwd_wait``).
FWD_WAIT_NONE = 0  # compute never waits for a D2H copy except for memory
FWD_WAIT_LAYER = 1  # a layer's first operator waits for the offloads earlier layers read last
FWD_WAIT_EVERY_OP = 2  # every operator waits until every earlier offload is done (copies inline)

#: When swapped tensors are released to the H2D engine (``RuntimeSpec.h2d_release``).
H2D_ALL_AT_BACKWARD = 0  # all of them when the backward pass starts, in deadline order
H2D_LAYER_AHEAD_BARRIER = 1  # closest layer with prefetches; a layer waits for all its own
H2D_LAYER_AHEAD = 2  # one layer ahead; compute waits only for the tensors it reads
H2D_ON_DEMAND = 3  # only when compute needs the tensor (no prefetch)


@dataclass(frozen=True)
class RuntimeSpec:
    """Policy switches of the event-model kernel (see `slackswap.simulator` for the semantics).

    ``lookahead_ops``: an H2D copy is admitted when used memory + its bytes + the transient
    allocations of the next ``lookahead_ops`` operators fit in the budget.
    """

    name: str
    description: str
    fwd_wait: int = FWD_WAIT_NONE
    h2d_release: int = H2D_ALL_AT_BACKWARD
    lookahead_ops: int = 3

    def code(self) -> tuple[int, int, int]:
        return (self.fwd_wait, self.h2d_release, self.lookahead_ops)


_SPECS: dict[str, RuntimeSpec] = {}
#: Runtime name -> one-line description (the registry the CLI lists).
RUNTIMES: dict[str, str] = {}


def register_runtime(spec: RuntimeSpec) -> RuntimeSpec:
    """Add a runtime; refuses a name already taken."""
    if spec.name in _SPECS:
        raise ValueError(f"runtime {spec.name!r} is already registered")
    if spec.fwd_wait not in (0, 1, 2) or spec.h2d_release not in (0, 1, 2, 3):
        raise ValueError(f"runtime {spec.name!r}: unknown policy code")
    if spec.lookahead_ops < 0:
        raise ValueError(f"runtime {spec.name!r}: lookahead_ops must be >= 0")
    _SPECS[spec.name] = spec
    RUNTIMES[spec.name] = spec.description
    return spec


def get_runtime(name: str) -> RuntimeSpec:
    """The spec of a registered runtime (plug-ins' included); a `UserError` naming the choices
    otherwise."""
    plugins.load_group(plugins.RUNTIMES, RUNTIMES.keys)  # once per process; raises on a bad one
    spec = _SPECS.get(name)
    if spec is None:
        raise PlanError(f"runtime = {name!r}: unknown (one of {', '.join(RUNTIMES)})")
    return spec


register_runtime(
    RuntimeSpec(
        "barrier-free",
        "SlackSwap (Sec. 3.4): eager D2H, deadline-ordered H2D from the start of backward "
        "with a three-operator memory look-ahead, no barriers",
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
    )
)

# Runtimes run by a Python event loop instead of the kernel (added by the baselines engineer):
# name -> (simulate(instance, actions, budget_bytes, timeline) -> SimResult,
#          simulate_population(instance, actions_2d, budget_bytes) -> BatchResult).
from slackswap.simulator import runtime_lru as _lru  # noqa: E402

PY_RUNTIMES = {_lru.RUNTIME: (_lru.simulate_result, _lru.simulate_population)}
RUNTIMES[_lru.RUNTIME] = _lru.DESCRIPTION
