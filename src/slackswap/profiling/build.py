"""Turn a recorded `Trace` into a validated `Instance` (plain Python; no torch needed).

Modelling choices:
- One saved tensor per storage that autograd saved (aliases and views count once), sized by the
  whole storage: that is what the saved view keeps alive. Parameters and buffers are excluded,
  and so are storages that existed before the step and that the step still held when backward
  began (model inputs, targets): the caller holds them for the whole step, so no action frees
  them (``meta["caller_held_bytes"]``). Nor are storages something besides autograd held
  from the forward pass into the backward pass (a checkpoint's closure, a forward hook storing
  them, autocast's cache; `Trace.let_go_in_backward`): they count as transient from their
  producer until that holder let go, or to the last operator.
- Backward readers: every backward operator that reads the storage, plus the operators from
  the one right after the unpack to the last of the node that unpacked it (the node holds what
  it unpacked until it returns; a reentrant ``torch.utils.checkpoint`` node runs a whole inner
  backward pass, other nodes' operators, before its own last one, or after it: it returns
  before the next operator of its own backward pass, `_to_node_returns`); a node that reads
  it holds it so too, also when the unpack went through other hooks than the recorder's (a
  non-reentrant checkpoint's). A tensor a node reads without the recorder's unpack was held
  for it since the recorder's unpack that gave it out (a non-reentrant checkpoint's re-run
  keeps aliases of its block's inputs), and a tensor is held until autograd lets go of what
  its pack returned, when that is after its last reader (the checkpoint's input saver goes
  with the block's last saved tensor): `_held_since_unpack`, `_held_until_let_go`. A saved
  tensor that no backward node unpacked is released with the graph: it is read by the last
  backward operator. A value the backward pass itself saved
  (the checkpoint's re-run forward) is no saved tensor of the instance: it counts as transient
  to the last operator of the node that unpacked it.
- Recompute cost: the time of the operator chain that rebuilds the tensor from saved tensors, the
  producer plus the producers of any unsaved intermediates it read (as the analytic builders do);
  rebuild inputs are the saved tensors that chain reads. Block inputs and tensors no recorded
  operator wrote (model inputs, constants) cost ``inf``; dropout masks are regenerated from the
  RNG state (the in-place chain on the mask's own storage, no inputs).
- Rebuild workspace: a chain of several operators makes unsaved intermediates again (the
  in-projection of ``nn.MultiheadAttention``: ``mm``, ``add``, ``clone``, then a ``select`` of
  the packed result). Each intermediate storage lives from the chain operator that writes it to
  the last chain operator that reads it, sized by its whole storage; the workspace is the largest
  sum of live intermediates at any chain operator, the rebuilt tensor's own storage and saved
  storages excluded (they are counted as saved tensors). A single-operator rebuild has none.
  Added to it: the unsaved bytes carried into the operator the rebuild runs before (gradient
  buffers live before and during it), the largest over the tensor's first backward reader and
  those of the tensors whose rebuild may rebuild it.
- Last forward use: the last forward operator that reads the tensor or, when later, the one
  after which the step dropped its last own reference to the storage (`Trace.released_after`:
  a Python local keeps a buffer until its function returns); it is listed among the
  operator's reads. A tensor the caller still holds when backward begins (a model input)
  keeps its last reader.
- A saved storage written before its saved value (a CPU dropout mask's ``bernoulli_`` before
  the ``div_`` that is saved) counts as transient from its first writer to that value's producer.
- Transient bytes of an operator: the storages that are not saved tensors (parameters and
  buffers excluded) alive while it runs, each from the first operator that reads or writes it
  to the last one (a gradient the autograd engine holds for a node several operators later
  counts in between, as it occupies memory there; a parameter's gradient until autograd
  accumulates it into ``.grad``, after the last operator of the node that made it; and until
  it was freed, when that was later: `Trace.freed_after`).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from slackswap.instance import Hardware, Instance
from slackswap.models.hardware import GPU
from slackswap.torchstep.costs import durations_s
from slackswap.torchstep.trace import EXTERNAL, Trace

#: A rebuild chain longer than this is no recomputation: the tensor counts as not rebuildable.
MAX_CHAIN_OPS = 32
_MASK_OPS = ("bernoulli", "native_dropout", "dropout", "rand")


def _unique_names(raw: list[str]) -> list[str]:
    seen: Counter[str] = Counter(raw)
    count: Counter[str] = Counter()
    out = []
    for n in raw:
        if seen[n] > 1:
            count[n] += 1
            out.append(f"{n}#{count[n]}")
        else:
            out.append(n)
    return out


def build_instance(
    trace: Trace,
    *,
    name: str,
    hardware: Hardware,
    gpu: GPU,
    timing: str,
    meta: dict[str, Any] | None = None,
) -> Instance:
    """The instance of one recorded step; ``timing`` is ``"measured"`` or ``"roofline"``."""
    ops, values = trace.ops, trace.values
    n_fwd = sum(1 for op in ops if op.phase == 0)
    if n_fwd == 0 or n_fwd == len(ops):
        raise ValueError("the trace needs forward and backward operators")
    if any(op.phase == 0 for op in ops[n_fwd:]):
        raise ValueError("a forward operator recorded after the backward pass began")
    durations = durations_s(ops, timing, gpu)

    # ---- saved tensors: one per storage, the last value saved -------------------------------
    # Saved storages that existed before the step and were still held when backward began
    # (model inputs and targets the caller holds) are the caller's, like the parameters: no
    # action frees them, so they are not offered to the planner, and their bytes are not
    # counted (what `slackswap.runtime.measure` leaves out as memory held before the step).
    caller_held = trace.preexisting - trace.released_after.keys()
    # Values the backward pass made and saved (a reentrant torch.utils.checkpoint re-runs its
    # block's forward inside backward and saves that graph's tensors) live and die inside one
    # backward node: no action applies to them, their bytes count as the node's transient ones.
    # So do forward values that only such a re-run saves (handed to the block by a closure, as
    # Hugging Face's layers get their rotary cos and sin): the closure holds them from their
    # producer to that node, where no action can free them.
    # So do storages a holder besides autograd kept from the forward pass into the backward
    # pass (a checkpoint's closure, an autograd Function's ``ctx``, a forward hook, autocast's
    # cache): no action frees them before that holder does; they count from their producer
    # until it let go (the last operator when it held them past the backward pass).
    graph_held = trace.let_go_in_backward
    saved_values = {
        v
        for v in trace.saved
        if values[v].storage not in caller_held
        and values[v].producer < n_fwd
        and v not in trace.saved_first_in_backward
        and values[v].storage not in graph_held
    }
    by_storage: dict[int, int] = {}
    for v in trace.saved:
        if v in saved_values:
            by_storage[values[v].storage] = v
    tensor_values = sorted(by_storage.values(), key=lambda v: (_producer(trace, v), v))
    t_index = {values[v].storage: i for i, v in enumerate(tensor_values)}
    n_t = len(tensor_values)

    external = any(values[v].producer == EXTERNAL for v in tensor_values)
    shift = 1 if external else 0  # a synthetic "input" operator produces the model inputs

    def op_of(i: int) -> int:
        return i + shift

    # ---- readers ------------------------------------------------------------------------------
    # A storage saved at several values (nn.GRU's CPU cell fills its gate buffer in place and
    # autograd saves views of it after each stage) is one saved tensor, its last saved value;
    # the forward reads of its earlier values before that value's producer build it.
    fwd_readers: list[set[int]] = [set() for _ in range(n_t)]
    bwd_readers: list[set[int]] = [set() for _ in range(n_t)]
    for i, op in enumerate(ops):
        for v in op.reads:
            t = t_index.get(values[v].storage)
            if t is None or v not in saved_values:
                continue
            if op.phase == 0 and i < _producer(trace, tensor_values[t]):
                continue
            (fwd_readers if op.phase == 0 else bwd_readers)[t].add(op_of(i))
    last_op = op_of(len(ops) - 1)
    unpacked_by = trace.unpacked_by or [-1] * len(trace.unpacked_before)
    # The last operator of each autograd node. A node's operators need not be contiguous: a
    # reentrant torch.utils.checkpoint's node runs a whole inner backward pass (other nodes'
    # operators) between its forward re-run and its return, and holds its inputs throughout.
    node_last: dict[int, int] = {}
    for i, op in enumerate(ops):
        if op.node >= 0:
            node_last[op.node] = i
    _to_node_returns(ops, node_last)
    # A node that reads a saved tensor holds it to its last operator, also when the unpack went
    # through other hooks (a non-reentrant checkpoint's, which hand the node the tensor its
    # recomputation made or, for the block's input, the input itself).
    for i, op in enumerate(ops):
        if op.phase == 0 or op.node < 0:
            continue
        for v in op.reads:
            t = t_index.get(values[v].storage)
            if t is not None and v in saved_values:
                bwd_readers[t].update(op_of(o) for o in range(i, node_last[op.node] + 1))
    # A value the backward pass made and saved (a reentrant checkpoint's re-run forward) is no
    # saved tensor of the instance, but the node that unpacks it holds it in the same way:
    # an unsaved storage alive to the node's last operator (`Trace.freed_after` cannot say: the
    # recorder's own aliases keep it from being seen freed). A storage a holder kept into the
    # backward pass is alive until it let go (`graph_held`), in the same way.
    node_held: dict[int, int] = dict(graph_held)
    for (v, nxt), node in zip(trace.unpacked_before, unpacked_by, strict=True):
        k = values[v].storage
        if k in caller_held:
            continue
        # The node that unpacked it holds it until its last operator (e.g. a linear layer's
        # backward reads its input for the weight gradient, then sums the bias gradient), so
        # every operator from the unpack to the node's last uses it: none may run without it.
        t = t_index.get(k)
        if nxt >= len(ops):  # unpacked after the last operator
            if t is not None:
                bwd_readers[t].add(last_op)
            continue
        end = max(nxt, node_last.get(node, -1))
        if t is None:
            node_held[k] = max(node_held.get(k, end), end)
        else:
            bwd_readers[t].update(op_of(o) for o in range(nxt, end + 1))
    _held_since_unpack(trace, t_index, saved_values, unpacked_by, bwd_readers, op_of)
    _held_until_let_go(trace, t_index, bwd_readers, op_of)
    for t in range(n_t):
        if not bwd_readers[t]:
            bwd_readers[t].add(last_op)
    # The step's own references hold a storage until it drops them, which may be after its
    # last reader (a local of the function that produced it): that operator counts as a
    # forward use, so a swapped or recomputed tensor's buffer goes no earlier than in the step.
    for k, after in trace.released_after.items():
        t = t_index.get(k)
        if t is not None and 0 <= after < n_fwd and after > values[tensor_values[t]].producer:
            fwd_readers[t].add(op_of(after))

    # ---- blocks, categories, recompute --------------------------------------------------------
    n_blocks = trace.n_blocks
    op_block = [trace.op_block(op) for op in ops]
    block_in: dict[int, int] = {}
    for v, b in trace.block_inputs.items():
        block_in.setdefault(values[v].storage, b)
    if ops and any(op_block[i] == n_blocks for i in range(n_fwd)):
        for v, b in trace.block_outputs.items():
            if b == n_blocks - 1:
                block_in.setdefault(values[v].storage, n_blocks)  # the head's input

    names = _unique_names(
        ["input"] * shift + [("bwd:" if op.phase else "") + f"{op.module}/{op.aten}" for op in ops]
    )
    producer: list[int] = []
    category: list[str] = []
    tblock: list[int] = []
    recompute: list[float] = []
    rebuild: list[tuple[int, ...]] = []
    tnames: list[str] = []
    workspace = [0] * n_t
    n_out: Counter[int] = Counter()
    n_inputs = 0
    for i, v in enumerate(tensor_values):
        val = values[v]
        p = val.producer
        producer.append(0 if p == EXTERNAL else op_of(p))
        b_in = block_in.get(val.storage)
        if b_in is not None:
            category.append("block_input")
            tblock.append(b_in)
            recompute.append(math.inf)
            rebuild.append(())
            tnames.append(f"block{b_in}.in")
            continue
        if p == EXTERNAL:
            category.append("block_input")
            tblock.append(-1)
            recompute.append(math.inf)
            rebuild.append(())
            tnames.append(f"input.{n_inputs}")
            n_inputs += 1
            continue
        n_out[p] += 1
        tnames.append(f"{names[op_of(p)]}.out" + (f"{n_out[p] - 1}" if n_out[p] > 1 else ""))
        tblock.append(op_block[p])
        own = _own_chain(trace, v)
        if val.dtype == "bool" or any(_is_mask_op(ops[o].aten) for o in own):
            category.append("dropout_mask")
            recompute.append(sum(durations[o] for o in own))
            rebuild.append(())
            continue
        kind, aten = ops[p].kind, ops[p].aten
        if kind == "attention":
            category.append("attention_output")
        elif kind in ("gemm", "conv"):
            category.append("gemm_output")
        elif aten in ("add", "add_") and len(ops[p].reads) >= 2:
            category.append("residual")
        else:
            category.append("elementwise")
        chain, inputs = _rebuild_chain(trace, v, saved_values, t_index)
        bad = chain is None or any(
            _producer(trace, tensor_values[u]) >= p for u in inputs if u != i
        )
        if bad or chain is None:
            recompute.append(math.inf)
            rebuild.append(())
        else:
            recompute.append(sum(durations[o] for o in chain))
            rebuild.append(tuple(sorted(u for u in inputs if u != i)))
            workspace[i] = _chain_workspace_bytes(trace, chain, val.storage, set(t_index))

    # ---- operators ----------------------------------------------------------------------------
    saved_storages = set(t_index)
    op_reads: list[list[int]] = [[] for _ in range(len(ops) + shift)]
    for t in range(n_t):
        for o in sorted(fwd_readers[t] | bwd_readers[t]):
            op_reads[o].append(t)
    # A saved storage written before the value that is saved (a CPU dropout mask: bernoulli_,
    # then div_ in place; a convolution's output, then an in-place ReLU) occupies memory from
    # its first writer on, before its producer: those operators count it as transient.
    early = {
        values[v].storage: (values[v].producer, values[v].nbytes)
        for v in tensor_values
        if values[v].producer != EXTERNAL
    }
    transient = [0] * shift + _transient_bytes(
        trace, saved_storages | caller_held, early, node_held
    )
    # A rebuild runs between two operators, where gradient buffers the backward pass carries
    # from one node to a later one stay allocated: the rebuild's workspace includes those
    # carried into the operator it runs before (its first backward reader, or that of a
    # recomputed consumer it is rebuilt for, whichever carries most).
    carried = [0] * shift + _carried_bytes(trace, saved_storages | caller_held, node_held)
    fbr = [min(r) for r in bwd_readers]
    consumers: list[list[int]] = [[] for _ in range(n_t)]
    for v in range(n_t):
        for u in rebuild[v]:
            consumers[u].append(v)
    for i in range(n_t):
        if not math.isfinite(recompute[i]) or category[i] == "block_input":
            continue
        points, todo, seen = {fbr[i]}, list(consumers[i]), set()
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                points.add(fbr[v])
                todo.extend(consumers[v])
        workspace[i] += max(carried[o] for o in points)
    blocks_col = [-1] * shift + op_block
    lfr = [max([producer[t], *fwd_readers[t]]) for t in range(n_t)]
    meta = dict(meta or {})
    meta.setdefault("builder", "profile")
    meta["timing"] = timing
    meta["n_blocks"] = n_blocks
    meta["block_modules"] = list(trace.block_modules)
    meta["parameter_bytes"] = trace.param_bytes
    held = {values[v].storage: values[v].nbytes for v in trace.saved}
    meta["caller_held_bytes"] = sum(n for k, n in held.items() if k in caller_held)
    meta["saved_dtypes"] = sorted({values[v].dtype for v in tensor_values})
    # What `slackswap.runtime` matches a live step against: each saved tensor's value id (the
    # recorder numbers values in a fixed order, so the same step numbers them the same way), its
    # dtype and the shape its producer wrote; op_shift is 1 when operator 0 is the synthetic input.
    meta["runtime_signature"] = {
        "op_shift": shift,
        "values": list(tensor_values),
        "dtypes": [values[v].dtype for v in tensor_values],
        "shapes": [list(values[v].shape) for v in tensor_values],
        # Earlier values of a saved tensor's storage that autograd saved too (value, tensor):
        # the runtime hands autograd views of the tensor for them.
        "earlier_values": sorted(
            [v, t_index[values[v].storage]]
            for v in saved_values
            if values[v].storage in t_index and by_storage[values[v].storage] != v
        ),
    }
    cols: dict[str, Any] = dict(
        op_name=names,
        op_phase=[0] * shift + [op.phase for op in ops],
        op_block=blocks_col,
        op_layer=blocks_col,
        op_kind=["memory"] * shift + [op.kind for op in ops],
        op_duration_s=[0.0] * shift + durations,
        op_flops=[0.0] * shift + [op.flops for op in ops],
        op_transient_bytes=transient,
        op_reads=op_reads,
        tensor_name=_unique_names(tnames),
        tensor_bytes=[values[v].nbytes for v in tensor_values],
        tensor_producer=producer,
        tensor_last_fwd_reader=lfr,
        tensor_first_bwd_reader=[min(r) for r in bwd_readers],
        tensor_last_bwd_reader=[max(r) for r in bwd_readers],
        tensor_recompute_s=recompute,
        tensor_rebuild_inputs=rebuild,
        tensor_block=tblock,
        tensor_category=category,
        tensor_rebuild_workspace_bytes=workspace,
    )
    return Instance(name=name, hardware=hardware, meta=meta, **cols)


def _lifetimes(
    trace: Trace, saved_storages: set[int], held: dict[int, int] | None = None
) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """First and last operator of each unsaved storage, and its bytes: from its first use to
    its last (a gradient until autograd accumulates it, a buffer a Python local held until it
    was freed, a storage an autograd node holds (``held``: storage -> its last operator) until
    then, when later)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    size: dict[int, int] = {}
    for i, op in enumerate(trace.ops):
        for k, nb in op.touched:
            if k in saved_storages:
                continue
            first.setdefault(k, i)
            last[k] = i
            size[k] = max(size.get(k, 0), nb)
    for k, at in trace.grad_accumulated.items():
        if k in last:
            last[k] = max(last[k], at)  # held by its autograd node until accumulated
    for k, at in trace.freed_after.items():
        if k in last and at < len(trace.ops):
            last[k] = max(last[k], at)  # a Python local held it past its last reader
    for k, at in (held or {}).items():
        if k in last:
            last[k] = max(last[k], at)
    return first, last, size


