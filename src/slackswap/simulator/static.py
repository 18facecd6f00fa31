"""Per-instance arrays the kernel reads, packed into a few 2-d arrays, built once and cached."""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

import numpy as np

from slackswap.instance import Instance

# Rows of `Static.so` (per operator, length n_ops + 1).
O_TRANS = 0  # transient bytes
O_CUMTR = 1  # prefix sums of transient bytes
O_PROD = 2  # CSR pointers into idx: tensors the operator produces (producer order)
O_LFR = 3  # CSR pointers: tensors whose last forward reader the operator is
O_READS = 4  # CSR pointers: saved tensors the operator reads
O_SEG_FIRST = 5  # 1 for the first backward operator of a layer segment
O_SEG_END = 6  # last operator of the backward segment holding the operator
O_NEXT_SEG_END = 7  # last operator of the following backward segment
O_FWD_LAYER_START = 8  # 1 for a forward operator whose layer differs from the previous one
O_PROD_BYTES = 9  # bytes of the saved tensors the operator produces
N_SO = 10

# Rows of `Static.st` (per tensor, length n_tensors + 1).
T_BYTES = 0
T_FBR = 1  # first backward reader
T_LBR = 2  # last backward reader
T_ORDER = 3  # tensors by decreasing (producer, index)
T_RDR = 4  # CSR pointers into idx: the tensor's backward readers, ascending
T_RIN = 5  # CSR pointers: rebuild inputs
T_RCONS = 6  # CSR pointers: tensors whose rebuild reads this one
T_LFR = 7  # last forward reader (the producer when no forward operator reads it)
T_WS = 8  # rebuild workspace: bytes a rebuild holds beside the rebuilt tensor
N_ST = 9

# Entries of `Static.hw`.
H_BW = 0  # bytes per second per direction
H_DUPLEX = 1  # share of H_BW each direction gets while both engines are busy
H_LATENCY = 2  # s per copy


class Static(NamedTuple):
    """Read-only, plan-independent arrays of one instance (int64 indices and bytes, float64 s)."""

    n_ops: int
    n_fwd: int
    so: np.ndarray  # (N_SO, n_ops + 1) int64
    base: np.ndarray  # (n_ops + 1,) ideal start of each operator (cumulative durations), s
    st: np.ndarray  # (N_ST, n_tensors + 1) int64
    trec: np.ndarray  # (n_tensors,) recompute cost, s (inf: cannot be recomputed)
    idx: np.ndarray  # all CSR index lists, concatenated
    hw: np.ndarray  # (3,) link: bandwidth, duplex factor, latency


def _group(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Item indices grouped by key (stable): ptr (n + 1) and the indices."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, order


def _lists(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows], dtype=np.int64)
    return ptr, np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(ptr[-1]))


def build_static(inst: Instance) -> Static:
    n, nt, nf = inst.n_ops, inst.n_tensors, inst.n_forward_ops
    i64 = np.int64
    base = np.zeros(n + 1, dtype=np.float64)
    np.cumsum(inst.op_duration_s.astype(np.float64), out=base[1:])
    so = np.zeros((N_SO, n + 1), dtype=i64)
    st = np.zeros((N_ST, nt + 1), dtype=i64)
    so[O_TRANS, :n] = inst.op_transient_bytes
    np.add.at(so[O_PROD_BYTES], inst.tensor_producer.astype(i64), inst.tensor_bytes.astype(i64))
    np.cumsum(so[O_TRANS, :n], out=so[O_CUMTR, 1:])
    st[T_BYTES, :nt] = inst.tensor_bytes
    st[T_FBR, :nt] = inst.tensor_first_bwd_reader
    st[T_LBR, :nt] = inst.tensor_last_bwd_reader
    st[T_LFR, :nt] = inst.tensor_last_fwd_reader
    st[T_WS, :nt] = inst.tensor_rebuild_workspace_bytes
    st[T_ORDER, :nt] = np.lexsort((np.arange(nt), inst.tensor_producer))[::-1]

    readers: list[list[int]] = [[] for _ in range(nt)]
    for op in range(nf, n):
        for t in inst.op_reads[op]:
            readers[t].append(op)
    consumers: list[list[int]] = [[] for _ in range(nt)]
    for v, row in enumerate(inst.tensor_rebuild_inputs):
        for u in sorted(set(row)):
            consumers[u].append(v)
    parts: list[tuple[np.ndarray, int, tuple[np.ndarray, ...]]] = [
        (so, O_PROD, _group(inst.tensor_producer.astype(i64), n)),
        (so, O_LFR, _group(inst.tensor_last_fwd_reader.astype(i64), n)),
        (so, O_READS, tuple(a.astype(i64) for a in inst.op_reads_csr)),
        (st, T_RDR, _lists([sorted(set(r)) for r in readers])),
        (st, T_RIN, tuple(a.astype(i64) for a in inst.rebuild_inputs_csr)),
        (st, T_RCONS, _lists(consumers)),
    ]
    chunks = []
    offset: int = 0
    for table, slot, (ptr, items) in parts:
        table[slot, :] = ptr + offset
        chunks.append(items)
        offset += int(items.shape[0])
    idx = np.concatenate(chunks) if chunks else np.zeros(0, dtype=i64)

    layer = inst.op_layer.astype(i64)
    if nf > 1:
        so[O_FWD_LAYER_START, 1:nf] = layer[1:nf] != layer[: nf - 1]
    starts = [j for j in range(nf, n) if j == nf or layer[j] != layer[j - 1]]
    ends = [*(s - 1 for s in starts[1:]), n - 1]
    so[O_SEG_END, :] = n - 1
    so[O_NEXT_SEG_END, :] = n - 1
    for k, (s, e) in enumerate(zip(starts, ends, strict=True)):
        so[O_SEG_FIRST, s] = 1
        so[O_SEG_END, s : e + 1] = e
        so[O_NEXT_SEG_END, s : e + 1] = ends[k + 1] if k + 1 < len(ends) else n - 1

    hw = inst.hardware
    static = Static(
        n_ops=n,
        n_fwd=nf,
        so=so,
        base=base,
        st=st,
        trec=np.ascontiguousarray(inst.tensor_recompute_s, dtype=np.float64),
        idx=np.ascontiguousarray(idx, dtype=i64),
        hw=np.array([hw.link_bw_Bps, hw.duplex_factor, hw.copy_latency_s], dtype=np.float64),
    )
    for a in static:
        if isinstance(a, np.ndarray):
            a.setflags(write=False)
    return static


_CACHE: weakref.WeakKeyDictionary[Instance, Static] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def static_for(inst: Instance) -> Static:
    """The cached `Static` of ``inst`` (built on first use; instances are immutable)."""
    with _LOCK:
        s = _CACHE.get(inst)
        if s is None:
            s = build_static(inst)
            _CACHE[inst] = s
        return s
