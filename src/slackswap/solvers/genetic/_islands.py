"""Running the genetic search's islands side by side in forked worker processes, or in turn in
the calling thread, with the same result either way.

Why processes: DEAP's variation is Python and holds the GIL for about as long as the simulator
(compiled, GIL released) takes to score the plans it makes, so two islands in two threads of one
process mostly wait for each other's Python: two threads score hardly more plans per second
than one, two processes nearly twice as many (figures in benchmarks/README.md, "Genetic
search"). A worker process made by ``fork`` inherits the loaded instance, the compiled simulator
and the fitness, so it starts in milliseconds and nothing travels but genomes. Forking a process
that runs other threads is unsafe (a lock another thread held at the fork stays held in the
child), so such a caller (Jupyter, a Dask worker) gets fresh interpreters instead
(``forkserver`` or ``spawn``): its islands travel pickled, and a worker takes about a second to
import and load the compiled simulator (`_fresh_worker`).

The islands are dealt to groups (island i to group i mod workers); the calling thread runs
group 0 and each other group runs in a worker, its islands taking their generations in turn.

Migration is a ring with one interval of delay: every ``interval`` generations an island sends
its ``migrants`` best (DEAP's `tools.selBest`) to the next island, and takes in, in place of its
worst (`tools.selWorst`), the migrants the previous island sent one interval earlier. An island
therefore never waits for a slower neighbour's current generation (a synchronous ring made both
islands idle about a tenth of the time), only, in the rare case, for one that has fallen a whole
interval behind; and what it receives is fixed by the sender's generation, not by timing, so the
result is the same for any number of workers. Messages go through the calling thread, which
routes them while it waits for its own.

Stops (`StopBoard`): an island's own rules, the generation limit and its share of the
evaluation limit, are deterministic. The clock is not: when one island finds the time limit near,
every island runs to the highest generation any island has started, so all islands of a run
stopped by the clock end at the same generation count and ``max_generations`` set to it replays
the run exactly.
"""

from __future__ import annotations

import importlib
import math
import multiprocessing
import pickle
import statistics
import sys
import threading
import traceback
import types
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection, wait
from typing import Any

from slackswap.interrupts import spawning, tie_to_parent
from slackswap.solvers.deadline import Deadline

#: Genomes in transit: each one's genes and its DEAP fitness ``wvalues``.
Snapshot = list[tuple[bytes, tuple[float, ...]]]


@dataclass
class IslandReport:
    """One island's outcome, sent back from a worker."""

    index: int
    generations: int
    stop: str  # "generations", "evaluations", "time", "target"
    evaluations: int
    cache_hits: int
    best: tuple[bytes, tuple[float, ...]]  # hall-of-fame leader: genes, fitness wvalues
    # Per generation (0 = the initial population): (clock seconds at its end, evaluations so
    # far, best feasible step seconds so far or inf).
    log: list[tuple[float, int, float]] = field(default_factory=list)


class StopBoard:
    """Where the islands decide to stop (shared by forked processes via ``ctx``).

    ``started[i]`` is the last generation island i began (-1 once it stopped by its own rule).
    Once some island finds the time limit near, ``stop_at`` is fixed at the largest of them and
    no island begins a later generation, while every island still runs up to it: all end at the
    same generation, and no island waits for migrants that a stopped neighbour will never send.
    The islands may drift apart by up to a migration interval, so the clock check allows for
    the generations the slowest running island still has to run.
    """

    def __init__(self, n_islands: int, ctx: Any = None) -> None:
        if ctx is None:
            self._lock: Any = threading.Lock()
            self._started: Any = [0] * n_islands
            self._stop_at: Any = [-1]
        else:
            self._lock = ctx.Lock()
            self._started = ctx.Array("q", n_islands, lock=False)
            self._stop_at = ctx.Array("q", [-1], lock=False)

    def may_start(self, island: int, generation: int, time_up: Callable[[int], bool]) -> bool:
        """Whether ``island``, having finished ``generation``, may begin the next one;
        ``time_up(lag)`` says whether the clock would pass the limit if ``lag`` more
        generations than this one's next had to run."""
        with self._lock:
            stop_at = int(self._stop_at[0])
            if stop_at < 0:
                started = [int(s) for s in self._started[:]]
                running = [s for s in started if s >= 0]
                lead = max(started)
                if time_up(lead - min(running) if running else 0):
                    stop_at = lead
                    self._stop_at[0] = stop_at
            if 0 <= stop_at <= generation:
                return False
            self._started[island] = generation + 1
            return True

    def finish(self, island: int) -> None:
        """``island`` stopped by its own rule: it no longer holds the others back."""
        with self._lock:
            self._started[island] = -1

    @property
    def timed_out(self) -> bool:
        return int(self._stop_at[0]) >= 0


