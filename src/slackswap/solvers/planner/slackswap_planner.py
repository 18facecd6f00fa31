"""The SlackSwap planner (Algorithm 1 with the Sec. 3.4 repair rounds) and its Table 3 ablations.

Registered as ``slackswap``, ``swap-first`` (Pass 1 ranked by production time), ``recompute-only``
(no Pass 1) and ``barriers`` (SlackSwap's plan run under vDNN's per-layer synchronisation).
Algorithm 1 itself is in `slackswap.solvers.planner._passes` (its decisions are listed there).

Validation and repair (Sec. 3.4), as decided here:

- Round 1 plans for the budget M and replays the plan in the event model (barrier-free runtime,
  the runtime SlackSwap plans for). A feasible plan with no stall ends the search.
- Otherwise the plan with no swaps (Pass 2 alone) is the next round, and the remaining rounds
  repair the swap plan from what the replay showed: a swapped tensor whose prefetch held up the
  compute stream (read from the replay's timeline: an operator waiting for its own swapped
  inputs blames each input whose prefetch was still running when the wait began, for the wait
  up to that prefetch's end; a stalled rebuild blames the swapped tensors its rebuild chain
  reads) is recomputed if its recompute cost is below the wait, else removed from S; a forward stall (compute waiting for memory that lagging offloads hold) raises the
  guard g to max(2 g, g + stall / T_F); a plan that does not fit, or fits only by making compute
  wait for memory in the backward pass, is re-planned for a budget 1%, 2%, 4%, ... smaller.
- At most ``max_rounds`` (six) replays; the fastest feasible plan seen wins (ties: the earlier).
  Replays of a plan already seen are skipped, and the search also stops when a repair changes
  nothing.
- Not in the paper: when no round fits at all, up to three last-resort replays swap what stays
  resident where memory runs out, so the runtime's eviction can free it between its backward
  readers (``oversubscribe``; see `_RepairSearch._oversubscribe`). Only budgets where Algorithm 1
  finds nothing are affected: a narrow band of VGG-16 budgets, where the first stage's second
  convolution backward does not fit next to the input image, which only the runtime can evict
  (the band is in benchmarks/README.md, "Figures from module docstrings").

Operator waits: the event model records an operator's wait for its own inputs without naming a
tensor (it may wait for several), so the repair blames each swapped input whose prefetch was
still running when the wait began, as it blames the tensors a stalled rebuild reads: Sec. 3.4's
rule applied to every late prefetch, not a new one. Without it a plan whose prefetches are
fetched on demand (on fast links, when the runtime admits a prefetch only once the next
operators' transient bytes fit beside it) keeps its stall. ``op_waits=False`` reads rebuild
waits only. ``benchmarks/bench_fastlink_sweep.py`` holds SlackSwap against the best baseline
over every catalog model, GPU, link and budget.

The memory branch (beyond Sec. 3.4; ``memory_branch=False`` turns it off): a late prefetch that
started only after the H2D engine sat idle was held back by the runtime's memory look-ahead, not
by the link (`held_back_prefetches`), and the per-tensor repair pays for its wait in recompute or
lost swaps. When a round shows one and the best plan is not yet ideal, the rounds left re-plan
the first round (no tensor repaired) for a budget 1%, 2%, 4%, ... 64% smaller
(`_RepairSearch._memory_branch`): a little more swapped, room for the look-ahead. It only adds
rounds, within the six, so it never returns a slower plan (what it changes over the catalog is in
benchmarks/README.md, the fast-link sweep).

Table 3's SlackSwap, swap-first, recompute-only and barriers cells come out identical with either
extension on or off, so ``reproduce table3`` shows the paper's algorithm's figures.

The ``barriers`` ablation runs exactly that search (validated barrier-free, as SlackSwap's own
plan) and hands the resulting plan to the ``barriers`` runtime: the paper's point is the cost of
the runtime, not a plan re-tuned for it. The simulator's barrier runtime synchronises per
``op_layer`` (a transformer block), which hides most copies behind the block's own compute, so
``barriers`` runs faster here than in the paper; ``slackswap reproduce table3`` compares every
ablation with Table 3 and ``--explain-barriers`` shows the per-operator variant (figures in
benchmarks/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from slackswap.console import format_bytes
from slackswap.errors import ArgumentError
from slackswap.instance import BACKWARD, Instance
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan
from slackswap.simulator import simulate
from slackswap.simulator.result import COMPUTE_KINDS
from slackswap.solvers.base import Solution, Solver, Tags
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.display import Display
from slackswap.solvers.planner._memory import need_ops, static_arrays
from slackswap.solvers.planner._passes import PassResult, plan_passes
from slackswap.solvers.registry import register

if TYPE_CHECKING:
    from slackswap.simulator import SimResult

#: Runtime the repair rounds replay plans in (the one Algorithm 1's schedules model).
PLANNER_RUNTIME = "barrier-free"
#: Stalls shorter than this (seconds) are float noise of the event model, not waits.
STALL_TOL_S = 1e-9
#: Replays the last-resort oversubscribed plan may take when no round fits.
OVERSUBSCRIBE_TRIES = 3
#: The most budget halvings the memory branch tries (1%, 2%, ... 64% smaller).
MAX_SHRINK = 7


@dataclass
class Round:
    """One replay: what was planned, and how it ran (seconds, bytes)."""

    budget_bytes: int  # M the passes planned for
    guard: float
    pass1: bool
    fits: bool  # the planner's own memory profile fits
    feasible: bool  # the event model ran it within the real budget
    step_s: float
    stall_s: float
    swap_bytes: int
    recompute_bytes: int
    note: str

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


#: The candidate orders of the repair passes (the ``order`` option).
ORDERS = ("rho", "production")


class SlackSwap(Solver):
    """SlackSwap: spend the link budget on the costliest-to-recompute tensors, recompute the rest.

    Options: ``order`` of Pass 1's candidates (``"rho"``: decreasing recompute cost per byte;
    ``"production"``: production order, the swap-first ablation); ``pass1`` (False: recompute
    only); ``guard`` g, the share of the forward pass the offloads leave free; ``max_rounds`` of
    validation and repair; ``runtime`` the returned plan is for; ``oversubscribe``: when no
    round fits, try the last-resort plan that leans on the runtime's eviction (see
    `_RepairSearch._oversubscribe`; not in the paper); ``op_waits``: the repair also reads an
    operator's wait for its own swapped inputs (False: only the waits of rebuilds);
    ``memory_branch``: after a late prefetch the runtime held back for memory, spend the rounds
    left on smaller planning budgets (`_RepairSearch._memory_branch`; not in the paper).
    """

    key = "slackswap"
    tags = Tags(
        exact=False, deterministic=True, honours_time_limit=True, static_plan=True, uses_seed=False
    )

    def __init__(
        self,
        *,
        order: str = "rho",
        pass1: bool = True,
        guard: float = 0.02,
        max_rounds: int = 6,
        runtime: str = PLANNER_RUNTIME,
        oversubscribe: bool = True,
        op_waits: bool = True,
        memory_branch: bool = True,
    ) -> None:
        self.order = order
        self.pass1 = pass1
        self.guard = guard
        self.max_rounds = max_rounds
        self.runtime = runtime
        self.oversubscribe = oversubscribe
        self.op_waits = op_waits
        self.memory_branch = memory_branch

    def check_options(self) -> None:
        if self.order not in ORDERS:
            raise ArgumentError(f"order must be 'rho' or 'production', got {self.order!r}")

    # ---------------------------------------------------------------------------------------
    def solve(
        self, instance: Instance, budget: Budget, *, deadline: Deadline, seed: int
    ) -> Plan | Solution:
        self.check_options()
        m_bytes = budget.bytes_for(instance)
        if m_bytes >= instance.peak_bytes:
            return Plan.keep_all(instance, self.runtime)
        search = _RepairSearch(self, instance, budget, deadline)
        search.run()
        info: dict[str, Any] = {"rounds": [r.as_dict() for r in search.rounds]}
        if search.best is not None:
            return Solution(plan=Plan(instance, search.best[1], self.runtime), info=info)
        fail = search.last_fail
        if fail is not None and not any(r.fits for r in search.rounds):
            info["reason"] = (
                f"the planner's memory profile stays {format_bytes(fail.overflow_bytes)} over "
                f"the budget at operator {instance.op_name[fail.fail_op]!r} with every tensor "
                "that has a finite recompute cost recomputed"
            )
        else:
            info["reason"] = "no replayed plan fit the budget in the event model"
        last = [r for r in search.rounds if r.note.startswith("out of memory") and not r.fits]
        if last:
            info["reason"] += f"; the last-resort oversubscribed plan failed too ({last[-1].note})"
        return Solution(plan=None, info=info)


class _RepairSearch:
    """The Sec. 3.4 rounds for one (instance, budget): plan, replay, repair; keep the fastest."""

    def __init__(
        self, solver: SlackSwap, instance: Instance, budget: Budget, deadline: Deadline
    ) -> None:
        self.solver = solver
        self.instance = instance
        self.budget = budget
        self.m_bytes = budget.bytes_for(instance)
        self.sa = static_arrays(instance)
        # a round starts only in the first half of the time limit, so one begun late still ends
        # within it
        self.deadline = deadline.share(0.5)
        n_t = instance.n_tensors
        self.excluded = np.zeros(n_t, dtype=bool)
        self.forced = np.zeros(n_t, dtype=bool)
        self.guard = float(solver.guard)
        self.shrink = 0
        self.rounds: list[Round] = []
        self.seen: set[bytes] = set()
        self.best: tuple[float, np.ndarray] | None = None
        self.last_fail: PassResult | None = None
        self.held_back = False  # some replay showed a late prefetch the runtime held for memory

    def _room(self) -> bool:
        if len(self.rounds) >= max(1, self.solver.max_rounds):
            return False
        return not self.deadline.expired()

    def _plan_budget(self) -> int:
        if self.shrink == 0:
            return self.m_bytes
        return int(self.m_bytes * (1.0 - 0.01 * 2 ** (self.shrink - 1)))

    def _replay(self, pass1: bool) -> tuple[PassResult, Any] | None:
        """Plan once and replay it; None when the passes cannot fit or the plan was seen."""

        m_plan = self._plan_budget()
        res = plan_passes(
            self.sa, m_plan, int(self.instance.peak_bytes), order=self.solver.order,
            pass1=pass1, guard=self.guard, excluded=self.excluded, forced_recomp=self.forced,
        )  # fmt: skip
        if not res.fits:
            self.last_fail = res
            return None
        key = res.actions.tobytes()
        if key in self.seen:
            return None
        self.seen.add(key)
        # Swap plans keep the timeline: the repair reads which prefetches held compute up.
        sim = simulate(
            self.instance, res.actions, self.budget, runtime=PLANNER_RUNTIME, timeline=pass1
        )
        stall = sim.fwd_stall_s + sim.bwd_stall_s if sim.feasible else float("inf")
        size = self.sa.size
        self.rounds.append(
            Round(
                m_plan, self.guard, pass1, True, bool(sim.feasible), float(sim.step_s),
                float(stall), int(size[res.actions == SWAP].sum()),
                int(size[res.actions == RECOMP].sum()), sim.reason,
            )
        )  # fmt: skip
        if sim.feasible and (self.best is None or sim.step_s < self.best[0]):
            self.best = (float(sim.step_s), res.actions.copy())
        return res, sim

    def run(self) -> None:
        with_swaps = bool(self.solver.pass1)
        no_swap_done = not with_swaps
        while self._room():
            out = self._replay(with_swaps)
            if out is None:
                break  # the passes cannot fit, or the repair led back to a plan already seen
            res, sim = out
            if sim.feasible and sim.fwd_stall_s + sim.bwd_stall_s <= STALL_TOL_S:
                break
            if not no_swap_done and self._room():
                no_swap_done = True
                self._replay(False)
            changed = False
            if not sim.feasible or sim.bwd_stall_mem_s > STALL_TOL_S:
                # Does not fit, or fits only by making compute wait for memory: re-plan for a
                # budget 1%, 2%, 4%, ... smaller.
                self.shrink += 1
                changed = True
            if with_swaps and sim.feasible:
                changed |= self._repair(res, sim)
                if sim.fwd_stall_s > STALL_TOL_S:  # offloads lag: widen the guard
                    self.guard = min(
                        0.5, max(2 * self.guard, self.guard + sim.fwd_stall_s / self.sa.forward_s)
                    )
                    changed = True
            if not changed:
                break
        if self.best is None and not no_swap_done and self._room():
            self._replay(False)  # the swap plan never fit: the plan with no swaps may
        if self.held_back and self.solver.memory_branch:
            self._memory_branch()
        if self.best is None and with_swaps and self.solver.oversubscribe:
            self._oversubscribe()

    def _oversubscribe(self) -> None:
        """Last resort when no plan fits: swap what stays resident where memory runs out.

        Beyond Algorithm 1 (a toolkit extension). The planner's model returns a tensor once, at
        its first backward reader, and keeps it to its last; a tensor read at operators i - 1
        and i + 1 but not i can only leave memory at i through the runtime's eviction, which
        applies to swapped tensors. So, starting from the plan Pass 2 gave up on: every tensor
        resident at the failing operator and not read there becomes a swap, and the plan is
        replayed; a replay that still fails names the next operator to treat.
        """

        res = plan_passes(
            self.sa, self.m_bytes, int(self.instance.peak_bytes), order=self.solver.order,
            pass1=True, guard=self.guard, excluded=self.excluded, forced_recomp=self.forced,
        )  # fmt: skip
        x = res.actions.copy()
        sa, i = self.sa, res.fail_op
        ptr, idx = self.instance.op_reads_csr
        for _ in range(OVERSUBSCRIBE_TRIES):
            if i < 0:
                sim = simulate(self.instance, x, self.budget, runtime=PLANNER_RUNTIME)
                i = sim.fail_op
                if sim.feasible or i < 0:
                    break
            need = need_ops(x, sa.fbr, sa.fbr, sa.prod, sa.rb_ptr, sa.rb_idx)
            resident = np.where(
                x == KEEP,
                (sa.prod <= i) & (i <= sa.lbr),
                ((sa.prod <= i) & (i <= sa.lfr)) | ((need <= i) & (i <= sa.lbr)),
            )
            move = resident & (x != SWAP)
            move[idx[ptr[i] : ptr[i + 1]]] = False
            if not move.any():
                break
            x[move] = SWAP
            sim = simulate(self.instance, x, self.budget, runtime=PLANNER_RUNTIME)
            size = sa.size
            self.rounds.append(
                Round(
                    self.m_bytes, self.guard, True, False, bool(sim.feasible), float(sim.step_s),
                    float(sim.fwd_stall_s + sim.bwd_stall_s) if sim.feasible else float("inf"),
                    int(size[x == SWAP].sum()), int(size[x == RECOMP].sum()),
                    sim.reason or "oversubscribed: runtime eviction covers what the model cannot",
                )
            )  # fmt: skip
            if sim.feasible:
                self.best = (float(sim.step_s), x.copy())
                break
            i = sim.fail_op

    def _memory_branch(self) -> None:
        """Rounds left after a late prefetch the runtime held back for memory: the first round's
        plan (no tensor repaired) re-planned for a budget 1%, 2%, 4%, ... smaller.

        Beyond Sec. 3.4's single path (a toolkit extension). Such a prefetch waited for
        the look-ahead's memory, not for the link, and the per-tensor repair (recompute it or
        un-swap it) pays for that wait in recompute; a smaller planning budget swaps a little
        more and leaves the look-ahead room. Budgets that give a plan already seen cost no
        replay; the branch ends at a replay with no stall, at a budget the passes cannot fit, or
        when the rounds run out, and the fastest plan of either path wins.
        """
        if self.best is not None and self.best[0] <= self.instance.ideal_step_s + STALL_TOL_S:
            return  # already ideal: nothing to gain
        no_repair = np.zeros(self.instance.n_tensors, dtype=bool)
        for shrink in range(1, MAX_SHRINK + 1):
            if not self._room():
                return
            m_plan = int(self.m_bytes * (1.0 - 0.01 * 2 ** (shrink - 1)))
            res = plan_passes(
                self.sa, m_plan, int(self.instance.peak_bytes), order=self.solver.order,
                pass1=True, guard=self.solver.guard, excluded=no_repair, forced_recomp=no_repair,
            )  # fmt: skip
            if not res.fits:
                return
            key = res.actions.tobytes()
            if key in self.seen:
                continue
            self.seen.add(key)
            sim = simulate(self.instance, res.actions, self.budget, runtime=PLANNER_RUNTIME)
            stall = sim.fwd_stall_s + sim.bwd_stall_s if sim.feasible else float("inf")
            size = self.sa.size
            self.rounds.append(
                Round(
                    m_plan, self.solver.guard, True, True, bool(sim.feasible), float(sim.step_s),
                    float(stall), int(size[res.actions == SWAP].sum()),
                    int(size[res.actions == RECOMP].sum()), sim.reason or "memory branch",
                )
            )  # fmt: skip
            if sim.feasible and (self.best is None or sim.step_s < self.best[0]):
                self.best = (float(sim.step_s), res.actions.copy())
            if stall <= STALL_TOL_S:
                return

    def _repair(self, res: PassResult, sim: SimResult) -> bool:
        """Recompute or un-swap each swapped tensor whose prefetch held up compute."""
        late = late_prefetches(
            self.instance, res.actions, self.budget, sim,
            prefetch_stalls_at_ops=self.solver.op_waits,
        )  # fmt: skip
        if self.solver.memory_branch and held_back_prefetches(self.instance, sim, late):
            self.held_back = True
        changed = False
        cost = self.sa.cost
        for t, wait_s in late.items():
            if np.isfinite(cost[t]) and cost[t] < wait_s:
                changed |= not self.forced[t]
                self.forced[t] = True
            else:
                changed |= not self.excluded[t]
                self.excluded[t] = True
        return changed


def late_prefetches(
    instance: Instance,
    actions: np.ndarray,
    budget: Budget,
    sim: SimResult | None = None,
    *,
    prefetch_stalls_at_ops: bool = True,
) -> dict[int, float]:
    """Swapped tensors whose prefetch held up the compute stream, with the wait in seconds.

    Read from the event model's timeline: a compute-lane stall waiting for a copy names the
    tensor it waited for; when that is a recomputed tensor whose rebuild waited, the wait goes to
    the swapped tensors its rebuild chain reads. ``sim``: a replay of these actions with its
    timeline, when the caller has one.
    """

    if sim is None or sim.timeline is None:
        sim = simulate(instance, actions, budget, runtime=PLANNER_RUNTIME, timeline=True)
    tl = sim.timeline
    if tl is None:
        return {}
    stall = tl.compute_kind == COMPUTE_KINDS.index("stall_copy")
    waits: dict[int, float] = {}
    rows = stall & (tl.compute_tensor >= 0)
    for t, dt in zip(
        tl.compute_tensor[rows].tolist(),
        (tl.compute_end_s[rows] - tl.compute_start_s[rows]).tolist(),
        strict=True,
    ):
        if dt <= STALL_TOL_S:
            continue
        for u in _swapped_sources(instance, actions, t):
            waits[u] = waits.get(u, 0.0) + dt
    if not prefetch_stalls_at_ops:
        return waits
    # An operator waiting for its own swapped inputs is recorded without a tensor (it may wait
    # for several): blame each swapped input whose prefetch was still running when the wait
    # began, for the part of the wait up to its prefetch's end.
    h2d_end: dict[int, float] = {}
    for t, e, end in zip(
        tl.copy_tensor.tolist(), tl.copy_engine.tolist(), tl.copy_end_s.tolist(), strict=True
    ):
        if e == 1:
            h2d_end[t] = max(end, h2d_end.get(t, end))
    ptr, idx = instance.op_reads_csr
    rows = np.flatnonzero(stall & (tl.compute_tensor < 0) & (tl.compute_op >= 0))
    for k in rows.tolist():
        t0, t1 = float(tl.compute_start_s[k]), float(tl.compute_end_s[k])
        if t1 - t0 <= STALL_TOL_S:
            continue
        j = int(tl.compute_op[k])
        for u in idx[ptr[j] : ptr[j + 1]].tolist():
            end = h2d_end.get(u)
            if actions[u] == SWAP and end is not None and end > t0 + STALL_TOL_S:
                waits[u] = waits.get(u, 0.0) + min(end, t1) - t0
    return waits


def held_back_prefetches(instance: Instance, sim: SimResult, late: dict[int, float]) -> list[int]:
    """The tensors of ``late`` whose prefetch the runtime held back for memory.

    In the barrier-free runtime every prefetch is queued when the backward pass starts and the
    H2D engine takes the queue's head as soon as it is admitted, so a prefetch that starts after
    the engine sat idle (past the backward start and the previous prefetch's end) waited for
    the memory look-ahead or a memory stall, not for the link. ``sim`` must carry its timeline.
    """

    tl = sim.timeline
    if tl is None or not late:
        return []
    h2d = np.flatnonzero(tl.copy_engine == 1)
    bwd_ops = (tl.compute_op >= 0) & (tl.compute_kind == COMPUTE_KINDS.index("op"))
    bwd_ops[bwd_ops] = instance.op_phase[tl.compute_op[bwd_ops]] == BACKWARD
    if h2d.size == 0 or not bwd_ops.any():
        return []
    bwd_start = float(tl.compute_start_s[bwd_ops].min())
    h2d = h2d[np.argsort(tl.copy_start_s[h2d], kind="stable")]
    starts, ends = tl.copy_start_s[h2d], tl.copy_end_s[h2d]
    # when the engine was free for each copy: the backward start, or the end of the copies before
    free_from = np.maximum.accumulate(np.concatenate(([bwd_start], ends[:-1])))
    held = set(tl.copy_tensor[h2d][starts > free_from + STALL_TOL_S].tolist())
    return sorted(t for t in late if t in held)


def _swapped_sources(instance: Instance, actions: np.ndarray, t: int) -> list[int]:
    """``t`` itself when swapped; else the swapped tensors its rebuild chain reads."""
    out: list[int] = []
    stack, seen = [t], {t}
    while stack:
        u = stack.pop()
        if actions[u] == SWAP:
            out.append(u)
        elif actions[u] == RECOMP:
            for v in instance.tensor_rebuild_inputs[u]:
                if v not in seen:
                    seen.add(v)
                    stack.append(v)
    return sorted(out)


register(
    "slackswap",
    "SlackSwap: Algorithm 1 with validation-and-repair rounds",
    display=Display(
        colour="black", marker="o", emphasis=True, order=0, label="SlackSwap", featured=0
    ),
)(SlackSwap)
register(
    "swap-first",
    "Ablation: SlackSwap with Pass 1 ranked by production time",
    display=Display(colour="#9467bd", marker="P", order=1),
    order="production",
)(SlackSwap)
register(
    "recompute-only",
    "Ablation: SlackSwap without Pass 1 (no swaps)",
    display=Display(colour="#8c564b", marker="*", order=2),
    pass1=False,
)(SlackSwap)
register(
    "barriers",
    "Ablation: SlackSwap's plan under vDNN's per-layer barriers",
    display=Display(colour="#e377c2", marker="X", order=3),
    runtime="barriers",
)(SlackSwap)