def _running_sum(delta: list[int]) -> list[int]:
    out, run = [], 0
    for d in delta[:-1]:
        run += d
        out.append(run)
    return out


def _held_since_unpack(
    trace: Trace,
    t_index: dict[int, int],
    saved_values: set[int],
    unpacked_by: list[int],
    bwd_readers: list[set[int]],
    op_of: Any,
) -> None:
    """A saved tensor that a backward node reads without unpacking it through the recorder's
    hooks was handed to that node by another holder, which has held it since the recorder's
    unpack that gave it out: every operator from that unpack to the read uses it.

    A non-reentrant ``torch.utils.checkpoint`` unpacks its block's inputs once, to re-run the
    block, and keeps what the re-run saves (aliases of those inputs: a linear layer's input)
    until the nodes that read them run, operators later. Between the unpack and those reads no
    operator reads the tensor, yet its storage cannot go: a copy back let go there (the
    simulator, short of memory, evicting it between readers) frees nothing, and the copy back
    made again for the later reader is a second one."""
    unpacks: list[list[int]] = [[] for _ in range(len(bwd_readers))]
    nodes: list[set[int]] = [set() for _ in range(len(bwd_readers))]
    values, ops = trace.values, trace.ops
    for (v, nxt), node in zip(trace.unpacked_before, unpacked_by, strict=True):
        t = t_index.get(values[v].storage)
        if t is not None:
            unpacks[t].append(nxt)
            nodes[t].add(node)
    for i, op in enumerate(ops):
        if op.phase == 0 or op.node < 0:
            continue
        for v in op.reads:
            t = t_index.get(values[v].storage)
            if t is None or v not in saved_values or op.node in nodes[t]:
                continue
            since = [u for u in unpacks[t] if u <= i]
            if since:
                bwd_readers[t].update(op_of(o) for o in range(min(since), i))


