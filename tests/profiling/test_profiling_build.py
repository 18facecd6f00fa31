"""From a recorded trace to an instance (plain data, no torch): readers, chains, blocks, inputs."""

from __future__ import annotations

import math

import pytest

from slackswap.models.hardware import get_gpu, hardware
from slackswap.profiling.build import MAX_CHAIN_OPS, build_instance
from slackswap.torchstep.trace import EXTERNAL, OpRecord, Trace, Value


def _op(aten, phase, block, reads, writes, s, in_block=True, module="m"):
    return OpRecord(
        aten=aten,
        phase=phase,
        module=module,
        block=block,
        in_block=in_block,
        kind="memory",
        reads=reads,
        writes=writes,
        measured_s=s,
    )


def _build(trace: Trace):
    return build_instance(
        trace,
        name="t",
        hardware=hardware("a100"),
        gpu=get_gpu("a100"),
        timing="measured",  # the hand-set measured_s are the durations
    )


def _trace() -> Trace:
    """x (model input) -> f0 -> a -> f1 -> b -> f2 in place -> b' ; backward reads b', a, x."""
    tr = Trace()
    tr.values = [
        Value(storage=10, nbytes=400, producer=EXTERNAL, dtype="float32"),  # x
        Value(storage=11, nbytes=800, producer=0, dtype="float32"),  # a
        Value(storage=12, nbytes=800, producer=1, dtype="float32"),  # b (unsaved)
        Value(storage=12, nbytes=800, producer=2, dtype="float32"),  # b' = relu_(b)
        Value(storage=13, nbytes=16, producer=3, dtype="bool"),  # a mask
    ]
    tr.block_modules = ["layers.0"]
    tr.ops = [
        _op("embed", 0, -1, [0], [1], 1.0, in_block=False),
        _op("mm", 0, 0, [1], [2], 2.0),
        _op("relu_", 0, 0, [2], [3], 0.5),
        _op("native_dropout", 0, 0, [3], [4], 0.25, in_block=False),  # after the last block
        _op("mm", 1, 0, [3, 4], [], 3.0),
        _op("relu_bwd", 1, 0, [3], [], 1.0),
        _op("mm", 1, -1, [1], [], 3.0),
    ]
    tr.saved = [0, 1, 3, 3, 4]  # b' saved twice (two views): one tensor
    tr.block_inputs = {1: 0}
    tr.unpacked_before = [(0, 6), (4, 4)]
    return tr


def test_build_from_a_hand_trace() -> None:
    inst = _build(_trace())
    # A synthetic operator produces the model input; then the recorded operators in order.
    assert inst.op_name[0] == "input" and inst.op_duration_s[0] == 0.0
    assert inst.op_name[1:] == ("m/embed", "m/mm", "m/relu_", "m/native_dropout") + (
        "bwd:m/mm#1",
        "bwd:m/relu_bwd",
        "bwd:m/mm#2",
    )
    assert inst.n_tensors == 4 and inst.saved_bytes == 400 + 800 + 800 + 16
    x, a, b, mask = (
        inst.tensor_index[n]
        for n in ("input.0", "block0.in", "m/relu_.out", "m/native_dropout.out")
    )
    assert inst.tensor_category[a] == "block_input" and math.isinf(inst.tensor_recompute_s[a])
    assert inst.tensor_category[x] == "block_input" and inst.tensor_block[x] == -1
    # b' rebuilds through the unsaved b: relu_ + mm from a.
    assert inst.tensor_recompute_s[b] == pytest.approx(2.5)
    assert inst.tensor_rebuild_inputs[b] == (a,)
    # A bool output is a dropout mask, regenerated alone.
    assert inst.tensor_category[mask] == "dropout_mask"
    assert inst.tensor_recompute_s[mask] == pytest.approx(0.25)
    assert inst.tensor_rebuild_inputs[mask] == ()
    # Readers: forward from op reads, backward from reads and unpacks.
    assert inst.tensor_last_fwd_reader[b] == 4
    assert (inst.tensor_first_bwd_reader[b], inst.tensor_last_bwd_reader[b]) == (5, 6)
    assert inst.tensor_first_bwd_reader[x] == 7  # unpacked just before the last op
    # The dropout runs after the last block returned: it belongs to the head, block 1.
    assert inst.op_block.tolist() == [-1, -1, 0, 0, 1, 0, 0, -1]


def test_tensor_never_unpacked_is_read_by_the_last_backward_op() -> None:
    tr = _trace()
    tr.unpacked_before = []
    inst = _build(tr)
    x = inst.tensor_index["input.0"]
    assert inst.tensor_first_bwd_reader[x] == inst.n_ops - 1


