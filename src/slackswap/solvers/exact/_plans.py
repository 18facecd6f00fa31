"""Plans for the exact solvers: round a fractional solution, repair it, improve it in the simulator.

Every plan here is judged by the simulator (barrier-free runtime): rounding proposes, repair
recomputes the cheapest tensors (seconds per byte freed at the failing operator) until the
simulator says the plan fits, and a local search moves one tensor (or swaps the roles of two)
while the simulated step improves.
"""

from __future__ import annotations

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import KEEP, RECOMP, SWAP, Budget
from slackswap.simulator import SimResult, simulate, simulate_many
from slackswap.solvers.base import Solution
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.registry import REGISTRY

#: Instances with at most this many tensors get the whole pair neighbourhood in local search.
FULL_PAIRS = 40

#: Past this many tensors local search applies improving moves batch by batch: a whole
#: single-move neighbourhood (about 2 plans per tensor) costs seconds to minutes (15k plans,
#: about 7 s at 7,684 tensors; 61k at 30,724), and a search cut by the clock mid-sweep applied
#: nothing. Above every catalog instance (at most 723 tensors), so their plans are unchanged.
FIRST_IMPROVEMENT_TENSORS = 1_000

#: Plans per call into the compiled simulator: between calls Python sees Ctrl-C, so one batch
#: should take well under a second (256 plans of a 16,906-operator instance: about 0.13 s).
BATCH = 256

#: Rounding thresholds tried on a fractional solution (share of a tensor recomputed / swapped).
_THRESHOLDS = (0.5, 0.3, 0.1, 0.7, 0.9, 1e-6)


class Scorer:
    """Scores plans in the simulator at one budget, counting evaluations against the solve's
    stopping rule ``stop`` (a `Deadline`; None: none).

    Its evaluation budget (``stop.max_evaluations``) makes a search deterministic: it stops
    after that many plans whatever the clock says (the clock still stops it first on a slow
    machine). Once its time is up `many` starts no further batch and scores the plans left inf
    (a whole neighbourhood of a 7,684-tensor instance is 15k plans, about 7 s, which overran a
    60 s limit by 2 s).
    """

    def __init__(self, instance: Instance, budget_bytes: int, stop: Deadline | None = None):
        self.instance = instance
        self.budget = Budget.bytes(budget_bytes)
        self.evaluations = 0
        self.stop = stop

    @property
    def exhausted(self) -> bool:
        """Whether the evaluation budget is spent."""
        return self.stop is not None and self.stop.out_of_evaluations(self.evaluations)

    def many(self, acts2d: np.ndarray) -> np.ndarray:
        """Simulated step of each plan, seconds (inf when it does not fit or over the budget)."""
        n = len(acts2d)
        if n == 0:
            return np.zeros(0)
        out = np.full(n, np.inf)
        if self.stop is not None:
            n = int(min(n, self.stop.evaluations_left(self.evaluations)))
            if n == 0:
                return out
        acts = np.ascontiguousarray(acts2d[:n], dtype=np.int8)
        for lo in range(0, n, BATCH):
            if self.stop is not None and self.stop.expired():
                break
            res = simulate_many(self.instance, acts[lo : lo + BATCH], self.budget)
            out[lo : min(n, lo + BATCH)] = np.where(res.feasible, res.step_s, np.inf)
            self.evaluations += min(n, lo + BATCH) - lo
        return out

    def one(self, acts: np.ndarray) -> SimResult:
        self.evaluations += 1
        return simulate(self.instance, acts, self.budget)


def score_changes(
    scorer: Scorer, a: np.ndarray, changes: list[tuple[tuple[int, int], ...]]
) -> np.ndarray:
    """Simulated step (seconds; inf: does not fit) of ``a`` with each change applied, where a
    change is a tuple of (tensor, action) pairs.

    The same scores, in the same `Scorer.many` batches, as one call on the whole matrix of
    changed plans, but only one batch of plans is in memory at a time: a single-move
    neighbourhood of a 30,724-tensor plan is 61k plans, 1.9 GB as one int8 matrix.
    """
    out = np.full(len(changes), np.inf)
    for lo in range(0, len(changes), BATCH):
        part = changes[lo : lo + BATCH]
        cand = np.repeat(a[None, :], len(part), axis=0)
        for k, change in enumerate(part):
            for t, v in change:
                cand[k, t] = v
        out[lo : lo + len(part)] = scorer.many(cand)
    return out


def valid_actions(instance: Instance, acts: np.ndarray) -> np.ndarray:
    """``acts`` with every RECOMP of a tensor that nothing rebuilds turned into SWAP."""
    out = np.asarray(acts, dtype=np.int8).copy()
    out[(out == RECOMP) & ~np.isfinite(instance.tensor_recompute_s)] = SWAP
    return out


