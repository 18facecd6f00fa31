"""``milp``: a certified lower bound from the linear relaxation (HiGHS) and plans rounded from it.

The bound engine is `slackswap.solvers.exact._lp.BoundProgram` (read its docstring for every
constraint and for the relaxations that keep the bound valid for the simulator's optimum); past
`FULL_LP_MAX_OPS` operators it is `slackswap.solvers.exact._coarse.CoarseBound`, the same LP
checked at a few hundred operators (``info["lp_engine"]``: ``full`` or ``coarse``). Plans
come from rounding the relaxation's solution (and SlackSwap's plan as a hint), repairing each in
the simulator (recompute the cheapest idle tensor at the failing operator until it fits) and a
local search in the simulator; then from many random roundings of the relaxation's optima
(`slackswap.solvers.exact._guided`, until three quarters of the time limit); the binary version
(HiGHS branch and bound) runs on what time is left, and its solution is one more start.

The `Solution` carries ``lower_bound_s`` (always set when the relaxation ran: the ideal step at
worst, ``inf`` for a budget the relaxation proves infeasible) and ``claimed_step_s``, the
relaxation's value with the returned plan's actions fixed: a claim the tests hold against the
simulator (it may never exceed the simulated step).

The bound is the engine's, as proved (the relaxation's, or the binary version's dual bound when
higher): never capped by the plan, so a bound above the plan's simulated step shows as the
defect it is (`slackswap.solvers.running.run` makes that record an ``error``). ``info["found_by"]``
says where the plan came from: ``lp-rounding``, ``milp-rounding``, ``keep-all``,
``hint:SOLVER`` or ``lp-guided-rounding``, with ``+repair`` and ``+local-search`` when those
changed it.

Status: ``timeout`` when the clock stopped the row generation or the local search before it
converged (a spent work budget, ``max_evaluations``, is not a timeout); the random roundings
and the binary version are opportunistic ("when time allows") and never make a timeout. ``optimal`` when the plan's
simulated step equals the bound (within 1e-9, relative).
"""

from __future__ import annotations

import math

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import Budget, Plan
from slackswap.solvers._named_solvers import check_hint
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.exact._coarse import FULL_LP_MAX_OPS, coarse_bound
from slackswap.solvers.exact._guided import search_from_relaxation
from slackswap.solvers.exact._lp import BoundProgram
from slackswap.solvers.exact._plans import (
    Scorer,
    best_plan,
    hint_plans,
    labelled,
    relaxation_preference,
    round_candidates,
)
from slackswap.solvers.registry import register

#: The guided roundings' random stream: fixed, not the run's seed, so the answer depends on the
#: instance, budget, options and time limit only (``uses_seed=False``: a sweep runs it once).
GUIDED_SEED = 0

#: Share of the time limit kept free at its end (pricing the plan, the bound, the runner).
RESERVE_SHARE = 0.08
#: Share of the time limit the relaxation may take (from its start; the rest goes to the plans).
LP_SHARE = 0.4
#: Share of the time limit the binary version leaves for pricing the plan (`plan_value`).
CLAIM_SHARE = 0.05
#: Share of the time limit the plan searches leave for the binary version and the claim
#: (`SEARCH_ROOM_COARSE_SHARE` where the binary version is skipped: the claim alone).
SEARCH_ROOM_SHARE = 0.25
SEARCH_ROOM_COARSE_SHARE = 0.05
#: Share of the time limit that must be left to price a plan (`plan_value`) at all.
PRICE_SHARE = 0.02
#: Seconds the relaxation gets at least, however short the time limit.
LP_MIN_S = 0.05


