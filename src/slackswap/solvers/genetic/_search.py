"""The DEAP machinery of the genetic search: genome, toolbox, islands, generation loop, stops.

A genome is one action per saved tensor (0 keep, 1 swap, 2 recomp) stored as an ``array.array``
of signed bytes (DEAP's own compact-genome idiom): slicing copies, so DEAP's crossover works on
it unchanged, and a population joins into a numpy matrix without a per-gene loop. The operators
are DEAP's: two-point crossover (`tools.cxTwoPoint`), uniform integer mutation
(`tools.mutUniformInt`, applied to a window of consecutive tensors, see `mutate_window`),
tournament selection (`tools.selTournament`), variation as `algorithms.varAnd` does it (crossover
of consecutive pairs with probability cxpb, then mutation with probability mutpb) but without
re-scoring what it did not change (see `vary`), elitism through a `tools.HallOfFame` whose
members rejoin every generation, and ring migration between islands (`tools.selBest` migrants
replace `tools.selWorst`, as `tools.migRing` moves them, but one interval late: see
`_islands`). Fitness is lexicographic and minimised: (infeasibility, step seconds), so an
infeasible plan ranks below every feasible one and by how far it overflows the budget.

Fitness comes from a batch function (the simulator's population entry point), called once per
generation and island on the individuals the variation changed; this module knows nothing of the
simulator, so tests can drive it with any batch function.

Determinism: DEAP's operators draw from Python's module-level `random`, which any other thread
(a Dask worker, a progress bar) may also draw from mid-search. So the `random` that DEAP's
operator modules see is replaced by `_THREAD_RANDOM`, which forwards to the generator of the
island the calling thread is running (`use_rng`) and to the module otherwise: the same seed
replays the same trajectory whatever else runs, and islands (or whole searches) may run in
threads of one process at once. The global state is never touched. The generators are
`FastRandom`s: integer draws from one C-level ``random()`` call each, a large share of DEAP's
per-genome cost otherwise. Stop rules, checked by each island before each of its generations: an
evaluation limit (each island's share of it), a generation limit, and a time limit. The first
two are deterministic; a run stopped by the clock is reproducible up to the generation it reached
(every island ends at that generation, the result reports it, and ``max_generations`` set to
that number replays the run exactly). How islands run side by side: `_islands`.
"""

from __future__ import annotations

import array
import math
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from deap import algorithms, base, creator, tools
from deap.tools import crossover, mutation, selection

from slackswap.solvers.deadline import Deadline
from slackswap.solvers.genetic._islands import (
    IslandReport,
    Rules,
    Snapshot,
    run_islands,
    worker_start_method,
)

#: Generations run when no stop (time, evaluations, generations) is given at all.
DEFAULT_GENERATIONS = 100


class PlanFitness(base.Fitness):
    """DEAP's `base.Fitness` with each comparison one method call instead of two.

    `base.Fitness` derives ``>`` and ``>=`` from ``<=`` and ``<`` through a second call;
    selection, the hall of fame and ``max`` compare fitnesses several times per genome. The
    expressions are DEAP's own, so the order (lexicographic on ``wvalues``) is unchanged.
    """

    def __gt__(self, other: base.Fitness) -> bool:
        return not self.wvalues <= other.wvalues

    def __ge__(self, other: base.Fitness) -> bool:
        return not self.wvalues < other.wvalues


# DEAP's creator makes classes at module level; guard against a second import (reload).
if not hasattr(creator, "SlackswapPlanFitness"):
    creator.create("SlackswapPlanFitness", PlanFitness, weights=(-1.0, -1.0))
if not hasattr(creator, "SlackswapGenome"):
    creator.create(
        "SlackswapGenome", array.array, typecode="b", fitness=creator.SlackswapPlanFitness
    )

# The evaluator and `vary` set ``wvalues`` (values times weights) directly: weights of -1 each.
if creator.SlackswapPlanFitness.weights != (-1.0, -1.0):
    raise ImportError("deap.creator.SlackswapPlanFitness must have the weights (-1, -1)")

Genome = Any  # creator.SlackswapGenome: an array.array("b") with a ``fitness`` attribute