def test_a_long_unsaved_chain_is_not_rebuildable() -> None:
    n = MAX_CHAIN_OPS + 2
    tr = Trace()
    tr.values = [Value(100, 8, EXTERNAL, "float32")] + [Value(i, 8, i, "float32") for i in range(n)]
    tr.ops = [_op("exp", 0, -1, [i], [i + 1], 1.0) for i in range(n)]
    tr.ops.append(_op("exp_bwd", 1, -1, [n], [], 1.0))
    tr.saved = [n]  # only the last value is saved: rebuilding it re-runs the whole chain
    inst = _build(tr)
    assert inst.n_tensors == 1 and math.isinf(inst.tensor_recompute_s[0])
    assert inst.tensor_rebuild_inputs[0] == ()
    # A short chain is fine: three ops from the model input.
    tr.values = [Value(100, 8, EXTERNAL, "float32")] + [Value(i, 8, i, "float32") for i in range(3)]
    tr.ops = [_op("exp", 0, -1, [i], [i + 1], 1.0) for i in range(3)]
    tr.ops.append(_op("exp_bwd", 1, -1, [3], [], 1.0))
    tr.saved = [3]
    assert _build(tr).tensor_recompute_s[0] == pytest.approx(3.0)


def test_a_trace_without_backward_is_rejected() -> None:
    tr = _trace()
    tr.ops = [op for op in tr.ops if op.phase == 0]
    with pytest.raises(ValueError, match="forward and backward"):
        _build(tr)


def test_rebuild_workspace_is_the_chains_largest_live_intermediates() -> None:
    """A packed in-projection: y = clone(add(mm(a))) * 2, only a and y saved. Rebuilding y
    re-runs mm, add, clone and mul; their unsaved outputs are the workspace."""
    tr = Trace()
    tr.values = [
        Value(storage=10, nbytes=400, producer=EXTERNAL, dtype="float32"),  # 0: x
        Value(storage=11, nbytes=1600, producer=0, dtype="float32"),  # 1: a (saved)
        Value(storage=12, nbytes=4800, producer=1, dtype="float32"),  # 2: mm out
        Value(storage=13, nbytes=4800, producer=2, dtype="float32"),  # 3: add out
        Value(storage=16, nbytes=100, producer=2, dtype="float32"),  # 4: add's unread output
        Value(storage=14, nbytes=4800, producer=3, dtype="float32"),  # 5: clone out
        Value(storage=15, nbytes=1600, producer=4, dtype="float32"),  # 6: y = mul (saved)
        Value(storage=15, nbytes=1600, producer=5, dtype="float32"),  # 7: relu_(y), in place
    ]
    tr.ops = [
        _op("exp", 0, -1, [0], [1], 1.0),
        _op("mm", 0, -1, [1], [2], 1.0),
        _op("add", 0, -1, [2], [3, 4], 1.0),
        _op("clone", 0, -1, [3], [5], 1.0),
        _op("mul", 0, -1, [5], [6], 1.0),
        _op("relu_", 0, -1, [6], [7], 1.0),
        _op("mul_bwd", 1, -1, [7], [], 1.0),
        _op("mm_bwd", 1, -1, [1], [], 1.0),
        _op("exp_bwd", 1, -1, [0], [], 1.0),
    ]
    tr.saved = [0, 1, 7]
    inst = _build(tr)
    x, a, y = (inst.tensor_index[n] for n in ("input.0", "m/exp.out", "m/relu_.out"))
    assert inst.tensor_rebuild_inputs[y] == (a,)
    assert inst.tensor_recompute_s[y] == pytest.approx(5.0)  # mm, add, clone, mul, relu_
    # Live intermediates by hand: at mm 4800 (mm out); at add 4800 + 4800 + 100 (mm out read,
    # add out written, its unread second output); at clone 4800 + 4800 (add out read, clone out
    # written); at mul 4800 (clone out); at relu_ none (y's own storage is the rebuilt tensor).
    assert inst.tensor_rebuild_workspace_bytes[y] == 9700
    # a single-operator rebuild and a tensor that cannot be rebuilt hold none
    assert inst.tensor_rebuild_workspace_bytes[a] == 0
    assert inst.tensor_rebuild_workspace_bytes[x] == 0


def test_in_place_chain_on_the_rebuilt_storage_has_no_workspace() -> None:
    inst = _build(_trace())  # b' = relu_(mm(a)): both write b's storage
    assert inst.tensor_rebuild_workspace_bytes.tolist() == [0] * inst.n_tensors


