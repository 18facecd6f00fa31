"""Apply a plan inside torch.compile: mark each saved tensor's nodes, then let PyTorch's
min-cut partitioner split the joint graph.

keep: ``node.meta["recompute"] = MUST_SAVE`` on its operator (the partitioner never recomputes
it); recompute: ``MUST_RECOMPUTE`` on every operator of its rebuild chain (the partitioner
re-runs exactly those in the backward); swap: kept, and ``node.meta["should_offload"]`` on its
outputs with ``enable_activation_offloading``. Views are recomputed from their bases
(``recompute_views``), so what the forward hands the backward is the saved tensors themselves.

Where torch's own pass decides, not the simulator's schedule: an offload is placed after the
tensor's last forward use and its reload right before its first backward use (synchronous
``device_put``; with ``activation_offload_separate_stream`` on a CUDA side stream, reloads
prefetched by torch's own ordering), not at the simulator's copy deadlines and admission; and
torch's offload pass skips outputs of multi-output operators (``getitem``), views and
non-contiguous tensors: such a swapped tensor stays on the device, which the measured
``offloaded_bytes`` shows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from slackswap.compile.graph import (
    JointGraph,
    analyse,
    base_of,
    is_getitem,
    is_kernel,
    tensor_bytes,
)
from slackswap.errors import UserError
from slackswap.torchstep.compileapi import (
    CPU_OFFLOAD_PREFIX,
    CheckpointPolicy,
    CustomPartitionerFn,
    cse_enabled,
    graph_cse,
    min_cut_partition,
    op_packet_name,
    partitioner_config,
)

ACTIONS = ("keep", "swap", "recomp")


class PlanKeyError(UserError):
    """A plan whose saved-tensor keys do not match the compiled graph's."""