def round_candidates(instance: Instance, s: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Plans from a fractional (swap share s, recompute share r) solution, one per threshold."""
    out = []
    for th in _THRESHOLDS:
        a = np.zeros(instance.n_tensors, dtype=np.int8)
        a[s >= th] = SWAP
        a[(r >= th) & (r >= s)] = RECOMP
        out.append(valid_actions(instance, a))
    keep = 1.0 - s - r
    a = np.argmax(np.stack([keep, s, r]), axis=0).astype(np.int8)
    out.append(valid_actions(instance, a))
    return np.unique(np.stack(out), axis=0)


def repair(
    scorer: Scorer, acts: np.ndarray, deadline: Deadline, max_steps: int = 10_000
) -> np.ndarray | None:
    """Recompute (else swap) the cheapest tensor that would free memory at the failing operator.

    Repeats until the simulator accepts the plan; None when nothing is left to change.
    """
    inst = scorer.instance
    a = valid_actions(inst, acts)
    cost = inst.tensor_recompute_s
    size = inst.tensor_bytes.astype(float)
    lfr, fb = inst.tensor_last_fwd_reader, inst.tensor_first_bwd_reader
    for _ in range(max_steps):
        res = scorer.one(a)
        if res.feasible:
            return a
        if deadline.expired() or res.fail_op < 0 or scorer.exhausted:
            return None
        f = res.fail_op
        # tensors idle at f (last forward reader before it, first backward reader after it)
        idle = (lfr < f) & (fb > f)
        cand = np.flatnonzero(idle & (a != RECOMP) & np.isfinite(cost))
        if cand.size:
            # cheapest seconds per byte first, as many as cover the overflow (one simulation
            # per batch rather than per tensor)
            over = max(float(res.overflow_bytes), 1.0)
            order = cand[np.argsort(cost[cand] / np.minimum(size[cand], over), kind="stable")]
            take = int(np.searchsorted(np.cumsum(size[order]), over)) + 1
            a[order[:take]] = RECOMP
            continue
        cand = np.flatnonzero(idle & (a == KEEP))
        if cand.size:
            a[cand[np.argmax(size[cand])]] = SWAP
            continue
        return None
    return None


def local_search(
    scorer: Scorer,
    acts: np.ndarray,
    step: float,
    deadline: Deadline,
    preference: np.ndarray | None = None,
) -> tuple[np.ndarray, float, bool]:
    """Best-improvement search over single-tensor moves, then pair exchanges, in the simulator.

    Past `FIRST_IMPROVEMENT_TENSORS` tensors one neighbourhood outlasts the time limit (61k
    plans at 30,724 tensors, minutes), so the moves are scored a batch at a time and each
    batch's improving moves are applied at once (`_batch_improvement`), in the order
    ``preference`` gives (an (n_tensors, 3) array: how much a relaxation wants each action of
    each tensor; None: tensor order).

    Returns the best plan, its simulated step (seconds) and whether the search ended in a local
    optimum (rather than on the clock or the work budget). Deterministic under a work budget.
    """
    inst = scorer.instance
    n = inst.n_tensors
    finite = np.isfinite(inst.tensor_recompute_s)
    a = acts.copy()
    best = step
    large = n > FIRST_IMPROVEMENT_TENSORS
    while not deadline.expired() and not scorer.exhausted:
        if large:
            a, best, applied = _batch_improvement(scorer, a, best, deadline, preference)
            if applied:
                continue
            pair = _pair_exchange(scorer, a, best, deadline)
            if pair is None:
                return a, best, not (deadline.expired() or scorer.exhausted)
            a, best = pair
            continue
        moves = []
        for t in range(n):
            for v in (KEEP, SWAP, RECOMP):
                if v != a[t] and (v != RECOMP or finite[t]):
                    moves.append((t, v))
        steps = score_changes(scorer, a, [((t, v),) for t, v in moves])
        order = np.argsort(steps, kind="stable")
        if steps[order[0]] < best * (1 - 1e-12):
            # apply the improving moves greedily, each checked in the simulator
            applied = False
            for k in order:
                if steps[k] >= best * (1 - 1e-12):
                    break
                t, v = moves[k]
                trial = a.copy()
                trial[t] = v
                st = float(scorer.many(trial[None, :])[0])
                if st < best * (1 - 1e-12):
                    a, best, applied = trial, st, True
                if deadline.expired() or scorer.exhausted:
                    break
            if applied:
                continue
        pair = _pair_exchange(scorer, a, best, deadline)
        if pair is None:
            stopped = deadline.expired() or scorer.exhausted
            return a, best, not stopped
        a, best = pair
    return a, best, False


def _batch_improvement(
    scorer: Scorer,
    a: np.ndarray,
    best: float,
    deadline: Deadline,
    preference: np.ndarray | None,
) -> tuple[np.ndarray, float, bool]:
    """One sweep over the single-tensor moves, a simulator batch at a time, most preferred
    first; after each batch its improving moves are applied greedily (each checked in the
    simulator). Returns (plan, step, whether some move was applied)."""
    inst = scorer.instance
    n = inst.n_tensors
    finite = np.isfinite(inst.tensor_recompute_s)
    t_all = np.repeat(np.arange(n), 3)
    v_all = np.tile(np.array([KEEP, SWAP, RECOMP], dtype=np.int8), n)
    allowed = (v_all != RECOMP) | finite[t_all]
    if preference is not None:
        # the relaxation's wish for the target action over the current one, largest first
        gain = preference[t_all, v_all] - preference[t_all, a[t_all]]
        order = np.lexsort((np.arange(3 * n), -gain))
    else:
        order = np.arange(3 * n)
    order = order[allowed[order]]
    applied = False
    for lo in range(0, len(order), BATCH):
        if deadline.expired() or scorer.exhausted:
            break
        part = [(int(t_all[k]), int(v_all[k])) for k in order[lo : lo + BATCH]]
        part = [(t, v) for t, v in part if a[t] != v]
        steps = score_changes(scorer, a, [((t, v),) for t, v in part])
        for k in np.argsort(steps, kind="stable"):
            if steps[k] >= best * (1 - 1e-12) or deadline.expired() or scorer.exhausted:
                break
            t, v = part[k]
            trial = a.copy()
            trial[t] = v
            st = float(scorer.many(trial[None, :])[0])
            if st < best * (1 - 1e-12):
                a, best, applied = trial, st, True
    return a, best, applied


def _pair_exchange(
    scorer: Scorer, a: np.ndarray, best: float, deadline: Deadline, width: int = 40
) -> tuple[np.ndarray, float] | None:
    """Move one tensor to a cheaper action and another to a dearer one, in one step."""
    inst = scorer.instance
    finite = np.isfinite(inst.tensor_recompute_s)
    if inst.n_tensors <= FULL_PAIRS:
        return _all_pairs(scorer, a, best, deadline, finite)
    cost = np.where(finite, inst.tensor_recompute_s, np.inf)
    size = inst.tensor_bytes.astype(float)
    # relieve: recomputed or swapped tensors going back to keep (most expensive first);
    # burden: kept tensors recomputed (cheapest per byte first) or swapped (largest first)
    rel = np.flatnonzero(a != KEEP)
    rel = rel[np.argsort(-np.where(a[rel] == RECOMP, cost[rel], 0.0), kind="stable")][:width]
    bur_r = np.flatnonzero((a == KEEP) & finite)
    # per byte freed; a zero-byte tensor (it frees nothing) as if it freed one, so it comes last
    bur_r = bur_r[np.argsort(cost[bur_r] / np.maximum(size[bur_r], 1.0), kind="stable")][:width]
    bur_s = np.flatnonzero(a == KEEP)
    bur_s = bur_s[np.argsort(-size[bur_s], kind="stable")][:width]
    moves: list[tuple[int, int, int, int]] = []
    for t in rel.tolist():
        moves += [(t, KEEP, u, RECOMP) for u in bur_r.tolist()]
        moves += [(t, KEEP, u, SWAP) for u in bur_s.tolist()]
        if a[t] == RECOMP:
            moves.append((t, SWAP, -1, KEEP))
    if not moves or deadline.expired() or scorer.exhausted:
        return None
    changes: list[tuple[tuple[int, int], ...]] = [
        ((t, v), (u, w)) if u >= 0 else ((t, v),) for t, v, u, w in moves
    ]
    steps = score_changes(scorer, a, changes)
    k = int(np.argmin(steps))
    if steps[k] < best * (1 - 1e-12):
        out = a.copy()
        for t, v in changes[k]:
            out[t] = v
        return out, float(steps[k])
    return None


def _all_pairs(
    scorer: Scorer, a: np.ndarray, best: float, deadline: Deadline, finite: np.ndarray
) -> tuple[np.ndarray, float] | None:
    """The whole two-tensor neighbourhood (every pair, every other action of each)."""
    n = len(a)
    cand = []
    for t in range(n):
        for u in range(t + 1, n):
            for v in (KEEP, SWAP, RECOMP):
                if v == a[t] or (v == RECOMP and not finite[t]):
                    continue
                for w in (KEEP, SWAP, RECOMP):
                    if w == a[u] or (w == RECOMP and not finite[u]):
                        continue
                    c = a.copy()
                    c[t], c[u] = v, w
                    cand.append(c)
    if not cand or deadline.expired() or scorer.exhausted:
        return None
    plans = np.stack(cand)
    steps = scorer.many(plans)
    k = int(np.argmin(steps))
    if steps[k] < best * (1 - 1e-12):
        return plans[k].copy(), float(steps[k])
    return None


def best_plan(
    scorer: Scorer,
    starts: list[tuple[str, np.ndarray]],
    deadline: Deadline,
    search: bool = True,
    repair_deadline: Deadline | None = None,
    preference: np.ndarray | None = None,
) -> tuple[np.ndarray | None, float, bool, str]:
    """Repair each start, keep the fastest, then improve it by local search until ``deadline``.

    ``starts`` are (origin, plan) pairs. Repairs may run until ``repair_deadline`` (default
    ``deadline``): a plan that fits matters more than a better one. Returns (plan or None,
    simulated step in seconds, whether the search converged, where the plan came from: the
    winning start's origin, plus ``+repair`` when the repair changed it and ``+local-search``
    when the search improved it).
    """
    fix_by = deadline if repair_deadline is None else repair_deadline
    best_a: np.ndarray | None = None
    best = np.inf
    origin = ""
    seen: set[bytes] = set()
    for label, a0 in starts:
        key = np.asarray(a0, dtype=np.int8).tobytes()
        if key in seen:
            continue
        seen.add(key)
        a = repair(scorer, a0, fix_by if best_a is None else deadline)
        if a is None:
            continue
        st = float(scorer.many(a[None, :])[0])
        if st < best:
            best, best_a = st, a
            origin = label if np.array_equal(a, a0) else f"{label}+repair"
    converged = True
    if best_a is not None and search:
        first = best
        best_a, best, converged = local_search(scorer, best_a, best, deadline, preference)
        if best < first and not origin.endswith("+local-search"):
            origin += "+local-search"
    return best_a, best, converged, origin


def relaxation_preference(s: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(n_tensors, 3): a relaxation's share of keep, swap and recompute for each tensor."""
    keep = np.clip(1.0 - s - r, 0.0, 1.0)
    return np.column_stack([keep, s, r])


def labelled(origin: str, plans: list[np.ndarray] | np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``plans`` as `best_plan` starts that all came from ``origin``."""
    return [(origin, np.asarray(p, dtype=np.int8)) for p in plans]


def hint_plans(
    instance: Instance, budget: Budget, hint: str, deadline: Deadline
) -> list[np.ndarray]:
    """Plans from another registered solver to start from (``hint="none"``: no hint).

    The hint solver runs only with enough time left (its first call may compile), and gets half
    of it, and no part of this solve's evaluation budget (it counts its own).
    """
    left = deadline.remaining()
    if hint in ("", "none") or left < 2.0 or hint not in REGISTRY:
        return []
    entry = REGISTRY[hint]
    try:
        hint_deadline = deadline.time_only().within(left / 2)
        out = entry.make().solve(instance, budget, deadline=hint_deadline, seed=0)
    except Exception:  # a failing hint is no plan, not a failed solve
        return []
    plan = out.plan if isinstance(out, Solution) else out
    return [] if plan is None else [np.asarray(plan.actions, dtype=np.int8)]


#: Without a time limit, `iterated_local_search` stops after this many perturbations in a row
#: that beat nothing (with one, the clock stops it and this rule is not applied).
ILS_PATIENCE = 50


def iterated_local_search(
    scorer: Scorer,
    acts: np.ndarray,
    step: float,
    deadline: Deadline,
    seed: int,
    kick: int = 4,
) -> tuple[np.ndarray, float]:
    """Perturb ``kick`` random tensors of the incumbent, search locally, keep what is faster.

    Escapes the local optima of `local_search` on small instances, where the best plan can lie
    four moves away behind infeasible or slower intermediate plans. Seeded: reproducible under
    a work budget. Ends at ``deadline``, when the scorer's work budget is spent or, without a
    time limit, after `ILS_PATIENCE` perturbations in a row that beat nothing.
    """
    rng = np.random.default_rng(seed)
    finite = np.isfinite(scorer.instance.tensor_recompute_s)
    n = len(acts)
    best_a, best = acts.copy(), step
    since_better = 0
    while not deadline.expired() and not scorer.exhausted:
        if not deadline.limited and since_better >= ILS_PATIENCE:
            break
        since_better += 1
        trial = best_a.copy()
        for t in rng.choice(n, size=min(kick, n), replace=False):
            options = [
                v for v in (KEEP, SWAP, RECOMP) if v != trial[t] and (v != RECOMP or finite[t])
            ]
            trial[t] = options[int(rng.integers(len(options)))]
        st = float(scorer.many(trial[None, :])[0])
        if not np.isfinite(st):
            fixed = repair(scorer, trial, deadline, max_steps=20)
            if fixed is None:
                continue
            trial, st = fixed, float(scorer.many(fixed[None, :])[0])
        trial, st, _ = local_search(scorer, trial, st, deadline)
        if st < best * (1 - 1e-12):
            best_a, best, since_better = trial, st, 0
    return best_a, best
