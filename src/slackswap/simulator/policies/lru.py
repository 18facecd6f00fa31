"""The ``on-demand-lru`` runtime (SuperNeurons' tensor cache): a plain event loop in Python.

Semantics (the rest is the event model of `slackswap.simulator`: one compute stream, a D2H and
an H2D engine at the link bandwidth, ``duplex_factor`` of it while both are busy, plus the copy
latency per copy; a fragmentation-free memory of ``budget`` bytes):

- KEEP tensors stay from their producer to their last backward use. RECOMP tensors are freed
  after their last forward reader and rebuilt on the compute stream right before their first
  backward reader, rebuild inputs that are themselves RECOMP first (chains); a rebuilt tensor
  stays until its last backward use (reader or rebuild reading it). Its rebuild workspace
  (``tensor_rebuild_workspace_bytes``) is allocated with it and freed when the rebuild ends.
- SWAP tensors are *evictable*: they stay on the device like KEEP tensors and leave only when
  an allocation does not fit. Then the least recently used evictable tensor (last produced,
  read or fetched longest ago; ties: the lower tensor index) that the current step does not
  read is evicted: dropped at once when the host already holds a copy, else copied out on the
  D2H engine with compute waiting for the copy (a memory stall), its buffer freed when the
  copy ends. Evictions repeat until the allocation fits.
- A step that reads an evicted tensor fetches it on the H2D engine ahead of any queued
  prefetch (its buffer allocated when the copy is issued, evicting as above) and waits for it
  (a copy stall).
- Prefetch for the next heavy operator: when a backward GEMM, attention or convolution starts
  (and when the backward pass starts), the evicted tensors that the steps up to and including
  the next heavy backward operator read are fetched, in order, as long as each buffer fits
  without evicting anything; the rest are fetched on demand.
- A step that lacks memory while no eviction can free any (nothing evictable, nothing in
  flight) makes the plan infeasible at that operator; SWAP tensors never leave the device
  unless memory runs short, so at a budget of at least the keep-all peak nothing is copied.

Time, as in the compiled kernel: the compute clock is the ideal start of the current operator
plus the delay so far (stalls and rebuilds), and the step is the ideal step plus the delay, so it
is never below the ideal step, not even by a rounding error.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import RECOMP, SWAP
from slackswap.simulator.policies import register_runtime
from slackswap.simulator.policies.base import Runtime
from slackswap.simulator.result import SimResult, Timeline

RUNTIME = "on-demand-lru"
DESCRIPTION = (
    "SuperNeurons: SWAP tensors leave only under memory pressure, least recently used first, "
    "compute waiting for the eviction copy; backward prefetch for the next heavy operator"
)
HEAVY_KINDS = ("gemm", "attention", "conv")
D2H, H2D = 0, 1
K_OP, K_REBUILD, K_STALL_COPY, K_STALL_MEM, K_EVICT = 0, 1, 2, 3, 4  # result.COMPUTE_KINDS


class _Infeasible(Exception):
    def __init__(self, reason: str, op: int, overflow: int) -> None:
        super().__init__(reason)
        self.reason, self.op, self.overflow = reason, op, overflow


@dataclass
class _Steps:
    """The compute stream's sequence: forward ops, then backward ops with rebuilds inserted."""

    op: list[int] = field(default_factory=list)  # operator index (a rebuild: the op it precedes)
    rebuild: list[int] = field(default_factory=list)  # rebuilt tensor, -1 for an operator
    reads: list[tuple[int, ...]] = field(default_factory=list)
    frees: list[list[int]] = field(default_factory=list)  # tensors whose residency ends after


def build_steps(inst: Instance, actions: np.ndarray) -> _Steps:
    """Forward operators, then backward operators each preceded by the rebuilds it needs."""
    s = _Steps()
    nf = inst.n_forward_ops
    rin = inst.tensor_rebuild_inputs
    for i in range(nf):
        s.op.append(i)
        s.rebuild.append(-1)
        s.reads.append(inst.op_reads[i])
    rebuilt = np.zeros(inst.n_tensors, dtype=bool)

    def need(t: int, op: int) -> None:
        if actions[t] != RECOMP or rebuilt[t]:
            return
        rebuilt[t] = True  # set first: a cycle in rebuild inputs cannot recurse forever
        for u in rin[t]:
            need(u, op)
        s.op.append(op)
        s.rebuild.append(t)
        s.reads.append(rin[t])

    for i in range(nf, inst.n_ops):
        for t in inst.op_reads[i]:
            need(t, i)
        s.op.append(i)
        s.rebuild.append(-1)
        s.reads.append(inst.op_reads[i])
    # Residency ends: RECOMP after its last forward reader; every tensor after its last backward
    # use (a reader or a rebuild reading it).
    last_use = np.full(inst.n_tensors, -1, dtype=np.int64)
    n_fwd_steps = nf
    for k in range(n_fwd_steps, len(s.op)):
        for t in s.reads[k]:
            last_use[t] = k
    s.frees = [[] for _ in s.op]
    for t in range(inst.n_tensors):
        if actions[t] == RECOMP:
            s.frees[int(inst.tensor_last_fwd_reader[t])].append(t)
        if last_use[t] >= 0:
            s.frees[int(last_use[t])].append(t)
    return s


