"""Plans guided by the relaxation: random roundings of optimal-face points, repaired and searched.

The relaxation's optimum is very degenerate: swapping a tensor costs it nothing while the link
has room, so its interior-point solution swaps far more than a plan needs (BERT-Large at 20% of
P: 4.0 GB where 1.6 GB reaches the same value), and a plan rounded from it spends the link on
swaps that free nothing useful. Local search from such a plan stops in a poor local optimum:
the better plans differ in dozens of tensors at once. Two things here fix that:

- a point on the optimal face with the fewest swapped bytes (the relaxation re-solved with its
  objective capped at its optimum and the swapped bytes as objective), so that only the swaps
  the bound needs are made;
- many roundings instead of one: each tensor's action drawn with the point's shares as
  probabilities (seeded), repaired and improved by local search in the simulator; the best
  plan is kept. Roundings alternate between that point and the relaxation's own.

No bound comes from here: the relaxation's optimum is unchanged, and every plan is judged by
the simulator alone.
"""

from __future__ import annotations

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import RECOMP, SWAP
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.exact._lp import BoundProgram, BoundResult
from slackswap.solvers.exact._plans import Scorer, local_search, repair, valid_actions

#: Relative slack on the relaxation's optimum when the face is searched: the bound's last LP
#: may have been solved with fewer lazy rows than the model now holds, so an exact cap could
#: make the face empty.
FACE_SLACK = 1e-6

#: Share of the time left the fewest-swaps LP may take (it costs about one round of the
#: relaxation; the roundings need the rest).
FACE_SHARE = 0.5

#: Without a time limit, the roundings stop after this many in a row that beat nothing (with
#: one, the clock stops them and this rule is not applied, so plans under a time limit are
#: those of the clock alone).
PATIENCE = 20

#: ``info["found_by"]`` of a plan found here.
ORIGIN = "lp-guided-rounding"


def fewest_swaps_point(
    model: BoundProgram, lp: BoundResult, deadline: Deadline
) -> tuple[np.ndarray, np.ndarray] | None:
    """(swap share, recompute share) of an optimum of the relaxation that swaps the fewest bytes.

    The relaxation is solved again with its objective (the non-operator time) capped at the
    optimum ``lp`` found and the swapped bytes minimised. None when that LP does not finish by
    ``deadline`` or has no solution.
    """
    if lp.bound_s is None or deadline.remaining() <= 0.05:
        return None
    inst = model.instance
    optimum = (lp.bound_s - inst.ideal_step_s) / model.time_unit  # in ideal steps
    cap = optimum + FACE_SLACK * (1.0 + abs(optimum))
    objective = np.zeros(model.n_vars)
    objective[model.s] = model.b
    ub = model.var_ub.copy()
    ub[model.T[-1]] = cap
    saved = model.c, model.var_ub
    model.c, model.var_ub = objective, ub
    try:
        res = model._lp(deadline)
    finally:
        model.c, model.var_ub = saved
    if res.status != 0 or res.x is None:
        return None
    return np.clip(res.x[model.s], 0.0, 1.0), np.clip(res.x[model.r], 0.0, 1.0)


def random_rounding(
    instance: Instance, s: np.ndarray, r: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Each tensor swapped with probability s, recomputed with probability r, else kept."""
    u = rng.random(len(s))
    acts = np.zeros(len(s), dtype=np.int8)
    acts[u < s] = SWAP
    acts[(u >= s) & (u < s + r)] = RECOMP
    return valid_actions(instance, acts)


def guided_search(
    scorer: Scorer,
    points: list[tuple[np.ndarray, np.ndarray]],
    acts: np.ndarray | None,
    step: float,
    deadline: Deadline,
    seed: int,
) -> tuple[np.ndarray | None, float, int, str]:
    """Round ``points`` at random in turn, repair, search locally; keep the fastest plan.

    ``acts`` / ``step`` are the incumbent (None / inf: none yet). Returns the best plan, its
    simulated step (seconds), how many roundings were searched and, when one beat the
    incumbent, where it came from (`ORIGIN`, ``+repair`` / ``+local-search`` when those changed
    it; "" otherwise). Stops at ``deadline`` (a rounding is not begun when the last one took
    longer than the time left), when the scorer's work budget is spent or, without a time
    limit, after `PATIENCE` roundings in a row that beat nothing; seeded, so reproducible
    under a work budget.
    """
    best_a, best, origin = acts, step, ""
    tries = 0
    since_better = 0  # roundings in a row that beat nothing (the rule without a time limit)
    last_s = 0.0  # seconds the last rounding took: one that cannot finish is not begun
    while points and deadline.remaining() > last_s and not scorer.exhausted:
        if not deadline.limited and since_better >= PATIENCE:
            break
        began = deadline.elapsed()
        s, r = points[tries % len(points)]
        tries += 1
        rounded = random_rounding(scorer.instance, s, r, rng=np.random.default_rng([seed, tries]))
        since_better += 1
        fixed = repair(scorer, rounded, deadline)
        if fixed is None:
            continue
        first = float(scorer.many(fixed[None, :])[0])
        trial, st, _ = local_search(scorer, fixed, first, deadline)
        last_s = deadline.elapsed() - began
        if st < best * (1 - 1e-12):
            best_a, best, since_better = trial, st, 0
            origin = ORIGIN + ("+repair" if not np.array_equal(rounded, fixed) else "")
            origin += "+local-search" if st < first else ""
    return best_a, best, tries, origin


def search_from_relaxation(
    model: BoundProgram,
    lp: BoundResult,
    scorer: Scorer,
    acts: np.ndarray | None,
    step: float,
    deadline: Deadline,
    seed: int,
) -> tuple[np.ndarray | None, float, dict[str, object]]:
    """`guided_search` from the fewest-swaps optimum and ``lp``'s own point until ``deadline``.

    The fewest-swaps LP is solved only when one round of the relaxation took under a quarter
    of the time left (it costs about one round), and gets at most half of it. Returns the best
    plan (``acts`` when nothing beat it), its simulated step (seconds) and what was done
    (``guided_points``, ``guided_roundings``, and ``guided_found_by``: the `guided_search`
    origin of a plan that beat ``acts``, else "") for the solver's info.
    """
    info: dict[str, object] = {"guided_points": 0, "guided_roundings": 0, "guided_found_by": ""}
    if lp.bound_s is None or deadline.expired() or scorer.exhausted:
        return acts, step, info
    points = []
    left = deadline.remaining()
    if lp.seconds / max(lp.rounds, 1) < 0.25 * left:
        face = fewest_swaps_point(model, lp, deadline.within(FACE_SHARE * left))
        if face is not None:
            points.append(face)
    points.append((lp.s, lp.r))
    best_a, best, tries, origin = guided_search(scorer, points, acts, step, deadline, seed)
    info.update(guided_points=len(points), guided_roundings=tries, guided_found_by=origin)
    return best_a, best, info