@dataclass(frozen=True)
class Rules:
    """An island's stop rules: generation limit, its share of the evaluations, the clock, and
    a target step (seconds) no plan can beat, once its best feasible plan reaches it."""

    max_generations: int | None
    evaluation_share: int | None
    deadline: Deadline
    target_step_s: float | None = None

    def clock(self) -> float:
        return self.deadline.clock()

    def own_stop(self, generation: int, evaluations: int, best_step_s: float = math.inf) -> str:
        if self.target_step_s is not None and best_step_s <= self.target_step_s:
            return "target"
        if self.max_generations is not None and generation >= self.max_generations:
            return "generations"
        if self.evaluation_share is not None and evaluations >= self.evaluation_share:
            return "evaluations"
        return ""

    def time_up(self, pace: Pace, lag: int) -> bool:
        """Whether the next generation, and ``lag`` more, might end past the limit: the next
        may take as long as the slowest of late (`Pace.worst_s`), and the ``lag`` more, which
        an island behind must run to catch up, plus one to spare, the usual time
        (`Pace.usual_s`). One stalled generation (the machine busy for a moment) is not taken
        to be the pace of all the ones behind it."""
        if not self.deadline.limited:
            return False
        needed = pace.worst_s + (1 + lag) * pace.usual_s
        return self.deadline.elapsed() + needed > self.deadline.usable_s


class Pace:
    """How long an island's generations take: the slowest of late (each earlier one counting
    0.8 times as much per generation since: a machine that slows down shows at once) and the
    median of the last `WINDOW` (the usual pace, which one stall does not move)."""

    WINDOW = 9

    def __init__(self) -> None:
        self.worst_s = 0.0
        self._recent: deque[float] = deque(maxlen=self.WINDOW)

    def add(self, generation_s: float) -> None:
        self.worst_s = max(0.8 * self.worst_s, generation_s)
        self._recent.append(generation_s)

    @property
    def usual_s(self) -> float:
        return statistics.median(self._recent) if self._recent else 0.0


#: How long past the time limit (s) the calling thread waits for a worker that sends nothing.
WORKER_GRACE_S = 5.0


class WorkerFailed(RuntimeError):
    """An island worker raised (its message), or exited without a word."""


