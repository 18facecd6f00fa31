"""The raw record of one profiled training step, as plain data (no torch): ops, values, saves.

A *value* is the content of one storage between two writes: an operator that allocates a new
storage or writes one in place creates a value; views and aliases do not. Saved tensors are values,
so aliases and views of one storage count once, and in-place chains (convolution, then an in-place
ReLU) keep their order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXTERNAL = -1  # producer of a value no recorded operator wrote (model inputs, constants)


@dataclass
class OpRecord:
    """One operator that launches work (views and bare allocations are not recorded)."""

    aten: str  # overload packet name, e.g. "addmm"
    phase: int  # 0 forward, 1 backward
    module: str  # module path of the forward context ("" outside any module)
    block: int  # the last block entered (see `Trace`); -1 before the first block
    in_block: bool  # inside that block's module, or after it returned
    kind: str  # one of validation.OP_KINDS
    reads: list[int] = field(default_factory=list)  # value ids read (parameters excluded)
    writes: list[int] = field(default_factory=list)  # value ids created
    touched: list[tuple[int, int]] = field(default_factory=list)  # (storage key, bytes) used
    flops: float = 0.0  # 2 per multiply-add
    bytes_moved: float = 0.0  # bytes read and written (tensor extents, not storages)
    measured_s: float = 0.0  # wall time of the kernel call on the profiling device, seconds
    node: int = -1  # backward: sequence number of the autograd node running it (-1: none)
    task: int = -1  # backward: the backward pass (graph task) running it (-1: unknown)


@dataclass
class Value:
    """The content of a storage after one write."""

    storage: int  # storage key, unique for the whole trace
    nbytes: int  # bytes of the whole storage (what a saved view keeps alive)
    producer: int  # op index, or EXTERNAL
    dtype: str
    shape: tuple[int, ...] = ()  # shape of the tensor whose write created the value


@dataclass
class Trace:
    """Everything `build_instance` needs; filled by the recorder.

    Blocks are numbered by call: the k-th call of a block module is block k. Operators between
    two blocks belong to the earlier one; operators after the last block (the head and the loss)
    belong to block ``n_blocks`` (see `op_block`).
    """

    ops: list[OpRecord] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    saved: list[int] = field(default_factory=list)  # value ids in pack order (may repeat)
    # values first saved during the backward pass: a value the forward pass made that only a
    # reentrant checkpoint's re-run forward saves (handed to the block by a closure, not as an
    # input); the closure, not autograd, holds it from its producer on
    saved_first_in_backward: set[int] = field(default_factory=set)
    unpacked_before: list[tuple[int, int]] = field(default_factory=list)  # (value, next op index)
    # per entry of `unpacked_before`, the autograd node that unpacked it (-1: none); the node
    # holds what it unpacked until it has run all its operators
    unpacked_by: list[int] = field(default_factory=list)
    # per entry of `saved` (a pack), the backward operator after which autograd let go of what
    # the pack hook returned (the node that saved it ran, or the graph went); absent: let go in
    # the forward pass, or not observed
    let_go_after: dict[int, int] = field(default_factory=dict)
    block_inputs: dict[int, int] = field(default_factory=dict)  # value id -> block it enters
    block_outputs: dict[int, int] = field(default_factory=dict)  # value id -> block it leaves
    block_modules: list[str] = field(default_factory=list)  # module path of each block call
    param_bytes: int = 0  # parameters and buffers (not activations), for the record
    # storage key of a parameter gradient -> the last operator before autograd accumulated it
    grad_accumulated: dict[int, int] = field(default_factory=dict)
    # storage key of a saved tensor -> the forward operator after which the step's own
    # references (Python locals, C++ frames; not autograd's) were all gone; absent when still
    # held when the backward pass began (model inputs the caller holds) or not observed
    released_after: dict[int, int] = field(default_factory=dict)
    # storage key of a saved storage the step made that something besides autograd still held
    # when the backward pass began (a checkpoint's closure, an autograd Function's ``ctx``, a
    # forward hook storing it, autocast's cache) -> the operator after which that holder let
    # go of it, the last one when it held it past the backward pass; absent: let go in the
    # forward pass
    let_go_in_backward: dict[int, int] = field(default_factory=dict)
    # storage key of a storage an operator allocated -> the operator after which it was freed
    # (absent: still alive when the step ended)
    freed_after: dict[int, int] = field(default_factory=dict)
    # storage keys of storages that existed before the step (no recorded operator allocated
    # them: model inputs, targets, constants)
    preexisting: set[int] = field(default_factory=set)
    # storage keys of the model's own input tensors (its positional arguments), which a fast
    # step of the training path hands a rebuild; None: not recorded (every value the step
    # did not make is taken to be there when a rebuild reads it)
    model_inputs: set[int] | None = None

    @property
    def n_blocks(self) -> int:
        return len(self.block_modules)

    def op_block(self, op: OpRecord) -> int:
        """The block of ``op`` in the instance: -1 before the first block, ``n_blocks`` after
        the last one."""
        if not op.in_block and op.block == self.n_blocks - 1 and op.block >= 0:
            return self.n_blocks
        return op.block