def plan_hash(actions: Mapping[str, str]) -> str:
    """A short content hash of ``actions`` (saved-tensor key -> action)."""
    text = json.dumps(sorted(actions.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def prepare_joint(gm: Any, num_fwd_outputs: int) -> JointGraph:
    """Run the partitioner's own first passes (dead code, CSE) on ``gm`` in place, so that the
    nodes marked are the nodes it partitions; the analysed graph."""
    gm.graph.eliminate_dead_code()
    if cse_enabled():
        gm.graph = graph_cse(gm.graph)
    gm.recompile()
    return analyse(gm.graph, num_fwd_outputs)


def mark(joint: JointGraph, actions: Mapping[str, str], where: str = "the plan") -> None:
    """Mark the joint graph's nodes from ``actions``; `PlanKeyError` naming the first key of
    the plan the graph lacks, or of the graph the plan lacks."""
    graph_keys = [g.key for g in joint.groups]
    known = set(graph_keys)
    for key in actions:
        if key not in known:
            raise PlanKeyError(
                f"{where}: saved tensor {key!r} is not in the compiled graph "
                f"({len(graph_keys)} saved tensors, e.g. {graph_keys[0]!r}); the plan was made "
                "for another model, input shape or backend"
            )
    for key in graph_keys:
        if key not in actions:
            raise PlanKeyError(f"{where}: no action for the compiled graph's saved tensor {key!r}")
    # Backward nodes that read only forward values stay in the backward, as in the joint
    # graph: torch would otherwise move one into the forward and save it in place of a
    # tensor the plan keeps (a ReLU's boolean mask for its output).
    for n in joint.unclaimed:
        n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    for grp in joint.groups:
        # Views run no kernel; torch's partitioner bans some (transpose, detach) from
        # recomputation and would save them in place of their base: re-made in the backward,
        # they leave the base itself to be saved (and offloaded), as the plan says.
        for n in grp.views:
            n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        action = actions[grp.key]
        if action not in ACTIONS:
            raise PlanKeyError(f"{where}: {grp.key!r} = {action!r}: expected keep, swap or recomp")
        if action == "recomp":
            if not grp.rebuildable:
                raise PlanKeyError(
                    f"{where}: {grp.key!r} cannot be recomputed inside torch.compile (its "
                    "rebuild updates a buffer, e.g. batch-norm statistics)"
                )
            # A random operator (dropout) is re-run by torch with the forward's RNG state
            # (its rng functionalization): the same numbers again.
            for n in grp.chain_nodes:
                n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        else:
            grp.producer.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            for n in grp.outputs:
                n.meta["recompute"] = CheckpointPolicy.MUST_SAVE
                if action == "swap":
                    n.meta["should_offload"] = True


def measure(joint: JointGraph, fw: Any, bw: Any, num_fwd_outputs: int) -> dict[str, Any]:
    """What the partitioned graphs do: the saved tensors the forward hands the backward (by
    key; bytes of the storages, each counted once: a saved view counts its base), bytes
    offloaded, and the forward operators the backward re-runs (kernels only; views and
    ``getitem`` run none)."""
    fw_out = list(fw.graph.find_nodes(op="output")[0].args[0])[num_fwd_outputs:]
    by_name = {n.name: n for n in joint.forward}
    saved: dict[str, int] = {}  # base node name -> bytes
    moved: dict[str, int] = {}
    saved_groups: set[int] = set()
    offloaded: set[int] = set()
    others: list[str] = []
    rng_bytes = 0
    for node in fw_out:
        if not hasattr(node, "op"):
            continue
        if (
            is_getitem(node)
            and op_packet_name(node.args[0].target) == "run_and_save_rng_state"
            and node.args[1] == 0
        ):
            # The generator state torch saves to re-run a random operator (attention kernels
            # are tagged random for their dropout argument): bookkeeping, not an activation.
            rng_bytes += tensor_bytes(node.meta.get("val"))
            continue
        name = node.name
        is_moved = name.startswith(CPU_OFFLOAD_PREFIX)
        if is_moved:
            name = name[len(CPU_OFFLOAD_PREFIX) :]
        jn = by_name.get(name)
        if jn is None:
            if node.op == "call_function":  # a node torch moved into the forward and saved
                saved[name] = tensor_bytes(node.meta.get("val"))
                others.append(joint.keys.get(name, name))
            continue
        if base_of(jn).op != "call_function":
            continue  # a placeholder (parameter, input) or a symbolic size
        base = base_of(jn)
        saved[base.name] = tensor_bytes(base.meta.get("val"))
        if is_moved:
            moved[base.name] = saved[base.name]
        g = joint.group_of_name.get(name)
        if g is None:
            others.append(joint.keys.get(base.name, name))
            continue
        saved_groups.add(g)
        if is_moved:
            offloaded.add(g)
    fwd = joint.forward_names
    recomputed = [n.name for n in bw.graph.nodes if n.name in fwd and is_kernel(n)]
    # A random operator re-run in the backward is wrapped to replay the forward's RNG state
    # (``run_with_rng_state(state, op, *args)``): it is that forward operator again.
    by_call = {
        (n.target, tuple(a.name for a in n.all_input_nodes)): n.name
        for n in joint.forward
        if is_kernel(n)
    }
    for n in bw.graph.nodes:
        if n.op == "call_function" and op_packet_name(n.target) == "run_with_rng_state":
            call = (n.args[1], tuple(_origin_name(a) for a in n.all_input_nodes[1:]))
            recomputed.append(by_call.get(call, n.name))
    return {
        "saved": sorted(joint.groups[g].key for g in saved_groups),
        "saved_bytes": sum(saved.values()),
        "rng_state_bytes": rng_bytes,
        "unplanned_saved": others,
        "offloaded": sorted(joint.groups[g].key for g in offloaded),
        "offloaded_bytes": sum(moved.values()),
        "recomputed_ops": sorted(joint.keys.get(n, n) for n in recomputed),
    }


#: Operators torch's offload pass inserts to bring a saved tensor back.
_RELOAD_OPS = {"device_put", "reload", "wait_tensor"}


def _origin_name(node: Any) -> str:
    """The joint-graph name of a backward graph's value: through a reload back to the saved
    tensor it reloads (``cpu_offload_<name>``)."""
    while node.op == "call_function" and op_packet_name(node.target) in _RELOAD_OPS:
        node = node.all_input_nodes[0]
    name = str(node.name)
    return name[len(CPU_OFFLOAD_PREFIX) :] if name.startswith(CPU_OFFLOAD_PREFIX) else name


def planned(joint: JointGraph, actions: Mapping[str, str]) -> dict[str, Any]:
    """What ``actions`` asks of the partitioned graphs, in `measure`'s terms."""
    saved = [g for g in joint.groups if actions[g.key] != "recomp"]
    recomp = [g for g in joint.groups if actions[g.key] == "recomp"]
    recomp_ops = {n.name for g in recomp for n in g.chain}
    # Outputs of a saved operator that only a recomputed tensor's rebuild reads (dropout's or
    # batch-norm's result) are saved beside it: torch recomputes per operator.
    joined = {
        n.name: tensor_bytes(n.meta.get("val"))
        for g in recomp
        for n in g.reads_joined
        if actions[joint.groups[joint.group_of_name[n.name]].key] != "recomp"
    }
    return {
        "saved": sorted(g.key for g in saved),
        "saved_bytes": sum(g.nbytes for g in saved) + sum(joined.values()),
        "offloaded": sorted(g.key for g in joint.groups if actions[g.key] == "swap"),
        "offloaded_bytes": sum(g.nbytes for g in joint.groups if actions[g.key] == "swap"),
        "recomputed_ops": sorted(joint.keys[n] for n in recomp_ops),
    }


#: Reports of the partitioners by token: inductor deep-copies its config values (the
#: partitioner object among them), so a copy reports here, not on the object the caller holds.
REPORTS: dict[str, list[dict[str, Any]]] = {}


def partition_with_plan(
    gm: Any,
    joint_inputs: Any,
    *,
    actions: Mapping[str, str],
    token: str | None = None,
    offload_stream: bool = False,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Partition joint graph ``gm`` under ``actions`` (saved-tensor key -> keep/swap/recomp)
    with PyTorch's min-cut partitioner; with ``token``, what it planned and what the graphs
    do go to ``REPORTS[token]``."""
    n_out = int(kwargs["num_fwd_outputs"])
    joint = prepare_joint(gm, n_out)
    mark(joint, actions)
    offload = any(a == "swap" for a in actions.values())
    # offload_stream: copies on a CUDA side stream (``ao::offload`` / ``ao::reload``), with
    # torch's own wait sinking and reload prefetch; the default is synchronous device_put.
    stream = dict(
        activation_offload_separate_stream=offload_stream,
        activation_offload_sink_wait=offload_stream,
        activation_reload_prefetch=offload_stream,
    )
    with partitioner_config(recompute_views=True, enable_activation_offloading=offload, **stream):
        fw, bw = min_cut_partition(gm, joint_inputs, **kwargs)
    if token is not None:
        REPORTS.setdefault(token, []).append(
            {"planned": planned(joint, actions), "measured": measure(joint, fw, bw, n_out)}
        )
    return fw, bw


class PlanPartitioner(CustomPartitionerFn):  # type: ignore[misc, valid-type]
    """Inductor's ``custom_partitioner_fn`` for a plan; its ``uuid`` (part of inductor's FX
    graph cache key) names the plan's content hash and this module's source."""

    def __init__(
        self, actions: Mapping[str, str], token: str | None = None, offload_stream: bool = False
    ):
        self.actions = dict(actions)
        self.token = token
        self.offload_stream = offload_stream

    def __call__(self, gm: Any, joint_inputs: Any, **kwargs: Any) -> tuple[Any, Any]:
        return partition_with_plan(
            gm,
            joint_inputs,
            actions=self.actions,
            token=self.token,
            offload_stream=self.offload_stream,
            **kwargs,
        )

    def uuid(self) -> Any:
        with open(__file__, "rb") as f:
            source = hashlib.sha256(f.read()).hexdigest()[:16]
        stream = "-stream" if self.offload_stream else ""
        return f"slackswap-plan-{plan_hash(self.actions)}{stream}-{source}"
