"""Compile (or load from numba's disk cache) what a run needs before anything is timed.

The simulator's event kernel and SlackSwap's planning passes are numba functions, compiled on
their first call and cached on disk (``cache=True``; `slackswap.numbacache`: one cache per user,
shared by every checkout of the same sources). New or edited sources compile them again, which
takes tens of CPU seconds (benchmarks/README.md); a later process loads them from the cache in
about a second. Either would otherwise land in the first job's
planning time (``plan_s``), or eat a search's time limit.

`warm_up` runs each solver, untimed and unrecorded, on a one-layer GPT-2 XL at a few budgets (the
kernels' argument types are those of every catalog instance), once per process, and says on
stderr, once per part, when numba actually compiles the simulator or the planner (it listens for
numba's compile event, so a cache load stays silent).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import slackswap
from slackswap import interrupts, numbacache
from slackswap.analysis import guard
from slackswap.instances.catalog import build_model
from slackswap.simulator import simulate
from slackswap.solvers import REGISTRY, run
from slackswap.solvers.planner._memory import need_ops, static_arrays
from slackswap.solvers.planner._passes import plan_passes

if TYPE_CHECKING:
    from slackswap.instance import Instance
    from slackswap.solvers.base import Solver

#: Seconds a search or exact solver gets per warm-up solve (the tiny instance needs far less).
WARM_TIME_LIMIT_S = 0.2
#: Budgets (fractions of P) a solver is warmed at, binding first: some compiled paths run only
#: at some budgets (SlackSwap's replay repair only at 60% on the warm-up instance).
WARM_BUDGETS = (0.4, 1.0, 0.8, 0.6, 0.5, 0.3, 0.2, 0.15, 0.1, 0.05)
#: The same for searches and exact solvers, which may take their time limit at each.
WARM_BUDGETS_TIMED = (0.4, 1.0, 0.1)
#: (what, CPU seconds a cold compile took on the 2-core development VM (benchmarks/README.md:
#: the simulator's kernel 18.4 s, SlackSwap's passes 8.8 s plus their imports and helpers),
#: module, its function called from Python): the parts the compile notice names.
COMPILED_PARTS: tuple[tuple[str, float, str, str], ...] = (
    ("simulator", 20.0, "slackswap.simulator.kernel", "run_batch"),
    ("planner", 13.0, "slackswap.solvers.planner._passes", "pass2_kernel"),
)

#: Seconds the warm-up waits for the process compiling the planner before going on without it.
HELPER_TIMEOUT_S = 600.0

_warm: set[str] = set()
_announced: set[str] = set()
_tiny: Instance | None = None


def _cost(cpu_s: float) -> str:
    """What a compile costs, as measured (CPU seconds on an idle machine)."""
    return f"about {cpu_s:.0f} s of CPU (measured on an idle 2-core machine; longer when busy)"


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def warm_up(
    solvers: Iterable[str | Solver],
    *,
    say: Callable[[str], None] | None = _stderr,
    guard_s: float | None = None,
) -> None:
    """Compile or load every compiled function the given solvers (names or objects) and the
    simulator use, once per process; ``say`` gets the one-line compile notices (None: silent).

    ``guard_s``: the wall-clock guard of the jobs the warm-up prepares (None: none). Each
    solver's warm-up runs under it too (in the main thread, as `execute`'s guard does), so a
    solver that never comes back stops the warm-up no later than it would stop its job: the
    job then reports it. The simulator's own compile is never cut.

    Never raises: a solver that fails here fails again, and is reported, in its real run.
    """
    todo: list[Any] = []
    for s in ["", *solvers]:  # "": the simulator itself, whatever the solvers
        key = s if isinstance(s, str) else repr(s)
        if key not in _warm:
            _warm.add(key)
            todo.append(s)
    if not todo:
        return
    helper = _planner_helper(say) if "" in todo else None
    with _watch_numba(say) as numba_calls:
        inst = _instance()
        for solver in todo:
            if solver != "" and helper is not None:
                _wait(helper)  # the planner is in the cache now: load it, do not compile it twice
                helper = None
            with _guarded(guard_s if solver != "" else None):
                _warm_one(inst, solver, numba_calls)
    if helper is not None:
        _wait(helper)


@contextmanager
def _guarded(seconds: float | None) -> Iterator[None]:
    """The body under the wall-clock guard of ``seconds`` (None, or outside the main thread:
    none); a body the guard stops just ends."""
    if seconds is None or not guard.can_alarm():
        yield
        return
    try:
        with guard.alarm(seconds):
            yield
    except guard.JobTimeout:
        pass


def _wait(helper: subprocess.Popen[bytes]) -> None:
    try:
        helper.wait(timeout=HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # this process compiles what the helper did not
        helper.kill()
        helper.wait()


def _planner_helper(say: Callable[[str], None] | None) -> subprocess.Popen[bytes] | None:
    """With the simulator and the planner both to compile (a fresh clone) and a second core,
    compile the planner in a second process while this one compiles the simulator: the cold
    warm-up then takes about the longer of the two, not their sum. None when not worth it."""
    stale = dict(stale_parts(unknown=False))  # only a cache known to be empty starts a process
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    if "simulator" not in stale or "planner" not in stale or cores < 2:
        return None

    env = dict(os.environ)
    # the same sources, so the same numba cache files
    src = str(Path(slackswap.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    try:
        helper = subprocess.Popen(
            [sys.executable, "-c", "from slackswap.analysis.warmup import compile_planner; "
             "compile_planner()"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        return None
    if say is not None:
        _announced.update(stale)
        say(
            f"first run: compiling the simulator and, in a second process, the planner, "
            f"{_cost(max(stale.values()))} (once: numba's compiled code is "
            f"{numbacache.describe()})"
        )
    return helper


def compile_planner() -> None:
    """Compile SlackSwap's passes (not the simulator) on the warm-up instance, into numba's
    cache: the second process of `_planner_helper`."""
    import numpy as np

    inst = _instance()
    sa = static_arrays(inst)
    for frac in WARM_BUDGETS:
        for pass1 in (True, False):
            res = plan_passes(
                sa, int(frac * inst.peak_bytes), int(inst.peak_bytes), pass1=pass1,
                excluded=np.zeros(inst.n_tensors, dtype=bool),
                forced_recomp=np.zeros(inst.n_tensors, dtype=bool),
            )  # fmt: skip
            # the repair's call, with the read-only first-reader array as ``back``
            need_ops(res.actions, sa.fbr, sa.fbr, sa.prod, sa.rb_ptr, sa.rb_idx)


def _instance() -> Instance:
    global _tiny
    if _tiny is None:
        _tiny = build_model("gpt2-xl", layers=1, name="warm-up")
    return _tiny


def _warm_one(inst: Instance, solver: Any, numba_calls: list[int]) -> None:
    import numpy as np

    # Here, not at the top: compile_planner's helper process imports this module and needs
    # neither the simulator nor the solver registry.

    try:
        if solver == "":
            simulate(inst, np.zeros(inst.n_tensors, dtype=np.int8), 1.0)
            return
        tags = REGISTRY[solver].tags if isinstance(solver, str) else type(solver).tags
        timed = tags.uses_time_limit or tags.exact
        limit = WARM_TIME_LIMIT_S if timed else None
        for k, frac in enumerate(WARM_BUDGETS_TIMED if timed else WARM_BUDGETS):
            before = numba_calls[0]
            run(inst, frac, solver, time_limit=limit, seed=0, find_min_budget=False)
            if k == 0 and numba_calls[0] == before:
                return  # its first solve compiled or loaded nothing: it has no compiled code
    except Exception:  # noqa: BLE001 - the real run reports it
        pass


def stale_parts(*, unknown: bool = True) -> list[tuple[str, float]]:
    """The compiled parts numba's cache holds nothing for (what, seconds a compile took here);
    a part whose cache cannot be read (another numba's layout) counts as stale if ``unknown``."""
    import importlib

    out = []
    for what, seconds, module, name in COMPILED_PARTS:
        try:
            dispatcher = getattr(importlib.import_module(module), name)
            stale = not dispatcher._cache._cache_file._load_index()  # numba internals
        except Exception:  # noqa: BLE001 - an unknown cache layout
            stale = unknown
        if stale:
            out.append((what, seconds))
    return out


@contextmanager
def _watch_numba(say: Callable[[str], None] | None) -> Iterator[list[int]]:
    """Count numba's compiles and cache loads in a one-item list; and say on ``say``, once per
    process and part, when a real compile (not a cache load) of the simulator or the planner
    starts, with about how long it takes."""
    from numba.core import event

    stale = dict(stale_parts()) if say is not None else {}
    modules = {module: what for what, _, module, _ in COMPILED_PARTS if what in stale}
    count = [0]

    class Loads(event.Listener):  # every compile or cache load takes numba's compiler lock
        def on_start(self, ev: Any) -> None:
            count[0] += 1
            # LLVM calls back into Python through ctypes: a KeyboardInterrupt raised there
            # would be "Exception ignored" (a traceback) and the compile would go on
            interrupts.begin_ending_at_once()

        def on_end(self, ev: Any) -> None:
            interrupts.end_ending_at_once()

    class Compiles(event.Listener):  # a real compile only
        def on_start(self, ev: Any) -> None:
            dispatcher = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
            module = getattr(getattr(dispatcher, "py_func", None), "__module__", None)
            what = modules.get(module or "")
            if say is None or what is None or what in _announced:
                return
            _announced.add(what)
            say(
                f"first run: compiling the {what}, {_cost(stale[what])} (once: numba's "
                f"compiled code is {numbacache.describe()})"
            )

        def on_end(self, ev: Any) -> None:
            pass

    listeners = {"numba:compiler_lock": Loads(), "numba:compile": Compiles()}
    for kind, listener in listeners.items():
        event.register(kind, listener)
    try:
        yield count
    finally:
        for kind, listener in listeners.items():
            event.unregister(kind, listener)
