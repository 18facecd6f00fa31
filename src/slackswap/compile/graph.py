"""The saved tensors of a joint forward+backward FX graph, with keys stable across recompiles.

A *saved tensor* is one storage the backward reads from the forward: the base (the first
non-view ancestor) of every forward node a backward node reads, parameters and inputs (the
graph's placeholders, held by the caller) excluded. The outputs of a multi-output operator
(``native_layer_norm``'s output, mean and rstd) the backward reads form one saved tensor: torch's
partitioner decides recomputation per operator, so they are kept or recomputed together.

Its *rebuild chain*: the forward operators that make it again from other saved tensors and the
placeholders (the operator itself and the unsaved intermediates it reads), as the eager
profiler's chains; a chain with a random operator (dropout) is no rebuild (torch would draw new
numbers). Views and ``getitem`` run no kernel: they belong to no chain's operator count.

Keys name nodes by module path, operator and index within that module and operator
(``blocks.0.fc1/addmm#0``): FX node names (``addmm_2``) are numbered over the whole graph and
shift when an earlier module changes; these keys do not.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from slackswap.torchstep.compileapi import is_random_op, is_view_op, op_packet_name

#: Aliasing operators whose schema says otherwise (``_unsafe_view`` returns a view of its input).
_ALSO_VIEWS = {"_unsafe_view", "alias", "lift_fresh"}


def is_getitem(node: Any) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem"


def is_view(node: Any) -> bool:
    """A view, an alias or a ``getitem`` of a view (``split``'s parts): no kernel, no storage."""
    if node.op != "call_function":
        return False
    if is_getitem(node):
        parent = node.args[0]
        return is_view(parent)
    return is_view_op(node.target) or op_packet_name(node.target) in _ALSO_VIEWS


def is_kernel(node: Any) -> bool:
    """An FX node that runs an operator of its own (no view, no ``getitem``)."""
    return node.op == "call_function" and not is_view(node) and not is_getitem(node)


def tensor_bytes(val: Any) -> int:
    """Bytes of a tensor value (``meta["val"]``), or of a tuple of them; 0 for anything else."""
    if isinstance(val, list | tuple):
        return sum(tensor_bytes(v) for v in val)
    numel = getattr(val, "numel", None)
    size = getattr(val, "element_size", None)
    if numel is None or size is None:
        return 0
    try:
        return int(numel()) * int(size())
    except (TypeError, ValueError):  # a symbolic size
        return 0


def module_path(node: Any) -> str:
    """The innermost module path of a node (``blocks.0.fc1``; ``""`` outside any module); a
    backward node carries its forward node's (``fwd_nn_module_stack``)."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    if not stack:
        return ""
    path = str(list(stack.values())[-1][0])
    path = re.sub(r"^L\['[^']*'\]", "", path)  # the traced root: L['self'] or L['fn']
    # Indexing written as [0] in some dynamo versions: the module path uses dots.
    return path.replace("['", ".").replace("']", "").replace("[", ".").replace("]", "").lstrip(".")


def base_of(node: Any) -> Any:
    """The first ancestor through views that is no view (``node`` itself when it is none)."""
    while is_view(node):
        args = node.all_input_nodes
        if not args:
            return node
        node = args[0]
    return node


def producer_of(node: Any) -> Any:
    """The operator node that made a base: a multi-output operator for its ``getitem``."""
    if is_getitem(node) and node.args and hasattr(node.args[0], "op"):
        return node.args[0]
    return node


@dataclass
class SavedGroup:
    """One saved tensor: its producing operator and the output nodes the backward reads."""

    key: str
    producer: Any  # fx.Node of the operator
    outputs: list[Any]  # fx.Nodes (the producer itself, or its getitems)
    nbytes: int
    chain: list[Any] = field(default_factory=list)  # kernel nodes that rebuild it, in order
    chain_nodes: list[Any] = field(default_factory=list)  # every node of the rebuild
    rebuild_inputs: list[int] = field(default_factory=list)  # other groups the chain reads
    random: bool = False  # the chain draws random numbers: not rebuildable
    views: list[Any] = field(default_factory=list)  # forward views of its outputs
    #: the chain updates a buffer (batch-norm's running statistics, a ``*_functional`` op):
    #: re-running it in the backward would read the buffer after the forward updated it
    mutates: bool = False
    #: outputs of other groups' operators that the backward does not read but this rebuild
    #: does (dropout's or batch-norm's result): saved beside that group while this is recomputed
    reads_joined: list[Any] = field(default_factory=list)

    _n_read: int = 0

    @property
    def n_read(self) -> int:
        """How many of ``outputs`` (the first ones) the backward reads."""
        return self._n_read

    @property
    def rebuildable(self) -> bool:
        return bool(self.chain) and not self.mutates

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.outputs]


@dataclass
class JointGraph:
    """A joint graph's forward and backward nodes and its saved tensors."""

    forward: list[Any]  # call_function nodes, graph order
    backward: list[Any]
    groups: list[SavedGroup]
    group_of_name: dict[str, int]  # forward node name (views included) -> group
    keys: dict[str, str]  # node name -> stable key
    unclaimed: list[Any] = field(default_factory=list)  # backward nodes no tangent reaches

    @property
    def forward_names(self) -> set[str]:
        return {n.name for n in self.forward}


def node_keys(nodes: list[Any]) -> dict[str, str]:
    """Stable keys ``module/op#k`` of ``nodes`` (k counts that module's ``op`` nodes in order)."""
    seen: Counter[tuple[str, str]] = Counter()
    out = {}
    for n in nodes:
        mod = module_path(n) or "model"
        op = op_packet_name(n.target)
        out[n.name] = f"{mod}/{op}#{seen[mod, op]}"
        seen[mod, op] += 1
    return out


def analyse(graph: Any, num_fwd_outputs: int) -> JointGraph:
    """The forward and backward nodes and the saved tensors of joint ``graph`` (an
    ``fx.Graph``) whose first ``num_fwd_outputs`` outputs are the forward's."""
    nodes = list(graph.nodes)
    output = next(n for n in nodes if n.op == "output")
    outs = output.args[0]
    # Forward: the ancestors of the forward outputs (as torch's partitioner classifies them).
    forward_set: set[Any] = set()
    todo = [a for a in outs[:num_fwd_outputs] if hasattr(a, "op")]
    while todo:
        n = todo.pop()
        if n in forward_set or n.op != "call_function":
            continue
        forward_set.add(n)
        todo.extend(n.all_input_nodes)
    for n in nodes:  # an output of a forward operator that only the backward reads (a mask)
        if is_getitem(n) and n.args[0] in forward_set:
            forward_set.add(n)
    forward = [n for n in nodes if n in forward_set]
    backward = [n for n in nodes if n.op == "call_function" and n not in forward_set]
    # Backward nodes no tangent reaches (a ReLU mask computed from its output): torch's
    # partitioner may move them into the forward and save them instead of what they read.
    closure: set[Any] = set()
    for n in nodes:
        if (n.op == "placeholder" and "tangents" in str(n.target)) or any(
            a in closure for a in n.all_input_nodes
        ):
            closure.add(n)
    unclaimed = [n for n in backward if n not in closure]

    keys = node_keys([n for n in forward if not is_getitem(n)])
    keys.update(node_keys([n for n in backward if not is_getitem(n)]))
    for n in forward + backward:  # a getitem is named after its operator's key
        if is_getitem(n):
            keys[n.name] = f"{keys.get(n.args[0].name, n.args[0].name)}.{n.args[1]}"

    # Bases the backward reads, grouped by producing operator.
    by_producer: dict[Any, list[Any]] = {}
    for b in backward:
        for a in b.all_input_nodes:
            if a not in forward_set:
                continue
            base = base_of(a)
            if base.op != "call_function" or base not in forward_set:
                continue  # a placeholder: a parameter or an input, held by the caller
            if tensor_bytes(base.meta.get("val")) == 0:
                continue  # a symbolic size or no tensor
            outs_of = by_producer.setdefault(producer_of(base), [])
            if base not in outs_of:
                outs_of.append(base)
    order = {n: i for i, n in enumerate(nodes)}
    producers = sorted(by_producer, key=order.__getitem__)
    groups = []
    for p in producers:
        members = sorted(by_producer[p], key=order.__getitem__)
        nbytes = sum(tensor_bytes(m.meta.get("val")) for m in members)
        groups.append(SavedGroup(keys[p.name], p, members, nbytes, _n_read=len(members)))
    group_of_name: dict[str, int] = {}
    member_group = {m: g for g, grp in enumerate(groups) for m in grp.outputs}
    for g, grp in enumerate(groups):
        member_group[grp.producer] = g
    joint = JointGraph(forward, backward, groups, group_of_name, keys, unclaimed)
    for g in range(len(groups)):
        _rebuild_chain(joint, g, forward_set, member_group)
    for n in forward:
        found = member_group.get(base_of(n))
        if found is not None:
            group_of_name[n.name] = found
    for n in forward:
        if n.name in group_of_name and is_view(n):
            groups[group_of_name[n.name]].views.append(n)
    return joint


def _rebuild_chain(
    joint: JointGraph, g: int, forward_set: set[Any], member_group: dict[Any, int]
) -> None:
    grp = joint.groups[g]
    chain: set[Any] = set()
    inputs: set[int] = set()
    todo = [grp.producer, *grp.outputs]
    while todo:
        n = todo.pop()
        if n in chain or n.op != "call_function" or n not in forward_set:
            continue
        base = base_of(n)
        other = member_group.get(base)
        if other is None and is_getitem(base):
            # Another output of a saved multi-output operator (dropout's result beside its
            # mask): torch recomputes per operator, so it belongs to that operator's group
            # (its bytes do not count: the backward does not read it; torch saves it beside
            # a kept group only while a recomputed tensor's rebuild reads it).
            other = member_group.get(base.args[0])
            if other is not None and other != g:
                joint.groups[other].outputs.append(base)
                member_group[base] = other
        if other is not None and other != g:
            inputs.add(other)
            if base not in joint.groups[other].outputs[: joint.groups[other].n_read]:
                grp.reads_joined.append(base)
            continue
        chain.add(n)
        todo.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(joint.forward)}
    grp.chain_nodes = sorted(chain, key=order.__getitem__)
    grp.chain = [n for n in grp.chain_nodes if is_kernel(n)]
    grp.rebuild_inputs = sorted(inputs)
    grp.random = any(draws_random(n) for n in grp.chain)
    grp.mutates = any(op_packet_name(n.target).endswith("_functional") for n in grp.chain)


def draws_random(node: Any) -> bool:
    """An operator that draws random numbers; attention counts only with dropout_p > 0 (its
    kernels are tagged random for their dropout argument)."""
    if not is_random_op(node.target):
        return False
    if "attention" in op_packet_name(node.target):
        p = node.kwargs.get("dropout_p", node.args[3] if len(node.args) > 3 else 0.0)
        return not (isinstance(p, int | float) and p == 0)
    return True