class _Link:
    """Two DMA engines (D2H, H2D), FIFO each, sharing the link's duplex bandwidth."""

    def __init__(self, bw: float, duplex: float, latency: float) -> None:
        self.bw, self.duplex, self.latency = bw, duplex, latency
        self.now = 0.0
        self.queue: tuple[deque[int], deque[int]] = (deque(), deque())
        self.cur: list[list[float] | None] = [None, None]  # [tensor, latency left, bytes left]
        self.size: dict[int, float] = {}
        self.moved = [0, 0]
        self.started: list[float] = [0.0, 0.0]  # start of the copy on each engine, s
        self.log: list[tuple[int, int, float, float]] | None = None  # (engine, tensor, start, end)

    def push(self, d: int, t: int, nbytes: int, front: bool = False) -> None:
        self.size[t] = float(nbytes)
        (self.queue[d].appendleft if front else self.queue[d].append)(t)
        self.moved[d] += nbytes
        self._start(d)

    def _start(self, d: int) -> None:
        if self.cur[d] is None and self.queue[d]:
            t = self.queue[d].popleft()
            self.cur[d] = [float(t), self.latency, self.size[t]]
            self.started[d] = self.now

    def _rate(self) -> float:
        both = self.cur[0] is not None and self.cur[1] is not None
        return self.bw * (self.duplex if both else 1.0)

    def _phase_end(self, d: int, rate: float) -> float:
        c = self.cur[d]
        if c is None:
            return math.inf
        return self.now + (c[1] if c[1] > 0 else c[2] / rate)

    def next_event(self) -> float:
        """Time of the next phase change (latency over or copy done), inf when idle."""
        rate = self._rate()
        return min(self._phase_end(D2H, rate), self._phase_end(H2D, rate))

    def phases_left(self) -> int:
        """An upper bound on the phase changes still to come (two per copy: latency, bytes)."""
        return 2 * (len(self.queue[D2H]) + len(self.queue[H2D]) + 2)

    def advance(self, until: float) -> list[tuple[float, int, int]]:
        """Run the engines to ``until``; returns the copies done as (time, direction, tensor).

        Each pass ends the phase whose event it is outright (its remainder set to zero) rather
        than by subtracting the elapsed time: near a large clock the subtraction can leave a
        remainder below the clock's resolution, whose event time rounds back to ``now`` and the
        clock stops advancing (a 1e15 B/s link did so). So every pass ends at least one phase,
        and `phases_left` bounds the passes.
        """
        done: list[tuple[float, int, int]] = []
        for _ in range(self.phases_left() + 1):
            rate = self._rate()
            ends = (self._phase_end(D2H, rate), self._phase_end(H2D, rate))
            t_ev = min(ends)
            if t_ev > until:
                self._progress(until - self.now)
                self.now = max(self.now, until)
                return done
            in_latency = [c is not None and c[1] > 0 for c in self.cur]  # before progressing
            self._progress(t_ev - self.now)
            self.now = max(self.now, t_ev)
            for d in (D2H, H2D):
                c = self.cur[d]
                if c is None:
                    continue
                if ends[d] == t_ev:  # this engine's event: its phase is over
                    if in_latency[d]:
                        c[1] = 0.0
                    else:
                        c[2] = 0.0
                if c[1] <= 0 and c[2] <= 0:
                    done.append((self.now, d, int(c[0])))
                    if self.log is not None:
                        self.log.append((d, int(c[0]), self.started[d], self.now))
                    self.cur[d] = None
                    self._start(d)
        raise RuntimeError("on-demand-lru: the link model made no progress")  # a bug, not input

    def _progress(self, dt: float) -> None:
        if dt <= 0:
            return
        rate = self._rate()
        for c in self.cur:
            if c is None:
                continue
            if c[1] > 0:  # next_event never steps past the end of a latency phase
                c[1] = max(0.0, c[1] - dt)
            else:
                c[2] = max(0.0, c[2] - rate * dt)