def _reentrant_trace() -> Trace:
    """A reentrant checkpoint: a = exp(x) is saved by the checkpoint's node (7), which re-runs
    r = mm(a) in backward and runs an inner backward pass (node 9 saves r) before it returns."""
    tr = Trace()
    tr.values = [
        Value(storage=10, nbytes=400, producer=EXTERNAL, dtype="float32"),  # 0: x
        Value(storage=11, nbytes=800, producer=0, dtype="float32"),  # 1: a (saved)
        Value(storage=12, nbytes=800, producer=1, dtype="float32"),  # 2: y, the output
        Value(storage=13, nbytes=800, producer=2, dtype="float32"),  # 3: grad of y
        Value(storage=14, nbytes=800, producer=3, dtype="float32"),  # 4: r, saved in backward
        Value(storage=15, nbytes=800, producer=4, dtype="float32"),  # 5: grad of a
        Value(storage=16, nbytes=8, producer=5, dtype="float32"),  # 6: a bias gradient
        Value(storage=17, nbytes=800, producer=6, dtype="float32"),  # 7: grad of a, summed
    ]
    tr.ops = [
        _op("exp", 0, -1, [0], [1], 1.0),
        _op("mm", 0, -1, [1], [2], 1.0),
        _op("ones_like", 1, -1, [2], [3], 1.0),
        _op("mm", 1, -1, [1], [4], 1.0),  # the checkpoint's node re-runs its forward
        _op("mm_bwd", 1, -1, [3, 4], [5], 1.0),  # the inner backward pass: node 9
        _op("sum", 1, -1, [3], [6], 1.0),
        _op("add", 1, -1, [5], [7], 1.0),  # back in the checkpoint's node
        _op("exp_bwd", 1, -1, [0, 7], [], 1.0),
    ]
    for op, node in zip(tr.ops, [-1, -1, 5, 7, 9, 9, 7, 3], strict=True):
        op.node = node
        op.touched = sorted(
            {(tr.values[v].storage, tr.values[v].nbytes) for v in op.reads + op.writes}
        )
    tr.saved = [0, 1, 4]
    tr.unpacked_before = [(1, 3), (4, 4), (0, 7)]
    tr.unpacked_by = [7, 9, 3]
    return tr


def test_a_reentrant_checkpoints_node_holds_what_it_unpacked_through_its_inner_backward() -> None:
    """The checkpoint's node runs other nodes' operators before it returns: what it unpacked
    is in use to its last operator, not only to the end of its first run of operators."""
    inst = _build(_reentrant_trace())
    a = inst.tensor_index["m/exp.out"]
    assert (inst.tensor_first_bwd_reader[a], inst.tensor_last_bwd_reader[a]) == (4, 7)
    assert all(a in inst.op_reads[o] for o in range(4, 8))


def test_a_value_saved_in_backward_is_held_to_the_last_operator_of_its_node() -> None:
    """r, saved by the inner node 9 and last read by its ``mm_bwd``, stays allocated through
    the node's ``sum``: the node frees what it unpacked when it returns."""
    inst = _build(_reentrant_trace())
    assert inst.n_tensors == 2  # x and a: r is made and freed inside the backward pass
    # At the sum: the grad of y (800), r (800), the grad of a (800) and the bias gradient (8).
    assert int(inst.op_transient_bytes[1 + 5]) == 800 + 800 + 800 + 8


def test_a_node_holds_a_saved_tensor_it_reads_to_its_last_operator_without_a_recorded_unpack() -> (
    None
):
    """A non-reentrant checkpoint's node gets its saved tensors through the checkpoint's own
    hooks (the recorder sees no unpack): reading one, the node holds it until it returns."""
    tr = Trace()
    tr.values = [
        Value(storage=10, nbytes=400, producer=EXTERNAL, dtype="float32"),  # 0: x
        Value(storage=11, nbytes=800, producer=0, dtype="float32"),  # 1: a (saved)
        Value(storage=12, nbytes=800, producer=1, dtype="float32"),  # 2: y
        Value(storage=13, nbytes=800, producer=2, dtype="float32"),  # 3: grad of y
        Value(storage=14, nbytes=800, producer=3, dtype="float32"),  # 4: weight gradient
        Value(storage=15, nbytes=8, producer=4, dtype="float32"),  # 5: bias gradient
    ]
    tr.ops = [
        _op("exp", 0, -1, [0], [1], 1.0),
        _op("mm", 0, -1, [1], [2], 1.0),
        _op("ones_like", 1, -1, [2], [3], 1.0),
        _op("mm_bwd", 1, -1, [1, 3], [4], 1.0),  # node 7 reads a
        _op("sum", 1, -1, [3], [5], 1.0),  # node 7 again: it still holds a
        _op("exp_bwd", 1, -1, [0], [], 1.0),
    ]
    for op, node in zip(tr.ops, [-1, -1, 5, 7, 7, 3], strict=True):
        op.node = node
    tr.saved = [0, 1]
    tr.unpacked_before = [(0, 5)]
    tr.unpacked_by = [3]
    inst = _build(tr)
    a = inst.tensor_index["m/exp.out"]
    assert (inst.tensor_first_bwd_reader[a], inst.tensor_last_bwd_reader[a]) == (4, 5)