#: Scores a plans x tensors int8 matrix: (infeasibility >= 0, 0 when feasible; step seconds).
BatchFitness = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
#: Repairs a plans x tensors int8 matrix in place; returns genes changed per plan.
BatchRepair = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class SearchConfig:
    """Options of one search (see `GeneticSearch` for their meaning)."""

    pop_size: int = 128
    cxpb: float = 0.8
    mutpb: float = 1.0
    indpb: float = 0.01
    mutation_window: int = 8
    elite: int = 2
    tournsize: int = 3
    max_generations: int | None = None
    islands: int = 1
    migration_interval: int = 10
    migrants: int = 2
    local_mutants: int = 0
    #: Stop once the best feasible plan's step (seconds) is at most this: the ideal step, or a
    #: proven lower bound, which no plan can beat (a search would spend its limit for nothing).
    target_step_s: float | None = None


@dataclass
class SearchResult:
    """The best genome found and how the search got there."""

    best: np.ndarray | None  # int8 actions of the best plan (feasible or not); None if empty
    best_infeasibility: float  # 0 when the best plan is feasible
    best_step_s: float  # inf unless feasible
    evaluations: int  # distinct plans the batch function scored
    generations: int
    stop: str  # "evaluations", "generations", "time" or "target"
    elapsed_s: float
    history: list[tuple[float, int, float]] = field(default_factory=list)
    initial: list[tuple[float, float]] = field(default_factory=list)  # each seed's fitness
    cache_hits: int = 0  # genomes scored from memory (a plan met again), not simulated

    @property
    def feasible(self) -> bool:
        return self.best is not None and self.best_infeasibility == 0.0


_RNG_METHODS = tuple(n for n in dir(random.Random) if not n.startswith("_"))
#: The `random` module's own functions (a thread with no search bound draws from them).
_MODULE_FUNCTIONS = {n: getattr(random, n) for n in _RNG_METHODS if hasattr(random, n)}


class _ThreadRandom(threading.local):
    """Stands in for the `random` module: the calling thread's search generator, if any.

    While a search runs in a thread, `use_rng` binds the generator's methods as attributes of
    this thread's instance, so ``random.random()`` inside DEAP's operators is one attribute
    lookup (operators call it once per gene). Every thread starts with the `random` module's
    functions bound instead (`threading.local` runs ``__init__`` in each thread on first use),
    not with a ``__getattr__`` fallback: a class with one pays a slower lookup on every
    attribute, found or not (about 160 ns against 80 here, several times per genome).
    """

    def __init__(self) -> None:
        self.__dict__.update(_MODULE_FUNCTIONS)


_THREAD_RANDOM: Any = _ThreadRandom()
for _module in (crossover, mutation, selection, algorithms):
    if getattr(_module, "random", None) is random:
        _module.random = _THREAD_RANDOM  # type: ignore[attr-defined]


class FastRandom(random.Random):
    """`random.Random` whose integer draws take one ``random()`` call (C) each.

    The module's `randrange`, `randint` and `choice` go through a Python-level rejection loop
    (``_randbelow``), about a microsecond a call; DEAP's tournament, crossover and mutation make
    several such draws per genome. Scaling one 53-bit uniform double by n biases a draw by at
    most n / 2^53, below 2^-40 for the ranges the search asks for (genes, population: n < 2^13),
    and stays deterministic for a seed.
    """

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:  # type: ignore[override]
        if stop is None:
            start, stop = 0, start
        n = stop - start
        if step != 1 or n <= 0:
            return super().randrange(start, stop, step)
        i = int(self.random() * n)
        return start + (i if i < n else n - 1)  # guards a product rounded up to n

    def randint(self, a: int, b: int) -> int:
        # randrange(a, b + 1) inlined: DEAP's mutation and crossover call this per gene / pair.
        n = b + 1 - a
        if n <= 0:
            return super().randint(a, b)
        i = int(self.random() * n)
        return a + (i if i < n else n - 1)

    def choice(self, seq: Any) -> Any:  # any sized, indexable sequence, as the base class
        n = len(seq)
        if n == 0:
            raise IndexError("Cannot choose from an empty sequence")
        i = int(self.random() * n)
        return seq[i if i < n else n - 1]


def new_rng(seed: int) -> random.Random:
    """The search generator for ``seed`` (a `random.Random`, the type DEAP's operators use)."""
    return FastRandom(int(np.random.default_rng(seed).integers(2**63)))