class _LRURun:
    def __init__(
        self, inst: Instance, actions: np.ndarray, budget: int, record: bool = False
    ) -> None:
        hw = inst.hardware
        self.inst, self.act, self.budget = inst, actions, budget
        self.size = inst.tensor_bytes.astype(np.int64)
        self.steps = build_steps(inst, actions)
        self.link = _Link(hw.link_bw_Bps, hw.duplex_factor, hw.copy_latency_s)
        n = inst.n_tensors
        self.on_dev = np.zeros(n, dtype=bool)
        self.host = np.zeros(n, dtype=bool)  # the host holds a copy
        self.evicting = np.zeros(n, dtype=bool)  # D2H eviction in flight
        self.fetching = np.zeros(n, dtype=bool)  # H2D in flight (buffer allocated)
        self.dead = np.zeros(n, dtype=bool)  # residency over for good
        self.access = np.full(n, -1, dtype=np.int64)
        self.used = 0
        self.peak = 0
        # The compute clock is the ideal start of the current operator plus the delay so far,
        # as in the compiled kernel: summing durations one by one instead rounds differently from
        # the ideal step's sum and could end a step below it (2e-17 s on VGG-16).
        base = np.zeros(inst.n_ops + 1, dtype=np.float64)
        np.cumsum(inst.op_duration_s, out=base[1:])
        self.base: list[float] = base.tolist()  # ideal start of each operator, s
        self.delay = 0.0  # stalls and rebuilds so far, s
        self.now = 0.0
        self.pending_free = 0  # bytes that in-flight evictions will free
        self.stall = {(ph, kind): 0.0 for ph in (0, 1) for kind in ("copy", "mem")}
        self.recompute_s = 0.0
        self.evictions = 0
        self.heavy = np.array([k in HEAVY_KINDS for k in inst.op_kind], dtype=bool)
        self.record = record
        # (start, end, kind, op, tensor) with kind as in `result.COMPUTE_KINDS`; (time, bytes)
        self.comp: list[tuple[float, float, int, int, int]] = []
        self.mem: list[tuple[float, int]] = []
        if record:
            self.link.log = []

    def _mem(self, delta: int) -> None:
        self.used += delta
        self.peak = max(self.peak, self.used)
        if self.record:
            self.mem.append((max(self.now, self.link.now), self.used))

    # ----- copies and memory ------------------------------------------------------------------
    def _apply(self, done: list[tuple[float, int, int]]) -> None:
        for _, d, t in done:
            if d == D2H:
                self.evicting[t] = False
                self.host[t] = True
                self.on_dev[t] = False
                self.pending_free -= int(self.size[t])
                self._mem(-int(self.size[t]))
            else:
                self.fetching[t] = False
                self.on_dev[t] = True

    def _wait_event(self, phase: int, kind: str, op: int, need: int) -> None:
        """Let compute wait until the next copy ends; infeasible when no copy is in flight."""
        for _ in range(self.link.phases_left() + 1):  # each pass ends a phase (`_Link.advance`)
            t_ev = self.link.next_event()
            if t_ev == math.inf:
                raise _Infeasible(
                    f"operator {self.inst.op_name[op]!r} lacks memory ({need} bytes more do "
                    "not fit the budget) and nothing can be evicted",
                    op,
                    max(0, self.used + need - self.budget),
                )
            done = self.link.advance(t_ev)
            if done:
                self._apply(done)
                break
        else:
            raise RuntimeError("on-demand-lru: waited for a copy that never ended")  # a bug
        delay = self.link.now - self.base[op]
        if delay > self.delay:
            self.stall[(phase, kind)] += delay - self.delay
            self.delay = delay
            end = self.base[op] + delay
            if self.record:
                kind_code = K_STALL_COPY if kind == "copy" else K_STALL_MEM
                self.comp.append((self.now, end, kind_code, op, -1))
            self.now = end

    def _victim(self, exclude: set[int]) -> int:
        cand = np.flatnonzero(self.on_dev & (self.act == SWAP) & ~self.evicting & ~self.fetching)
        best, best_key = -1, (math.inf, math.inf)
        for t in cand.tolist():
            if t in exclude:
                continue
            key = (self.access[t], t)
            if key < best_key:
                best, best_key = t, key
        return best

    def _make_room(self, need: int, exclude: set[int], phase: int, op: int) -> None:
        """Evict least recently used tensors until ``need`` more bytes fit; compute waits."""
        while self.used + need > self.budget:
            if self.used - self.pending_free + need > self.budget:
                v = self._victim(exclude)
                if v >= 0:
                    self.evictions += 1
                    if self.record:
                        self.comp.append((self.now, self.now, K_EVICT, op, v))
                    if self.host[v]:
                        self.on_dev[v] = False
                        self._mem(-int(self.size[v]))
                    else:
                        self.evicting[v] = True
                        self.pending_free += int(self.size[v])
                        self.link.push(D2H, v, int(self.size[v]))
                    continue
            self._wait_event(phase, "mem", op, need)

    def _fetch(self, t: int, front: bool) -> None:
        self._mem(int(self.size[t]))
        self.fetching[t] = True
        self.link.push(H2D, t, int(self.size[t]), front=front)

    def _prefetch(self, k: int) -> None:
        """Fetch, while buffers fit, the evicted inputs of steps k+1 .. the next heavy operator."""
        st = self.steps
        for j in range(k + 1, len(st.op)):
            for t in st.reads[j]:
                if self.act[t] == SWAP and not self.on_dev[t] and not self.fetching[t]:
                    if self.used + int(self.size[t]) > self.budget:
                        return
                    self.access[t] = k
                    self._fetch(t, front=False)
            if st.rebuild[j] < 0 and self.heavy[st.op[j]]:
                return

    # ----- the compute stream -----------------------------------------------------------------
    def run(self) -> None:
        inst, st = self.inst, self.steps
        nf = inst.n_forward_ops
        prod_of: list[list[int]] = [[] for _ in range(inst.n_ops)]
        for t, p in enumerate(inst.tensor_producer.tolist()):
            prod_of[p].append(t)
        for k in range(len(st.op)):
            op, rb = st.op[k], st.rebuild[k]
            phase = 0 if k < nf else 1
            reads = set(st.reads[k])
            if k == nf or (phase == 1 and rb < 0 and self.heavy[op]):
                self._prefetch(k)
            # 1. inputs on the device (fetch evicted ones first in line; wait for them)
            for t in st.reads[k]:
                if not self.on_dev[t] and not self.fetching[t]:
                    if self.act[t] != SWAP:
                        raise _Infeasible(
                            f"tensor {inst.tensor_name[t]!r} is not resident for "
                            f"{inst.op_name[op]!r}",
                            op,
                            0,
                        )
                    self._make_room(int(self.size[t]), reads, phase, op)
                    self._fetch(t, front=True)
            while any(self.fetching[t] for t in reads):
                self._wait_event(phase, "copy", op, 0)
            # 2. allocate outputs (a rebuilt tensor) and temporaries
            # (a rebuild's temporaries: its chain's intermediates, the workspace)
            outs = [rb] if rb >= 0 else (prod_of[op] if k < nf else [])
            if rb >= 0:
                transient = int(inst.tensor_rebuild_workspace_bytes[rb])
            else:
                transient = int(inst.op_transient_bytes[op])
            need = transient + sum(int(self.size[t]) for t in outs)
            self._make_room(need, reads | set(outs), phase, op)
            self._mem(need)
            for t in outs:
                self.on_dev[t] = True
                self.access[t] = k
            for t in reads:
                self.access[t] = k
            # 3. run: a rebuild delays the operator it precedes; an operator ends at its ideal
            # end plus the delay
            if rb >= 0:
                dur = float(inst.tensor_recompute_s[rb])
                self.recompute_s += dur
                self.delay += dur
                end = self.base[op] + self.delay
            else:
                end = self.base[op + 1] + self.delay
            if self.record:
                self.comp.append((self.now, end, K_REBUILD if rb >= 0 else K_OP, op, rb))
            self.now = end
            self._apply(self.link.advance(self.now))
            # 4. release temporaries and tensors whose residency ends here
            if transient:
                self._mem(-transient)
            for t in st.frees[k]:
                self._release(t)

    def _release(self, t: int) -> None:
        if self.on_dev[t] and not self.evicting[t]:
            self.on_dev[t] = False
            self._mem(-int(self.size[t]))
        # An eviction in flight frees the buffer when it ends; nothing more to do here.