def _held_until_let_go(
    trace: Trace, t_index: dict[int, int], bwd_readers: list[set[int]], op_of: Any
) -> None:
    """A saved tensor read in the backward pass is held to the operator after which autograd
    let go of it (`Trace.let_go_after`), when that is after its last reader: the node that
    saved it may run after the nodes that read it (a non-reentrant checkpoint saves its
    block's inputs in a node of its own, which runs once the block's backward pass is done),
    and a copy back stays on the device until autograd lets go of the tensor."""
    values = trace.values
    for pack, after in trace.let_go_after.items():
        t = t_index.get(values[trace.saved[pack]].storage)
        if t is None or not bwd_readers[t]:
            continue
        last = max(bwd_readers[t])
        bwd_readers[t].update(range(last + 1, op_of(after) + 1))


def _to_node_returns(ops: list[Any], node_last: dict[int, int]) -> None:
    """Move each node's last operator in ``node_last`` to the last one before it returns. A
    reentrant ``torch.utils.checkpoint``'s node runs its block's backward as a backward pass
    of its own (another graph task) after its own last operator, holding its inputs and the
    gradients handed to it until that pass ends: its end is the operator before the next one
    of its own backward pass. A node whose pass does not go on after it is left as it is
    (what follows may be another backward pass of the step, not one inside the node)."""
    following: dict[int, int] = {}  # graph task -> the next operator of it, scanning backwards
    next_of_task = [-1] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        task = ops[i].task
        if task >= 0:
            next_of_task[i] = following.get(task, -1)
            following[task] = i
    for node, last in node_last.items():
        nxt = next_of_task[last]
        if nxt > last + 1:
            node_last[node] = nxt - 1


