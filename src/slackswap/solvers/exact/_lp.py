"""The linear relaxation over operator boundaries: a lower bound on any plan's simulated step.

`BoundProgram` builds, for one instance and memory budget M, a linear program whose optimum is at
or below the step time the simulator (barrier-free runtime) gives *any* plan at that budget. Its
binary version (``integral=True``: the per-tensor actions 0/1) is a stronger relaxation of the
same thing and is solved by HiGHS's branch and bound when time allows.

Variables (bytes scaled by P, seconds by the ideal step, so coefficients are O(1)):

- ``s_t``, ``r_t`` in [0, 1]: the share of tensor t swapped / recomputed; keep = 1 - s_t - r_t.
- ``T_i``: non-operator time (stalls and rebuilds) before operator i starts, non-decreasing; the
  start of operator i is S_i = D_i + T_i with D_i the ideal start. Objective: T_{n-1}, so the
  bound is ideal + T_{n-1}.
- ``F_i`` (forward op i): bytes of swapped tensors whose last forward reader is before i and
  whose outbound copy (D2H) had finished by S_i: the bytes swapping has freed at op i.
- ``X_j`` (backward op j): bytes of swapped tensors first read after j that hold no device
  memory at S_j (offloaded, prefetch not yet begun).
- running sums (``Q``, ``L``, ``Rb``, ``W``, ``G``, ``R``) that keep every row sparse.

Constraints, each true of every feasible simulator run (the embedding in `embed_run` and the
test ``tests/solvers/exact/test_exact_validity.py`` execute that argument):

1. memory at the start of every operator, both passes: tensors between producer and last
   forward reader are resident whatever the action; after that, keep and swap tensors stay
   resident unless freed (F_i); in the backward pass every tensor is resident until its last
   backward reader except recomputed ones not yet rebuilt (first reader after j) and swapped
   ones absent (X_j), or absent between two of its backward readers;
2. freed-by-swap windows: bytes whose D2H started after the end of operator p (tensors produced
   at or after p) and ended by S_i fit in what one copy engine moves in S_i - E_p at the full
   link rate: F_i <= Q_p + W (S_i - E_p) for every producer p < i, and likewise X_j (a tensor may
   be absent in the backward pass only if its outbound copy had finished);
3. prefetch deadlines: bytes absent at S_j and first read at or before j' come back on one H2D
   engine within [S_j, S_j']; tensors freed in the forward pass come back no earlier than the
   end of the last forward operator (the H2D queue opens then, before any stall of the first
   backward operator); and refetches: bytes absent at S_k (or freed in the forward pass) but
   present again at S_j started their H2D copy in between, one at a time, so all but the one
   still in flight (at most the largest tensor first read after k) moved by S_j. This keeps
   large tensors from coming back "fluidly" (VGG-16's 0.8 GB activations);
4. time: non-operator time is stalls (Z) plus rebuilds (Rt); every recomputed tensor is rebuilt
   once, at cost c_t, in the backward pass, before its first backward reader and not before the
   first backward reader of any tensor rebuilt from it (chains pull rebuilds earlier, never
   into the forward pass): sum over fb(t) <= j of c_t r_t <= Rt_j <= the same sum over tensors
   whose earliest possible rebuild is at or before j.

Relaxations that keep it valid for the simulator's optimum (each only lowers the bound): copies
are fluid bytes; the 10 us per copy, the 85% duplex rate, FIFO (D2H) and deadline (H2D) order,
the admission look-ahead and evictions' extra traffic are dropped; rebuild inputs need not be
resident during a rebuild, chained rebuilds may run early for free, a swapped input needed by a
rebuild keeps its own first reader as its deadline; memory is checked at operator starts only.
Rows of kinds 2 and 3 (one per pair of operators) are generated lazily: every LP solved along the
way has a subset of the rows, so its optimum is itself a valid bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from slackswap.console import format_bytes
from slackswap.instance import Instance
from slackswap.plan import RECOMP, SWAP
from slackswap.simulator.result import COMPUTE_KINDS, ENGINES
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._interrupt import call_interruptibly

#: Relative violation below which a lazy row counts as satisfied.
_TOL = 1e-9
#: Pairs of operators whose lazy-row slacks are computed at once (bounds the memory they take).
_CHUNK_CELLS = 1 << 22
#: Events this close (in ideal steps) count as simultaneous when a run is embedded: times that
#: are equal in the simulator may differ by float rounding once recomputed here.
_EPS = 1e-12


@dataclass
class BoundResult:
    """One solve of the relaxation."""

    bound_s: float | None  # a lower bound on any plan's simulated step (None: no bound yet)
    status: str  # "optimal"; "partial" (rows left, stalled); "timeout" (clock); "infeasible"
    integral: bool  # the binary version (MILP) was solved
    s: np.ndarray  # swap share per tensor
    r: np.ndarray  # recompute share per tensor
    claimed_step_s: float | None  # objective value of the returned point
    rounds: int = 0
    rows: int = 0
    lazy_rows: int = 0
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


def _blocks(n_rows: int, n_cols: int, cells: int) -> Iterator[slice]:
    """Consecutive row slices of an n_rows x n_cols matrix, each at most ``cells`` cells."""
    step = max(1, cells // max(n_cols, 1))
    for a in range(0, n_rows, step):
        yield slice(a, min(a + step, n_rows))


class _Vars:
    def __init__(self) -> None:
        self.n = 0
        self.lb: list[np.ndarray] = []
        self.ub: list[np.ndarray] = []

    def add(self, count: int, lb: float = 0.0, ub: float = math.inf) -> np.ndarray:
        idx = np.arange(self.n, self.n + count, dtype=np.int64)
        self.n += count
        self.lb.append(np.full(count, lb))
        self.ub.append(np.full(count, ub))
        return idx


class _Rows:
    """Sparse rows lo <= sum(val * x[col]) <= hi, appended in batches."""

    def __init__(self) -> None:
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.n = 0

    def add(
        self,
        terms: list[tuple[np.ndarray, np.ndarray | float]],
        lo: np.ndarray | float,
        hi: np.ndarray | float,
        count: int,
    ) -> None:
        """``count`` rows; each term is (columns, coefficients) of length ``count``."""
        rows = np.arange(self.n, self.n + count, dtype=np.int64)
        for cols, vals in terms:
            self.r.append(rows)
            self.c.append(np.asarray(cols, dtype=np.int64))
            self.v.append(np.broadcast_to(np.asarray(vals, dtype=float), (count,)).copy())
        self.lo.append(np.broadcast_to(np.asarray(lo, dtype=float), (count,)).copy())
        self.hi.append(np.broadcast_to(np.asarray(hi, dtype=float), (count,)).copy())
        self.n += count

    def add_sparse(
        self, row_of: np.ndarray, cols: np.ndarray, vals: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Rows given as (local row, column, value) triples; ``lo``/``hi`` per local row."""
        self.r.append(np.asarray(row_of, dtype=np.int64) + self.n)
        self.c.append(np.asarray(cols, dtype=np.int64))
        self.v.append(np.asarray(vals, dtype=float))
        self.lo.append(np.asarray(lo, dtype=float))
        self.hi.append(np.asarray(hi, dtype=float))
        self.n += len(lo)

    def matrix(self, n_vars: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        if not self.r:
            return sp.csr_matrix((0, n_vars)), np.zeros(0), np.zeros(0)
        a = sp.csr_matrix(
            (np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
            shape=(self.n, n_vars),
        )
        return a, np.concatenate(self.lo), np.concatenate(self.hi)


def _cum_chain(
    rows: _Rows,
    chain: np.ndarray,
    event_pos: np.ndarray,
    var_cols: np.ndarray,
    coef: np.ndarray,
) -> None:
    """Rows chain[k] - chain[k-1] - sum(coef * x[var_cols] for events at position k) = 0.

    ``event_pos[e]`` in [0, len(chain)) is where event e enters the running sum (chain[0] has
    only the events at position 0).
    """
    m = len(chain)
    row_of = [np.arange(m), np.arange(1, m), event_pos]
    cols = [chain, chain[:-1], var_cols]
    vals = [np.ones(m), -np.ones(m - 1), -np.asarray(coef, dtype=float)]
    rows.add_sparse(
        np.concatenate(row_of),
        np.concatenate(cols),
        np.concatenate(vals),
        np.zeros(m),
        np.zeros(m),
    )


class BoundProgram:
    """The relaxation for one instance and budget (bytes); `solve` returns a `BoundResult`."""

    def __init__(self, instance: Instance, budget_bytes: int):
        self.instance = instance
        self.budget_bytes = int(budget_bytes)
        inst = instance
        n, nf, nt = inst.n_ops, inst.n_forward_ops, inst.n_tensors
        self.n, self.nf, self.nb, self.nt = n, nf, n - nf, nt
        self.byte_unit = float(max(inst.peak_bytes, 1))
        self.time_unit = float(max(inst.ideal_step_s, 1e-12))
        self.bw = inst.hardware.link_bw_Bps * self.time_unit / self.byte_unit
        d = inst.op_duration_s / self.time_unit
        self.d = d
        self.D = np.concatenate([[0.0], np.cumsum(d)[:-1]])  # ideal start of each op
        b = inst.tensor_bytes / self.byte_unit
        self.b = b
        prod = inst.tensor_producer.astype(np.int64)
        lfr = inst.tensor_last_fwd_reader.astype(np.int64)
        fb = inst.tensor_first_bwd_reader.astype(np.int64)
        lb = inst.tensor_last_bwd_reader.astype(np.int64)
        self.prod, self.lfr, self.fb, self.lb = prod, lfr, fb, lb
        cost = inst.tensor_recompute_s / self.time_unit
        self.can_recompute = np.isfinite(cost)
        self.cost = np.where(self.can_recompute, cost, 0.0)
        M = self.budget_bytes / self.byte_unit
        trans = inst.op_transient_bytes / self.byte_unit

        v = _Vars()
        self.s = v.add(nt, 0.0, 1.0)
        self.r = v.add(nt, 0.0, 1.0)
        self.T = v.add(n, 0.0)  # T = Z + Rt
        self.Z = v.add(n, 0.0)  # stall time before op i (cumulative)
        self.Rt = v.add(self.nb, 0.0)  # rebuild time before backward op j (cumulative)
        self.R2 = v.add(self.nb, 0.0)  # R2[j] = sum c r over tensors a rebuild may reach by j
        self.F = v.add(nf, 0.0)
        self.X = v.add(self.nb, 0.0)
        self.Q = v.add(nf, 0.0)  # Q[i] = sum b s over tensors produced before op i
        self.L = v.add(nf, 0.0)  # L[i] = sum b s over tensors last read (fwd) before op i
        self.Rb = v.add(nf, 0.0)  # Rb[i] = sum b r over tensors last read (fwd) before op i
        self.W = v.add(self.nb, 0.0)  # W[j] = sum b s over tensors first read (bwd) after op j
        self.G = v.add(self.nb, 0.0)  # G[j] = sum b r over tensors first read (bwd) after op j
        self.R = v.add(self.nb, 0.0)  # R[j] = sum c r over tensors first read at or before j
        self.n_vars = v.n
        var_lb = np.concatenate(v.lb)
        var_ub = np.concatenate(v.ub)
        var_ub[self.r[~self.can_recompute]] = 0.0
        self.var_lb, self.var_ub = var_lb, var_ub

        rows = _Rows()
        t_all = np.arange(nt)
        # actions: s + r <= 1
        rows.add([(self.s, 1.0), (self.r, 1.0)], -np.inf, 1.0, nt)
        # time: T = Z + Rt (Rt = 0 in the forward pass), stalls and rebuilds only accumulate
        rows.add([(self.T[:nf], 1.0), (self.Z[:nf], -1.0)], 0.0, 0.0, nf)
        rows.add([(self.T[nf:], 1.0), (self.Z[nf:], -1.0), (self.Rt, -1.0)], 0.0, 0.0, self.nb)
        rows.add([(self.Z[1:], 1.0), (self.Z[:-1], -1.0)], 0.0, np.inf, n - 1)
        rows.add([(self.Rt[1:], 1.0), (self.Rt[:-1], -1.0)], 0.0, np.inf, self.nb - 1)
        # running sums (forward, indexed by op; an event at op e enters position e + 1)
        fwd_pos_prod = prod + 1
        keep = fwd_pos_prod < nf
        _cum_chain(rows, self.Q, fwd_pos_prod[keep], self.s[keep], b[keep])
        keep = lfr + 1 < nf
        _cum_chain(rows, self.L, (lfr + 1)[keep], self.s[keep], b[keep])
        _cum_chain(rows, self.Rb, (lfr + 1)[keep], self.r[keep], b[keep])
        # backward sums: W[j] counts fb > j; chain runs from the last op backwards
        rev = self.nb - 1 - (fb - nf)  # position of op fb in the reversed backward order
        # W[j] (reversed chain index k = n-1-j) gains tensors with fb = j + 1, i.e. k = rev + 1
        keep = rev + 1 < self.nb
        _cum_chain(rows, self.W[::-1], (rev + 1)[keep], self.s[keep], b[keep])
        _cum_chain(rows, self.G[::-1], (rev + 1)[keep], self.r[keep], b[keep])
        _cum_chain(rows, self.R, fb - nf, self.r, self.cost)
        self.earliest = self._earliest_rebuild()
        _cum_chain(rows, self.R2, self.earliest - nf, self.r, self.cost)
        # every recomputed tensor is rebuilt once, in the backward pass, before its first
        # backward reader and no earlier than the first reader of anything rebuilt from it:
        # R_j <= Rt_j <= R2_j (and R_{n-1} = R2_{n-1} is the whole recompute time)
        rows.add([(self.Rt, 1.0), (self.R, -1.0)], 0.0, np.inf, self.nb)
        rows.add([(self.Rt, 1.0), (self.R2, -1.0)], -np.inf, 0.0, self.nb)

        # memory, forward op i: produced-so-far - Rb_i - F_i + transient_i <= M
        produced = np.zeros(n + 1)
        np.add.at(produced, prod + 1, b)
        produced = np.cumsum(produced)[1 : nf + 1]  # bytes produced at or before op i
        self.fwd_mem_const = produced + trans[:nf]
        rows.add([(self.Rb, -1.0), (self.F, -1.0)], -np.inf, M - self.fwd_mem_const, nf)
        # F_i <= L_i, F monotone
        rows.add([(self.F, 1.0), (self.L, -1.0)], -np.inf, 0.0, nf)
        rows.add([(self.F[1:], 1.0), (self.F[:-1], -1.0)], 0.0, np.inf, nf - 1)

        # memory, backward op j: alive(j) - G_j - X_j - (swapped, between reads) + trans <= M
        alive = np.zeros(n + 1)
        np.add.at(alive, lb + 1, -b)
        alive[0] = b.sum()
        alive = np.cumsum(alive)[nf:n]  # bytes with lb >= j (all produced by then)
        self.bwd_mem_const = alive + trans[nf:]
        gap_r, gap_c, gap_v = self._between_reads_terms()
        row_of = np.concatenate([np.arange(self.nb), np.arange(self.nb), gap_r])
        cols = np.concatenate([self.G, self.X, gap_c])
        vals = np.concatenate([-np.ones(self.nb), -np.ones(self.nb), gap_v])
        rows.add_sparse(row_of, cols, vals, np.full(self.nb, -np.inf), M - self.bwd_mem_const)
        # absent bytes are swapped bytes first read later: X_j <= W_j
        rows.add([(self.X, 1.0), (self.W, -1.0)], -np.inf, 0.0, self.nb)
        del t_all
        self._static = rows
        self._lazy_keys: set[tuple[str, int, int]] = set()
        self._lazy = _Rows()
        # largest tensor first read after each op nf-1 .. n-1 (the one copy that may still be
        # in flight when a refetch window closes)
        bm = np.zeros(self.nb + 2)
        for t in range(nt):
            k = int(fb[t]) - (nf - 1)  # tensor counts for sources k' < k
            bm[k - 1] = max(bm[k - 1], b[t]) if k >= 1 else bm[0]
        self.bmax_after = np.maximum.accumulate(bm[::-1])[::-1][: self.nb + 1]
        # window starts: producers of tensors (a window starting between producers is weaker)
        self.producers = np.unique(prod)
        # deadline points j' for prefetch rows: first backward readers
        self.deadlines = np.unique(fb)
        self.c = np.zeros(self.n_vars)
        self.c[self.T[n - 1]] = 1.0
        self.infeasible_reason = self._trivially_infeasible(M)

    # ----- structure helpers -------------------------------------------------------------------
    def _earliest_rebuild(self) -> np.ndarray:
        """Earliest backward op at which a tensor may be rebuilt: the first backward reader of
        itself or of any tensor rebuilt from it (transitively)."""
        inst = self.instance
        e = self.fb.copy()
        ptr, idx = inst.rebuild_inputs_csr
        # consumers have later producers; walking producers downwards settles chains in one pass
        for v in np.argsort(-self.prod, kind="stable"):
            for u in idx[ptr[v] : ptr[v + 1]]:
                if e[v] < e[u]:
                    e[u] = e[v]
        return e

    def _between_reads_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-b_t s_t at backward ops strictly between two backward readers of t that skip t.

        A swapped tensor may be evicted between its backward reads, so there it is not counted.
        """
        inst = self.instance
        ptr, idx = inst.op_reads_csr
        rr: list[int] = []
        cc: list[int] = []
        vv: list[float] = []
        for t in range(self.nt):
            f, last = int(self.fb[t]), int(self.lb[t])
            if last - f < 2:
                continue
            readers = {j for j in range(f, last + 1) if t in idx[ptr[j] : ptr[j + 1]]}
            for j in range(f + 1, last):
                if j not in readers:
                    rr.append(j - self.nf)
                    cc.append(int(self.s[t]))
                    vv.append(-float(self.b[t]))
        return (
            np.asarray(rr, dtype=np.int64),
            np.asarray(cc, dtype=np.int64),
            np.asarray(vv, dtype=float),
        )

    def _trivially_infeasible(self, M: float) -> str:
        """A reason when memory cannot fit even with every tensor freed where it can be."""
        # forward: tensors between producer and last forward reader stay; the rest may go
        n, nf = self.n, self.nf
        live = np.zeros(n + 1)
        np.add.at(live, self.prod, self.b)
        np.add.at(live, self.lfr + 1, -self.b)
        must_f = np.cumsum(live)[:nf] + self.instance.op_transient_bytes[:nf] / self.byte_unit
        # backward: tensors read by the op itself stay
        ptr, idx = self.instance.op_reads_csr
        must_b = (
            np.array([self.b[idx[ptr[j] : ptr[j + 1]]].sum() for j in range(nf, n)])
            + self.instance.op_transient_bytes[nf:] / self.byte_unit
        )
        must = np.concatenate([must_f, must_b])
        worst = int(np.argmax(must))
        if must[worst] > M * (1 + 1e-12):
            return (
                f"operator {worst} ({self.instance.op_name[worst]}) needs "
                f"{format_bytes(must[worst] * self.byte_unit)} (its transient bytes and the saved "
                f"tensors it reads or that are live there) > budget "
                f"{format_bytes(self.budget_bytes)}"
            )
        return ""

    # ----- lazy rows -----------------------------------------------------------------------------
    def _start(self, x: np.ndarray, i: np.ndarray) -> np.ndarray:
        return self.D[i] + x[self.T[i]]

    def _lazy_slacks(
        self, x: np.ndarray, chunk_cells: int = _CHUNK_CELLS
    ) -> Iterator[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
        """Slack of every window and deadline row at ``x``: (kind, sources, targets, slack).

        There is one row per pair of operators, so the slacks come in blocks of sources of at
        most ``chunk_cells`` pairs: memory stays linear in the operator count (a whole matrix at
        17k operators is about 0.5 GB per kind).
        """
        bw, nf = self.bw, self.nf
        P = self.producers
        EP = self._start(x, P) + self.d[P]  # end of each producer op
        QP = x[self.Q[P]]
        # freed-by-swap windows, forward: F_i <= Q_p + bw (S_i - E_p), p < i
        fi = np.arange(nf)
        Si = self._start(x, fi)
        Fi = x[self.F]
        for blk in _blocks(nf, P.size, chunk_cells):
            slack = QP[None, :] + bw * (Si[blk, None] - EP[None, :]) - Fi[blk, None]
            slack[P[None, :] >= fi[blk, None]] = np.inf
            yield "fw", fi[blk], P, slack
        # the same for absent bytes in the backward pass: X_j <= Q_p + bw (S_j - E_p)
        jb = np.arange(nf, self.n)
        Sj = self._start(x, jb)
        Xj = x[self.X]
        for blk in _blocks(jb.size, P.size, chunk_cells):
            slack = QP[None, :] + bw * (Sj[blk, None] - EP[None, :]) - Xj[blk, None]
            yield "bx", jb[blk], P, slack
        # prefetch deadlines: X_j <= W_j' + bw (S_j' - S_j), j < j'; source nf - 1 is F_last
        Dl = self.deadlines
        Sd = self._start(x, Dl)
        Wd = x[self.W[Dl - nf]]
        src = np.concatenate([[nf - 1], jb])
        amount = np.concatenate([[x[self.F[nf - 1]]], Xj])
        # H2D copies may begin once the last forward operator ends (E_{nf-1}), before S_nf
        e_fwd = self._start(x, np.array([nf - 1]))[0] + self.d[nf - 1]
        start = np.concatenate([[e_fwd], Sj])
        for blk in _blocks(src.size, Dl.size, chunk_cells):
            slack = Wd[None, :] + bw * (Sd[None, :] - start[blk, None]) - amount[blk, None]
            slack[Dl[None, :] <= src[blk, None]] = np.inf
            yield "pf", src[blk], Dl, slack
        # refetch: bytes absent at the source and present again at S_j had their H2D start in
        # between, one copy at a time: all but the last in flight are done by S_j
        for blk in _blocks(src.size, jb.size, chunk_cells):
            slack = (
                bw * (Sj[None, :] - start[blk, None])
                + self.bmax_after[src[blk] - (nf - 1)][:, None]
                - amount[blk, None]
                + Xj[None, :]
            )
            slack[jb[None, :] <= src[blk, None]] = np.inf
            yield "rf", src[blk], jb, slack

    def _violated(self, x: np.ndarray, per_row: int) -> list[tuple[str, int, int]]:
        """Up to ``per_row`` most violated lazy rows per source op, not yet in the model."""
        out: list[tuple[str, int, int]] = []
        for kind, src, dst, slack in self._lazy_slacks(x):
            out += self._pick(slack, kind, src, dst, per_row)
        return [k for k in out if k not in self._lazy_keys]

    def violations(self, x: np.ndarray, tol: float = 1e-7) -> list[str]:
        """Every row of the full relaxation (all window and deadline pairs) that ``x`` breaks.

        ``tol`` is in scaled units (bytes / P, seconds / ideal step). Used by the validity test.
        """
        out = []
        lo_v = x < self.var_lb - tol
        hi_v = x > self.var_ub + tol
        for k in np.flatnonzero(lo_v | hi_v)[:20]:
            out.append(f"variable {self._var_name(int(k))} = {x[k]:.6g} outside bounds")
        a, lo, hi = self._static.matrix(self.n_vars)
        ax = a @ x
        bad = np.flatnonzero((ax < lo - tol) | (ax > hi + tol))
        for k in bad[:20]:
            cols = a.indices[a.indptr[k] : a.indptr[k + 1]]
            names = ", ".join(self._var_name(int(c)) for c in cols[:6])
            out.append(f"static row {k} ({names}): {ax[k]:.6g} not in [{lo[k]:.6g}, {hi[k]:.6g}]")
        for kind, src, dst, slack in self._lazy_slacks(x):
            bad2 = np.argwhere(slack < -tol)
            for a_, c_ in bad2[:20]:
                out.append(
                    f"{kind} row (op {int(src[a_])}, op {int(dst[c_])}): short by "
                    f"{-slack[a_, c_]:.6g}"
                )
        return out

    def _var_name(self, k: int) -> str:
        for name in ("s", "r", "T", "Z", "Rt", "R2", "F", "X", "Q", "L", "Rb", "W", "G", "R"):
            idx = getattr(self, name)
            if idx.size and idx[0] <= k <= idx[-1]:
                return f"{name}[{k - idx[0]}]"
        return f"x[{k}]"

    def embed_run(self, actions: np.ndarray, timeline: Any) -> np.ndarray:
        """The point of the relaxation that a simulated run (barrier-free, with timeline) takes.

        This is the validity argument as code: every quantity is read off the run (operator
        starts, copy ends, prefetch starts, evictions), and `violations` of the result must be
        empty for every feasible run.
        """

        acts = np.asarray(actions)
        x = np.zeros(self.n_vars)
        s = (acts == SWAP).astype(float)
        r = (acts == RECOMP).astype(float)
        x[self.s] = s
        x[self.r] = r
        kind = np.asarray(timeline.compute_kind)
        is_op = kind == COMPUTE_KINDS.index("op")
        op_of_row = np.asarray(timeline.compute_op)[is_op]

        def per_op(seconds: Any) -> np.ndarray:  # one value per operator, in time units
            out = np.full(self.n, np.nan)
            out[op_of_row] = np.asarray(seconds)[is_op]
            return out / self.time_unit

        S = per_op(timeline.compute_start_s)
        # Each operator's end as the run has it, not S + d: a copy that starts as an operator
        # ends carries the run's own float of that instant, and S + d can round past it.
        E = per_op(timeline.compute_end_s)
        x[self.T] = S - self.D
        is_rb = kind == COMPUTE_KINDS.index("rebuild")
        rb_start = np.asarray(timeline.compute_start_s)[is_rb] / self.time_unit
        rb_len = (np.asarray(timeline.compute_end_s)[is_rb] / self.time_unit) - rb_start
        rt = np.array([rb_len[rb_start < S[j]].sum() for j in range(self.nf, self.n)])
        x[self.Rt] = rt
        x[self.Z] = x[self.T]
        x[self.Z[self.nf :]] -= rt
        nf, n = self.nf, self.n
        b = self.b
        bs, br = b * s, b * r
        x[self.Q] = [bs[self.prod < i].sum() for i in range(nf)]
        x[self.L] = [bs[self.lfr < i].sum() for i in range(nf)]
        x[self.Rb] = [br[self.lfr < i].sum() for i in range(nf)]
        x[self.W] = [bs[self.fb > j].sum() for j in range(nf, n)]
        x[self.G] = [br[self.fb > j].sum() for j in range(nf, n)]
        x[self.R] = [(self.cost * r)[self.fb <= j].sum() for j in range(nf, n)]
        x[self.R2] = [(self.cost * r)[self.earliest <= j].sum() for j in range(nf, n)]
        # per swapped tensor: end of its first D2H copy, its H2D starts, its evictions
        eng = np.asarray(timeline.copy_engine)
        ct = np.asarray(timeline.copy_tensor)
        c0 = np.asarray(timeline.copy_start_s) / self.time_unit
        c1 = np.asarray(timeline.copy_end_s) / self.time_unit
        ev = kind == COMPUTE_KINDS.index("evict")
        ev_t = np.asarray(timeline.compute_tensor)[ev]
        ev_s = np.asarray(timeline.compute_start_s)[ev] / self.time_unit
        d2h = ENGINES.index("D2H")
        # the backward pass opens when the last forward operator ends: an offload finished by
        # then frees its buffer; one still running leaves the tensor resident (evictable later)
        SB = S[nf - 1] + self.d[nf - 1]
        F = np.zeros(nf)
        X = np.zeros(n - nf)
        end_lfr = E[self.lfr]
        for t in np.flatnonzero(acts == SWAP):
            out_end = c1[(eng == d2h) & (ct == t)]
            done = float(out_end.min()) if out_end.size else np.inf
            F[(self.lfr[t] < np.arange(nf)) & (done <= S[:nf] + _EPS)] += b[t]
            events: list[tuple[float, int]] = []  # (time, 0 free / 1 alloc), frees first on ties
            if done <= SB + _EPS:
                events.append((max(done, end_lfr[t]), 0))
            events += [(float(h), 1) for h in c0[(eng != d2h) & (ct == t)]]
            events += [(float(e), 0) for e in ev_s[ev_t == t]]
            events.sort()
            times = np.array([e[0] for e in events])
            kinds = np.array([e[1] for e in events])
            for j in range(nf, int(self.fb[t])):
                k = np.searchsorted(times, S[j] + _EPS, side="right") - 1
                if k >= 0 and kinds[k] == 0:
                    X[j - nf] += b[t]
        x[self.F] = F
        x[self.X] = X
        return x

    @staticmethod
    def _pick(
        slack: np.ndarray, kind: str, rows: np.ndarray, cols: np.ndarray, per_row: int
    ) -> list[tuple[str, int, int]]:
        if slack.size == 0:
            return []
        k = min(per_row, slack.shape[1])
        # the k smallest slacks of each row (argpartition: linear in the row, not n log n),
        # then in order of slack, as a full sort would list them
        part = np.argpartition(slack, k - 1, axis=1)[:, :k] if k < slack.shape[1] else None
        if part is None:
            part = np.broadcast_to(np.arange(slack.shape[1]), slack.shape)
        vals = np.take_along_axis(slack, part, axis=1)
        within = np.argsort(vals, axis=1, kind="stable")
        order = np.take_along_axis(part, within, axis=1)
        hit_a, hit_c = np.nonzero(np.take_along_axis(vals, within, axis=1) < -_TOL)
        return [
            (kind, int(rows[a]), int(cols[order[a, c]])) for a, c in zip(hit_a, hit_c, strict=True)
        ]

    def _add_lazy(self, keys: list[tuple[str, int, int]]) -> None:
        bw, nf = self.bw, self.nf
        for kind, a, c in keys:
            self._lazy_keys.add((kind, a, c))
            if kind in ("fw", "bx"):  # amount_a - Q_c - bw (T_a - T_c) <= bw (D_a - D_c - d_c)
                amount = self.F[a] if kind == "fw" else self.X[a - nf]
                rhs = bw * (self.D[a] - self.D[c] - self.d[c])
                self._lazy.add(
                    [
                        (np.array([amount]), 1.0),
                        (np.array([self.Q[c]]), -1.0),
                        (np.array([self.T[a]]), -bw),
                        (np.array([self.T[c]]), bw),
                    ],
                    -np.inf,
                    rhs,
                    1,
                )
            elif kind == "rf":  # amount_a - X_c - bw (T_c - T_start) <= bw (D_c - D_a') + b
                if a == nf - 1:
                    amount, start, d0 = self.F[nf - 1], nf - 1, self.D[nf]
                else:
                    amount, start, d0 = self.X[a - nf], a, self.D[a]
                rhs = bw * (self.D[c] - d0) + self.bmax_after[a - (nf - 1)]
                self._lazy.add(
                    [
                        (np.array([amount]), 1.0),
                        (np.array([self.X[c - nf]]), -1.0),
                        (np.array([self.T[c]]), -bw),
                        (np.array([self.T[start]]), bw),
                    ],
                    -np.inf,
                    rhs,
                    1,
                )
            else:  # amount_a - W_c - bw (T_c - T_start) <= bw (D_c - D_start)
                if a == nf - 1:  # from the end of the forward pass: E_{nf-1} = D_nf + T_{nf-1}
                    amount, start = self.F[nf - 1], nf - 1
                    rhs = bw * (self.D[c] - self.D[nf])
                else:
                    amount, start = self.X[a - nf], a
                    rhs = bw * (self.D[c] - self.D[start])
                self._lazy.add(
                    [
                        (np.array([amount]), 1.0),
                        (np.array([self.W[c - nf]]), -1.0),
                        (np.array([self.T[c]]), -bw),
                        (np.array([self.T[start]]), bw),
                    ],
                    -np.inf,
                    rhs,
                    1,
                )

    def _seed_lazy(self) -> None:
        """Start with the nearest window and the nearest deadline of each operator."""
        keys: list[tuple[str, int, int]] = []
        P = self.producers
        for i in range(1, self.nf):
            k = np.searchsorted(P, i) - 1
            if k >= 0:
                keys.append(("fw", i, int(P[k])))
                keys.append(("fw", i, int(P[0])))
        for j in range(self.nf, self.n):
            keys.append(("bx", j, int(P[-1])))
            keys.append(("bx", j, int(P[0])))
            k = np.searchsorted(self.deadlines, j, side="right")
            if k < len(self.deadlines):
                keys.append(("pf", j, int(self.deadlines[k])))
        for dl in self.deadlines:
            keys.append(("pf", self.nf - 1, int(dl)))
        for j in range(self.nf, self.n):
            keys.append(("rf", self.nf - 1, j))
        self._add_lazy(sorted(set(keys)))

    # ----- solving ---------------------------------------------------------------------------------
    def _matrices(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        a1, lo1, hi1 = self._static.matrix(self.n_vars)
        a2, lo2, hi2 = self._lazy.matrix(self.n_vars)
        return (
            sp.vstack([a1, a2], format="csr"),
            np.concatenate([lo1, lo2]),
            np.concatenate([hi1, hi2]),
        )

    def _lp(self, deadline: Deadline) -> Any:
        """One HiGHS LP over the current rows, cut at ``deadline`` (read here, in seconds)."""
        a, lo, hi = self._matrices()
        eq = lo == hi
        ub_rows = ~eq
        # linprog wants A_ub x <= b_ub; split two-sided rows
        a_ub_parts, b_ub_parts = [], []
        fin_hi = ub_rows & np.isfinite(hi)
        fin_lo = ub_rows & np.isfinite(lo)
        if fin_hi.any():
            a_ub_parts.append(a[fin_hi])
            b_ub_parts.append(hi[fin_hi])
        if fin_lo.any():
            a_ub_parts.append(-a[fin_lo])
            b_ub_parts.append(-lo[fin_lo])
        return call_interruptibly(
            lambda: linprog(
                self.c,
                A_ub=sp.vstack(a_ub_parts, format="csr") if a_ub_parts else None,
                b_ub=np.concatenate(b_ub_parts) if b_ub_parts else None,
                A_eq=a[eq] if eq.any() else None,
                b_eq=lo[eq] if eq.any() else None,
                bounds=np.column_stack([self.var_lb, self.var_ub]),
                # interior point: the simplex path ends on a vertex that breaks many lazy rows
                # without changing the optimum (the problem is very degenerate); IPM's point
                # breaks few, so the row generation converges in one to three rounds
                method="highs-ipm",
                options={"time_limit": max(deadline.remaining(), 0.05), "presolve": True},
            )
        )

    def solve(
        self,
        *,
        deadline: Deadline,
        integral: bool = False,
        max_rounds: int = 30,
        per_row: int = 2,
        stall_rounds: int = 3,
    ) -> BoundResult:
        """Solve the relaxation, adding violated window/deadline rows until none is left, or
        until ``stall_rounds`` rounds in a row leave the optimum where it was.

        With ``integral=True`` the LP rounds run first, then the binary version (HiGHS branch and
        bound) on the rows found, for what time is left; its dual bound is still valid.
        Every round is cut at ``deadline``.
        """
        clock = deadline.lap()
        empty = np.zeros(self.nt)
        if self.infeasible_reason:
            return BoundResult(
                None,
                "infeasible",
                False,
                empty,
                empty,
                None,
                info={"reason": self.infeasible_reason},
            )
        if not self._lazy_keys:
            self._seed_lazy()
        best: BoundResult | None = None
        rounds = 0
        x = None
        history: list[float] = []
        stalled = 0
        by_clock = False
        while rounds < max_rounds:
            if deadline.remaining() <= 0.05:
                by_clock = True
                break
            res = self._lp(deadline)
            rounds += 1
            if res.status == 2:
                return BoundResult(
                    None,
                    "infeasible",
                    False,
                    empty,
                    empty,
                    None,
                    rounds=rounds,
                    seconds=clock.elapsed(),
                    info={"reason": "the relaxation has no solution at this budget"},
                )
            if res.status != 0 or res.x is None:
                by_clock = True
                break
            x = res.x
            gained = best is None or float(res.fun) > history[-1] + 1e-9 * (1 + abs(history[-1]))
            history.append(float(res.fun))
            best = self._result(x, float(res.fun), "optimal", False, rounds, clock)
            new = self._violated(x, per_row)
            if not new:
                break
            stalled = 0 if gained else stalled + 1
            best.status = "partial"  # its point breaks rows: the bound holds, maybe weaker
            if stalled >= stall_rounds:
                break  # degenerate: new rows move the point, not the optimum
            self._add_lazy(new)
        if best is None:
            return BoundResult(None, "timeout", False, empty, empty, None, rounds=rounds)
        if by_clock and best.status == "partial":
            best.status = "timeout"  # the clock, not convergence, ended the rounds
        if integral and deadline.remaining() > 0.2:
            mres = self._milp(deadline)
            if mres is not None:
                mres.rounds = rounds
                if mres.bound_s is not None and mres.bound_s >= (best.bound_s or 0.0):
                    return mres
                mres.bound_s = best.bound_s
                return mres
        return best

    def plan_value(self, actions: np.ndarray, deadline: Deadline) -> float | None:
        """The relaxation's optimum with the actions fixed: a claim about this plan (seconds).

        No run of the plan in the simulator is faster (the relaxation stays valid for it).
        None when the LP does not finish in time; inf when it has no solution (the plan
        cannot fit).
        """

        acts = np.asarray(actions)
        lb, ub = self.var_lb.copy(), self.var_ub.copy()
        lb[self.s] = ub[self.s] = (acts == SWAP).astype(float)
        lb[self.r] = ub[self.r] = (acts == RECOMP).astype(float)
        if np.any(lb > ub):
            return math.inf
        saved = self.var_lb, self.var_ub
        self.var_lb, self.var_ub = lb, ub
        try:
            res = self._lp(deadline)
        finally:
            self.var_lb, self.var_ub = saved
        if res.status == 2:
            return math.inf
        if res.status != 0:
            return None
        return self.instance.ideal_step_s + float(res.fun) * self.time_unit

    def _milp(
        self, deadline: Deadline, per_row: int = 2, max_rounds: int = 30
    ) -> BoundResult | None:
        """The binary version, with the same lazy rows: solve, add the rows its point breaks,
        solve again. Every dual bound along the way is valid (it has a subset of the rows).
        Cut at ``deadline``, read in seconds only for HiGHS."""
        clock = deadline.lap()
        integrality = np.zeros(self.n_vars, dtype=np.int64)
        integrality[self.s] = 1
        integrality[self.r] = 1
        best: BoundResult | None = None
        for rounds in range(1, max_rounds + 1):
            left = deadline.remaining()
            if left <= 0.05:
                break
            a, lo, hi = self._matrices()
            res = call_interruptibly(
                partial(
                    milp,
                    self.c,
                    integrality=integrality,
                    bounds=Bounds(self.var_lb, self.var_ub),
                    constraints=LinearConstraint(a, lo, hi),
                    options={"time_limit": left, "presolve": True},
                )
            )
            if res.status == 2:
                empty = np.zeros(self.nt)
                return BoundResult(
                    None, "infeasible", True, empty, empty, None, info={"reason": res.message}
                )
            dual = getattr(res, "mip_dual_bound", None)
            bound = None
            if dual is not None and np.isfinite(dual):
                bound = self.instance.ideal_step_s + float(dual) * self.time_unit
            if res.x is None:
                if bound is not None and (best is None or (best.bound_s or 0) < bound):
                    empty = np.zeros(self.nt)
                    best = BoundResult(bound, "timeout", True, empty, empty, None, rounds=rounds)
                break
            out = self._result(
                res.x,
                float(res.fun),
                "optimal" if res.status == 0 else "timeout",
                True,
                rounds,
                clock,
            )
            if res.status == 0:
                out.bound_s = max(out.bound_s or 0.0, bound or 0.0)
            else:
                out.bound_s = bound
            if best is None or (out.bound_s or 0.0) >= (best.bound_s or 0.0):
                best = out
            if res.status != 0:
                break
            new = self._violated(res.x, per_row)
            if not new:
                return best
            self._add_lazy(new)
            best.status = "partial"  # its point broke rows: its bound holds, its plan may not
        return best

    def _result(
        self, x: np.ndarray, fun: float, status: str, integral: bool, rounds: int, clock: Deadline
    ) -> BoundResult:
        value = self.instance.ideal_step_s + fun * self.time_unit
        return BoundResult(
            bound_s=value,
            status=status,
            integral=integral,
            s=np.clip(x[self.s], 0.0, 1.0),
            r=np.clip(x[self.r], 0.0, 1.0),
            claimed_step_s=value,
            rounds=rounds,
            rows=self._static.n + self._lazy.n,
            lazy_rows=self._lazy.n,
            seconds=clock.elapsed(),
            info={"T": x[self.T] * self.time_unit},
        )