def simulate_lru(
    instance: Instance, actions: np.ndarray, budget_bytes: int, timeline: bool = False
) -> dict[str, Any]:
    """Run the ``on-demand-lru`` runtime; returns the fields of a `SimResult`.

    Deterministic and pure; an infeasible plan gives ``feasible=False`` with a reason (the
    failing operator in ``fail_op``, the missing bytes in ``overflow_bytes``), never an error.
    """
    ideal = float(instance.ideal_step_s)
    acts = np.asarray(actions, dtype=np.int8)
    base: dict[str, Any] = dict(
        ideal_s=ideal, budget_bytes=int(budget_bytes), runtime=RUNTIME, timeline=None
    )
    bad = np.flatnonzero((acts == RECOMP) & ~np.isfinite(instance.tensor_recompute_s))
    if bad.size:
        t = int(bad[0])
        return _infeasible(
            base,
            f"invalid plan: tensor {instance.tensor_name[t]!r} is marked recomp but no operator "
            "rebuilds it (infinite recompute cost)",
            int(instance.tensor_first_bwd_reader[t]),
            int(instance.tensor_bytes[bad].sum()),
        )
    run = _LRURun(instance, acts, int(budget_bytes), record=timeline)
    try:
        run.run()
    except _Infeasible as exc:
        res = _infeasible(base, exc.reason, exc.op, exc.overflow)
        res.update(
            peak_bytes=int(run.peak),
            d2h_bytes=int(run.link.moved[D2H]),
            h2d_bytes=int(run.link.moved[H2D]),
            evictions=run.evictions,
            timeline=_timeline(run) if timeline else None,
        )
        return res
    s = run.stall
    step = ideal + run.delay  # as the compiled kernel: never below the ideal step
    return dict(
        base,
        step_s=step,
        throughput=ideal / step,
        recompute_s=run.recompute_s,
        fwd_stall_s=s[(0, "copy")] + s[(0, "mem")],
        fwd_stall_copy_s=s[(0, "copy")],
        fwd_stall_mem_s=s[(0, "mem")],
        bwd_stall_s=s[(1, "copy")] + s[(1, "mem")],
        bwd_stall_copy_s=s[(1, "copy")],
        bwd_stall_mem_s=s[(1, "mem")],
        d2h_bytes=int(run.link.moved[D2H]),
        h2d_bytes=int(run.link.moved[H2D]),
        peak_bytes=int(run.peak),
        feasible=True,
        reason="",
        fail_op=-1,
        overflow_bytes=0,
        evictions=run.evictions,
        timeline=_timeline(run) if timeline else None,
    )