@contextmanager
def use_rng(rng: random.Random) -> Iterator[None]:
    """Make ``rng`` the generator DEAP's operators (and this module) draw from, in this thread."""
    state = _THREAD_RANDOM.__dict__
    previous = dict(state)
    state.clear()
    state.update({name: getattr(rng, name) for name in _RNG_METHODS})
    try:
        yield
    finally:
        state.clear()
        state.update(previous)


def deap_random(seed: int) -> AbstractContextManager[None]:
    """Give DEAP's operators (and this module) a generator seeded from ``seed``, in this thread."""
    return use_rng(new_rng(seed))


def _clone(ind: Genome) -> Genome:
    # The default clone is copy.deepcopy and the creator's constructor builds a Fitness through
    # its checks (~10 us a genome under load); a genome is its genes plus a Fitness whose whole
    # state is the immutable ``wvalues`` tuple, so copying both directly is exact (~2 us).
    cls = creator.SlackswapGenome
    new = cls.__new__(cls, ind)
    fit = _FITNESS.__new__(_FITNESS)
    fit.wvalues = ind.fitness.wvalues
    new.fitness = fit
    return new


_FITNESS = creator.SlackswapPlanFitness


def mutate_window(
    ind: Genome,
    width: int,
    indpb: float,
    arity: Sequence[int],
    ups: Sequence[list[int]] | None = None,
) -> tuple[Genome]:
    """DEAP's uniform integer mutation, as a step, on ``width`` consecutive genes.

    Gene t takes ``arity[t]`` values (3: keep, swap, recomp; 2: keep, swap for a tensor nothing
    can rebuild). `tools.mutUniformInt` picks the genes (each with probability ``indpb``) and
    draws a step in 1..arity-1 for each; the gene moves by that step modulo its arity, so a picked
    gene always changes action (a plain redraw keeps it a third of the time, and a mutant equal to
    its parent is a wasted evaluation). The window is placed at random: tensors are in production
    order, so it covers a layer or two, and it costs O(width) Python steps instead of O(tensors):
    a step per gene over the whole genome would be most of a generation's cost.
    ``ups[start]``, if given, is the list of upper step bounds (arity - 1) of the window at
    ``start``, precomputed by the toolbox.
    """
    start = _THREAD_RANDOM.randrange(len(ind) - width + 1)
    step = [0] * width
    up = ups[start] if ups is not None else [m - 1 for m in arity[start : start + width]]
    tools.mutUniformInt(step, low=1, up=up, indpb=indpb)
    for i, d in enumerate(step):
        if d:
            t = start + i
            ind[t] = (ind[t] + d) % arity[t]
    return (ind,)


def _random_genes(arity: Sequence[int]) -> Iterator[int]:
    return (_THREAD_RANDOM.randrange(m) for m in arity)


def make_toolbox(
    n_genes: int, config: SearchConfig, arity: Sequence[int] | None = None
) -> base.Toolbox:
    """DEAP toolbox: random genomes, clone, two-point crossover, uniform mutation, tournament.

    ``arity[t]`` is the number of actions gene t may take (default 3 for every gene): genes
    drawn at random and mutated stay in that range, and crossover keeps every gene in place, so
    the search never leaves the space of plans it is given.
    """
    ar = [3] * n_genes if arity is None else [int(m) for m in arity]
    if len(ar) != n_genes or any(m not in (2, 3) for m in ar):
        raise ValueError("arity must give 2 or 3 for every gene")
    tb = base.Toolbox()
    tb.register(
        "individual", tools.initIterate, creator.SlackswapGenome, partial(_random_genes, ar)
    )
    tb.register("clone", _clone)
    tb.register("mate", tools.cxTwoPoint)
    width = config.mutation_window if 0 < config.mutation_window < n_genes else n_genes
    # Same expected number of genes changed as indpb over the whole genome.
    indpb = min(1.0, config.indpb * n_genes / max(width, 1))
    ups = [[m - 1 for m in ar[s : s + width]] for s in range(n_genes - width + 1)]
    tb.register("mutate", mutate_window, width=width, indpb=indpb, arity=ar, ups=ups)
    tb.register("select", tools.selTournament, tournsize=config.tournsize)
    return tb


