"""Run a `Plan` on the real PyTorch step its instance was profiled from (needs torch).

``with slackswap.runtime.apply(plan, budget="50%"): loss_fn(model(*inputs)).backward()`` runs
the step with each saved tensor kept, swapped to host memory or recomputed as the plan says,
with the simulator's barrier-free semantics (`slackswap.simulator`):

- keep: untouched (autograd holds the tensor as usual).
- swap: when the step first saves the tensor, its whole storage is copied to host memory
  (pinned, on a dedicated copy stream ordered after the producer, on CUDA; at once on CPU) and
  the runtime keeps no device reference, so the buffer is freed once the copy and the step's
  last use of it (its last forward reader) are done (CUDA: ``record_stream`` on the copy stream
  keeps the allocator from reusing it earlier). From the start of the backward pass, before
  each operator, copies back are started in deadline order (first backward reader) on a second
  stream while the head fits the budget with the transient bytes of the next three operators
  (the simulator's look-ahead, on the instance's memory model); a tensor needed before its copy
  was admitted is copied at once (the deadlock rule). Compute waits, through the copy's CUDA
  event, only when it unpacks that tensor. Without CUDA the same bookkeeping runs with
  synchronous copies.
- recompute: the runtime holds nothing, so the tensor is freed after its last forward reader;
  when autograd first unpacks it (right before its first backward reader) the forward operators
  that produced it are run again on its rebuild inputs (inputs that are themselves recomputed
  are rebuilt first and stay until their own last reader; swapped ones are fetched), random
  operators with the RNG state they first ran with, so dropout masks come out identical.
  Each operator is replayed in the grad mode it first ran in (nn.LSTM's CPU kernel returns
  more outputs with grad on). Buffers and other tensors of the caller's an operator updates in
  place (batch-norm running statistics, which ``native_batch_norm``'s schema does not mark as
  written) get a scratch copy, so the model's state is that of one step.

PyTorch pieces used and why: ``torch.autograd.graph.saved_tensors_hooks`` (what
``save_on_cpu`` and torchtune's offloading use) to hand autograd a handle instead of each
saved tensor and to learn the moment each one is needed again; a ``TorchDispatchMode`` (with
the profiler's value numbering) to number operators and values exactly as the profile did,
so each saved tensor is matched to the instance's by value, dtype, shape and producing
operator, and to record each forward operator's call so a chain can be replayed per tensor
(``torch.utils.checkpoint`` recomputes whole regions, not single tensors, so only its idea of
restoring the RNG state per random operator is borrowed); CUDA streams, events,
``record_stream`` and pinned memory for the overlapped copies.

The step must be the profiled one: the same operators in the same order (checked operator by
operator, the first difference named in a `StepMismatchError`), forward and backward inside
the ``with`` block. One backward pass: a second one over a graph kept with
``retain_graph=True``, inside the block or after it, is refused in one line naming
``retain_graph`` (the plan dropped what the first one needed). A plan for another instance
(``instance=``) or one that does not fit the budget in the simulator is refused before
anything is installed; every hook is removed on exit, also when the step raises.
`StorageTracker` measures the step's memory independently: `RunStats` carries its peak and how
far it ended above the budget, with a `BudgetWarning` when it did (naming, when autograd still
held saved tensors at the end, a graph kept with ``retain_graph=True``: it keeps each past its
last reader, where the plan frees it, or the forward hooks that held tensors); saved tensors a
reference outside autograd kept alive past where the plan frees them (swapped or recomputed
ones after their last forward reader, kept ones after their last backward reader) are named
(`HeldTensorWarning`, with the modules that have forward hooks) and not counted as swapped or
recomputed.

For a training loop, ``planned = prepare(model, plan, "50%")`` once and ``with planned.step():
loss_fn(model(x)).backward()`` each iteration: the first step is the checked one above, and it
learns every saved tensor's place in autograd's pack order; later steps run with
``saved_tensors_hooks`` alone (no dispatch mode, no per-operator Python): each saved tensor
checked by shape, dtype and storage size, kept ones handed back, swapped ones copied as above,
recomputed ones rebuilt by ``torch.utils.checkpoint`` over the profiled blocks whose saved tensors
are all recomputed, or by replaying the first step's operator records (dropout with the RNG state
of its module call). Every step is measured (a later one by its own tracker in the hooks,
`memory.SavedBytesTracker`); a step over its budget warns and makes the next one checked.
Other input shapes raise `ShapeChangeError` before the step's first operator, or re-plan
(``replan=True``). See `training`.

How copies run (side streams, prefetch, the look-ahead) is read from the simulator's runtime
registry (`policy.runtime_policy`); a runtime whose rules the live executor cannot follow is
refused before the step.

Where each part lives: `checked` (`check_plan`, `apply`), `stats` (`RunStats` and the
warnings), `observer` (what the checked path tells an observer), `executor` (matching the step,
the hooks), `copies` (the one copy engine: out, back, admission; both paths), `rebuild`
(recompute), `entry` (the per-tensor state they share: its place in the step and where its
bytes are, each an explicit checked state machine), `schedule` (the simulator's copy times),
`policy` (a runtime's rules), `training` (`prepare`, the training path), `memory` and `measure`
(checking a run).
"""

from __future__ import annotations

from typing import Any

from slackswap.runtime.checked import apply, check_plan
from slackswap.runtime.observer import StepObserver
from slackswap.runtime.stats import BudgetWarning, HeldTensorWarning, RunStats
from slackswap.simulator.policies import execution_modes
from slackswap.torchstep import require_torch

__all__ = [
    "apply",
    "BudgetWarning",
    "check_plan",
    "HeldTensorWarning",
    "prepare",
    "PlannedStep",
    "RunStats",
    "RUNTIME_MODES",
    "ShapeChangeError",
    "StepMismatchError",
    "StepObserver",
    "StorageTracker",
]


def __getattr__(name: str) -> Any:
    # executor and memory import torch at the top: loaded on first use, so this package (and
    # check_plan) works without the torch extra.
    if name == "RUNTIME_MODES":
        # Simulator runtime -> how this package runs it (`ExecutionMode`): read from the one
        # runtime registry at each use, so the names are the registered ones.
        return execution_modes()
    # lazy (each below): the module imports torch, an optional dependency
    if name == "StepMismatchError":
        from slackswap.runtime.executor import StepMismatchError  # lazy: imports torch

        return StepMismatchError
    if name in ("prepare", "PlannedStep", "ShapeChangeError"):
        require_torch()  # one line saying how to install the extra, not an ImportError
        import slackswap.runtime.training as training  # lazy: imports torch

        return getattr(training, name)
    if name == "StorageTracker":
        from slackswap.runtime.memory import StorageTracker  # lazy: imports torch

        return StorageTracker
    raise AttributeError(f"module 'slackswap.runtime' has no attribute {name!r}")
