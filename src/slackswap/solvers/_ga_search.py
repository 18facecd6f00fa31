"""The DEAP machinery of the genetic search: genome, toolbox, generation loop, stop rules.

A genome is one action per saved tensor (0 keep, 1 swap, 2 recomp) stored as an ``array.array``
of signed bytes (DEAP's own compact-genome idiom): slicing copies, so DEAP's crossover works on
it unchanged, and a population joins into a numpy matrix without a per-gene loop. The operators
are DEAP's: two-point crossover (`tools.cxTwoPoint`), uniform integer mutation
(`tools.mutUniformInt`, applied to a window of consecutive tensors, see `mutate_window`),
tournament selection (`tools.selTournament`), variation as `algorithms.varAnd` does it (crossover
of consecutive pairs with probability cxpb, then mutation with probability mutpb) but without
re-scoring what it did not change (see `vary`), and elitism through a `tools.HallOfFame` whose
members rejoin every generation. Fitness is lexicographic and minimised: (infeasibility, step seconds), so an
infeasible plan ranks below every feasible one and by how far it overflows the budget.

Fitness comes from a batch function (the simulator's population entry point), called once per
generation on the individuals the variation changed; this module knows nothing of the simulator,
so tests can drive it with any batch function.

Determinism: DEAP's operators draw from Python's module-level `random`, which any other thread
(a Dask worker, a progress bar) may also draw from mid-search. So the `random` that DEAP's
operator modules see is replaced by `_THREAD_RANDOM`, which forwards to a generator private to
the calling thread while a search runs in it (`deap_random`) and to the module otherwise: the
same seed replays the same trajectory whatever else runs, and two searches may run in threads of
one process at once. The global state is never touched. Stop rules, checked between generations:
an evaluation limit, a generation limit, and a time limit. The first two are deterministic; a run
stopped by the clock is reproducible up to the generation it reached (the result reports it, and
``max_generations`` set to that number replays the run exactly).
"""

from __future__ import annotations

import array
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from deap import algorithms, base, creator, tools
from deap.tools import crossover, mutation, selection

#: Generations run when no stop (time, evaluations, generations) is given at all.
DEFAULT_GENERATIONS = 100

# DEAP's creator makes classes at module level; guard against a second import (reload).
if not hasattr(creator, "SlackswapPlanFitness"):
    creator.create("SlackswapPlanFitness", base.Fitness, weights=(-1.0, -1.0))
if not hasattr(creator, "SlackswapGenome"):
    creator.create(
        "SlackswapGenome", array.array, typecode="b", fitness=creator.SlackswapPlanFitness
    )

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
    mutation_window: int = 16
    elite: int = 2
    tournsize: int = 3
    max_evaluations: int | None = None
    max_generations: int | None = None
    time_limit_s: float | None = None


@dataclass
class SearchResult:
    """The best genome found and how the search got there."""

    best: np.ndarray | None  # int8 actions of the best plan (feasible or not); None if empty
    best_infeasibility: float  # 0 when the best plan is feasible
    best_step_s: float  # inf unless feasible
    evaluations: int  # distinct plans the batch function scored
    generations: int
    stop: str  # "evaluations", "generations" or "time"
    elapsed_s: float
    history: list[tuple[float, int, float]] = field(default_factory=list)
    initial: list[tuple[float, float]] = field(default_factory=list)  # each seed's fitness
    cache_hits: int = 0  # genomes scored from memory (a plan met again), not simulated

    @property
    def feasible(self) -> bool:
        return self.best is not None and self.best_infeasibility == 0.0


class _ThreadRandom:
    """Stands in for the `random` module: the calling thread's search generator, if any."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        rng = getattr(self._local, "rng", None)
        return getattr(rng if rng is not None else random, name)


_THREAD_RANDOM: Any = _ThreadRandom()
for _module in (crossover, mutation, selection, algorithms):
    if getattr(_module, "random", None) is random:
        _module.random = _THREAD_RANDOM  # type: ignore[attr-defined]


@contextmanager
def deap_random(seed: int) -> Iterator[None]:
    """Give DEAP's operators (and this module) a generator seeded from ``seed``, in this thread."""
    local = _THREAD_RANDOM._local
    previous = getattr(local, "rng", None)
    local.rng = random.Random(int(np.random.default_rng(seed).integers(2**63)))
    try:
        yield
    finally:
        local.rng = previous


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


def mutate_window(ind: Genome, width: int, indpb: float, arity: Sequence[int]) -> tuple[Genome]:
    """DEAP's uniform integer mutation, as a step, on ``width`` consecutive genes.

    Gene t takes ``arity[t]`` values (3: keep, swap, recomp; 2: keep, swap for a tensor nothing
    can rebuild). `tools.mutUniformInt` picks the genes (each with probability ``indpb``) and
    draws a step in 1..arity-1 for each; the gene moves by that step modulo its arity, so a picked
    gene always changes action (a plain redraw keeps it a third of the time, and a mutant equal to
    its parent is a wasted evaluation). The window is placed at random: tensors are in production
    order, so it covers a layer or two, and it costs O(width) Python steps instead of O(tensors)
    (~0.1 us per gene, most of a generation's cost over a GPT-2 XL genome of 484 tensors).
    """
    start = _THREAD_RANDOM.randrange(len(ind) - width + 1)
    step = [0] * width
    tools.mutUniformInt(step, low=1, up=[m - 1 for m in arity[start : start + width]], indpb=indpb)
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
    tb.register("mutate", mutate_window, width=width, indpb=indpb, arity=ar)
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
    off = list(offspring)
    for i in range(1, len(off), 2):
        if _THREAD_RANDOM.random() < cxpb:
            p, q = off[i - 1], off[i]
            if p is q or p == q:
                continue
            a, b = tb.mate(tb.clone(p), tb.clone(q))
            for child in (a, b):
                if child == p:
                    child.fitness.values = p.fitness.values
                elif child == q:
                    child.fitness.values = q.fitness.values
                else:
                    del child.fitness.values
            off[i - 1], off[i] = a, b
    for i in range(len(off)):
        if _THREAD_RANDOM.random() < mutpb:
            x = off[i]
            y = tb.clone(x) if x.fitness.valid else x
            (y,) = tb.mutate(y)
            if y is not x and y == x:
                continue  # the mutation drew no gene
            del y.fitness.values
            off[i] = y
    return off