def _timeline(run: _LRURun) -> Any:
    comp = run.comp
    log = run.link.log or []
    return Timeline(
        compute_start_s=np.array([c[0] for c in comp], dtype=np.float64),
        compute_end_s=np.array([c[1] for c in comp], dtype=np.float64),
        compute_kind=np.array([c[2] for c in comp], dtype=np.int64),
        compute_op=np.array([c[3] for c in comp], dtype=np.int64),
        compute_tensor=np.array([c[4] for c in comp], dtype=np.int64),
        copy_engine=np.array([c[0] for c in log], dtype=np.int64),
        copy_tensor=np.array([c[1] for c in log], dtype=np.int64),
        copy_start_s=np.array([c[2] for c in log], dtype=np.float64),
        copy_end_s=np.array([c[3] for c in log], dtype=np.float64),
        mem_time_s=np.array([m[0] for m in run.mem], dtype=np.float64),
        mem_bytes=np.array([m[1] for m in run.mem], dtype=np.int64),
    )


def _infeasible(base: dict[str, Any], reason: str, op: int, overflow: int) -> dict[str, Any]:
    return dict(
        base,
        step_s=math.inf,
        throughput=0.0,
        recompute_s=0.0,
        fwd_stall_s=0.0,
        fwd_stall_copy_s=0.0,
        fwd_stall_mem_s=0.0,
        bwd_stall_s=0.0,
        bwd_stall_copy_s=0.0,
        bwd_stall_mem_s=0.0,
        d2h_bytes=0,
        h2d_bytes=0,
        peak_bytes=0,
        feasible=False,
        reason=reason,
        fail_op=int(op),
        overflow_bytes=int(max(overflow, 1)),
        evictions=0,
    )


class OnDemandLRU(Runtime):
    """The ``on-demand-lru`` runtime, registered in `slackswap.simulator.policies`; a population
    runs one plan after another (`Runtime.simulate_population`)."""

    name = RUNTIME
    description = DESCRIPTION

    def simulate(
        self, instance: Instance, actions: np.ndarray, budget_bytes: int, timeline: bool = False
    ) -> SimResult:
        return SimResult(**simulate_lru(instance, actions, budget_bytes, timeline))


register_runtime(OnDemandLRU())