def vary(offspring: list[Genome], tb: base.Toolbox, cxpb: float, mutpb: float) -> list[Genome]:
    """`algorithms.varAnd` (pairs crossed with probability cxpb, then each genome mutated with
    probability mutpb) that never re-scores a genome it did not change.

    ``offspring`` holds references from selection (the same genome may appear twice). A parent is
    cloned only when it is changed; a pair of equal parents is not crossed (the children would be
    copies); a child equal to a parent, or a mutant equal to its original, keeps that fitness
    instead of being scored again. In a converging population these copies are most of what
    varAnd would send to the simulator.
    """
    # Bound once: the thread's generator cannot change during the call. A fitness is
    # invalidated as DEAP's ``del fitness.values`` does it (``wvalues = ()``), without the
    # property's call, and "valid" is a non-empty ``wvalues``.
    draw = _THREAD_RANDOM.random
    mate, clone, mutate = tb.mate, tb.clone, tb.mutate
    off = list(offspring)
    for i in range(1, len(off), 2):
        if draw() < cxpb:
            p, q = off[i - 1], off[i]
            if p is q or p == q:
                continue
            a, b = mate(clone(p), clone(q))
            for child in (a, b):
                if child == p:
                    child.fitness.wvalues = p.fitness.wvalues
                elif child == q:
                    child.fitness.wvalues = q.fitness.wvalues
                else:
                    child.fitness.wvalues = ()
            off[i - 1], off[i] = a, b
    for i in range(len(off)):
        if draw() < mutpb:
            x = off[i]
            y = clone(x) if x.fitness.wvalues else x
            (y,) = mutate(y)
            if y is not x and y == x:
                continue  # the mutation drew no gene
            y.fitness.wvalues = ()
            off[i] = y
    return off


def genome(actions: np.ndarray) -> Genome:
    """A genome from an int8 actions array."""
    return creator.SlackswapGenome(np.asarray(actions, dtype=np.int8).tobytes())


def initial_population(
    tb: base.Toolbox, seeds: Sequence[Genome], pop_size: int
) -> tuple[list[Genome], int]:
    """The seed genomes (at most ``pop_size``, kept as given, fitness included), then mutants of
    them in turn, or random genomes when there are no seeds; also returns how many seeds lead
    the list."""
    pop = list(seeds[:pop_size])
    n_seeds = len(pop)
    if not pop:
        return [tb.individual() for _ in range(pop_size)], 0
    i = 0
    while len(pop) < pop_size:
        (mutant,) = tb.mutate(tb.clone(pop[i % n_seeds]))
        del mutant.fitness.values
        pop.append(mutant)
        i += 1
    return pop, n_seeds


#: Plans remembered by the evaluator (two generations of this many each; ~0.6 kB a plan on
#: GPT-2 XL), so a plan met again soon is looked up instead of simulated again.
CACHE_PLANS = 20_000


class _Evaluator:
    """Repairs, scores and counts a list of genomes in one batch call.

    ``evaluations`` counts plans the batch function scored: distinct plans, because a plan
    scored recently (see `CACHE_PLANS`) or twice in one batch is simulated once; ``cache_hits``
    counts the genomes given a remembered score instead.
    """

    def __init__(self, n_genes: int, fitness: BatchFitness, repair: BatchRepair | None) -> None:
        self.n_genes = n_genes
        self.fitness = fitness
        self.repair = repair
        self.evaluations = 0
        self.cache_hits = 0
        # Weighted fitness (DEAP's ``wvalues``) by genome bytes: set directly, it skips the
        # weighting that each ``fitness.values = ...`` does in Python.
        self._new: dict[bytes, tuple[float, float]] = {}
        self._old: dict[bytes, tuple[float, float]] = {}

    def _remember(self, key: bytes, wvalues: tuple[float, float]) -> None:
        if len(self._new) >= CACHE_PLANS:
            self._old, self._new = self._new, {}
        self._new[key] = wvalues

    def __call__(self, inds: list[Genome], *, repair: bool = True) -> None:
        if not inds:
            return
        mat = np.frombuffer(b"".join(inds), dtype=np.int8).reshape(len(inds), self.n_genes)
        mat = mat.copy()  # frombuffer over bytes is read-only; the repair writes in place
        if self.repair is not None and repair:
            changed = self.repair(mat)
            for r in np.flatnonzero(changed).tolist():
                # Lamarckian: the repaired plan replaces the genome, so children inherit it.
                memoryview(inds[r])[:] = memoryview(mat[r])
        todo: dict[bytes, list[Genome]] = {}
        rows: list[int] = []
        for i, ind in enumerate(inds):
            key = ind.tobytes()
            known = self._new.get(key) or self._old.get(key)
            if known is not None:
                ind.fitness.wvalues = known
                self.cache_hits += 1
            elif key in todo:
                todo[key].append(ind)
                self.cache_hits += 1
            else:
                todo[key] = [ind]
                rows.append(i)
        if not rows:
            return
        infeas, step = self.fitness(mat[rows] if len(rows) < len(inds) else mat)
        for (key, group), f, s in zip(todo.items(), infeas.tolist(), step.tolist(), strict=True):
            wvalues = (-f, -s)  # what `values = (f, s)` stores under the weights (-1, -1)
            for ind in group:
                ind.fitness.wvalues = wvalues
            self._remember(key, wvalues)
        self.evaluations += len(rows)


