"""`prepare` and `PlannedStep`: a plan run step after step in a training loop (see
`slackswap.runtime.training`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

import torch

from slackswap.console import format_bytes
from slackswap.errors import UserError
from slackswap.instance import Instance
from slackswap.plan import Budget, Plan
from slackswap.profiling import profile_step
from slackswap.runtime.checked import apply, check_plan
from slackswap.runtime.stats import RunStats, warn_about
from slackswap.runtime.training.facts import PlanFacts, plan_facts
from slackswap.runtime.training.fast import FastStep, ShapeChangeError
from slackswap.runtime.training.learning import (
    FirstStepObserver,
    Learned,
    ModuleCalls,
    block_tracking,
    input_signature,
    learn,
)

__all__ = ["PlannedStep", "prepare"]

#: `PlannedStep.step`'s "no batch given".
_NO_BATCH: Any = object()


def _takes_batch(loss_fn: Callable[..., Any] | None) -> bool:
    """Whether ``loss_fn`` needs a second positional argument (the batch): ``loss_fn(output,
    batch)`` rather than ``loss_fn(output)``. False when its signature cannot be read (a
    builtin): it is then called as ``loss_fn(output)`` unless a step is given its batch."""
    if loss_fn is None:
        return False
    try:
        params = inspect.signature(loss_fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.kind in positional and p.default is p.empty]
    return len(required) >= 2


class PlannedStep:
    """A plan prepared for a training loop (see `prepare`); ``with planned.step(): ...``."""

    def __init__(
        self,
        model: torch.nn.Module,
        plan: Plan,
        budget: Budget | float | str,
        *,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        runtime: str | None = None,
        schedule: str | None = None,
        replan: bool = False,
        solver: Callable[[Instance, Budget], Plan | None] | None = None,
    ):
        if not isinstance(model, torch.nn.Module):
            raise UserError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        if replan and not callable(solver):
            raise UserError(
                "replan=True: pass solver=, a function (instance, budget) -> Plan that solves "
                "as the plan was solved, e.g. lambda i, b: slackswap.solve(i, b, 'slackswap').plan"
            )
        self.model = model
        self.budget = Budget.parse(budget)
        self.loss_fn = loss_fn
        self._loss_takes_batch = _takes_batch(loss_fn)
        self._batch: Any = _NO_BATCH  # the running step's batch, when it was given one
        self.runtime = runtime
        self.schedule = schedule
        self.replan = replan
        self.solver = solver
        self.steps = 0
        #: What the runtime did and measured in the last step (None before the first).
        self.last_stats: RunStats | None = None
        self._over: RunStats | None = None  # the last step, when it went over its budget
        self._use(plan)

    def _use(self, plan: Plan) -> None:
        self.plan = plan
        self._stats = check_plan(plan, self.budget, runtime=self.runtime)  # refused here, early
        self._learned: Learned | None = None
        self._facts: PlanFacts | None = None

    def _plan_facts(self) -> PlanFacts:
        """What the plan's fast steps read (`PlanFacts`), made at the first of them: the model
        is looked at once per plan (a module does not move between the steps of a training
        loop; the first step of another plan looks again)."""
        if self._facts is None:
            self._facts = plan_facts(self.plan, self._stats, self.model)
        return self._facts

    # ----- what the first step learned --------------------------------------------------------
    @property
    def fast(self) -> bool:
        """Whether the next step runs with saved-tensor hooks alone (False before the first
        step, when the plan needs the checked path at every step, and after a step that went
        over its budget: see `reason`)."""
        return self._learned is not None and not self._learned.reason and self._over is None

    @property
    def reason(self) -> str:
        """Why the next step runs the checked path ('' when it does not, or before the first
        step)."""
        if self._learned is not None and self._learned.reason:
            return self._learned.reason
        if self._over is not None:
            return (
                f"the last step went {format_bytes(self._over.over_budget_bytes)} over its "
                "budget: the next one runs the checked path, which measures every operator "
                "(and runs fast again once a step is within the budget)"
            )
        return ""

    @property
    def checkpointed_blocks(self) -> list[str]:
        """The profiled blocks a fast step runs under ``torch.utils.checkpoint``."""
        if self._learned is None:
            return []
        names = self._blocks()
        return [names[b] for b in self._learned.checkpointed]

    def _blocks(self) -> list[str]:
        return list(dict.fromkeys(self.plan.instance.meta.get("block_modules", [])))

    # ----- the step ---------------------------------------------------------------------------
    def step(self, batch: Any = _NO_BATCH) -> AbstractContextManager[RunStats]:
        """One forward and backward under the plan: the checked path the first time (and at
        every step when `fast` is False), saved-tensor hooks alone afterwards. Every step is
        measured (`RunStats`, also `last_stats` after it); a step that goes over its budget
        gets a `BudgetWarning` and makes the next one a checked step.

        ``batch``: this iteration's batch (inputs and targets, as the loader gives it), for a
        ``loss_fn(output, batch)`` given to `prepare`: with ``replan=True``, a step whose
        inputs changed shape is profiled again with ``loss_fn(output, batch)``, this batch's
        targets included. The step itself runs what the ``with`` block runs."""
        if batch is not _NO_BATCH and self.loss_fn is not None and not self._loss_takes_batch:
            raise UserError(
                "planned.step(batch): the batch is handed to loss_fn(output, batch), and the "
                "loss_fn given to prepare takes the output alone"
            )
        return _Stepping(self, batch)

    @contextmanager
    def _checked_step(
        self, called: tuple[Sequence[Any], dict[str, Any]] | None = None
    ) -> Iterator[RunStats]:
        """The checked path (`apply`); the first time, it learns what later steps check and
        replay. ``called``: the model's inputs, when the step starts inside its call."""
        learning = self._learned is None
        inputs: list[list[tuple[Any, ...]]] = []
        tensors: list[list[torch.Tensor]] = []
        if called is not None:
            inputs.append(input_signature(*called))
            tensors.append([x for x in (*called[0], *called[1].values()) if torch.is_tensor(x)])
        current = [-1]
        blocks = self._blocks()
        observer = FirstStepObserver(current, ModuleCalls(self.model)) if learning else None
        given_objects: set[int] = set()  # blocks given an object (`learning.holds_objects`)

        def note_inputs(m: Any, a: Any, k: Any) -> None:
            if not tensors:
                tensors.append([x for x in (*a, *k.values()) if isinstance(x, torch.Tensor)])
                if not inputs:
                    inputs.append(input_signature(a, k))

        with ExitStack() as stack:
            if observer is not None:
                stack.enter_context(block_tracking(self.model, blocks, current, given_objects))
                stack.enter_context(observer.calls.tracking())
                h = self.model.register_forward_pre_hook(note_inputs, with_kwargs=True)
                stack.callback(h.remove)
            with apply(
                self.plan,
                self.budget,
                model=self.model,
                runtime=self.runtime,
                schedule=self.schedule,
                observer=observer,
            ) as stats:
                yield stats
        if observer is not None:
            self._learned = learn(
                self.plan,
                self.model,
                blocks,
                observer.packs,
                inputs[0] if inputs else None,
                observer.records,
                tensors[0] if tensors else [],
                shared=observer.shared,
                given_objects=frozenset(given_objects),
                closure_held=observer.closure_held,
            )

    def _switch_plan(
        self, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[ExitStack, RunStats]:
        """A fast step's inputs changed shape (``replan=True``): profile and solve the step
        again, and start the new plan's checked first step inside the model's call (the fast
        step closes it when the step ends)."""
        self._use(self._replan(args, kwargs))
        inner = ExitStack()
        stats = inner.enter_context(self._checked_step((args, kwargs)))
        return inner, stats

    def _replan(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Plan:
        """Profile the step again on the new inputs and solve it with the same solver."""
        if kwargs:
            raise ShapeChangeError(
                "replan=True: the model takes keyword inputs, which profiling cannot replay; "
                "prepare a plan for the new shapes instead"
            )
        inst = profile_step(self.model, tuple(args), self._profile_loss(),
                            blocks=[self.model.get_submodule(b) for b in self._blocks()])  # fmt: skip
        assert self.solver is not None
        plan = self.solver(inst, self.budget)
        if not isinstance(plan, Plan):
            raise ShapeChangeError(
                f"replan: the solver found no plan at {self.budget} for the new shapes"
            )
        return plan

    def _profile_loss(self) -> Callable[[Any], torch.Tensor] | None:
        """The loss the running step is profiled again with: ``loss_fn(output, batch)`` when
        the step was given its batch, else ``loss_fn(output)`` (None: the default loss)."""
        loss_fn, batch = self.loss_fn, self._batch
        if batch is _NO_BATCH:
            if self._loss_takes_batch:
                raise ShapeChangeError(
                    "replan=True: loss_fn takes (output, batch), and this step was given no "
                    "batch to profile the new shapes with: run it as `with planned.step(batch):`"
                )
            return loss_fn
        if loss_fn is None:
            raise ShapeChangeError(
                "replan=True: planned.step(batch) was given a batch but prepare no loss_fn to "
                "hand it to: pass loss_fn=lambda output, batch: ... (the loss the loop computes)"
            )
        return lambda output: loss_fn(output, batch)


class _Stepping:
    """One step of a `PlannedStep` as a context (``with planned.step() as stats:``): a class
    rather than a generator, as a fast step's set-up and end are a cost every step pays."""

    __slots__ = ("_fast", "_planned", "_run", "_stats", "batch")

    def __init__(self, planned: PlannedStep, batch: Any):
        self._planned = planned
        self.batch = batch
        self._fast: FastStep | None = None
        self._run: AbstractContextManager[RunStats] | None = None
        self._stats: RunStats | None = None

    def __enter__(self) -> RunStats:
        p = self._planned
        p._batch = self.batch
        try:
            if p.fast:
                assert p._learned is not None
                self._run = self._fast = FastStep(
                    p.model,
                    p._plan_facts(),
                    p._learned,
                    replan=p._switch_plan if p.replan else None,
                )
            else:
                self._run = p._checked_step()
            self._stats = self._run.__enter__()
        except BaseException:
            p._batch = _NO_BATCH
            raise
        return self._stats

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        p = self._planned
        assert self._run is not None
        try:
            self._run.__exit__(exc_type, exc, tb)
        finally:
            p._batch = _NO_BATCH
        if exc is not None:
            return
        stats = self._stats
        assert stats is not None
        if self._fast is not None and not self._fast.replanned:
            warn_about(stats, stacklevel=3)  # at the caller's ``with`` statement
        p._over = stats if stats.over_budget_bytes > 0 else None
        p.last_stats = stats
        p.steps += 1


def prepare(
    model: torch.nn.Module,
    plan: Plan,
    budget: Budget | float | str,
    *,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    runtime: str | None = None,
    schedule: str | None = None,
    replan: bool = False,
    solver: Callable[[Instance, Budget], Plan | None] | None = None,
) -> PlannedStep:
    """A reusable `PlannedStep` running ``plan`` at ``budget`` on ``model``, step after step.

    The plan is refused here when it does not fit the budget in the simulator or ``runtime``
    cannot run it. ``runtime``/``schedule``: as for `slackswap.runtime.apply` (the checked
    step). ``replan``: when the model's inputs change shape, profile the step again (with
    ``loss_fn``, default the sum of the output, and the profiled blocks) and call
    ``solver(instance, budget)`` for the new plan, instead of raising `ShapeChangeError`;
    ``slackswap.runtime`` does not import the solvers, so the caller passes the one that made
    the plan, e.g. ``lambda inst, b: slackswap.solve(inst, b, "slackswap").plan``.
    """
    return PlannedStep(model, plan, budget, loss_fn=loss_fn, runtime=runtime,
                       schedule=schedule, replan=replan, solver=solver)  # fmt: skip