class _Post:
    """A group's mail: migrants and stop notices for its islands, by (generation, island).

    ``send`` addresses a message to an island, wherever it runs; ``take`` waits (reading this
    group's link) for the migrants an island is due. Messages: ("mig", to, generation, genomes),
    ("stop", to, last generation of the sender), ("done", reports), ("error", text).
    """

    def __init__(self, group: int, workers: int) -> None:
        self.group = group
        self.workers = workers
        self.migrants: dict[tuple[int, int], Snapshot] = {}  # (generation, island) -> genomes
        self.sender_stopped: dict[int, int] = {}  # island -> last generation of its sender

    def file(self, msg: tuple[Any, ...]) -> None:
        if msg[0] == "mig":
            self.migrants[(msg[2], msg[1])] = msg[3]
        elif msg[0] == "stop":
            self.sender_stopped[msg[1]] = msg[2]
        elif msg[0] == "error":
            raise WorkerFailed(msg[1])
        else:
            raise WorkerFailed(f"ga: unexpected island message {msg[0]!r}")

    def send(self, msg: tuple[Any, ...]) -> None:
        if msg[1] % self.workers == self.group:
            self.file(msg)
        else:
            self._send_away(msg)

    def take(self, island: int, generation: int) -> Snapshot | None:
        """The migrants sent to ``island`` at ``generation``; None if its sender stopped first."""
        key = (generation, island)
        while key not in self.migrants:
            if self.sender_stopped.get(island, generation) < generation:
                return None
            self.file(self._fetch())
        return self.migrants.pop(key)

    def poll(self) -> None:
        """Handle what has arrived, without waiting (the hub routes it on)."""

    def _send_away(self, msg: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _fetch(self) -> tuple[Any, ...]:
        raise NotImplementedError


class _WorkerPost(_Post):
    """A worker group's mail: everything goes through its one link to the calling thread."""

    def __init__(self, group: int, workers: int, conn: Connection) -> None:
        super().__init__(group, workers)
        self.conn = conn

    def _send_away(self, msg: tuple[Any, ...]) -> None:
        self.conn.send(msg)

    def _fetch(self) -> tuple[Any, ...]:
        msg: tuple[Any, ...] = self.conn.recv()
        return msg


class _HubPost(_Post):
    """The calling thread's mail: it also routes the workers' messages to each other and
    collects their reports."""

    def __init__(
        self,
        workers: int,
        links: dict[int, Connection],
        deadline: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(0, workers)
        self.links = links
        self.live = set(links)
        self.reports: list[IslandReport] = []
        self.deadline = deadline  # clock reading after which a silent worker is given up on
        self.clock = clock

    def _send_away(self, msg: tuple[Any, ...]) -> None:
        group = msg[1] % self.workers
        if group in self.live:  # a finished worker needs nothing more
            try:
                self.links[group].send(msg)
            except BrokenPipeError:
                # It finished and closed its end before its report was read here; had it
                # failed instead, reading its link says so.
                pass

    def _receive(self, group: int) -> tuple[Any, ...] | None:
        """Take one message from a worker: handle it here, or return it if it is for group 0."""
        try:
            msg: tuple[Any, ...] = self.links[group].recv()
        except EOFError:
            raise WorkerFailed(f"ga: island worker {group} exited unexpectedly") from None
        if msg[0] == "done":
            self.reports.extend(msg[1])
            self.live.discard(group)
        elif msg[0] == "error":
            raise WorkerFailed(f"ga: island worker {group} failed: {msg[1]}")
        elif msg[1] % self.workers == 0:
            return msg
        else:
            self._send_away(msg)
        return None

    def _ready(self) -> list[int]:
        """Wait until some live worker's link has a message; those workers, in order.

        Past the deadline (the time limit plus `WORKER_GRACE_S`) a worker that still says
        nothing is given up on, so that a worker stuck starting (a fresh interpreter that
        cannot import, say) fails the search instead of hanging it."""
        by_conn = {id(self.links[g]): g for g in self.live}
        while True:
            timeout = None
            if self.deadline is not None and self.clock is not None:
                timeout = max(0.0, self.deadline - self.clock())
            ready = wait([self.links[g] for g in self.live], timeout)
            if ready:
                return sorted(by_conn[id(c)] for c in ready)
            if timeout is not None and timeout <= 0.0:
                silent = ", ".join(str(g) for g in sorted(self.live))
                raise WorkerFailed(
                    f"ga: island worker {silent} sent nothing {WORKER_GRACE_S:g} s past the time "
                    "limit; gave up on it"
                )

    def _fetch(self) -> tuple[Any, ...]:
        while True:
            if not self.live:
                raise WorkerFailed("ga: every island worker finished while an island still waited")
            for group in self._ready():
                msg = self._receive(group)
                if msg is not None:
                    return msg

    def poll(self) -> None:
        # Workers' messages to each other pass here; route them at least once a generation.
        ready = True
        while ready:
            ready = False
            for g in sorted(self.live):
                if g in self.live and self.links[g].poll():
                    ready = True
                    msg = self._receive(g)
                    if msg is not None:
                        self.file(msg)

    def drain(self) -> None:
        """Route and collect until every worker has reported."""
        while self.live:
            for group in self._ready():
                msg = self._receive(group)
                if msg is not None:
                    self.file(msg)


def run_group(
    islands: Sequence[Any],
    rules: Rules,
    board: StopBoard,
    post: _Post,
    *,
    n_islands: int,
    interval: int,
) -> list[IslandReport]:
    """Run these islands' generations in turn until each stops, migrating every ``interval``
    generations along the ring of all ``n_islands`` islands."""
    active = list(islands)
    reports: list[IslandReport] = []
    pace = {isl.index: Pace() for isl in islands}
    started_at = {isl.index: rules.clock() for isl in islands}
    waited_s = 0.0  # this group's time spent waiting for migrants
    waited_at = {isl.index: 0.0 for isl in islands}
    ring = n_islands > 1
    while active:
        post.poll()
        for isl in list(active):
            now = rules.clock()
            if isl.generation > 0:
                # Time between this island's generations (a round of the whole group), less
                # the waits for migrants: a neighbour that started late (a fresh worker takes
                # about a second) must not make a generation look that long to the clock.
                work = now - started_at[isl.index] - (waited_s - waited_at[isl.index])
                pace[isl.index].add(work)
            started_at[isl.index] = now
            waited_at[isl.index] = waited_s
            stop = rules.own_stop(isl.generation, isl.evaluations, isl.best_step_s)
            if stop:
                board.finish(isl.index)
            elif not board.may_start(
                isl.index, isl.generation, partial(rules.time_up, pace[isl.index])
            ):
                stop = "time"
            if stop:
                active.remove(isl)
                reports.append(isl.report(stop))
                if ring:
                    post.send(("stop", (isl.index + 1) % n_islands, isl.generation))
                continue
            isl.step()
            isl.generation += 1
            g = isl.generation
            if ring and g % interval == 0:
                if g > interval:
                    t_wait = rules.clock()
                    incoming = post.take(isl.index, g - interval)
                    waited_s += rules.clock() - t_wait
                    if incoming is not None:
                        isl.immigrate(incoming)
                post.send(("mig", (isl.index + 1) % n_islands, g, isl.emigrants()))
            isl.note(rules.clock())
    return reports


def _worker(
    inherited: list[Connection],
    conn: Connection,
    group: int,
    workers: int,
    islands: Sequence[Any],
    rules: Rules,
    board: StopBoard,
    n_islands: int,
    interval: int,
) -> None:
    """A worker group's main: run its islands, talking to the calling thread through ``conn``.

    ``inherited``: the calling thread's ends of the links made before this worker's, which a
    forked worker holds copies of; it closes them, or a worker that exits would not be seen to
    (its link would stay open here)."""
    tie_to_parent()  # a search killed with kill -9 leaves no island running
    for other in inherited:
        other.close()
    post = _WorkerPost(group, workers, conn)
    try:
        reports = run_group(
            islands, rules, board, post,
            n_islands=n_islands, interval=interval,
        )  # fmt: skip
        conn.send(("done", reports))
    except (EOFError, BrokenPipeError):
        pass  # the calling thread gave up (it failed itself); nothing to report
    except BaseException as exc:  # noqa: BLE001 - sent to the calling thread, which raises it
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        try:
            conn.send(("error", text))
        except OSError:
            pass
    finally:
        conn.close()


def fork_available() -> bool:
    """Whether worker processes can be forked safely here: a fork start method exists, the
    calling process runs no other thread (a thread holding a lock at the fork would leave the
    child's copy of that lock held forever), and it is not itself a daemonic worker (say, of a
    `multiprocessing.Pool`), which may not have children."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
        and not multiprocessing.current_process().daemon
    )


def worker_start_method() -> str | None:
    """How island workers start here: ``fork`` where that is safe (see `fork_available`);
    else, for a caller running other threads (Jupyter, Dask), a fresh interpreter (``forkserver``,
    or ``spawn`` where there is none), which costs about a second to start and needs the islands
    to pickle; None for a daemonic caller, which may not have children at all."""
    if multiprocessing.current_process().daemon:
        return None
    if fork_available():
        return "fork"
    methods = multiprocessing.get_all_start_methods()
    for method in ("forkserver", "spawn"):
        if method in methods:
            return method
    return None


@contextmanager
def _without_main() -> Iterator[None]:
    """Hide the caller's ``__main__`` while a fresh worker starts.

    `multiprocessing` makes a spawned (or forkserver) child run the parent's main script again,
    as ``__mp_main__``, so that objects defined there unpickle; a script without an
    ``if __name__ == "__main__":`` guard would then run its whole job again in the worker. The
    islands never need the script (`run_islands` keeps them in turn if their pickle names
    ``__main__``), so the child is told of none."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _fresh_worker(
    payload: bytes, conn: Connection, board: StopBoard, preload: tuple[str, ...]
) -> None:
    """A spawned (or forkserver) worker's main: import ``preload``, unpickle its islands and run
    them.

    The genomes' classes are made by DEAP's ``creator`` when the search module is imported, so
    the caller names that module in ``preload`` and its import comes first."""
    tie_to_parent()
    try:
        for module in preload:
            importlib.import_module(module)
        group, workers, islands, rules, n_islands, interval = pickle.loads(payload)
        for isl in islands:
            isl.warm()
    except BaseException as exc:  # noqa: BLE001 - sent to the calling thread, which raises it
        conn.send(("error", "".join(traceback.format_exception_only(type(exc), exc)).strip()))
        conn.close()
        return
    _worker([], conn, group, workers, islands, rules, board, n_islands, interval)


def run_islands(
    islands: Sequence[Any],
    rules: Rules,
    *,
    interval: int,
    workers: int,
    start_method: str | None,
    preload: Sequence[str] = (),
) -> tuple[list[IslandReport], bool]:
    """Run every island until it stops: in ``workers`` groups, one in the calling thread (which
    also routes messages) and the others in worker processes started by ``start_method``
    (``fork``, ``forkserver`` or ``spawn``); with None, or where the islands do not pickle for a
    fresh worker, all in turn in the calling thread. Returns the reports in island order and
    whether the clock stopped the run. ``preload``: modules a fresh (spawned or forkserver)
    worker imports before it unpickles the islands (the search module, whose import makes the
    genomes' classes).

    There is no thread mode: DEAP's Python holds the GIL, so island threads only take turns,
    and slowly (figures in benchmarks/README.md, "Figures from module docstrings")."""
    n = len(islands)
    workers = max(1, min(workers, n)) if start_method else 1
    payloads: dict[int, bytes] = {}
    if workers > 1 and start_method != "fork":
        try:
            payloads = {
                g: pickle.dumps((g, workers, islands[g::workers], rules, n, interval))
                for g in range(1, workers)
            }
        except (pickle.PicklingError, AttributeError, TypeError):
            workers = 1  # say, a fitness that is a closure: the islands take turns instead
        if any(b"__main__" in p for p in payloads.values()):
            # Something in them is defined in the caller's script, which a fresh worker does not
            # run (see _without_main). Genes are bytes 0-2, so they never read as that name.
            workers = 1
    # Only with workers: a platform without fork has no such context.
    ctx: Any = multiprocessing.get_context(start_method) if workers > 1 else None
    if workers > 1 and start_method == "forkserver":
        ctx.set_forkserver_preload(list(preload))
    board = StopBoard(n, ctx)
    links: dict[int, Connection] = {}
    runners: list[Any] = []
    finished = False
    if workers > 1:
        sys.stdout.flush()
        sys.stderr.flush()  # a forked child must not write the parent's buffered output again
    try:
        for g in range(1, workers):
            mine, theirs = ctx.Pipe()
            if start_method == "fork":
                args: tuple[Any, ...] = (
                    list(links.values()), theirs, g, workers, islands[g::workers], rules, board,
                    n, interval,
                )  # fmt: skip
                runner = ctx.Process(target=_worker, args=args, daemon=True)
                runner.start()
                runners.append(runner)
            else:
                runner = ctx.Process(
                    target=_fresh_worker,
                    args=(payloads[g], theirs, board, tuple(preload)),
                    daemon=True,
                )
                with _without_main(), spawning():
                    runner.start()
                    # Inside the block: a Ctrl-C it held is raised as it ends, and the
                    # worker started must still be stopped below.
                    runners.append(runner)
            theirs.close()  # the child holds its end; EOF then means it exited
            links[g] = mine
        deadline = None
        if rules.deadline.limited:
            deadline = rules.deadline.at + WORKER_GRACE_S
        hub = _HubPost(workers, links, deadline, rules.clock)
        reports = run_group(
            islands[0::workers], rules, board, hub,
            n_islands=n, interval=interval,
        )  # fmt: skip
        hub.drain()
        reports += hub.reports
        finished = True
    finally:
        for conn in links.values():
            conn.close()
        for runner in runners:
            # A worker that reported exits at once; after a failure, one may be stuck.
            runner.join(timeout=5.0 if finished else 0.5)
            if runner.is_alive():
                runner.terminate()
                runner.join()
    reports.sort(key=lambda r: r.index)
    return reports, board.timed_out