def genome(actions: np.ndarray) -> Genome:
    """A genome from an int8 actions array."""
    return creator.SlackswapGenome(np.asarray(actions, dtype=np.int8).tobytes())


def initial_population(
    tb: base.Toolbox, seeds: Sequence[np.ndarray], pop_size: int
) -> tuple[list[Genome], int]:
    """The seeds (duplicates dropped, at most ``pop_size``), then mutants of them in turn, or
    random genomes when there are no seeds; also returns how many seeds lead the list."""
    pop: list[Genome] = []
    seen: set[bytes] = set()
    for s in seeds:
        key = np.asarray(s, dtype=np.int8).tobytes()
        if key not in seen and len(pop) < pop_size:
            seen.add(key)
            pop.append(genome(s))
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
        self._new: dict[bytes, tuple[float, float]] = {}
        self._old: dict[bytes, tuple[float, float]] = {}

    def _remember(self, key: bytes, value: tuple[float, float]) -> None:
        if len(self._new) >= CACHE_PLANS:
            self._old, self._new = self._new, {}
        self._new[key] = value

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
                ind.fitness.values = known
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
            value = (f, s)
            for ind in group:
                ind.fitness.values = value
            self._remember(key, value)
        self.evaluations += len(rows)


def search(
    n_genes: int,
    fitness: BatchFitness,
    config: SearchConfig,
    *,
    seed: int,
    seeds: Sequence[np.ndarray] = (),
    arity: Sequence[int] | None = None,
    repair: BatchRepair | None = None,
    start: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> SearchResult:
    """Run the generational loop until a stop rule fires. ``arity`` bounds each gene (see
    `make_toolbox`); ``start`` is the clock reading the time limit counts from (default: now), so
    a caller's set-up time counts against it."""
    t0 = clock() if start is None else start
    limits = (config.max_evaluations, config.max_generations, config.time_limit_s)
    max_gen = config.max_generations
    if all(x is None for x in limits):
        max_gen = DEFAULT_GENERATIONS
    evaluator = _Evaluator(n_genes, fitness, repair)
    history: list[tuple[float, int, float]] = []
    with deap_random(seed):
        tb = make_toolbox(n_genes, config, arity)
        hof = tools.HallOfFame(max(1, config.elite))
        pop, n_seeds = initial_population(tb, seeds, config.pop_size)
        # Seeds are scored as given, never repaired, so the best plan can't be worse than any.
        evaluator(pop[:n_seeds], repair=False)
        evaluator(pop[n_seeds:])
        scored = {bytes(ind): ind.fitness.values for ind in pop[:n_seeds]}
        nan = (math.nan, math.nan)
        initial = [scored.get(np.asarray(s, dtype=np.int8).tobytes(), nan) for s in seeds]
        hof.update(pop)
        best_step = math.inf

        def note_progress() -> None:
            nonlocal best_step
            top = hof[0].fitness.values
            if top[0] == 0.0 and top[1] < best_step:
                best_step = top[1]
                history.append((clock() - t0, evaluator.evaluations, best_step))

        note_progress()
        n_off = max(2, config.pop_size - config.elite)
        generations = 0
        gen_s = 0.0
        stop = ""
        while True:
            now = clock()
            if max_gen is not None and generations >= max_gen:
                stop = "generations"
            elif config.max_evaluations is not None and (
                evaluator.evaluations >= config.max_evaluations
            ):
                stop = "evaluations"
            elif config.time_limit_s is not None and now - t0 + gen_s > config.time_limit_s:
                stop = "time"  # the next generation would end past the limit
            if stop:
                break
            offspring = tb.select(pop, n_off)
            offspring = vary(offspring, tb, config.cxpb, config.mutpb)
            evaluator([ind for ind in offspring if not ind.fitness.valid])
            hof.update(offspring)
            pop = list(hof.items[: config.elite]) + offspring
            generations += 1
            note_progress()
            gen_s = max(gen_s * 0.8, clock() - now)  # a cautious estimate of the next one
    elapsed = clock() - t0
    top = hof[0]
    best_infeas, best_s = top.fitness.values
    history.append((elapsed, evaluator.evaluations, best_step))
    return SearchResult(
        best=np.frombuffer(bytes(top), dtype=np.int8).copy(),
        best_infeasibility=float(best_infeas),
        best_step_s=float(best_s) if best_infeas == 0.0 else math.inf,
        evaluations=evaluator.evaluations,
        generations=generations,
        stop=stop,
        elapsed_s=elapsed,
        history=history,
        initial=[(float(a), float(b)) for a, b in initial],
        cache_hits=evaluator.cache_hits,
    )