def _fitness_of(ind: Genome) -> Any:
    return ind.fitness


def best_of_groups(trials: Sequence[Genome], n: int, k: int) -> list[Genome]:
    """The best of each scored group: ``trials[j]`` (j < n) and its k mutants
    ``trials[n + j k : n + (j + 1) k]``; the first of the group wins a tie."""
    return [
        max([trials[j], *trials[n + j * k : n + (j + 1) * k]], key=_fitness_of) for j in range(n)
    ]


class _Island:
    """One population with its own generator, hall of fame and evaluator (plan cache).

    Islands share nothing mutable but the toolbox (whose operators keep no state), so two of
    them can take a generation at once in two threads or processes, and each one's trajectory
    depends only on its generator and on the migrants it takes in.
    """

    def __init__(
        self,
        index: int,
        tb: base.Toolbox,
        config: SearchConfig,
        evaluator: _Evaluator,
        rng: random.Random,
    ) -> None:
        self.index = index
        self.tb = tb
        self.config = config
        self.evaluator = evaluator
        self.rng = rng
        self.hof = tools.HallOfFame(max(1, config.elite))
        self.pop: list[Genome] = []
        self.generation = 0
        self.log: list[tuple[float, int, float]] = []
        self._best_step = math.inf

    def populate(self, seeds: list[Genome], clock_s: Callable[[], float]) -> None:
        """The scored seeds (copies), then mutants of them or random genomes, scored."""
        with use_rng(self.rng):
            pop, n_seeds = initial_population(self.tb, seeds, self.config.pop_size)
            self.evaluator(pop[n_seeds:])
            self.hof.update(pop)
            self.pop = pop
        self.note(clock_s())

    def warm(self) -> None:
        """Score one plan of the population, neither kept nor counted: a fresh worker process
        loads the compiled simulator here rather than in its first timed generation."""
        if self.pop:
            self.evaluator.fitness(np.frombuffer(bytes(self.pop[0]), dtype=np.int8)[None].copy())

    @property
    def evaluations(self) -> int:
        """Plans this island's evaluator has scored."""
        return self.evaluator.evaluations

    @property
    def best_step_s(self) -> float:
        """The best feasible plan's step so far (inf before one)."""
        return self._best_step

    def note(self, clock_s: float) -> None:
        """Log the end of a generation: clock, evaluations so far, best feasible step."""
        infeas, step = self.hof[0].fitness.values
        if infeas == 0.0 and step < self._best_step:
            self._best_step = step
        self.log.append((clock_s, self.evaluator.evaluations, self._best_step))

    def emigrants(self) -> Snapshot:
        """Copies of the ``migrants`` best genomes (DEAP's `tools.selBest`), to travel."""
        best = tools.selBest(self.pop, min(self.config.migrants, len(self.pop)))
        return [(bytes(ind), ind.fitness.wvalues) for ind in best]

    def immigrate(self, incoming: Snapshot) -> None:
        """Put migrants in place of the worst genomes (`tools.selWorst`), as `tools.migRing`
        does, and let the hall of fame see them."""
        worst = tools.selWorst(self.pop, len(incoming))
        for (genes, w), out in zip(incoming, worst, strict=True):
            self.pop[self.pop.index(out)] = _from_snapshot(genes, w)
        self.hof.update(self.pop)

    def report(self, stop: str) -> IslandReport:
        top = self.hof[0]
        return IslandReport(
            index=self.index,
            generations=self.generation,
            stop=stop,
            evaluations=self.evaluator.evaluations,
            cache_hits=self.evaluator.cache_hits,
            best=(bytes(top), top.fitness.wvalues),
            log=self.log,
        )

    def step(self) -> None:
        """One generation: tournament selection, variation, local improvement, scoring, elitism.

        Local improvement (``local_mutants`` = k > 0): each changed offspring gets k mutants
        of its own (DEAP's mutation again), all are scored in the same simulator batch, and
        the best of the k + 1 takes the offspring's place (the offspring itself on a tie).
        It spends more of a generation in the simulator and less in DEAP's per-genome Python
        (selection, crossover, hall of fame), and searches harder around the plans that
        selection picked.
        """
        cfg = self.config
        tb = self.tb
        k = cfg.local_mutants
        with use_rng(self.rng):
            offspring = tb.select(self.pop, max(2, cfg.pop_size - cfg.elite))
            offspring = vary(offspring, tb, cfg.cxpb, cfg.mutpb)
            fresh = [i for i, ind in enumerate(offspring) if not ind.fitness.wvalues]  # invalid
            trials = [offspring[i] for i in fresh]
            for i in fresh if k else ():
                trials.extend(tb.mutate(tb.clone(offspring[i]))[0] for _ in range(k))
            self.evaluator(trials)
            if k:
                for i, best in zip(fresh, best_of_groups(trials, len(fresh), k), strict=True):
                    offspring[i] = best
            self.hof.update(offspring)
            self.pop = list(self.hof.items[: cfg.elite]) + offspring


