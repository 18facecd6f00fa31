"""Per-instance arrays the kernel reads, built once per instance and cached."""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

import numpy as np

from slackswap.problem import Instance


class Static(NamedTuple):
    """Read-only, plan-independent arrays of one instance (indices int64, bytes int64, s float64)."""

    n_ops: int
    n_fwd: int
    dur: np.ndarray  # op duration, s
    base: np.ndarray  # n_ops + 1: ideal start of each op (cumulative sum of durations), s
    transient: np.ndarray  # op transient bytes
    cumtr: np.ndarray  # n_ops + 1: prefix sums of transient bytes
    prod_ptr: np.ndarray  # CSR op -> tensors it produces (producer order)
    prod_idx: np.ndarray
    lfr_ptr: np.ndarray  # CSR op -> tensors whose last forward reader it is
    lfr_idx: np.ndarray
    reads_ptr: np.ndarray  # CSR op -> saved tensors it reads
    reads_idx: np.ndarray
    rdr_ptr: np.ndarray  # CSR tensor -> its backward readers, ascending
    rdr_idx: np.ndarray
    rin_ptr: np.ndarray  # CSR tensor -> rebuild inputs
    rin_idx: np.ndarray
    rcons_ptr: np.ndarray  # CSR tensor -> tensors whose rebuild reads it
    rcons_idx: np.ndarray
    tbytes: np.ndarray
    trec: np.ndarray  # recompute cost, s (inf: cannot be recomputed)
    tfbr: np.ndarray  # first backward reader
    tlbr: np.ndarray  # last backward reader
    order_desc: np.ndarray  # tensors by decreasing (producer, index)
    fwd_layer_start: np.ndarray  # int8 per op: a forward op whose layer differs from the previous
    seg_first: np.ndarray  # int8 per op: first backward op of a layer segment
    seg_end: np.ndarray  # per op: last op of its backward segment (backward ops only)
    next_seg_end: np.ndarray  # per op: last op of the following backward segment
    link_bw: float  # bytes per second per direction
    duplex: float  # share of link_bw each direction gets while both are busy
    latency: float  # s per copy


def _csr_from_keys(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Group item indices by ``keys`` (stable): ptr of length n + 1 and the item indices."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    counts = np.bincount(keys, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, order


def _segments(inst: Instance) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n, nf = inst.n_ops, inst.n_forward_ops
    layer = inst.op_layer.astype(np.int64)
    fwd_start = np.zeros(n, dtype=np.int8)
    if nf > 1:
        fwd_start[1:nf] = layer[1:nf] != layer[: nf - 1]
    seg_first = np.zeros(n, dtype=np.int8)
    seg_end = np.full(n, n - 1, dtype=np.int64)
    next_end = np.full(n, n - 1, dtype=np.int64)
    starts = [j for j in range(nf, n) if j == nf or layer[j] != layer[j - 1]]
    ends = [*(s - 1 for s in starts[1:]), n - 1]
    for k, (s, e) in enumerate(zip(starts, ends, strict=True)):
        seg_first[s] = 1
        seg_end[s : e + 1] = e
        next_end[s : e + 1] = ends[k + 1] if k + 1 < len(ends) else n - 1
    return fwd_start, seg_first, seg_end, next_end


def build_static(inst: Instance) -> Static:
    n, nt = inst.n_ops, inst.n_tensors
    i64 = np.int64
    dur = np.ascontiguousarray(inst.op_duration_s, dtype=np.float64)
    base = np.zeros(n + 1, dtype=np.float64)
    np.cumsum(dur, out=base[1:])
    tr = inst.op_transient_bytes.astype(i64)
    cumtr = np.zeros(n + 1, dtype=i64)
    np.cumsum(tr, out=cumtr[1:])
    prod = inst.tensor_producer.astype(i64)
    prod_ptr, prod_idx = _csr_from_keys(prod, n)
    lfr_ptr, lfr_idx = _csr_from_keys(inst.tensor_last_fwd_reader.astype(i64), n)
    reads_ptr, reads_idx = (a.astype(i64) for a in inst.op_reads_csr)
    nf = inst.n_forward_ops
    rdr: list[list[int]] = [[] for _ in range(nt)]
    for op in range(nf, n):
        for t in inst.op_reads[op]:
            rdr[t].append(op)
    rdr = [sorted(set(r)) for r in rdr]
    rdr_ptr = np.zeros(nt + 1, dtype=i64)
    rdr_ptr[1:] = np.cumsum([len(r) for r in rdr], dtype=i64)
    rdr_idx = np.fromiter((o for r in rdr for o in r), dtype=i64)
    rin_ptr, rin_idx = (a.astype(i64) for a in inst.rebuild_inputs_csr)
    cons: list[list[int]] = [[] for _ in range(nt)]
    for v, row in enumerate(inst.tensor_rebuild_inputs):
        for u in set(row):
            cons[u].append(v)
    rcons_ptr = np.zeros(nt + 1, dtype=i64)
    rcons_ptr[1:] = np.cumsum([len(c) for c in cons], dtype=i64)
    rcons_idx = np.fromiter((v for c in cons for v in c), dtype=i64)
    order_desc = np.lexsort((np.arange(nt), prod))[::-1].astype(i64)
    fwd_start, seg_first, seg_end, next_end = _segments(inst)
    hw = inst.hardware
    arrays = Static(
        n_ops=n,
        n_fwd=nf,
        dur=dur,
        base=base,
        transient=tr,
        cumtr=cumtr,
        prod_ptr=prod_ptr,
        prod_idx=prod_idx,
        lfr_ptr=lfr_ptr,
        lfr_idx=lfr_idx,
        reads_ptr=np.ascontiguousarray(reads_ptr),
        reads_idx=np.ascontiguousarray(reads_idx),
        rdr_ptr=rdr_ptr,
        rdr_idx=rdr_idx,
        rin_ptr=np.ascontiguousarray(rin_ptr),
        rin_idx=np.ascontiguousarray(rin_idx),
        rcons_ptr=rcons_ptr,
        rcons_idx=rcons_idx,
        tbytes=inst.tensor_bytes.astype(i64),
        trec=np.ascontiguousarray(inst.tensor_recompute_s, dtype=np.float64),
        tfbr=inst.tensor_first_bwd_reader.astype(i64),
        tlbr=inst.tensor_last_bwd_reader.astype(i64),
        order_desc=np.ascontiguousarray(order_desc),
        fwd_layer_start=fwd_start,
        seg_first=seg_first,
        seg_end=seg_end,
        next_seg_end=next_end,
        link_bw=float(hw.link_bw_Bps),
        duplex=float(hw.duplex_factor),
        latency=float(hw.copy_latency_s),
    )
    for a in arrays:
        if isinstance(a, np.ndarray):
            a.setflags(write=False)
    return arrays


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
