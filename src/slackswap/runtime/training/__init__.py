"""`prepare` and `PlannedStep`: a plan run step after step in a training loop.

``planned = prepare(model, plan, "50%")`` once, then ``with planned.step(): ...`` around each
iteration's forward and backward. The first step is the checked path (`slackswap.runtime.apply`:
every operator numbered and matched to the profile by a dispatch mode), and it learns, in the
order autograd packs them, every saved tensor's shape, dtype, storage size, plan entry and the
block whose forward saved it. Later steps install ``torch.autograd.graph.saved_tensors_hooks``
and nothing else, no dispatch mode:

- a saved tensor is identified by its position in the pack order (one integer), for which
  what to do was decided once per plan (`fast.pack_program`), and checked against what the
  first step learned (shape, dtype, storage bytes) and nothing else; no state change of the
  runtime's is checked on this path unless ``SLACKSWAP_CHECK_STATES=1``; a different shape is a
  `ShapeChangeError`
  before the step's first operator when the model's inputs changed shape (or, with
  ``replan=True``, the step is profiled and solved again with the same solver, with the
  loop's loss, ``loss_fn(output, batch)`` given ``planned.step(batch)``'s batch, and runs as
  the checked first step of the new plan);
- a kept tensor (and a parameter, or a value the plan does not cover) is handed back as is
  (its storage counted by the step's memory tracker, `memory.SavedBytesTracker`);
- a swapped tensor's storage is copied to host memory when first packed (pinned, on a side
  stream, on CUDA) and back when autograd first unpacks it, by the checked path's own copy
  engine (`slackswap.runtime.copies.CopyEngine`); on CUDA with a prefetching runtime the copies
  back are started ahead by the engine's look-ahead rule on the plan's memory model, in
  deadline order, the step's position read from the tensor being unpacked;
- recomputed tensors are rebuilt by PyTorch's own ``torch.utils.checkpoint`` (non-reentrant)
  over each profiled block whose saved tensors are all recomputed (those made inside it) or
  kept (its inputs), and none of whose recomputed tensors is saved after it or read by the
  rebuild of a recomputed tensor made after it (its output, which the checkpoint does not make
  again, saved by a pooling after the block, or read through views by a patch merging whose
  concatenation the plan recomputes): the block is run
  again in backward with the RNG state it first ran with, and buffers it updates (batch-norm
  statistics) are restored after the recomputation, so the model's state is that of one step.
  Other recomputed tensors (a convolution's output, which the batch-norm after the block saves;
  every recomputed tensor of such a block) are replayed from the
  first step's operator records,
  only the operators that make them (random ones from this step's RNG state, noted at the
  start of their module call or, when another random operator drew since, in the pack hook of
  the last tensor saved before them: `Replay.random_after_pack`); a plan whose recomputation needs a dispatch mode is run by the
  checked path at every step (`PlannedStep.fast` is False, `PlannedStep.reason` says why).

Every step is measured (`RunStats`, `PlannedStep.last_stats`): a later step by its own tracker
in the hooks (saved tensors' live bytes and the modelled transients), with held tensors (a
forward hook keeping activations) and retained ones (``retain_graph=True``) named; a step that
goes over its budget warns and makes the next step a checked one.

Where each part lives: `planned` (`prepare`, `PlannedStep`), `learning` (the first step, and
what it decides for later ones), `facts` (what every later step reads of its plan, made once),
`fast` (a later step's hooks), `checkpointing` (blocks under ``torch.utils.checkpoint``),
`replay` (rebuilds from the first step's records).
"""

from slackswap.runtime.training.fast import ShapeChangeError
from slackswap.runtime.training.planned import PlannedStep, prepare

__all__ = ["PlannedStep", "ShapeChangeError", "prepare"]
