"""The compiled step's joint graph as an ordinary `Instance`.

Operators: the kernels (no views, no ``getitem``) of the forward graph, then of the backward
graph, in the order the partitioner emits them when every saved tensor is kept. Saved tensors:
`slackswap.compile.graph` (one per storage the backward reads; rebuild chains as the eager
profile's). Readers: an operator reads a saved tensor when an argument is it or a view of it.
Times: the roofline of a named GPU (`slackswap.torchstep.costs`, as the eager profiler), from
each node's FLOPs (``torch.utils.flop_counter``) and bytes read and written (``meta["val"]``);
the instance says ``timing = "roofline"``. Transient bytes of an operator: the outputs of the
graph's other kernels that are not saved tensors, each live from its kernel to its last reader
(a graph output to the end of its graph), parameters excluded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import flop_counter

from slackswap.compile.capture import Captured, capture
from slackswap.compile.graph import (
    JointGraph,
    is_getitem,
    is_kernel,
    is_view,
    module_path,
    tensor_bytes,
)
from slackswap.compile.partition import measure, partition_with_plan, prepare_joint
from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.models.hardware import get_gpu, hardware
from slackswap.profiling.blocks import find_blocks
from slackswap.torchstep.compileapi import min_cut_partition, op_packet_name, partitioner_config
from slackswap.torchstep.costs import durations_s, op_kind
from slackswap.torchstep.trace import OpRecord

#: The activation_memory_budget values at which torch's own partitioner is run at profile time
#: (its decisions go to ``meta["compile"]["torch_budget"]`` for the ``torch-budget`` solver).
TORCH_BUDGETS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)


def _val(x: Any) -> Any:
    if hasattr(x, "op") and hasattr(x, "meta"):
        return x.meta.get("val")
    if isinstance(x, list | tuple):
        return type(x)(_val(v) for v in x)
    return x


def _flops(node: Any) -> float:
    formula = flop_counter.flop_registry.get(getattr(node.target, "_overloadpacket", None))
    if formula is None:
        return 0.0
    args = [_val(a) for a in node.args]
    kwargs = {k: _val(v) for k, v in node.kwargs.items()}
    try:
        return float(formula(*args, **kwargs, out_val=node.meta.get("val")))
    except Exception:  # noqa: BLE001 - a formula that rejects odd arguments costs no FLOPs
        return 0.0


def _bytes_moved(node: Any) -> float:
    seen = {a for a in node.all_input_nodes}
    read = sum(tensor_bytes(a.meta.get("val")) for a in seen)
    return float(read + tensor_bytes(node.meta.get("val")))


def _block_of(path: str, blocks: list[str]) -> int:
    for b, p in enumerate(blocks):
        if path == p or path.startswith(p + "."):
            return b
    return -1


def _groups_read(node: Any, joint: JointGraph, memo: dict[Any, frozenset[int]]) -> frozenset[int]:
    """Saved tensors an argument of ``node`` is (or is a view of)."""
    out: set[int] = set()
    for a in node.all_input_nodes:
        out |= _resolve(a, joint, memo)
    return frozenset(out)


def _resolve(n: Any, joint: JointGraph, memo: dict[Any, frozenset[int]]) -> frozenset[int]:
    if n in memo:
        return memo[n]
    g = joint.group_of_name.get(n.name)
    if g is not None:
        got = frozenset({g})
    elif is_view(n) or is_getitem(n):
        got = frozenset().union(*(_resolve(a, joint, memo) for a in n.all_input_nodes))
    else:
        got = frozenset()
    memo[n] = got
    return got


def _transients(
    graph: Any, kernels: list[Any], saved_names: set[str], outputs_to_end: bool
) -> list[int]:
    """Per kernel of ``graph`` (in ``kernels`` order), the bytes of live unsaved outputs; a
    graph output lives to the graph's end when ``outputs_to_end``, else to its last reader in
    the graph (the backward's outputs are parameter gradients: ``.grad`` memory, which the
    eager profile does not count as activations either)."""
    index = {n: i for i, n in enumerate(kernels)}
    end = len(kernels) - 1
    delta = [0] * (len(kernels) + 1)

    def last_use(n: Any) -> int:
        last = index.get(n, -1)
        todo, seen = list(n.users), set()
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            if u.op == "output":
                if outputs_to_end:
                    return end
                continue
            if u in index:
                last = max(last, index[u])
            if is_view(u) or is_getitem(u):
                todo.extend(u.users)
        return last

    for n in kernels:
        if n.name in saved_names:
            continue
        outs = [u for u in n.users if is_getitem(u)] or [n]
        size = sum(tensor_bytes(o.meta.get("val")) for o in outs if o.name not in saved_names)
        if size == 0:
            continue
        lo = index[n]
        hi = max(lo, last_use(n))
        delta[lo] += size
        delta[hi + 1] -= size
    out, run = [], 0
    for d in delta[:-1]:
        run += d
        out.append(run)
    return out


def build_compiled_instance(
    captured: Captured,
    *,
    name: str,
    gpu: str,
    link: str | None = None,
    block_paths: Sequence[str] = (),
    link_bw_Bps: float | None = None,
    torch_budgets: Sequence[float] = TORCH_BUDGETS,
) -> Instance:
    """The `Instance` of a captured joint graph, times from the roofline of ``gpu``."""
    try:
        g = get_gpu(gpu)
        hw = hardware(gpu, link, link_bw_Bps)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    n_out = int(captured.kwargs["num_fwd_outputs"])
    gm = captured.copy()
    joint = prepare_joint(gm, n_out)
    if not joint.groups:
        raise UserError("the compiled graph saves no activation for the backward: nothing to plan")
    keep_all = {grp.key: "keep" for grp in joint.groups}
    fw, bw = partition_with_plan(
        captured.copy(), captured.joint_inputs, actions=keep_all, **captured.kwargs
    )
    blocks = list(block_paths)
    fw_k = [n for n in fw.graph.nodes if is_kernel(n)]
    bw_k = [n for n in bw.graph.nodes if is_kernel(n)]
    records: list[OpRecord] = []
    names: list[str] = []
    for phase, kernels in ((0, fw_k), (1, bw_k)):
        for n in kernels:
            aten = op_packet_name(n.target)
            path = module_path(n)
            records.append(
                OpRecord(
                    aten=aten,
                    phase=phase,
                    module=path,
                    block=_block_of(path, blocks),
                    in_block=True,
                    kind=op_kind(aten),
                    flops=_flops(n),
                    bytes_moved=_bytes_moved(n),
                )
            )
            key = joint.keys.get(n.name, n.name)
            names.append(("bwd:" if phase else "") + key)
    seen: dict[str, int] = {}
    for i, nm in enumerate(names):  # a node the partitioner made twice (rare): told apart
        if nm in seen:
            seen[nm] += 1
            names[i] = f"{nm}~{seen[nm]}"
        else:
            seen[nm] = 0
    durations = durations_s(records, "roofline", g)
    n_fwd = len(fw_k)
    op_index_fw = {n.name: i for i, n in enumerate(fw_k)}
    memo_fw: dict[Any, frozenset[int]] = {}
    memo_bw: dict[Any, frozenset[int]] = {}
    reads: list[set[int]] = [set(_groups_read(n, joint, memo_fw)) for n in fw_k]
    reads += [set(_groups_read(n, joint, memo_bw)) for n in bw_k]
    n_t = len(joint.groups)
    producer = [op_index_fw[grp.producer.name] for grp in joint.groups]
    fwd_readers: list[list[int]] = [[] for _ in range(n_t)]
    bwd_readers: list[list[int]] = [[] for _ in range(n_t)]
    for i, rs in enumerate(reads):
        for t in rs:
            (fwd_readers if i < n_fwd else bwd_readers)[t].append(i)
    last_op = len(records) - 1
    for t in range(n_t):
        if not bwd_readers[t]:
            bwd_readers[t].append(last_op)
            reads[last_op].add(t)
    saved_names = {m.name for grp in joint.groups for m in grp.outputs}
    saved_names |= {grp.producer.name for grp in joint.groups}
    transient = _transients(fw.graph, fw_k, saved_names, True)
    transient += _transients(bw.graph, bw_k, set(), False)

    categories, recompute, rebuild, workspace = [], [], [], []
    dur_by_name = {n.name: durations[i] for i, n in enumerate(fw_k)}
    for grp in joint.groups:
        aten = op_packet_name(grp.producer.target)
        kind = op_kind(aten)
        vals = [m.meta.get("val") for m in grp.outputs]
        if grp.random or any(getattr(v, "dtype", None) == torch.bool for v in vals):
            categories.append("dropout_mask")
        elif kind == "attention":
            categories.append("attention_output")
        elif kind in ("gemm", "conv"):
            categories.append("gemm_output")
        elif aten == "add" and len(grp.producer.all_input_nodes) >= 2:
            categories.append("residual")
        else:
            categories.append("elementwise")
        cost = sum(dur_by_name.get(n.name, 0.0) for n in grp.chain)
        recompute.append(cost if grp.rebuildable else math.inf)
        rebuild.append(tuple(grp.rebuild_inputs) if grp.rebuildable else ())
        workspace.append(
            sum(tensor_bytes(n.meta.get("val")) for n in grp.chain if n is not grp.producer)
        )
    # A tensor a later block's forward reads is that block's input (the checkpoint that block
    # checkpointing keeps), as in the eager profile; its recompute cost stays as computed.
    tblock = [records[p].block for p in producer]
    for t in range(n_t):
        enters = sorted(
            {records[i].block for i in fwd_readers[t]} - {tblock[t], -1},
        )
        if enters and enters[0] > tblock[t]:
            categories[t] = "block_input"
            tblock[t] = enters[0]
    meta: dict[str, Any] = {
        "builder": "compile",
        "timing": "roofline",
        "n_blocks": len(blocks),
        "block_modules": blocks,
        "parameter_bytes": sum(
            tensor_bytes(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"
        ),
        "compile": {
            "backend": captured.backend,
            "torch": torch.__version__,
            "tensor_nodes": {grp.key: grp.names for grp in joint.groups},
            "torch_budget": torch_budget_decisions(captured, joint, torch_budgets),
        },
    }
    cols: dict[str, Any] = dict(
        op_name=names,
        op_phase=[r.phase for r in records],
        op_block=[r.block for r in records],
        op_layer=[r.block for r in records],
        op_kind=[r.kind for r in records],
        op_duration_s=durations,
        op_flops=[r.flops for r in records],
        op_transient_bytes=transient,
        op_reads=[sorted(r) for r in reads],
        tensor_name=[grp.key for grp in joint.groups],
        tensor_bytes=[grp.nbytes for grp in joint.groups],
        tensor_producer=producer,
        tensor_last_fwd_reader=[max([producer[t], *fwd_readers[t]]) for t in range(n_t)],
        tensor_first_bwd_reader=[min(r) for r in bwd_readers],
        tensor_last_bwd_reader=[max(r) for r in bwd_readers],
        tensor_recompute_s=recompute,
        tensor_rebuild_inputs=rebuild,
        tensor_block=tblock,
        tensor_category=categories,
        tensor_rebuild_workspace_bytes=workspace,
    )
    return Instance(name=name, hardware=hw, meta=meta, **cols)


def torch_budget_decisions(
    captured: Captured, joint: JointGraph, budgets: Sequence[float]
) -> list[dict[str, Any]]:
    """Torch's own partitioner at each ``activation_memory_budget``: which saved tensors it
    keeps (the rest it recomputes), and the bytes of what it saves outside them."""

    n_out = int(captured.kwargs["num_fwd_outputs"])
    out = []
    for b in budgets:
        gm = captured.copy()
        prepare_joint(gm, n_out)
        with partitioner_config(activation_memory_budget=float(b)):
            fw, bw = min_cut_partition(gm, captured.joint_inputs, **captured.kwargs)
        got = measure(joint, fw, bw, n_out)
        out.append(
            {
                "activation_memory_budget": float(b),
                "kept": got["saved"],
                "saved_bytes": got["saved_bytes"],
                "other_saved": got["unplanned_saved"],
                "recomputed_ops": len(got["recomputed_ops"]),
            }
        )
    return out


def profile_compiled(
    model: torch.nn.Module,
    example_inputs: torch.Tensor | Sequence[Any],
    *,
    backend: str = "inductor",
    gpu: str = "a100",
    link: str | None = None,
    blocks: str | Sequence[torch.nn.Module] | None = None,
    name: str | None = None,
    link_bw_Bps: float | None = None,
) -> Instance:
    """Profile ``torch.compile(model, backend=backend)``'s joint graph into an `Instance`.

    The loss stays outside the compiled graph (as with ``torch.compile(model)``): the
    instance covers the model's forward and backward. Refuses in one line an unsupported
    torch, a graph break, or a model torch cannot compile.
    """

    if not isinstance(model, torch.nn.Module):
        raise UserError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    inputs = _as_inputs(example_inputs)
    block_modules = find_blocks(model, blocks)
    paths = {id(m): p for p, m in model.named_modules()}
    block_paths = [paths[id(m)] for m in block_modules if id(m) in paths]
    captured = capture(model, inputs, backend)
    return build_compiled_instance(
        captured,
        name=name or f"{type(model).__name__}-compiled-{backend}@{gpu}",
        gpu=gpu,
        link=link,
        block_paths=block_paths,
        link_bw_Bps=link_bw_Bps,
    )


def _as_inputs(example_inputs: Any) -> tuple[Any, ...]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, list | tuple):
        return tuple(example_inputs)
    raise UserError(
        f"inputs: expected a tensor or a tuple of tensors, got {type(example_inputs).__name__}"
    )


LossFn = Callable[[Any], torch.Tensor]
