"""``cpsat``: the CP-SAT interval model (OR-Tools), exact on small instances, LNS on big ones.

The model is `slackswap.solvers.exact._cp.CpPlanProgram` (its docstring lists the constraints and
the relaxations that keep its optimum at or below the simulator's optimum). Plans are judged by
the simulator only, so the model's value for a plan is a claim, and the search is a loop:

- small instances (at most ``exact_tensors`` saved tensors): solve the model, simulate its plan,
  improve the plan by local search in the simulator, exclude the plan (a no-good) and solve
  again with the objective capped below the best simulated step. When the capped model has no
  solution, no plan can beat the incumbent (up to ``tolerance``): the incumbent is optimal.
  What the loop proves is that no plan simulates faster than the least of the incumbent's step
  (every excluded plan was simulated) and CP-SAT's bound on the plans not excluded (at the
  end, the cap); the reported bound is the larger of that and the relaxation's bound;
- big instances: large-neighbourhood search from the best of the relaxation's rounded plans and
  the hinted solver's plan (``hint``, SlackSwap by default), each repaired and improved by local
  search in the simulator: free the actions of the tensors of ``lns_blocks`` consecutive
  blocks, fix the rest (and the operators before the window), hint CP-SAT with the incumbent's
  simulated run mapped onto the model (a complete, feasible solution), keep a proposal only if
  the simulator says it is faster. The bound
  reported there is the linear relaxation's (`slackswap.solvers.exact._lp`), as proved and never
  capped by the plan, since CP-SAT's own bound on a full instance is close to the ideal step.

``info["found_by"]`` says which engine found the plan: ``cp-sat`` (the no-good loop's
proposal), ``cp-sat-lns`` (an accepted neighbourhood), or the start it grew from
(``lp-rounding``, ``keep-all``, ``hint:SOLVER``), with ``+repair``, ``+local-search`` and
``+iterated-local-search`` when those changed it.

CP-SAT runs with a deterministic time limit (and one worker by default), so a fixed seed and
work budget (``max_evaluations``) give the same plan; the wall-clock limit is a safety net.

Status: ``optimal`` when the no-good loop closed; ``timeout`` when the time limit ended the
search first (the incumbent and the best bound are returned); ``feasible`` when the search
ended on its own (the neighbourhood search made a full pass without improvement, or the work
budget was spent).
"""

from __future__ import annotations

import math

import numpy as np

from slackswap.instance import Instance
from slackswap.plan import Budget, Plan
from slackswap.simulator import simulate
from slackswap.solvers._named_solvers import check_hint
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.exact._coarse import FULL_LP_MAX_OPS, coarse_bound
from slackswap.solvers.exact._cp import CpPlanProgram
from slackswap.solvers.exact._lp import BoundProgram
from slackswap.solvers.exact._plans import (
    Scorer,
    best_plan,
    hint_plans,
    iterated_local_search,
    labelled,
    local_search,
    round_candidates,
)
from slackswap.solvers.registry import register

#: Share of the time limit kept free at its end (pricing the plan, the bound, the runner).
RESERVE_SHARE = 0.08
#: Share of the time limit the relaxation may take, from its start.
LP_SHARE = 0.25
#: Share of the time limit the binary version of the relaxation may take (small instances).
BINARY_SHARE = 0.1
#: Seconds the relaxation gets at least, however short the time limit.
LP_MIN_S = 0.05
#: Share of the time limit, from its start, the first plans (repair and local search of the
#: starts) may take: on small instances (`START_SHARE_EXACT`), where the no-good loop needs
#: more, and on big ones.
START_SHARE_EXACT = 0.3
START_SHARE_LNS = 0.4
#: Deterministic seconds of CP-SAT work, as a share of the time limit: the no-good loop's
#: (`EXACT_WORK_SHARE`) and the neighbourhood search's (`LNS_WORK_SHARE`). Metered in
#: deterministic time, the loops end at the same point on any machine.
EXACT_WORK_SHARE = 0.35
LNS_WORK_SHARE = 0.5
#: Share of the time limit the no-good loop leaves, by the wall clock, for polishing its plan.
POLISH_SHARE = 0.3
#: Without a time limit, deterministic seconds each CP-SAT call of the no-good loop may take:
#: a round that cannot close its proof in this much work ends the loop (the incumbent and the
#: bound found so far stand), so the loop ends on any instance. With a time limit the shares
#: above bound the work and this is not applied.
ROUND_WORK_S = 10.0
#: Share of a neighbourhood's deterministic seconds it may take by the wall clock.
LNS_WALL_SHARE = 0.8


