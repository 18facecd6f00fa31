"""The CP-SAT interval model: per-tensor actions with timed copies, memory as a cumulative.

`CpPlanProgram` states, for one instance and budget M, a scheduling problem whose optimum is at or
below the simulated step (barrier-free runtime) of every plan it admits:

- the compute stream: operators in order (start variables, fixed durations) and one optional
  rebuild interval per recomputed tensor, all on one no-overlap resource; a rebuild runs in the
  backward pass and ends before the tensor's first backward reader starts;
- a D2H and an H2D copy engine, each a no-overlap resource. A swapped tensor's D2H interval
  starts after its producer ends. If the tensor is *offloaded* (its device buffer freed before
  its first backward reader) its buffer is freed no earlier than the end of that copy and of
  its last forward reader, and an H2D interval starts after the buffer was freed and after the
  forward pass ended and ends before the first backward reader starts;
- memory: one cumulative of capacity M over the transient bytes of each operator while it runs
  and each tensor's residency: producer start .. last forward reader end always; then keep:
  .. last backward reader end; recomp: rebuild start .. last backward reader end; swap: until
  freed (offloaded) or until the first backward reader ends, from the H2D start (offloaded) to
  the first backward reader's end, and during each later backward reader.

Relaxations that keep the model's optimum at or below the simulator's optimum (a simulated run,
with every time rounded down to the tick, is a solution of the model): durations are rounded
down to whole ticks and byte sizes down to whole quanta (the capacity too); copies run at the
full link rate (no 85% duplex factor) but pay the 10 us latency; copy order is free (no FIFO,
no deadline order, no admission look-ahead); a swapped tensor is absent at most once before its
first backward reader (a run that evicts and fetches it again is mapped onto its last absence,
which needs less memory and less H2D time); a swapped tensor may be absent between two of its
backward readers; rebuild inputs need not be resident; chained rebuilds may run anywhere before
their first reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.simulator.result import COMPUTE_KINDS, ENGINES
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._interrupt import call_interruptibly

#: Seconds `CpPlanProgram.check_values` gives CP-SAT when no deadline is handed to it (a test's
#: check of one assignment).
CHECK_SECONDS = 10.0


def _cp_solver() -> cp_model.CpSolver:
    """A CP-SAT solver that leaves Ctrl-C to Python: by default CP-SAT catches SIGINT and ends
    the search as if its time limit had passed, so the solve went on (see `_interrupt`)."""
    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False
    return solver


@dataclass
class CpResult:
    """One CP-SAT solve."""

    status: str  # "optimal", "feasible", "infeasible", "unknown"
    actions: np.ndarray | None
    objective_s: float | None  # the model's step for ``actions`` (a claim, seconds)
    bound_s: float | None  # no admitted plan models faster than this (seconds)
    wall_s: float
    info: dict[str, Any] = field(default_factory=dict)


class CpPlanProgram:
    """The interval model for one instance and budget (bytes)."""

    def __init__(
        self,
        instance: Instance,
        budget_bytes: int,
        *,
        horizon_s: float | None = None,
        ticks_per_op: int = 10_000,
    ):
        inst = instance
        self.instance = instance
        self.budget_bytes = int(budget_bytes)
        n, nf, nt = inst.n_ops, inst.n_forward_ops, inst.n_tensors
        # one tick: the rounding error stays below 1e-4 of the ideal step in total
        self.tick_s = inst.ideal_step_s / (ticks_per_op * max(n, 1))
        u = self.tick_s
        hw = inst.hardware
        dur = np.floor(inst.op_duration_s / u).astype(np.int64)
        finite = np.isfinite(inst.tensor_recompute_s)
        rc = np.where(finite, np.floor(np.where(finite, inst.tensor_recompute_s, 0.0) / u), 0)
        rc = rc.astype(np.int64)
        copy = np.floor((inst.tensor_bytes / hw.link_bw_Bps + hw.copy_latency_s) / u)
        copy = copy.astype(np.int64)
        if horizon_s is None:
            horizon_s = (
                inst.ideal_step_s
                + float(np.where(finite, inst.tensor_recompute_s, 0.0).sum())
                + 2.0 * float(copy.sum()) * u
            )
        H = int(math.ceil(horizon_s / u)) + int(dur.sum()) + 1
        self.horizon = H
        # an offload may still run after the last operator: its copy's domain reaches further
        H2 = H + int(math.ceil(float(copy.sum()) / max(hw.duplex_factor, 0.1))) + 1
        quantum = max(1, math.ceil(max(self.budget_bytes, 1) / 2**30))
        cap = self.budget_bytes // quantum
        dem = inst.tensor_bytes // quantum
        tdem = inst.op_transient_bytes // quantum

        m = cp_model.CpModel()
        self.model = m

        self.spans: list[tuple[Any, Any, int, Any, int, Any]] = []

        def span(a: tuple[Any, int], b: tuple[Any, int], name: str, lit: Any = None) -> Any:
            """Interval from a[0] + a[1] to b[0] + b[1] (variable, constant offset)."""
            size = m.new_int_var(0, H2, f"len.{name}")  # start + size == end, enforced if present
            self.spans.append((size, a[0], a[1], b[0], b[1], lit))
            sa, sb = a[0] + a[1], b[0] + b[1]
            if lit is None:
                return m.new_interval_var(sa, size, sb, name)
            return m.new_optional_interval_var(sa, size, sb, lit, name)

        st = [m.new_int_var(0, H, f"S{i}") for i in range(n)]
        self.start = st
        end = [st[i] + int(dur[i]) for i in range(n)]
        for i in range(n - 1):
            m.add(st[i + 1] >= end[i])
        compute = [m.new_fixed_size_interval_var(st[i], int(dur[i]), f"op{i}") for i in range(n)]
        mem_iv: list[Any] = []
        mem_dem: list[int] = []
        for i in range(n):
            if tdem[i] > 0:
                mem_iv.append(compute[i])
                mem_dem.append(int(tdem[i]))
        d2h: list[Any] = []
        h2d: list[Any] = []
        self.k, self.s, self.r, self.off = [], [], [], []
        self.not_off: list[Any] = []
        self.rs: list[Any] = []
        self.ds: list[Any] = []
        self.fr: list[Any] = []
        self.hs: list[Any] = []
        self.dur, self.rc, self.copy = dur, rc, copy
        e_fwd = end[nf - 1]
        ptr, idx = inst.op_reads_csr
        for t in range(nt):
            p = int(inst.tensor_producer[t])
            lf = int(inst.tensor_last_fwd_reader[t])
            fb = int(inst.tensor_first_bwd_reader[t])
            lb = int(inst.tensor_last_bwd_reader[t])
            k = m.new_bool_var(f"k{t}")
            s = m.new_bool_var(f"s{t}")
            r = m.new_bool_var(f"r{t}")
            off = m.new_bool_var(f"o{t}")
            self.k.append(k)
            self.s.append(s)
            self.r.append(r)
            self.off.append(off)
            m.add_exactly_one(k, s, r)
            m.add_implication(off, s)
            if not finite[t]:
                m.add(r == 0)
            b = int(dem[t])
            # resident from the producer's start to the last forward reader's end, whatever
            mem_iv.append(span((st[p], 0), (st[lf], int(dur[lf])), f"base{t}"))
            mem_dem.append(b)
            # keep: to the last backward reader's end
            mem_iv.append(span((st[lf], int(dur[lf])), (st[lb], int(dur[lb])), f"keep{t}", k))
            mem_dem.append(b)
            # recomp: rebuilt in the backward pass before the first backward reader
            rs = m.new_int_var(0, H, f"rs{t}")
            self.rs.append(rs)
            m.add(rs >= e_fwd).only_enforce_if(r)
            m.add(rs + int(rc[t]) <= st[fb]).only_enforce_if(r)
            m.add(rs == 0).only_enforce_if(r.Not())
            compute.append(m.new_optional_fixed_size_interval_var(rs, int(rc[t]), r, f"rb{t}"))
            mem_iv.append(span((rs, 0), (st[lb], int(dur[lb])), f"rbm{t}", r))
            mem_dem.append(b)
            # swap: one D2H copy after the producer
            ds = m.new_int_var(0, H2, f"ds{t}")
            self.ds.append(ds)
            m.add(ds >= end[p]).only_enforce_if(s)
            m.add(ds == 0).only_enforce_if(s.Not())  # unused times pinned: no symmetry
            d2h.append(m.new_optional_fixed_size_interval_var(ds, int(copy[t]), s, f"d2h{t}"))
            # freed at fr (offloaded) or held to the first backward reader's end (not offloaded)
            fr = m.new_int_var(0, H, f"fr{t}")
            self.fr.append(fr)
            m.add(fr >= end[lf]).only_enforce_if(s)
            m.add(fr >= ds + int(copy[t])).only_enforce_if(off)
            not_off = m.new_bool_var(f"no{t}")
            self.not_off.append(not_off)
            m.add(not_off + off == s)
            m.add(fr == end[fb]).only_enforce_if(not_off)
            m.add(fr == 0).only_enforce_if(s.Not())
            mem_iv.append(span((st[lf], int(dur[lf])), (fr, 0), f"sw{t}", s))
            mem_dem.append(b)
            hs = m.new_int_var(0, H, f"hs{t}")
            self.hs.append(hs)
            m.add(hs >= fr).only_enforce_if(off)
            m.add(hs >= e_fwd).only_enforce_if(off)
            m.add(hs + int(copy[t]) <= st[fb]).only_enforce_if(off)
            m.add(hs == 0).only_enforce_if(off.Not())
            h2d.append(m.new_optional_fixed_size_interval_var(hs, int(copy[t]), off, f"h2d{t}"))
            mem_iv.append(span((hs, 0), (st[fb], int(dur[fb])), f"pf{t}", off))
            mem_dem.append(b)
            for j in range(fb + 1, lb + 1):
                if t in idx[ptr[j] : ptr[j + 1]]:
                    mem_iv.append(
                        m.new_optional_fixed_size_interval_var(st[j], int(dur[j]), s, f"rd{t}.{j}")
                    )
                    mem_dem.append(b)
        m.add_no_overlap(compute)
        m.add_no_overlap(d2h)
        m.add_no_overlap(h2d)
        m.add_cumulative(mem_iv, mem_dem, int(cap))
        self.objective = end[n - 1]
        m.minimize(self.objective)

    # ----- a simulated run as a solution of the model ---------------------------------------------
    def embed_run(self, actions: np.ndarray, timeline: Any) -> dict[Any, int]:
        """Values of the model's variables that a simulated run (with timeline) takes.

        Every time is rounded down to the tick. The validity test fixes these values and asks
        CP-SAT whether they satisfy the model (they must, for every feasible run).
        """

        inst = self.instance
        u = self.tick_s
        acts = np.asarray(actions)

        def tick(x: float) -> int:
            return int(math.floor(x / u + 1e-7))

        kind = np.asarray(timeline.compute_kind)
        c_start = np.asarray(timeline.compute_start_s)
        c_op = np.asarray(timeline.compute_op)
        c_t = np.asarray(timeline.compute_tensor)
        is_op = kind == COMPUTE_KINDS.index("op")
        S = np.zeros(inst.n_ops)
        S[c_op[is_op]] = c_start[is_op]
        vals: dict[Any, int] = {self.start[i]: tick(S[i]) for i in range(inst.n_ops)}
        nf = inst.n_forward_ops
        e_lfr = S + inst.op_duration_s  # ends (seconds)
        backward_opens = S[nf - 1] + inst.op_duration_s[nf - 1]
        rb = kind == COMPUTE_KINDS.index("rebuild")
        ev = kind == COMPUTE_KINDS.index("evict")
        eng = np.asarray(timeline.copy_engine)
        ct = np.asarray(timeline.copy_tensor)
        k0 = np.asarray(timeline.copy_start_s)
        k1 = np.asarray(timeline.copy_end_s)
        d2h = ENGINES.index("D2H")
        for t in range(inst.n_tensors):
            a = int(acts[t])
            vals[self.k[t]] = int(a == KEEP)
            vals[self.s[t]] = int(a == SWAP)
            vals[self.r[t]] = int(a == RECOMP)
            vals[self.rs[t]] = 0
            vals[self.ds[t]] = 0
            vals[self.fr[t]] = 0
            vals[self.hs[t]] = 0
            vals[self.off[t]] = 0
            vals[self.not_off[t]] = 0
            if a == RECOMP:
                vals[self.rs[t]] = tick(float(c_start[rb & (c_t == t)].min()))
            if a != SWAP:
                continue
            fb = int(inst.tensor_first_bwd_reader[t])
            lf = int(inst.tensor_last_fwd_reader[t])
            out = (eng == d2h) & (ct == t)
            d_end = float(k1[out].min()) if out.any() else math.inf
            if out.any():
                vals[self.ds[t]] = tick(float(k0[out].min()))
            else:  # still queued or running at the end of the step: after every other copy
                vals[self.ds[t]] = self._late_d2h(t, vals, eng, ct, k1)
            ins = (eng != d2h) & (ct == t) & (k0 < S[fb])
            if ins.any():
                hs = float(k0[ins].max())
                frees = [float(e) for e in c_start[ev & (c_t == t)]]
                if d_end <= backward_opens + 1e-12 * inst.ideal_step_s:  # float noise
                    frees.append(max(d_end, float(e_lfr[lf])))
                vals[self.off[t]] = 1
                # the first free (end of forward use / offload, or an eviction); float noise
                # can put it a hair after the prefetch that follows it
                vals[self.fr[t]] = tick(min(min(frees), hs))
                vals[self.hs[t]] = tick(hs)
            else:
                vals[self.not_off[t]] = 1
                vals[self.fr[t]] = vals[self.start[fb]] + int(self.dur[fb])
        # interval sizes: end - start when present, 0 otherwise (a complete hint)
        for size, av, ao, bv, bo, lit in self.spans:
            present = lit is None or vals[lit] == 1
            vals[size] = max(0, vals[bv] + bo - vals[av] - ao) if present else 0
        return vals

    def _late_d2h(
        self, t: int, vals: dict[Any, int], eng: np.ndarray, ct: np.ndarray, k1: np.ndarray
    ) -> int:
        """A start for an offload the run never finished: after every finished one, in order."""
        inst = self.instance
        last = int(math.ceil(float(k1[eng == 0].max()) / self.tick_s)) if (eng == 0).any() else 0
        p = int(inst.tensor_producer[t])
        later = [
            u for u in range(t) if vals.get(self.s[u]) == 1 and not ((eng == 0) & (ct == u)).any()
        ]
        start = max(last, vals[self.start[p]] + int(self.dur[p]))
        for u in later:
            start = max(start, vals[self.ds[u]] + int(self.copy[u]))
        return start

    def check_values(self, vals: dict[Any, int], deadline: Deadline | None = None) -> bool:
        """Whether fixing ``vals`` leaves the model satisfiable (CP-SAT decides, by ``deadline``:
        default `CHECK_SECONDS` from now)."""
        if deadline is None:
            deadline = Deadline.begin(CHECK_SECONDS)
        mdl = self.model.clone()
        for var, v in vals.items():
            mdl.add(var == int(v))
        solver = _cp_solver()
        solver.parameters.max_time_in_seconds = deadline.remaining()
        solver.parameters.num_workers = 1
        code = call_interruptibly(lambda: solver.solve(mdl), on_interrupt=solver.stop_search)
        return code in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    # ----- helpers ---------------------------------------------------------------------------------
    def literal(self, t: int, action: int) -> Any:
        return (self.k, self.s, self.r)[action][t]

    def fix(self, model: cp_model.CpModel, tensors: np.ndarray, actions: np.ndarray) -> None:
        """Fix the actions of ``tensors`` in ``model`` (a clone of this one)."""
        for t in tensors:
            model.add(self.literal(int(t), int(actions[t])) == 1)

    def add_no_good(self, actions: np.ndarray) -> None:
        """Exclude one plan (its simulated step is known) from the model, for good."""
        self.model.add_bool_or([self.literal(t, int(a)).Not() for t, a in enumerate(actions)])

    def solve(
        self,
        *,
        deadline: Deadline,
        seed: int = 0,
        workers: int = 1,
        model: cp_model.CpModel | None = None,
        hint: np.ndarray | None = None,
        hint_values: dict[Any, int] | None = None,
        cap_s: float | None = None,
        deterministic_s: float | None = None,
    ) -> CpResult:
        """Solve this model (or a clone with extra constraints) by ``deadline`` (read here, in
        seconds, for CP-SAT).

        ``cap_s`` admits only solutions whose modelled step is at most that many seconds;
        ``deterministic_s`` bounds CP-SAT's deterministic time (with one worker the result then
        does not depend on the machine's speed).
        """
        clock = deadline.lap()
        mdl = model if model is not None else self.model
        extra = None
        if cap_s is not None:
            mdl = mdl.clone() if mdl is self.model else mdl
            extra = int(math.floor(cap_s / self.tick_s))
            mdl.add(self.objective <= extra)
        if hint_values is not None:
            mdl = mdl.clone() if mdl is self.model else mdl
            mdl.clear_hints()
            for var, v in hint_values.items():
                mdl.add_hint(var, int(v))
        elif hint is not None:
            mdl = mdl.clone() if mdl is self.model else mdl
            mdl.clear_hints()
            for t, a in enumerate(hint):
                for v in (KEEP, SWAP, RECOMP):
                    mdl.add_hint(self.literal(t, v), int(a) == v)
        solver = _cp_solver()
        solver.parameters.max_time_in_seconds = max(0.01, deadline.remaining())
        solver.parameters.num_workers = int(workers)
        solver.parameters.random_seed = int(seed)
        if deterministic_s is not None:  # the same work whatever the clock: reproducible
            solver.parameters.max_deterministic_time = max(0.01, float(deterministic_s))
        code = call_interruptibly(lambda: solver.solve(mdl), on_interrupt=solver.stop_search)
        wall = clock.elapsed()
        det = float(solver.response_proto.deterministic_time)  # CpSolver.deterministic_time: 9.15+
        u = self.tick_s
        if code == cp_model.INFEASIBLE:
            bound = (extra + 1) * u if extra is not None else None
            return CpResult("infeasible", None, None, bound, wall, {"det_s": det})
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            bound = solver.best_objective_bound * u if solver.best_objective_bound > 0 else None
            return CpResult("unknown", None, None, bound, wall, {"det_s": det})
        acts = np.zeros(self.instance.n_tensors, dtype=np.int8)
        for t in range(self.instance.n_tensors):
            if solver.boolean_value(self.s[t]):
                acts[t] = SWAP
            elif solver.boolean_value(self.r[t]):
                acts[t] = RECOMP
        status = "optimal" if code == cp_model.OPTIMAL else "feasible"
        return CpResult(
            status,
            acts,
            solver.objective_value * u,
            solver.best_objective_bound * u,
            wall,
            info={
                "det_s": det,
                "offloaded": [t for t in range(len(acts)) if solver.boolean_value(self.off[t])],
            },
        )