def _transient_bytes(
    trace: Trace,
    saved_storages: set[int],
    early: dict[int, tuple[int, int]] | None = None,
    held: dict[int, int] | None = None,
) -> list[int]:
    """Per operator, the bytes of unsaved storages live from their first to their last use
    (or to the last operator of the node holding it, ``held``), and of each saved storage in
    ``early`` (storage -> (producer of its saved value, bytes)) from its first use to the
    operator before that producer."""
    first, last, size = _lifetimes(trace, saved_storages, held)
    before: dict[int, int] = {}  # saved storage -> its first use, when before its producer
    early = early or {}
    for i, op in enumerate(trace.ops):
        for k, _ in op.touched:
            if k in early and k in saved_storages and i < early[k][0]:
                before.setdefault(k, i)
    delta = [0] * (len(trace.ops) + 1)
    for k, lo in first.items():
        delta[lo] += size[k]
        delta[last[k] + 1] -= size[k]
    for k, lo in before.items():
        producer, nbytes = early[k]
        delta[lo] += nbytes
        delta[producer] -= nbytes
    return _running_sum(delta)


def _carried_bytes(
    trace: Trace, saved_storages: set[int], held: dict[int, int] | None = None
) -> list[int]:
    """Per operator, the bytes of unsaved storages live both before it starts and while it
    runs (first used by an earlier operator, last by it or a later one): what a rebuild right
    before it finds allocated besides the saved tensors."""
    first, last, size = _lifetimes(trace, saved_storages, held)
    delta = [0] * (len(trace.ops) + 1)
    for k, lo in first.items():
        if last[k] > lo:
            delta[lo + 1] += size[k]
            delta[last[k] + 1] -= size[k]
    return _running_sum(delta)


