"""Genetic search over per-tensor keep / swap / recomp plans (DEAP), the simulator as fitness.

The paper bounds SlackSwap's gap with such a search (POET's search space, SwapAdvisor's method,
45 s, Table 3). Two registered variants:

- ``ga``: seeded with the plans of the solvers named by ``seed_solvers`` (by default
  `DEFAULT_SEED_SOLVERS`: SlackSwap, then the built-in baselines and ablations whose plan is
  static and that do not search), then mutants of those seeds to fill the population. Seeds
  are scored unrepaired and the best plan is kept by elitism, so with SlackSwap among the seeds
  the result is never worse than SlackSwap's plan in the simulator. The seeds are named, never
  read off the registry, so that registering another solver changes no GA result.
- ``ga-random``: uniform random genomes, as SwapAdvisor's search starts.

Search space: a plan is one action per saved tensor, and ``recomp`` only for tensors some
operator chain can rebuild (finite recompute cost, the paper's c_t < inf): random genomes and
mutations draw a block input from keep / swap only, so the search never scores a plan the
simulator rejects as invalid (without this nearly every random genome of a transformer
recomputes some block input, and such plans carry no memory signal to climb).

Fitness is the simulator's population entry point (`simulate_many`, barrier-free runtime by
default): minimise (infeasibility, step seconds) lexicographically, where infeasibility is 0 for a
plan that simulates, the overflow of the budget as a share of the budget otherwise, and infinity
for a plan that recomputes a tensor nothing can rebuild (only a seed could be one).

Repair (``repair=True``, the default of ``ga-random``): before scoring, each new genome is
repaired in place (Lamarckian) by `_repair`: while the planner's static memory profile exceeds
the budget, the kept tensor idle at the peak with the lowest recompute cost per freed byte is
recomputed (Pass 2's rule), or the largest one swapped when none can be rebuilt. It is what lets
the random start reach feasible plans at low budgets; with ``repair=False`` the search is the
paper's plain GA, climbing out of infeasibility on the overflow alone. The seeded ``ga`` starts
from plans that fit and leaves the repair off by default: with seeds that fit, the repair did
not change the best plan found and only slowed the search (figures in benchmarks/README.md,
"Genetic search").

Ranking infeasible plans (``rank_infeasible=True``, the default) is what lets even the plain
random search reach low budgets: it is the only signal that points a plan that does not fit
towards one that does. With ``rank_infeasible=False`` every infeasible plan scores alike, and
the plain random search behaves as the paper reports it (figures in benchmarks/README.md).

Operators (`_search`): DEAP's tournament selection, two-point crossover and uniform integer
mutation (as a step on a window of consecutive tensors), hall-of-fame elitism, and DEAP's ring
migration between islands: by default two populations evolve apart, each in its own worker
process (`_islands`: DEAP's variation is Python and holds the GIL, so two islands in two
threads mostly wait for each other), and swap their best plans every ten generations, the only
time they meet. The workers are forked where that is safe; where the caller runs other threads
(Jupyter, a Dask worker) or the platform cannot fork, they are fresh interpreters
(``forkserver``, else ``spawn``) to which the islands travel pickled, about a second to start,
so only for runs with at least `_search.FRESH_WORKER_MIN_S` left on the clock; otherwise (a
shorter run, a daemonic caller, a fitness that does not pickle) the islands take their
generations in turn in the calling thread, at about the speed of one. The result is the same
either way, and for any number of workers.

``evaluations`` counts distinct plans the simulator scored: a plan met again (a child equal to
a parent, or one seen in the last few generations) takes its remembered score and is not
counted; the Solution's ``history`` is (seconds since the solve began, evaluations, best
feasible step seconds) at every
improvement and at the end, and ``info`` says how the run stopped and how each seed scored.

Stops (between generations): ``max_evaluations`` (plans scored, joined to the deadline's own
evaluation budget as one stopping rule; each island stops once it has scored its share),
``max_generations``, and the time limit, which counts the seeding too; with
none of them, `DEFAULT_GENERATIONS`; and an island stops as soon as its best plan reaches the
ideal step, which no plan beats (``info["stop"]`` is then ``"target"``). Runs stopped by an evaluation or generation limit are
exactly reproducible from the seed; a run stopped by the clock is reproducible up to the
generation it reached, which ``info["generations"]`` records (pass it as ``max_generations`` to
replay the run exactly).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.plan import Budget, Plan
from slackswap.simulator import score_many
from slackswap.solvers._named_solvers import check_solver_names, solver_names
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.genetic._repair import Repair
from slackswap.solvers.genetic._search import SearchConfig, SearchResult, search
from slackswap.solvers.registry import REGISTRY, register

#: How far (relative) above the ideal step a simulated step still counts as reaching it: the
#: simulator sums the same operator times in another order.
IDEAL_REL_TOL = 1e-9


class SimulatorFitness:
    """The search's fitness: the simulator's population entry point as a function of a plans x
    tensors int8 matrix, returning (infeasibility, step seconds).

    With a ``pool`` the population is split over its threads, each calling `simulate_many` on its
    share (the compiled kernel releases the GIL). The pool lives for the whole search:
    ``simulate_many(n_jobs=2)`` would start two threads per call, and on a loaded machine a
    thread start costs milliseconds, a large share of a generation. A class, not a closure, so
    that it pickles (without its pool) into island workers that are spawned, not forked.
    """

    def __init__(
        self,
        instance: Instance,
        budget: Budget,
        runtime: str,
        pool: ThreadPoolExecutor | None,
        n_jobs: int,
        rank_infeasible: bool = True,
    ) -> None:
        self.instance = instance
        self.budget = budget
        self.runtime = runtime
        self.pool = pool
        self.n_jobs = n_jobs
        self.rank_infeasible = rank_infeasible
        self.budget_bytes = float(budget.bytes_for(instance))

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"pool": None}  # a worker process scores in its own thread

    def _simulate(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return score_many(self.instance, actions, self.budget, runtime=self.runtime)

    def __call__(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pool, n_jobs = self.pool, self.n_jobs
        if pool is None or len(actions) < 2 * n_jobs:
            step_s, over_b, invalid = self._simulate(actions)
        else:
            bounds = np.linspace(0, len(actions), n_jobs + 1).astype(int).tolist()
            futs = [
                pool.submit(self._simulate, actions[a:b])
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)
            ]
            parts = [f.result() for f in futs]
            step_s, over_b, invalid = (np.concatenate([p[k] for p in parts]) for k in range(3))
        feasible = np.isfinite(step_s)
        over = over_b / max(self.budget_bytes, 1.0)
        # A tiny floor keeps an infeasible plan that reports no overflow behind every feasible one.
        infeas = np.where(invalid, math.inf, np.maximum(over, 1e-12))
        infeas = np.where(feasible, 0.0, infeas if self.rank_infeasible else 1.0)
        return infeas, step_s


#: The solvers whose plans seed ``ga`` unless ``seed_solvers`` names others: the built-in
#: solvers whose plan is static and that do not search, SlackSwap first (the plan the search
#: must never do worse than), then by name. A fixed list rather than every registered static
#: solver: the seeds and their order steer the search, so a solver registered later (a new
#: baseline, a plug-in) must not change the GA's results.
DEFAULT_SEED_SOLVERS: tuple[str, ...] = (
    "slackswap",
    "barriers",
    "checkpoint",
    "offload-overlap",
    "offload-sync",
    "recompute-only",
    "swap-first",
    "swapadvisor",
    "vdnn",
)


def seed_plans(
    instance: Instance,
    budget: Budget,
    *,
    deadline: Deadline,
    seed: int,
    names: tuple[str, ...] = DEFAULT_SEED_SOLVERS,
) -> list[tuple[str, np.ndarray]]:
    """The plans of the solvers ``names``, in that order, each solved within ``deadline`` (its
    time; each counts its own evaluations); a solver that raises or returns no plan is skipped
    (it costs the search one seed, nothing more)."""
    out: list[tuple[str, np.ndarray]] = []
    for name in names:
        try:
            res = (
                REGISTRY[name]
                .make()
                .solve(instance, budget, deadline=deadline.time_only(), seed=seed)
            )
        except Exception:  # a failing seed solver costs the search one seed, nothing more
            continue
        plan = res.plan if isinstance(res, Solution) else res
        if plan is not None:
            out.append((name, np.asarray(plan.actions, dtype=np.int8)))
    return out


#: Largest values of the options that multiply the work (each island scores a population of
#: ``pop_size`` before its first generation, each offspring ``local_mutants`` more): larger ones
#: ran for minutes past a one-second time limit. The search also looks at the clock as it sets
#: the islands up.
BOUNDS = {"pop_size": 100_000, "islands": 256, "local_mutants": 1_000, "n_jobs": 1_024}


class GeneticSearch(Solver):
    """Genetic search (DEAP) over per-tensor keep/swap/recomp plans, the simulator as fitness."""

    key = "ga"
    tags = Tags(deterministic=True, uses_time_limit=True, needs=("deap",))

    def __init__(
        self,
        *,
        seeded: bool = True,
        seed_solvers: tuple[str, ...] = DEFAULT_SEED_SOLVERS,
        pop_size: int = 128,
        cxpb: float = 0.8,
        mutpb: float = 1.0,
        indpb: float | None = None,
        mutation_window: int = 8,
        elite: int = 2,
        tournsize: int = 3,
        repair: bool | None = None,
        rank_infeasible: bool = True,
        max_evaluations: int | None = None,
        max_generations: int | None = None,
        islands: int = 2,
        migration_interval: int = 10,
        migrants: int = 2,
        local_mutants: int = 0,
        runtime: str = "barrier-free",
        n_jobs: int = 2,
        processes: bool = True,
    ) -> None:
        """Options: ``seeded`` (start from other solvers' plans, else random genomes);
        ``seed_solvers`` (the solvers whose plans seed a seeded search, in order: registered
        static planners that do not search; a list, or names separated by commas; default
        `DEFAULT_SEED_SOLVERS`); ``pop_size``; ``cxpb`` / ``mutpb`` (probability that a pair is crossed / a genome
        mutated); ``indpb`` (per-gene mutation probability, default 2 / tensors: the expected
        genes changed per mutation is indpb x tensors); ``mutation_window`` (a mutation changes
        genes only in a window of this many consecutive tensors, 0 = the whole genome);
        ``elite`` (best plans carried over unchanged); ``tournsize`` (tournament selection);
        ``repair`` (see the module docstring; default: on for a random start, off for a seeded
        one); ``rank_infeasible`` (rank infeasible plans by overflow; False scores them all
        alike, as a search told only "does not fit"); ``max_evaluations`` /
        ``max_generations`` (deterministic stops); ``islands`` (populations of ``pop_size``
        evolving apart, ``migrants`` best of each passed to the next in a ring every
        ``migration_interval`` generations); ``local_mutants`` (k: each new offspring is
        replaced by the best of itself and k mutants of it, all scored); ``runtime``
        (simulator runtime of the fitness and the plan); ``n_jobs`` (workers: islands run their generations at once, or one
        island's population is split over the simulator threads; speed only, never the
        result); ``processes`` (run the islands' workers as processes, forked or fresh, see
        above; False: all islands in turn in the calling thread)."""
        self.seeded = seeded
        self.seed_solvers = seed_solvers
        self.pop_size = pop_size
        self.cxpb = cxpb
        self.mutpb = mutpb
        self.indpb = indpb
        self.mutation_window = mutation_window
        self.elite = elite
        self.tournsize = tournsize
        self.repair = repair
        self.rank_infeasible = rank_infeasible
        self.max_evaluations = max_evaluations
        self.max_generations = max_generations
        self.islands = islands
        self.migration_interval = migration_interval
        self.migrants = migrants
        self.local_mutants = local_mutants
        self.runtime = runtime
        self.n_jobs = n_jobs
        self.processes = processes

    def check_options(self) -> None:
        check_solver_names(
            self.key, "seed_solvers", solver_names(self.seed_solvers), static_only=True
        )
        for name, most in BOUNDS.items():
            v = getattr(self, name)
            if isinstance(v, int) and v > most:
                raise UserError(
                    f"ga: {name} must be at most {most:,} (it multiplies the work), got {v}"
                )
        if self.pop_size < 2:
            raise UserError(f"ga: pop_size must be at least 2, got {self.pop_size}")
        for name in ("cxpb", "mutpb"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise UserError(f"ga: {name} must be in [0, 1], got {v}")
        if self.indpb is not None and not 0.0 < self.indpb <= 1.0:
            raise UserError(f"ga: indpb must be in (0, 1], got {self.indpb}")
        if self.mutation_window < 0:
            raise UserError(f"ga: mutation_window must be >= 0, got {self.mutation_window}")
        if not 0 <= self.elite < self.pop_size:
            raise UserError(f"ga: elite must be in [0, pop_size), got {self.elite}")
        if self.tournsize < 1:
            raise UserError(f"ga: tournsize must be at least 1, got {self.tournsize}")
        for name in ("max_evaluations", "max_generations"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise UserError(f"ga: {name} must be non-negative, got {v}")
        if self.islands < 1:
            raise UserError(f"ga: islands must be at least 1, got {self.islands}")
        if self.migration_interval < 1:
            raise UserError(
                f"ga: migration_interval must be at least 1, got {self.migration_interval}"
            )
        if not 0 <= self.migrants <= self.pop_size:
            raise UserError(f"ga: migrants must be in [0, pop_size], got {self.migrants}")
        if self.local_mutants < 0:
            raise UserError(f"ga: local_mutants must be >= 0, got {self.local_mutants}")
        if self.n_jobs < 1:
            raise UserError(f"ga: n_jobs must be at least 1, got {self.n_jobs}")

    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Solution:
        self.check_options()
        # One stopping rule for the search: the time limit and the evaluation budget.
        deadline = deadline.with_evaluations(self.max_evaluations)
        n = instance.n_tensors
        seed_names = solver_names(self.seed_solvers)
        seeds = (
            seed_plans(instance, budget, deadline=deadline, seed=seed, names=seed_names)
            if self.seeded
            else []
        )
        seeding_s = deadline.elapsed()
        config = SearchConfig(
            pop_size=self.pop_size,
            cxpb=self.cxpb,
            mutpb=self.mutpb,
            indpb=self.indpb if self.indpb is not None else min(1.0, 2.0 / max(n, 1)),
            mutation_window=self.mutation_window,
            elite=self.elite,
            tournsize=self.tournsize,
            max_generations=self.max_generations,
            islands=self.islands,
            migration_interval=self.migration_interval,
            migrants=self.migrants,
            local_mutants=self.local_mutants,
            # No plan beats the ideal step (every tensor kept, nothing waited for): once a plan
            # reaches it, to the simulator's rounding, the rest of the time limit buys nothing.
            target_step_s=instance.ideal_step_s * (1 + IDEAL_REL_TOL),
        )
        repaired = (not self.seeded) if self.repair is None else self.repair
        repair = Repair(instance, budget.bytes_for(instance)) if repaired else None
        # Several islands take the workers themselves; a single one splits its population.
        split = self.n_jobs > 1 and self.islands == 1
        pool = ThreadPoolExecutor(self.n_jobs) if split else None
        try:
            res = search(
                n,
                SimulatorFitness(
                    instance, budget, self.runtime, pool, self.n_jobs, self.rank_infeasible
                ),
                config,
                seed=seed,
                seeds=[a for _, a in seeds],
                arity=np.where(np.isfinite(instance.tensor_recompute_s), 3, 2).tolist(),
                repair=repair,
                deadline=deadline,
                n_jobs=self.n_jobs,
                processes=self.processes,
            )
        finally:
            if pool is not None:
                pool.shutdown()
        info = _info(res, seeds, seeding_s)
        plan = None
        if res.feasible and res.best is not None:
            plan = Plan(instance, res.best, runtime=self.runtime)
        else:
            info["reason"] = (
                f"no feasible plan in {res.evaluations} evaluations "
                f"(best overflows the budget by {res.best_infeasibility:.1%})"
            )
        return Solution(
            plan=plan,
            claimed_step_s=res.best_step_s if plan is not None else None,
            evaluations=res.evaluations,
            history=res.history,
            info=info,
        )


def _info(
    res: SearchResult, seeds: list[tuple[str, np.ndarray]], seeding_s: float
) -> dict[str, Any]:
    search_s = res.elapsed_s - seeding_s
    return {
        "generations": res.generations,
        "stop": res.stop,
        "seeding_s": seeding_s,
        "search_s": search_s,
        "plans_per_s": res.evaluations / search_s if search_s > 0 else None,
        "cache_hits": res.cache_hits,
        "seed_step_s": {
            name: (f[1] if f[0] == 0.0 else None)
            for (name, _), f in zip(seeds, res.initial, strict=True)
        },
    }


register(
    "ga",
    "genetic search seeded with SlackSwap and the static baselines",
    display=Display(colour="#637939", marker="d", order=10),
)(GeneticSearch)
register(
    "ga-random",
    "genetic search from random plans",
    display=Display(colour="#8c6d31", marker="s", order=11),
    seeded=False,
)(GeneticSearch)