def _from_snapshot(genes: bytes, wvalues: tuple[float, ...]) -> Genome:
    ind = creator.SlackswapGenome(genes)
    ind.fitness.wvalues = wvalues
    return ind


def search(
    n_genes: int,
    fitness: BatchFitness,
    config: SearchConfig,
    *,
    seed: int,
    seeds: Sequence[np.ndarray] = (),
    arity: Sequence[int] | None = None,
    repair: BatchRepair | None = None,
    deadline: Deadline | None = None,
    n_jobs: int = 1,
    processes: bool = False,
) -> SearchResult:
    """Run the generational loop until a stop rule fires. ``arity`` bounds each gene (see
    `make_toolbox`); ``deadline`` is the caller's (`Deadline`; None: no time limit), so its
    set-up time counts against it.

    With ``config.islands`` > 1 the population is that many islands (each ``pop_size``
    genomes, its own generator drawn from ``seed``) that evolve apart and, every
    ``migration_interval`` generations, pass their ``migrants`` best to the next island in a
    ring, where they replace its worst one interval later. ``n_jobs`` workers take the islands'
    generations at once, as processes, when ``processes`` is set: forked where that is safe,
    else fresh interpreters (`worker_start_method`; the islands, ``fitness`` included, must then
    pickle); otherwise the islands take their generations in turn in the calling thread (see
    `_islands` for why there is no thread mode). The islands exchange only migrants, and the
    result never depends on ``n_jobs`` or on processes; in processes, what ``fitness`` changes
    (say, a counter) stays in the worker. The evaluation limit is shared out: each island stops
    once it has scored its share.
    """
    if deadline is None:
        deadline = Deadline.never()
    t0, clock = deadline.start, deadline.clock
    if config.islands < 1:
        raise ValueError("islands must be at least 1")
    limits = (deadline.max_evaluations, config.max_generations, deadline.limit_s)
    max_gen = config.max_generations
    if all(x is None for x in limits):
        max_gen = DEFAULT_GENERATIONS
    tb = make_toolbox(n_genes, config, arity)
    # One island replays the single-population search; several take the streams after the one
    # that search draws.
    if config.islands == 1:
        rngs = [new_rng(seed)]
    else:
        streams = np.random.default_rng(seed).integers(2**63, size=config.islands + 1)[1:]
        rngs = [FastRandom(int(s)) for s in streams]
    islands = [
        _Island(i, tb, config, _Evaluator(n_genes, fitness, repair), rng)
        for i, rng in enumerate(rngs)
    ]

    # Seeds are scored once, as given (never repaired, so the best plan can't be worse than
    # any), and every island starts from copies of them.
    seen: set[bytes] = set()
    unique: list[Genome] = []
    for s in seeds:
        key = np.asarray(s, dtype=np.int8).tobytes()
        if key not in seen and len(unique) < config.pop_size:
            seen.add(key)
            unique.append(genome(s))
    islands[0].evaluator(unique, repair=False)
    scored = {bytes(ind): ind.fitness.values for ind in unique}
    nan = (math.nan, math.nan)
    initial = [scored.get(np.asarray(s, dtype=np.int8).tobytes(), nan) for s in seeds]
    for k, isl in enumerate(islands):
        # Each island scores a whole population before its first generation: with many
        # islands on a large instance that alone can pass the time limit, so the clock is
        # looked at here too; islands not populated in time are left out of the run.
        if k and deadline.expired():
            islands = islands[:k]
            break
        isl.populate([_clone(ind) for ind in unique], clock)

    share = None
    if deadline.max_evaluations is not None:
        share = -(-deadline.max_evaluations // config.islands)
    rules = Rules(max_gen, share, deadline, config.target_step_s)
    workers = max(1, min(n_jobs, len(islands)))
    reports, timed_out = run_islands(
        islands,
        rules,
        interval=config.migration_interval,
        workers=workers,
        start_method=_start_method(rules) if processes and workers > 1 else None,
        preload=(__name__,),
    )
    elapsed = clock() - t0
    # The champion: the best of the islands' best, the first island on a tie (DEAP's fitness
    # compares greater for better).
    tops = [_from_snapshot(*r.best) for r in reports]
    top = max(tops, key=lambda ind: ind.fitness)
    best_infeas, best_s = top.fitness.values
    total = sum(r.evaluations for r in reports)
    stops = {r.stop for r in reports}
    stop = (
        "time" if timed_out
        else next((s for s in ("target", "evaluations") if s in stops), "generations")
    )  # fmt: skip
    history = _merge_logs(reports, t0)
    history.append((elapsed, total, history[-1][2] if history else math.inf))
    return SearchResult(
        best=np.frombuffer(bytes(top), dtype=np.int8).copy(),
        best_infeasibility=float(best_infeas),
        best_step_s=float(best_s) if best_infeas == 0.0 else math.inf,
        evaluations=total,
        generations=max(r.generations for r in reports),
        stop=stop,
        elapsed_s=elapsed,
        history=history,
        initial=[(float(a), float(b)) for a, b in initial],
        cache_hits=sum(r.cache_hits for r in reports),
    )


#: Least time left on the clock (s) for which the search starts fresh worker interpreters (where
#: it may not fork): one takes about a second to start (0.6-1.6 s measured here), all of which a
#: shorter run would lose, and more when the clock stops the run before the worker has started.
FRESH_WORKER_MIN_S = 10.0


def _start_method(rules: Rules) -> str | None:
    """How the island workers start (`worker_start_method`), or None for in turn where fresh
    workers would cost a shorter run more than they give."""
    method = worker_start_method()
    if method in (None, "fork") or not rules.deadline.limited:
        return method
    return method if rules.deadline.remaining() >= FRESH_WORKER_MIN_S else None


def _merge_logs(reports: Sequence[IslandReport], t0: float) -> list[tuple[float, int, float]]:
    """The run's history, generation by generation over all islands: (seconds since ``t0``
    when the last island finished it, evaluations of all islands, best feasible step), kept
    where the best improves. Indexing by generation, not by clock, keeps everything but the
    seconds independent of how the islands were scheduled."""
    history: list[tuple[float, int, float]] = []
    best = math.inf
    for g in range(max(len(r.log) for r in reports)):
        rows = [r.log[min(g, len(r.log) - 1)] for r in reports]
        step = min(row[2] for row in rows)
        if step < best:
            best = step
            t = max(row[0] for row in rows) - t0
            history.append((t, sum(row[1] for row in rows), best))
    return history