def _producer(trace: Trace, v: int) -> int:
    return trace.values[v].producer


def _is_mask_op(aten: str) -> bool:
    return any(m in aten for m in _MASK_OPS)


def _own_chain(trace: Trace, v: int) -> list[int]:
    """The in-place chain that wrote value ``v``'s storage: its producer and the producers of
    earlier values of the same storage it read (``bernoulli_`` then ``div_`` for a CPU mask)."""
    out: list[int] = []
    storage = trace.values[v].storage
    while True:
        p = trace.values[v].producer
        if p == EXTERNAL or p in out:
            return out
        out.append(p)
        prev = [u for u in trace.ops[p].reads if trace.values[u].storage == storage and u != v]
        if not prev:
            return out
        v = prev[0]


def _chain_workspace_bytes(
    trace: Trace, chain: list[int], target_storage: int, saved_storages: set[int]
) -> int:
    """The largest sum of the chain's live unsaved intermediates at any of its operators, bytes.

    An intermediate is a storage a chain operator writes, other than the rebuilt tensor's own
    and the saved tensors'; it lives from its first writer in the chain to its last reader in
    the chain (or just its writer when no chain operator reads it).
    """
    values = trace.values
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    size: dict[int, int] = {}
    for o in chain:  # in execution order
        for w in trace.ops[o].writes:
            k = values[w].storage
            if k == target_storage or k in saved_storages:
                continue
            first.setdefault(k, o)
            last[k] = max(last.get(k, o), o)
            size[k] = max(size.get(k, 0), values[w].nbytes)
        for u in trace.ops[o].reads:
            k = values[u].storage
            if k in first:
                last[k] = o
    return max((sum(size[k] for k in first if first[k] <= o <= last[k]) for o in chain), default=0)