@register("cpsat", display=Display(colour="#17becf", marker="<", order=12))
class CpSat(Solver):
    """CP-SAT interval model: exact on small instances, neighbourhood search on big ones."""

    key = "cpsat"
    tags = Tags(exact=True, deterministic=True, needs=("ortools",), uses_time_limit=True)

    def __init__(
        self,
        *,
        exact_tensors: int = 24,
        hint: str = "slackswap",
        lns_blocks: int = 2,
        lns_seconds: float = 2.0,
        workers: int = 1,
        tolerance: float = 1e-4,
        max_evaluations: int | None = None,
    ):
        """``hint``: the registered solver whose plan is one more start (repaired and improved
        like the others; ``info["found_by"]`` says ``hint:SOLVER`` when it wins): default
        ``slackswap``, ``none`` for no hint."""
        self.exact_tensors = exact_tensors
        self.hint = hint
        self.lns_blocks = lns_blocks
        self.lns_seconds = lns_seconds
        self.workers = workers
        self.tolerance = tolerance
        self.max_evaluations = max_evaluations

    def check_options(self) -> None:
        check_hint(self.key, self.hint)  # a misspelt hint is an error, not a start missing

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Solution:
        self.check_options()
        # Every share below is of the whole time limit, in seconds only where it is decided
        # (`Deadline.share_s`); without a time limit every share is none and each phase ends
        # by its own rule (the relaxation's rows, the no-good loop's proof, the neighbourhood
        # search's full pass without improvement, the polish's patience).
        # One stopping rule down to the engine calls: the time limit and the evaluation budget.
        whole = deadline.with_evaluations(self.max_evaluations)
        # the end of the limit stays free for pricing the plan, writing the bound and the
        # runner's simulation of the plan
        deadline = whole.before(whole.share_s(RESERVE_SHARE))
        M = budget.bytes_for(instance)
        scorer = Scorer(instance, M, deadline)
        # the relaxation: a bound, an infeasibility proof, and rounded plans to start from
        lp_model = BoundProgram(instance, M)
        # past a few thousand operators the full LP does not finish in time: the coarse one (as
        # in milp), whose optimum is a valid bound too
        coarse = instance.n_ops > FULL_LP_MAX_OPS
        lp_deadline = deadline.within(max(LP_MIN_S, whole.share_s(LP_SHARE)))
        lp = coarse_bound(lp_model, lp_deadline) if coarse else lp_model.solve(deadline=lp_deadline)
        if lp.status == "infeasible":
            reason = "the relaxation proves no plan fits: " + str(lp.info.get("reason"))
            return Solution(
                None, lower_bound_s=math.inf, proven_infeasible=True, info={"reason": reason}
            )
        lp_bound = lp.bound_s if lp.bound_s is not None else instance.ideal_step_s
        if instance.n_tensors <= self.exact_tensors and lp.bound_s is not None:
            # the binary version is quick on small instances and much tighter where single
            # tensors are large (its lazy rows then see whole copies)
            mres = lp_model._milp(deadline.within(whole.share_s(BINARY_SHARE)))
            if mres is not None and mres.status == "infeasible":
                reason = "the binary relaxation proves no plan fits"
                return Solution(
                    None, lower_bound_s=math.inf, proven_infeasible=True, info={"reason": reason}
                )
            if mres is not None and mres.bound_s is not None:
                lp_bound = max(lp_bound, mres.bound_s)
        starts = (
            labelled("lp-rounding", round_candidates(instance, lp.s, lp.r))
            if lp.bound_s is not None
            else []
        )
        starts.append(("keep-all", np.zeros(instance.n_tensors, dtype=np.int8)))  # then repair
        if self.hint not in ("", "none"):
            hints = hint_plans(instance, budget, self.hint, deadline)
            starts += labelled(f"hint:{self.hint}", hints)
        small = instance.n_tensors <= self.exact_tensors
        start_share = START_SHARE_EXACT if small else START_SHARE_LNS
        acts, step, _, found_by = best_plan(
            scorer, starts, whole.share(start_share), repair_deadline=deadline
        )
        if acts is not None and step <= lp_bound * (1 + 1e-9):
            # A plan at the proven bound is optimal: CP-SAT could only spend the rest of the
            # time limit failing to beat it.
            return Solution(
                Plan(instance, acts),
                lower_bound_s=lp_bound,
                proven_optimal=True,
                evaluations=scorer.evaluations,
                info={"mode": "at the bound", "found_by": found_by,
                      "lp_engine": "coarse" if coarse else "full"},
            )  # fmt: skip
        if small:
            sol = self._exact(
                instance, M, scorer, acts, step, found_by, lp_bound, deadline, seed, whole
            )
        else:
            sol = self._lns(
                instance, M, scorer, acts, step, found_by, lp_bound, deadline, seed, whole
            )
        sol.info["lp_engine"] = "coarse" if coarse else "full"
        if scorer.exhausted:
            sol.info["stop"] = "evaluations"
        return sol

    # ----- small instances: the no-good loop --------------------------------------------------
    def _exact(
        self,
        inst: Instance,
        M: int,
        scorer: Scorer,
        acts: np.ndarray | None,
        step: float,
        found_by: str,
        lp_bound: float,
        deadline: Deadline,
        seed: int,
        whole: Deadline,
    ) -> Solution:
        """The no-good loop by ``deadline``; ``whole`` is the solve's whole deadline, of which
        the loop's shares are taken."""
        cp = CpPlanProgram(
            inst, M, horizon_s=step if math.isfinite(step) else None, ticks_per_op=100_000
        )
        excluded: set[bytes] = set()

        def exclude(plan: np.ndarray) -> None:
            key = plan.tobytes()
            if key not in excluded:
                excluded.add(key)
                cp.add_no_good(plan)

        if acts is not None:
            exclude(acts)
        proven = False
        cp_lb = 0.0  # no plan left in the model is modelled (hence simulated) faster
        claim = None
        rounds = 0
        # CP-SAT's work is metered in deterministic seconds, so the loop ends at the same
        # point on any machine (the wall clock is only a safety net; without a time limit the
        # work is unbounded and the loop ends when its proof closes)
        work = whole.share_s(EXACT_WORK_SHARE)
        cp_stop = deadline.before(whole.share_s(POLISH_SHARE))
        while not cp_stop.expired() and not scorer.exhausted and work > 0.005:
            cap = step * (1 - self.tolerance) if math.isfinite(step) else None
            res = cp.solve(
                deadline=cp_stop,
                seed=seed,
                workers=self.workers,
                hint=None,  # the incumbent is excluded: its values would only mislead
                cap_s=cap,
                deterministic_s=work if whole.limited else ROUND_WORK_S,
            )
            work -= float(res.info.get("det_s", work))
            rounds += 1
            if res.status == "infeasible":
                if cap is not None:  # every plan not yet simulated models slower than the cap
                    cp_lb = res.bound_s if res.bound_s is not None else cp_lb
                    proven = True
                break
            if res.bound_s is not None:
                cp_lb = res.bound_s
            if res.actions is None:
                break
            cand = res.actions
            exclude(cand)
            st = float(scorer.many(cand[None, :])[0])
            origin = "cp-sat"
            if math.isfinite(st):
                better, st_ls, _ = local_search(scorer, cand, st, deadline)
                exclude(better)
                if st_ls < st:
                    cand, st, origin = better, st_ls, "cp-sat+local-search"
            if st < step:
                # the model's value is a claim about CP-SAT's own plan only
                claim = res.objective_s if origin == "cp-sat" else None
                acts, step, found_by = cand, st, origin
        if acts is not None and not proven:
            # CP-SAT's proposals are relaxed plans: polish the incumbent in the simulator with
            # perturbation restarts for what time is left
            polished, polished_step = iterated_local_search(scorer, acts, step, deadline, seed)
            if polished_step < step:
                acts, step, claim = polished, polished_step, None
                found_by += "+iterated-local-search"
        info = {
            "mode": "exact",
            "cp_rounds": rounds,
            "cp_bound_s": cp_lb,
            "evaluations": scorer.evaluations,
            "found_by": found_by,
        }
        if acts is None:
            info["reason"] = "CP-SAT found no plan that fits"
            return Solution(
                None, lower_bound_s=lp_bound, timed_out=whole.limited and not proven, info=info
            )
        # What the loop proves: every plan it did not exclude models (hence simulates) at least
        # cp_lb, and every plan it excluded was simulated, the fastest being the incumbent; so
        # no plan is faster than the smaller of the two. Not a cap: the incumbent is one of the
        # plans the statement ranges over. The relaxation's bound holds on its own.
        bound = max(lp_bound, min(step, cp_lb))
        return Solution(
            Plan(inst, acts),
            lower_bound_s=bound,
            claimed_step_s=claim if claim is not None and acts is not None else None,
            proven_optimal=proven,
            # without a time limit the loop ended by its work rule (`ROUND_WORK_S`), not a clock
            timed_out=whole.limited and not proven and not scorer.exhausted,
            evaluations=scorer.evaluations,
            info=info,
        )

    @staticmethod
    def _hint_values(cp: CpPlanProgram, inst: Instance, M: int, acts: np.ndarray) -> dict:
        """The model's values for the simulated run of ``acts``: a complete, feasible hint."""
        sim = simulate(inst, acts, Budget.bytes(M), timeline=True)
        return cp.embed_run(acts, sim.timeline)

    # ----- big instances: large-neighbourhood search ------------------------------------------
    def _lns(
        self,
        inst: Instance,
        M: int,
        scorer: Scorer,
        acts: np.ndarray | None,
        step: float,
        found_by: str,
        lp_bound: float,
        deadline: Deadline,
        seed: int,
        whole: Deadline,
    ) -> Solution:
        """The neighbourhood search by ``deadline``; ``whole`` is the solve's whole deadline,
        of which its work share is taken. Without a time limit it ends after a full pass over
        the windows without improvement."""
        info: dict[str, object] = {"mode": "lns", "found_by": found_by}
        if acts is None:
            info["reason"] = "no hinted or rounded plan fits: nothing to improve"
            return Solution(None, lower_bound_s=lp_bound, timed_out=True, info=info)
        # building the model costs about a millisecond per operator and tensor: skip the search
        # when that would not leave a neighbourhood's worth of time
        if deadline.remaining() < 2e-3 * (inst.n_ops + inst.n_tensors) + 0.5:
            info["reason"] = "no time left for the neighbourhood search"
            return Solution(
                Plan(inst, acts),
                lower_bound_s=lp_bound,
                timed_out=True,
                evaluations=scorer.evaluations,
                info=info,
            )
        cp = CpPlanProgram(inst, M, horizon_s=step)
        hint = self._hint_values(cp, inst, M, acts)
        blocks = np.unique(inst.tensor_block)
        windows = [blocks[i : i + self.lns_blocks] for i in range(len(blocks))]
        tried = accepted = since_improve = 0
        claim = None
        converged = False
        work = whole.share_s(LNS_WORK_SHARE)  # deterministic seconds of CP-SAT, as in `_exact`
        while not deadline.expired() and not scorer.exhausted and work > 0.005:
            window = windows[tried % len(windows)]
            free = np.isin(inst.tensor_block, window)
            mdl = cp.model.clone()
            cp.fix(mdl, np.flatnonzero(~free), acts)
            # nothing before the window's first producer can change: pin those operators
            first = int(inst.tensor_producer[free].min()) if free.any() else 0
            for i in range(first):
                mdl.add(cp.start[i] == hint[cp.start[i]])
            per = min(work, self.lns_seconds)
            res = cp.solve(
                deadline=deadline.within(LNS_WALL_SHARE * per),
                seed=seed,
                workers=self.workers,
                model=mdl,
                hint_values=hint,
                deterministic_s=per,
            )
            work -= float(res.info.get("det_s", per))
            tried += 1
            improved = False
            if res.actions is not None and not np.array_equal(res.actions, acts):
                st = float(scorer.many(res.actions[None, :])[0])
                if st < step:
                    acts, step, claim, improved = res.actions, st, res.objective_s, True
                    accepted += 1
                    info["found_by"] = "cp-sat-lns"
                    hint = self._hint_values(cp, inst, M, acts)
            since_improve = 0 if improved else since_improve + 1
            if since_improve >= len(windows):
                converged = True
                break
        info.update(
            {"lns_tried": tried, "lns_accepted": accepted, "evaluations": scorer.evaluations}
        )
        return Solution(
            Plan(inst, acts),
            lower_bound_s=lp_bound,
            claimed_step_s=claim,
            timed_out=not converged and not scorer.exhausted,
            evaluations=scorer.evaluations,
            info=info,
        )