@register("milp", display=Display(colour="#393b79", marker=">", order=13))
class Milp(Solver):
    """Linear relaxation over operator boundaries (HiGHS): certified bound, rounded plans."""

    key = "milp"
    tags = Tags(
        exact=True, deterministic=True, needs=("scipy",), uses_time_limit=True, uses_seed=False
    )

    def __init__(
        self,
        *,
        integral: bool = True,
        hint: str = "slackswap",
        search: bool = True,
        max_evaluations: int | None = None,
    ):
        """``hint``: the registered solver whose plan is one more start (repaired and improved
        like the others; ``info["found_by"]`` says ``hint:SOLVER`` when it wins): default
        ``slackswap``, ``none`` for no hint."""
        self.integral = integral
        self.hint = hint
        self.search = search
        self.max_evaluations = max_evaluations

    def check_options(self) -> None:
        check_hint(self.key, self.hint)  # a misspelt hint is an error, not a start missing

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Solution:
        self.check_options()
        # Every share below is of the whole time limit, in seconds only where it is decided
        # (`Deadline.share_s`); without a time limit every share is none and each phase ends
        # by its own rule (the relaxation's rows, the searches' convergence, the guided
        # roundings' patience, HiGHS's proof).
        # One stopping rule down to the engine calls: the time limit and the evaluation budget.
        whole = deadline.with_evaluations(self.max_evaluations)
        # the end of the limit stays free for pricing the plan, writing the bound and the
        # runner's simulation of the plan
        deadline = whole.before(whole.share_s(RESERVE_SHARE))
        M = budget.bytes_for(instance)
        model = BoundProgram(instance, M)
        # past a few thousand operators the full LP does not finish (n^2.3): the coarse one,
        # checked at a few hundred operators, is the bound, and the binary version is skipped
        coarse = instance.n_ops > FULL_LP_MAX_OPS
        lp_deadline = deadline.within(max(LP_MIN_S, whole.share_s(LP_SHARE)))
        lp = coarse_bound(model, lp_deadline) if coarse else model.solve(deadline=lp_deadline)
        info: dict[str, object] = {
            "lp_engine": "coarse" if coarse else "full",
            "lp_status": lp.status,
            "lp_rounds": lp.rounds,
            "lp_rows": lp.rows,
            "lp_s": lp.seconds,
        }
        if lp.status == "infeasible":
            info["reason"] = "the relaxation proves no plan fits: " + str(lp.info.get("reason"))
            return Solution(None, lower_bound_s=math.inf, proven_infeasible=True, info=info)
        bound = lp.bound_s if lp.bound_s is not None else instance.ideal_step_s
        timed_out = lp.status == "timeout"
        scorer = Scorer(instance, M, deadline)
        starts = (
            labelled("lp-rounding", round_candidates(instance, lp.s, lp.r))
            if lp.bound_s is not None
            else []
        )
        starts.append(("keep-all", np.zeros(instance.n_tensors, dtype=np.int8)))  # then repair
        hints = hint_plans(instance, budget, self.hint, deadline)
        starts += labelled(f"hint:{self.hint}", hints)
        # leave room for the binary version and the claim on what is left
        room = SEARCH_ROOM_SHARE if self.integral and not coarse else SEARCH_ROOM_COARSE_SHARE
        search_stop = deadline.before(whole.share_s(room))
        preference = relaxation_preference(lp.s, lp.r) if lp.bound_s is not None else None
        acts, step, converged, found_by = best_plan(
            scorer, starts, search_stop, self.search, repair_deadline=deadline,
            preference=preference,
        )  # fmt: skip
        timed_out = timed_out or not (converged or scorer.exhausted)
        # A plan at the proven bound is optimal: the searches and the binary version after this
        # point could only spend the rest of the time limit.
        at_bound = acts is not None and step <= bound * (1 + 1e-9)
        if self.search and not at_bound:
            # many random roundings of the relaxation's optima, each repaired and searched
            # (`_guided`); opportunistic like the binary version: never a timeout
            guided, g_step, g_info = search_from_relaxation(
                model, lp, scorer, acts, step, search_stop, GUIDED_SEED
            )
            info.update(g_info)
            if g_info["guided_found_by"]:
                acts, step, found_by = guided, g_step, str(g_info["guided_found_by"])
        claim, claimed_for = None, None
        if acts is not None and deadline.has_left(whole.share_s(PRICE_SHARE)):
            claim, claimed_for = model.plan_value(acts, deadline), acts
        # the binary version is cut by the clock, so a run with a work budget skips it
        run_milp = self.integral and whole.max_evaluations is None and not coarse
        # HiGHS checks its clock between phases, and the binary version's root relaxation (about
        # one LP round, measured above) runs to its end: a root that cannot finish in the time
        # left overran a 4 s limit by up to 20%, so the binary version runs only when two LP
        # rounds fit.
        lp_round_s = lp.seconds / max(lp.rounds, 1)
        milp_deadline = deadline.before(whole.share_s(CLAIM_SHARE))
        milp_room_s = max(whole.share_s(CLAIM_SHARE), 2.0 * lp_round_s)
        if run_milp and not at_bound and milp_deadline.has_left(milp_room_s):
            mres = model._milp(milp_deadline)
            if mres is not None:
                info["milp_status"] = mres.status
                if mres.bound_s is not None and mres.bound_s > bound:
                    bound = mres.bound_s
                if mres.claimed_step_s is not None:
                    more = labelled("milp-rounding", round_candidates(instance, mres.s, mres.r))
                    if acts is not None:
                        more.append((found_by, acts))
                    a2, st2, _, by2 = best_plan(scorer, more, deadline, self.search)
                    if a2 is not None and st2 < step:
                        acts, step, found_by = a2, st2, by2
        info["evaluations"] = scorer.evaluations
        if scorer.exhausted:
            info["stop"] = "evaluations"
        info["found_by"] = found_by
        if acts is None:
            info["reason"] = "no rounded or hinted plan could be repaired to fit the budget"
            return Solution(None, lower_bound_s=bound, timed_out=timed_out, info=info)
        if claimed_for is not acts:
            priced = deadline.has_left(whole.share_s(PRICE_SHARE))
            claim = model.plan_value(acts, deadline) if priced else None
        # the bound is reported as proved: one above the plan's simulated step is a defect the
        # runner reports as an error, never something to cap
        return Solution(
            Plan(instance, np.asarray(acts)),
            lower_bound_s=bound,
            claimed_step_s=claim if claim is not None and math.isfinite(claim) else None,
            proven_optimal=step <= bound * (1 + 1e-9),
            timed_out=timed_out,
            evaluations=scorer.evaluations,
            info=info,
        )