def _rebuild_chain(
    trace: Trace, v: int, saved: set[int], t_index: dict[int, int]
) -> tuple[list[int] | None, set[int]]:
    """Operators that rebuild value ``v`` from saved tensors (in execution order), and the
    saved tensors they read; no chain (None) when it reads a tensor a rebuild cannot have: one
    with data that the step did not make and that is no input of the model (a loss's targets,
    a constant the model makes each call with ``torch.tensor``), which a fast step of the
    training path, running no dispatch mode, never sees (`Trace.model_inputs`)."""
    ops, values = trace.ops, trace.values
    model_inputs = trace.model_inputs
    chain: list[int] = []
    inputs: set[int] = set()
    stack = [values[v].producer]
    while stack:
        o = stack.pop()
        if o in chain:
            continue
        chain.append(o)
        if len(chain) > MAX_CHAIN_OPS:
            return None, inputs
        for u in ops[o].reads:
            # An earlier value of the rebuilt tensor's own storage is rebuilt with it.
            if u in saved and values[u].storage != values[v].storage:
                inputs.add(t_index[values[u].storage])
            elif values[u].producer != EXTERNAL:
                stack.append(values[u].producer)
            elif (
                model_inputs is not None
                and values[u].storage not in model_inputs
                and values[u].nbytes > 0
            ):
                return None, inputs
    return sorted(chain), inputs
