"""The event model (paper Sec. 4.1) and runtimes (Sec. 3.4) that judge every plan.

One training step on one GPU: a compute stream running the operators in order, a D2H and an H2D
DMA engine, and a memory budget M. Semantics (the paper's ambiguities decided here; each is
tested in ``tests/simulator/test_simulator*.py``):

Memory (bytes, fragmentation-free). A saved tensor is allocated when its producer starts; an
operator's ``op_transient_bytes`` (temporaries, gradient buffers) live while it runs. Before each
operator or rebuild starts, used memory + its allocation must fit in M. keep: resident until
its last backward reader ends. recomp: freed after its last forward reader; rebuilt by a rebuild
step of ``tensor_recompute_s`` on the compute stream (counted in ``recompute_s``) right before
its first backward reader, resident from then until its last backward reader; the rebuild also
allocates ``tensor_rebuild_workspace_bytes`` (a chain's intermediates) beside it, admitted with
the tensor and freed when the rebuild ends, like an operator's transient bytes. A rebuild input
that is itself recomp is rebuilt first, at the same point (so a chain rebuilds inputs first and
each stays until its own last backward reader); a swapped input must be on the device (its H2D
deadline is the earliest of its first backward reader and any rebuild needing it); a kept input
stays at least until the rebuilds that read it. RECOMP of a tensor with infinite recompute cost
makes the plan invalid (``feasible=False``; ``overflow_bytes`` is then the bytes of such tensors).

Link. Each engine runs its copies one at a time at ``link_bw_Bps``, at ``duplex_factor`` of it
while the other engine is busy (a copy in its latency phase counts as busy), after a fixed
``copy_latency_s`` per copy; rates change only when a copy starts or ends.

Barrier-free runtime (SlackSwap, Sec. 3.4). D2H: swapped tensors in production order (FIFO),
each starting no earlier than the end of its producer; the device buffer is freed once both the
copy and the last forward reader are done. A swapped tensor whose copy is not finished when the
backward pass starts (when its first operator starts, e.g. the loss's backward) stays on the
device (no H2D) and keeps its buffer when the copy ends; it becomes evictable once its host copy
exists. H2D: from the start of backward, in deadline order, one copy at a time; its bytes are
allocated on admission. The look-ahead test admits the head copy when used memory + its bytes +
the ``op_transient_bytes`` of the next three operators not yet started (fewer near the end)
fit in M. Used memory is everything allocated at that instant (saved and rebuilt tensors,
admitted prefetches, a running operator's transient bytes, a running rebuild's tensor and
workspace); the three are operators in execution order: a rebuild step is not one of them and
its bytes are not counted ahead. The test is made only in the backward pass, while the H2D
engine is idle and compute does not wait for memory, at these instants: when the backward pass
starts, before its first rebuild or operator allocates; when a copy ends on either engine,
after what its end frees; and when an operator ends, after its transient bytes and the tensors
it reads last are freed and before the next rebuild or operator allocates. At that last instant
the operator about to start has not started, so it is the first of the three: an admission
there leaves room for it and the two after it, which is what the paper's "the allocations of
the next three operators" asks of a runtime deciding between two operators, and what the live
PyTorch runtime does before each operator (`slackswap.runtime.copies`). (Counting the operator
that starts at that same instant as started would make the test at an operator boundary ask
room for four operators; ``tests/simulator/test_simulator_scenarios.py`` works a case by hand, and
`benchmarks/README.md`, "The judge's look-ahead instant", measures what that reading changes.)
The end of a rebuild and the end of a memory wait are not test instants: the next copy end or
operator end tests again. Compute waits only for the swapped tensors the next operator or rebuild reads
(stall: copy).
Deadlock rule: when compute waits for a tensor still queued and the H2D engine is idle (the
look-ahead refused the head), the head is admitted without the look-ahead, evicting if needed.
When compute lacks memory (stall: memory) no H2D copy is admitted. If the D2H copy in flight
frees its buffer when it ends (no operator still needs the tensor), compute waits for it. If it
does not, in the backward pass compute evicts device copies of swapped tensors that have a host
copy and are not needed by the current operator, furthest next use first (queued again for H2D
with that use as deadline; ties: the latest produced); when that is not enough (and in the
forward pass, which never evicts) it waits for the next copy to end and tries again. Why not
always wait for the copy in flight first, as the paper's runtime does ("while no copy is in
flight")? There every offload frees its buffer when it ends. Here an offload still running in
the backward pass belongs to a tensor that stays on the device, so its end frees nothing unless
the tensor's last backward reader is done; it only gives one more tensor a host copy. Waiting
for such copies held compute for the whole lagging queue while a tensor with its host copy could
leave at once (the wait-first rule is measured against this one in `benchmarks/README.md`,
"The judge's memory wait", where this one is also shown not to be better every time: an
eviction costs a prefetch later). The buffer of a swapped tensor whose last reader ends
before its offload stays until the offload ends, so even a keep/swap plan at a budget of P may
wait for memory. The deadlock rule above uses the same order.
If nothing is in flight and nothing can be evicted the plan is infeasible: ``reason`` and
``fail_op`` name the first failure, the run continues over budget and ``overflow_bytes`` is the
largest excess seen (so a search can rank infeasible plans); ``step_s`` is inf.
Numbers outside any physical range (instance validation should refuse them; the kernel does
not rely on it) end the run instead of hanging it, since a timer signal cannot interrupt
compiled code: a copy that never ends (a denormal link bandwidth) or a wait no copy can serve
is ``stuck``, a time that overflows to inf or nan (durations, latencies or recompute costs near
1e308) is ``not finite``, and more evictions than a correct run can make (a bound derived in
`kernel.sim_one`) stops it; each gives ``feasible=False`` with its reason.

Other runtimes (`RUNTIMES`): ``barriers`` (vDNN, Sec. 2.1: each offload counts against the layer
of its tensor's last forward reader, so it overlaps that layer; the first forward operator of the
next layer waits until every offload counted against it or an earlier layer is done (the FIFO
ahead of them included), and the first backward operator until every offload is done. Backward:
the first segment's prefetches are released at the start of backward; at the start of each
backward layer segment the prefetches of the closest later segment that still has one not started
are released (vDNN prefetches the closest preceding offloaded layer, skipping layers with nothing
to fetch) and compute waits until every swapped tensor needed in the current segment is on the
device), ``layer-prefetch`` (at each segment start the next segment's prefetches are released,
offloaded or not; no wait; in both, released copies pass the same look-ahead test, made also at
each segment start after the release), ``sync`` (every operator waits for every earlier offload; a swapped
tensor's H2D starts only when compute needs it; no look-ahead). Layers are maximal runs of equal
``op_layer`` in execution order.

Memory of a prefetch. Sec. 3.3's profile (the planner's) counts a swapped tensor again from its
first backward use; here its bytes count from the admission of its H2D copy, when the buffer is
really held, so a plan the profile accepts can still wait for memory or need the deadlock rule.

Stalls. A wait for a copy the next step reads is a copy stall; a wait because the allocation does
not fit is a memory stall; each is charged to the forward or backward pass of the operator that
waits (a rebuild's waits to the backward pass).

Times. The step is ``ideal_s + delay``, where delay accumulates rebuild times and stalls: a plan
that never waits gives ``step_s == ideal_s`` exactly. Copies still running after the last
operator do not lengthen the step (they still count in ``d2h_bytes`` / ``h2d_bytes``).
"""

from slackswap.simulator.api import score_many, simulate, simulate_many
from slackswap.simulator.policies import (
    RUNTIMES,
    ExecutionMode,
    Runtime,
    RuntimeSpec,
    get_runtime,
    register_runtime,
    runtime_names,
)
from slackswap.simulator.result import BatchResult, SimResult, Timeline

__all__ = [
    "RUNTIMES",
    "BatchResult",
    "ExecutionMode",
    "Runtime",
    "RuntimeSpec",
    "SimResult",
    "Timeline",
    "get_runtime",
    "register_runtime",
    "runtime_names",
    "score_many",
    "simulate",
    "simulate_many",
]
