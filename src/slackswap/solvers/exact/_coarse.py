"""The relaxation checked at a subset of operator boundaries: a valid bound for deep models.

`BoundProgram`'s LP grows superlinearly in solve time (HiGHS: about n^2.3 in the operator count),
and at 17k operators one LP takes minutes. `CoarseBound` keeps every per-tensor variable but
checks memory, windows and deadlines only at the operators in ``ops`` (a sorted subset that
holds the first and last operator of each pass), so the LP has O(len(ops) + n_tensors) rows.

Why it is a relaxation of `BoundProgram`'s full LP (every pair of operators), so its optimum is a
lower bound on any plan's simulated step: each variable here is the variable of the same name
at a kept operator, and each row is one of three kinds:

- a row of the full LP at kept operators (the memory rows, F <= L, X <= W, R <= Rt <= R2,
  T = Z + Rt);
- a chain between consecutive kept operators implied by the full LP's chain: running sums
  (Q, L, Rb, W, G, R, R2) gain every event between the two; T, Z, Rt, F only grow;
- the window and deadline rows for the pairs of kept operators only, written with running
  extremes instead of one row per pair (an exact reformulation of those pairs):
  ``V_i = min over kept producers p < i of Q_p - bw E_p`` (freed-by-swap windows:
  ``F_i - bw S_i <= V_i``, likewise X_j in the backward pass); ``U_a = min over kept
  deadlines j' > a of W_j' + bw S_j'`` (prefetch deadlines: ``amount_a + bw start_a <= U_a``);
  ``H_c = max over kept sources a < c of amount_a + bw start_a - bmax_a`` (refetches:
  ``H_c <= X_c + bw S_c``). A point of the full LP, with V, U, H set to those extremes,
  satisfies every row (`embed` does exactly this; ``tests/solvers/exact/test_exact_coarse.py`` checks it on
  simulated runs and compares the two optima).

Dropping the other operators' rows only lowers the optimum. On the repeated-layer catalog models
few rows bind (the full LP's duals: the memory row of the first backward operator, the window
from the first producer to it, the rebuild-time chains), so about a hundred kept operators per
pass, whatever the depth, lose little (`benchmarks/README.md`: within 0.03% of the full LP on
the bundled instances).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._interrupt import call_interruptibly
from slackswap.solvers.exact._lp import BoundProgram, BoundResult, _cum_chain, _Rows, _Vars

#: Above this many operators `milp` bounds with the coarse LP alone: one round of the full LP
#: took 0.45-0.9 s at 1,066 operators, 4-9 s at 4,234 and 126-143 s at 16,906 (GPT-2 XL with
#: 48 / 192 / 768 layers, 30% of P), against 0.3 / 0.6 / 1.7 s for the coarse LP with the same
#: optimum at 48 and 192 layers (benchmarks/README.md).
FULL_LP_MAX_OPS = 2000
#: Kept operators per pass (about): a few hundred rows whatever the depth.
KEPT_PER_PASS = 100


def select_ops(model: BoundProgram, per_pass: int) -> np.ndarray:
    """About ``per_pass`` kept operators in each pass: per group of consecutive operators, its
    first and the one with the most fixed memory (bytes alive whatever the plan plus transient
    bytes), with the first and last operator of each pass and the first producer (the window
    from it is the longest)."""
    nf, n = model.nf, model.n
    keep = {0, nf - 1, nf, n - 1, int(model.producers[0])}
    for lo_, hi_, const in ((0, nf, model.fwd_mem_const), (nf, n, model.bwd_mem_const)):
        size = max(1, -(-(hi_ - lo_) // max(per_pass // 2, 1)))
        for a in range(lo_, hi_, size):
            b = min(a + size, hi_)
            keep.add(a + int(np.argmax(const[a - lo_ : b - lo_])))
            keep.add(a)
    return np.array(sorted(keep), dtype=np.int64)


def coarse_bound(
    model: BoundProgram, deadline: Deadline, per_pass: int = KEPT_PER_PASS
) -> BoundResult:
    """The coarse relaxation of ``model`` at about ``per_pass`` kept operators per pass."""
    return CoarseBound(model, select_ops(model, per_pass)).solve(deadline)


class CoarseBound:
    """The relaxation of ``model`` (a `BoundProgram`) at the operators ``ops`` (sorted)."""

    def __init__(self, model: BoundProgram, ops: np.ndarray):
        m = model
        self.model = m
        nf, n = m.nf, m.n
        K = np.unique(np.asarray(ops, dtype=np.int64))
        if not {0, nf - 1, nf, n - 1} <= set(K.tolist()):
            raise ValueError("kept operators must include the first and last of each pass")
        Kf, Kb = K[K < nf], K[K >= nf]
        self.K, self.Kf, self.Kb = K, Kf, Kb
        nk, nkf, nkb = K.size, Kf.size, Kb.size
        bw, b = m.bw, m.b
        v = _Vars()
        self.s = v.add(m.nt, 0.0, 1.0)
        self.r = v.add(m.nt, 0.0, 1.0)
        self.T = v.add(nk, 0.0)
        self.Z = v.add(nk, 0.0)
        self.Rt = v.add(nkb, 0.0)
        self.R2 = v.add(nkb, 0.0)
        self.F = v.add(nkf, 0.0)
        self.X = v.add(nkb, 0.0)
        self.Q = v.add(nkf, 0.0)
        self.L = v.add(nkf, 0.0)
        self.Rb = v.add(nkf, 0.0)
        self.W = v.add(nkb, 0.0)
        self.G = v.add(nkb, 0.0)
        self.R = v.add(nkb, 0.0)
        self.V = v.add(nk, -np.inf)  # min over kept producers before the op of Q_p - bw E_p
        self.U = v.add(nkb + 1, -np.inf)  # per source (nf - 1, then Kb): min of W_j' + bw S_j'
        self.H = v.add(nkb, -np.inf)  # max over earlier sources of amount + bw start - bmax
        self.n_vars = v.n
        self.var_lb = np.concatenate(v.lb)
        self.var_ub = np.concatenate(v.ub)
        self.var_ub[self.r[~m.can_recompute]] = 0.0
        Tb = self.T[nkf:]  # T at the kept backward operators
        rows = _Rows()
        rows.add([(self.s, 1.0), (self.r, 1.0)], -np.inf, 1.0, m.nt)
        rows.add([(self.T[:nkf], 1.0), (self.Z[:nkf], -1.0)], 0.0, 0.0, nkf)
        rows.add([(Tb, 1.0), (self.Z[nkf:], -1.0), (self.Rt, -1.0)], 0.0, 0.0, nkb)
        rows.add([(self.Z[1:], 1.0), (self.Z[:-1], -1.0)], 0.0, np.inf, nk - 1)
        rows.add([(self.Rt[1:], 1.0), (self.Rt[:-1], -1.0)], 0.0, np.inf, nkb - 1)
        # running sums at kept operators: an event enters at the first kept operator it counts at
        pos = np.searchsorted(Kf, m.prod, side="right")  # first kept i with prod < i
        ok = pos < nkf
        _cum_chain(rows, self.Q, pos[ok], self.s[ok], b[ok])
        pos = np.searchsorted(Kf, m.lfr, side="right")
        ok = pos < nkf
        _cum_chain(rows, self.L, pos[ok], self.s[ok], b[ok])
        _cum_chain(rows, self.Rb, pos[ok], self.r[ok], b[ok])
        # W[j] counts fb > j: reversed chain, entering at the largest kept j below fb
        rev = nkb - np.searchsorted(Kb, m.fb, side="left")
        ok = rev < nkb
        _cum_chain(rows, self.W[::-1], rev[ok], self.s[ok], b[ok])
        _cum_chain(rows, self.G[::-1], rev[ok], self.r[ok], b[ok])
        _cum_chain(rows, self.R, np.searchsorted(Kb, m.fb, side="left"), self.r, m.cost)
        _cum_chain(rows, self.R2, np.searchsorted(Kb, m.earliest, side="left"), self.r, m.cost)
        rows.add([(self.Rt, 1.0), (self.R, -1.0)], 0.0, np.inf, nkb)
        rows.add([(self.Rt, 1.0), (self.R2, -1.0)], -np.inf, 0.0, nkb)
        M = m.budget_bytes / m.byte_unit
        rows.add([(self.Rb, -1.0), (self.F, -1.0)], -np.inf, M - m.fwd_mem_const[Kf], nkf)
        rows.add([(self.F, 1.0), (self.L, -1.0)], -np.inf, 0.0, nkf)
        rows.add([(self.F[1:], 1.0), (self.F[:-1], -1.0)], 0.0, np.inf, nkf - 1)
        gap_r, gap_c, gap_v = m._between_reads_terms()
        at = np.full(m.nb, -1, dtype=np.int64)
        at[Kb - nf] = np.arange(nkb)
        sel = at[gap_r] >= 0
        row_of = np.concatenate([np.arange(nkb), np.arange(nkb), at[gap_r[sel]]])
        # gap_c holds the full model's s columns: the same tensor's s column here
        cols = np.concatenate([self.G, self.X, self.s[gap_c[sel] - m.s[0]]])
        vals = np.concatenate([-np.ones(nkb), -np.ones(nkb), gap_v[sel]])
        rows.add_sparse(row_of, cols, vals, np.full(nkb, -np.inf), M - m.bwd_mem_const[Kb - nf])
        rows.add([(self.X, 1.0), (self.W, -1.0)], -np.inf, 0.0, nkb)
        # freed-by-swap windows from kept producers: V_k <= V_{k-1}, V_k <= Q_p - bw E_p for the
        # kept producer p = K[k-1], and F_i - bw S_i <= V_i (X_j in the backward pass)
        rows.add([(self.V[1:], 1.0), (self.V[:-1], -1.0)], -np.inf, 0.0, nk - 1)
        k = 1 + np.flatnonzero(np.isin(K[:-1], m.producers) & (K[:-1] < nf))
        p = K[k - 1]
        rows.add(
            [(self.V[k], 1.0), (self.Q[k - 1], -1.0), (self.T[k - 1], bw)],
            -np.inf,
            -bw * (m.D[p] + m.d[p]),
            k.size,
        )
        rows.add(
            [(self.F[1:], 1.0), (self.T[1:nkf], -bw), (self.V[1:nkf], -1.0)],
            -np.inf,
            bw * m.D[Kf[1:]],
            nkf - 1,
        )
        rows.add([(self.X, 1.0), (Tb, -bw), (self.V[nkf:], -1.0)], -np.inf, bw * m.D[Kb], nkb)
        # prefetch deadlines at kept deadlines: sources are nf - 1 (F, from the end of the forward
        # pass) and the kept backward operators; U[a] <= U[a+1], U[a] <= W + bw S at Kb[a]
        rows.add([(self.U[:-1], 1.0), (self.U[1:], -1.0)], -np.inf, 0.0, nkb)
        a = np.flatnonzero(np.isin(Kb, m.deadlines))
        rows.add(
            [(self.U[a], 1.0), (self.W[a], -1.0), (Tb[a], -bw)], -np.inf, bw * m.D[Kb[a]], a.size
        )
        last_f = nkf - 1  # position of op nf - 1
        e_fwd = m.D[nf - 1] + m.d[nf - 1]  # the end of the forward pass, less T_{nf-1}
        rows.add(
            [(self.F[[last_f]], 1.0), (self.T[[last_f]], bw), (self.U[[0]], -1.0)],
            -np.inf,
            -bw * e_fwd,
            1,
        )
        rows.add([(self.X, 1.0), (Tb, bw), (self.U[1:], -1.0)], -np.inf, -bw * m.D[Kb], nkb)
        # refetches: H_c >= H_{c-1}, H_c >= the term of the source just before c, H_c <= X + bw S
        bm = m.bmax_after
        rows.add([(self.H[1:], 1.0), (self.H[:-1], -1.0)], 0.0, np.inf, nkb - 1)
        rows.add(
            [(self.H[[0]], 1.0), (self.F[[last_f]], -1.0), (self.T[[last_f]], -bw)],
            bw * e_fwd - bm[0],
            np.inf,
            1,
        )
        src = Kb[:-1]
        rows.add(
            [(self.H[1:], 1.0), (self.X[:-1], -1.0), (Tb[:-1], -bw)],
            bw * m.D[src] - bm[src - (nf - 1)],
            np.inf,
            nkb - 1,
        )
        rows.add([(self.H, 1.0), (self.X, -1.0), (Tb, -bw)], -np.inf, bw * m.D[Kb], nkb)
        self.rows = rows
        self.c = np.zeros(self.n_vars)
        self.c[self.T[-1]] = 1.0

    def matrix(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """The rows lo <= A x <= hi."""
        return self.rows.matrix(self.n_vars)

    def embed(self, x_full: np.ndarray) -> np.ndarray:
        """The point of this LP that a point of the full LP (``BoundProgram``'s variables, e.g.
        from `BoundProgram.embed_run`) takes: the same values at kept operators, and the running
        extremes V, U, H over the kept pairs."""
        m, K, Kf, Kb = self.model, self.K, self.Kf, self.Kb
        nf = m.nf
        x = np.zeros(self.n_vars)
        x[self.s] = x_full[m.s]
        x[self.r] = x_full[m.r]
        x[self.T] = x_full[m.T[K]]
        x[self.Z] = x_full[m.Z[K]]
        for name, idx in (("Rt", Kb - nf), ("R2", Kb - nf), ("X", Kb - nf), ("W", Kb - nf)):
            x[getattr(self, name)] = x_full[getattr(m, name)[idx]]
        for name in ("G", "R"):
            x[getattr(self, name)] = x_full[getattr(m, name)[Kb - nf]]
        for name in ("F", "Q", "L", "Rb"):
            x[getattr(self, name)] = x_full[getattr(m, name)[Kf]]
        S = m.D[K] + x_full[m.T[K]]
        big = 1e9  # a V or U with nothing to bound it: any value above the rows' needs
        term = np.full(K.size, big)
        is_p = np.isin(K, m.producers) & (K < nf)
        term[is_p] = x_full[m.Q[K[is_p]]] - m.bw * (S[is_p] + m.d[K[is_p]])
        V = np.minimum.accumulate(np.concatenate([[big], term[:-1]]))
        x[self.V] = V
        nkf = Kf.size
        Sb = S[nkf:]
        ahead = np.full(Kb.size, big)
        is_d = np.isin(Kb, m.deadlines)
        ahead[is_d] = x_full[m.W[Kb[is_d] - nf]] + m.bw * Sb[is_d]
        x[self.U] = np.concatenate([np.minimum.accumulate(ahead[::-1])[::-1], [big]])
        e_fwd = S[nkf - 1] + m.d[nf - 1]
        amount = np.concatenate([[x_full[m.F[nf - 1]]], x_full[m.X[Kb - nf]]])
        start = np.concatenate([[e_fwd], Sb])
        bmax = m.bmax_after[np.concatenate([[nf - 1], Kb]) - (nf - 1)]
        x[self.H] = np.maximum.accumulate((amount + m.bw * start - bmax)[:-1])
        return x

    def violations(self, x: np.ndarray, tol: float = 1e-7) -> list[str]:
        """Rows and variable bounds that ``x`` breaks (scaled units), at most 20 of each."""
        out = [
            f"variable {k} = {x[k]:.6g} outside bounds"
            for k in np.flatnonzero((x < self.var_lb - tol) | (x > self.var_ub + tol))[:20]
        ]
        a, lo, hi = self.matrix()
        ax = a @ x
        out += [
            f"row {k}: {ax[k]:.6g} not in [{lo[k]:.6g}, {hi[k]:.6g}]"
            for k in np.flatnonzero((ax < lo - tol) | (ax > hi + tol))[:20]
        ]
        return out

    def solve(self, deadline: Deadline) -> BoundResult:
        """One LP (interior point, as `BoundProgram` runs it), cut at ``deadline``; its optimum
        is the bound."""
        clock = deadline.lap()
        m = self.model
        empty = np.zeros(m.nt)
        if m.infeasible_reason:
            return BoundResult(
                None, "infeasible", False, empty, empty, None, info={"reason": m.infeasible_reason}
            )
        a, lo, hi = self.matrix()
        eq = lo == hi
        fin_hi = ~eq & np.isfinite(hi)
        fin_lo = ~eq & np.isfinite(lo)
        res = call_interruptibly(
            lambda: linprog(
                self.c,
                A_ub=sp.vstack([a[fin_hi], -a[fin_lo]], format="csr"),
                b_ub=np.concatenate([hi[fin_hi], -lo[fin_lo]]),
                A_eq=a[eq],
                b_eq=lo[eq],
                bounds=np.column_stack([self.var_lb, self.var_ub]),
                method="highs-ipm",
                options={"time_limit": max(deadline.remaining(), 0.05), "presolve": True},
            )
        )
        seconds = clock.elapsed()
        info: dict[str, object] = {"kept_ops": int(self.K.size)}
        if res.status == 2:
            info["reason"] = "the relaxation has no solution at this budget"
            return BoundResult(
                None, "infeasible", False, empty, empty, None, 1, seconds=seconds, info=info
            )
        if res.status != 0 or res.x is None:
            return BoundResult(
                None, "timeout", False, empty, empty, None, 1, seconds=seconds, info=info
            )
        value = m.instance.ideal_step_s + float(res.fun) * m.time_unit
        return BoundResult(
            bound_s=value,
            status="optimal",
            integral=False,
            s=np.clip(res.x[self.s], 0.0, 1.0),
            r=np.clip(res.x[self.r], 0.0, 1.0),
            claimed_step_s=value,
            rounds=1,
            rows=self.rows.n,
            seconds=seconds,
            info=info,
        )
