"""SuperNeurons (Wang et al., PPoPP 2018): recompute cheap layers, LRU-evict heavy outputs."""

from __future__ import annotations

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import RECOMP, SWAP, Budget, Plan
from slackswap.solvers.base import Solver, Tags
from slackswap.solvers.baselines._common import category_mask
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.registry import register

#: Outputs of cheap layers (LayerNorm / RMSNorm, GeLU / SwiGLU, dropout masks): recomputed.
RECOMPUTED = ("elementwise", "dropout_mask")
#: Outputs of heavy layers (GEMM / convolution, attention): the LRU tensor cache's contents.
EVICTABLE = ("gemm_output", "attention_output")


def superneurons_actions(instance: Instance) -> np.ndarray:
    """RECOMP for cheap-layer outputs with a finite cost, SWAP (evictable) for heavy outputs."""
    actions = np.zeros(instance.n_tensors, dtype=np.int8)
    cheap = category_mask(instance, RECOMPUTED) & np.isfinite(instance.tensor_recompute_s)
    actions[cheap] = RECOMP
    actions[category_mask(instance, EVICTABLE)] = SWAP
    return actions


@register(
    "superneurons",
    display=Display(colour="#ff7f0e", marker="^", order=5, label="SuperNeurons", featured=2),
)
class SuperNeurons(Solver):
    """SuperNeurons: recompute norm, activation and dropout outputs; evict GEMM and attention
    outputs on demand in LRU order; prefetch for the next heavy operator.

    The plan marks the outputs of cheap layers (categories ``elementwise`` and ``dropout_mask``)
    RECOMP, always, as SuperNeurons' cost-aware recomputation does for its cheap layers, and the
    outputs of GEMMs, convolutions and attention (``gemm_output``, ``attention_output``) SWAP,
    which on the ``on-demand-lru`` runtime means *evictable*: such a tensor leaves the device only
    when an allocation does not fit, least recently used first, with compute waiting for the
    eviction copy (SuperNeurons' tensor cache), and in backward the runtime prefetches the
    evicted inputs of the next heavy operator. Block inputs and residual-stream tensors (outputs
    of residual adds, not of a heavy layer) are kept: SuperNeurons' cache holds only the
    checkpoint layers' outputs.
    """

    key = "superneurons"
    tags = Tags(deterministic=True, static_plan=False, uses_seed=False)
    runtime = "on-demand-lru"

    def __init__(self) -> None:
        pass

    def solve(self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int) -> Plan:
        return Plan(instance, superneurons_actions(instance), runtime=self.runtime)
