"""A fast step of the training path: saved-tensor hooks alone, no dispatch mode (see
`slackswap.runtime.training`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch

from slackswap.errors import UserError
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.runtime import RunStats
from slackswap.runtime.copies import copy_to_host
from slackswap.runtime.entry import Entry, EntryState, Handle, Residency, StateError
from slackswap.runtime.executor import StepMismatchError
from slackswap.runtime.policy import RuntimePolicy
from slackswap.runtime.rebuild import Rebuilder, view
from slackswap.runtime.training.checkpointing import checkpointed_block
from slackswap.runtime.training.learning import Learned, Pack, input_signature, storage_nbytes
from slackswap.runtime.training.replay import capturing_rng

if TYPE_CHECKING:
    from slackswap.runtime.training.planned import PlannedStep


class ShapeChangeError(UserError):
    """A step of a prepared plan saw other shapes than the profiled step (another batch size)."""


class FastStep:
    """One step with saved-tensor hooks alone (see `slackswap.runtime.training`)."""

    def __init__(self, owner: PlannedStep, learned: Learned):
        self.owner = owner
        self.learned = learned
        self.expected = learned.expected
        self.actions = learned.actions
        self.inst = owner.plan.instance
        self.pos = 0
        self.entries = [
            Entry(i, int(a), int(n), name)
            for i, (a, n, name) in enumerate(
                zip(learned.actions, self.inst.tensor_bytes, self.inst.tensor_name, strict=True)
            )
        ]
        self.error: BaseException | None = None
        self.stats = RunStats(
            budget_bytes=owner._stats.budget_bytes,
            simulated_peak_bytes=owner._stats.simulated_peak_bytes,
            simulated_step_s=owner._stats.simulated_step_s,
            runtime=owner._stats.runtime,
        )
        self.cuda = owner._on_cuda()
        self.policy: RuntimePolicy = owner._policy(self.cuda)
        self._copy_stream: Any = None
        self._h2d_stream: Any = None
        self._prefetch = self.cuda and self.policy.overlap and self.policy.prefetch
        if self.cuda and self.policy.overlap:
            self._copy_stream = torch.cuda.Stream()
            self._h2d_stream = torch.cuda.Stream()
        self._admitted = 0  # bytes of the entries copied back (their device storages)
        self._cursor = 0  # deadline order: the first swapped tensor not yet fetched back
        self._base: Any = None
        self._transient: Any = None
        if self._prefetch:
            self._base, self._transient = owner._memory_model()
        self._inner: ExitStack | None = None  # the new plan's checked step, after a replan
        self._inner_stats: Any = None
        self._stack = ExitStack()
        self._saving_inputs = [False]  # checkpoint is saving a block's (kept) inputs
        self.rebuilder: Rebuilder | None = None
        self._pending: dict[int, set[int]] = {}  # rebuild input -> recomputed ones still to come
        self._finished: set[int] = set()  # autograd is done with these; a rebuild is not
        rp = learned.replay
        if rp is not None:
            self.rebuilder = Rebuilder(
                rp.trace,
                self.inst,
                self.entries,
                rp.entry_of_value,
                materialise=self._materialise,
                quiet=nullcontext,
            )
            self.rebuilder.records = dict(rp.records)  # random ones get today's RNG state
            self.rebuilder.allocs = rp.allocs
            self.rebuilder.chains = rp.chains
            self._pending = {u: set(vs) for u, vs in rp.consumers.items()}

    @property
    def hooks_needed(self) -> bool:
        """False for a plan that keeps every saved tensor it covers, outside any checkpointed
        block: autograd's own handling is then the plan, so the step runs with no saved-tensor
        hook at all (no Python per saved tensor). The first step checked the operators; the
        inputs' shapes are still checked before each step."""
        return bool(
            self.learned.checkpointed
            or self.learned.replay is not None
            or any(int(a) != KEEP for a in self.actions)
        )

    @contextmanager
    def running(self) -> Iterator[RunStats]:
        owner = self.owner
        with ExitStack() as stack:
            for b in self.learned.checkpointed:
                stack.enter_context(
                    checkpointed_block(owner.model, owner._blocks()[b], self._saving_inputs)
                )
            h = owner.model.register_forward_pre_hook(self._check_inputs, with_kwargs=True)
            stack.callback(h.remove)
            if self.learned.replay is not None and self.learned.replay.random:
                assert self.rebuilder is not None
                stack.enter_context(capturing_rng(owner.model, self.learned.replay, self.rebuilder))
            if self.hooks_needed:
                stack.enter_context(
                    torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
                )
            self._stack = stack
            try:
                yield self.stats
            except BaseException as exc:
                if self._inner is not None:
                    inner, self._inner = self._inner, None
                    inner.__exit__(type(exc), exc, exc.__traceback__)
                    raise
                if self.error is not None and exc is not self.error:
                    raise self.error from exc
                raise
            finally:
                self._drop_all()
            if self._inner is not None:
                inner, self._inner = self._inner, None
                inner.__exit__(None, None, None)
                self.stats.__dict__.update(self._inner_stats.__dict__)
                return
            if self.error is not None:
                raise self.error
            if self.hooks_needed and self.pos != len(self.expected):
                raise StepMismatchError(
                    f"the step saved {self.pos} tensors for autograd where the first step of "
                    f"the plan saved {len(self.expected)} (forward and backward must both run "
                    "inside the with block)"
                )

    def _drop_all(self) -> None:
        for e in self.entries:
            e.free()
        if self.rebuilder is not None:
            self.rebuilder.externals = {}

    # ----- shapes -----------------------------------------------------------------------------
    def _check_inputs(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._inner is not None:
            return
        if self.rebuilder is not None and self.learned.replay is not None:
            flat = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
            self.rebuilder.externals = {
                v: flat[k] for v, k in self.learned.replay.externals.items() if k < len(flat)
            }
        want = self.learned.inputs
        if want is None:
            return
        got = input_signature(args, kwargs)
        if got == want:
            return
        if not self.owner.replan:
            self.error = ShapeChangeError(
                f"the model's inputs are {_fmt(got)}, the plan was made for {_fmt(want)} "
                "(another batch size or sequence length): prepare a plan for these shapes, "
                "or pass replan=True"
            )
            raise self.error
        self._switch_to_new_plan(args, kwargs)

    def _switch_to_new_plan(self, args: Any, kwargs: Any) -> None:
        """Profile and solve the step again, then run the rest of it as the checked first step
        of the new plan (its dispatch mode and hooks sit above this step's hooks)."""
        owner = self.owner
        self._stack.close()  # this step's checkpoint wrappers and hooks go first
        owner._use(owner._replan(args, kwargs))
        inner = ExitStack()
        self._inner_stats = inner.enter_context(owner._checked_step((args, kwargs)))
        self._inner = inner

    # ----- saved-tensor hooks -----------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        if self._saving_inputs[0]:
            return t  # a checkpointed block's kept inputs, held by torch.utils.checkpoint
        k = self.pos
        self.pos = k + 1
        exp = self.expected
        if k >= len(exp):
            self._fail(
                StepMismatchError(
                    f"the step saves more tensors for autograd than the first step of the plan "
                    f"({len(exp)}): it is not the step the plan was made for"
                )
            )
        p = exp[k]
        if t.shape != p.shape or t.dtype != p.dtype or storage_nbytes(t) != p.nbytes:
            self._mismatch(k, p, t)
        if p.entry < 0:
            return t
        e = self.entries[p.entry]
        action = e.action
        if action == KEEP:
            if p.entry in self._pending and e.residency is Residency.ABSENT:
                e.move(Residency.DEVICE, device=t.untyped_storage())  # a rebuild reads it
            return t
        if not e.packed:
            e.to(EntryState.SAVED)
            if action == SWAP:
                self._offload(e, t)  # a rebuild that reads it fetches it back, as autograd does
            else:
                self.stats.recomputed_bytes += e.nbytes
        return Handle(e, t, keep=False, release=self._release)

    def _mismatch(self, k: int, p: Pack, t: torch.Tensor) -> None:
        name = self.inst.tensor_name[p.entry] if p.entry >= 0 else f"saved tensor #{k}"
        got = f"{t.dtype}, shape {list(t.shape)}, {storage_nbytes(t)} storage bytes"
        want = f"{p.dtype}, shape {list(p.shape)}, {p.nbytes} storage bytes"
        # The model's inputs were checked before its first operator: with the same inputs, a
        # tensor of another shape means another step, not another batch size.
        other_shape = t.dtype == p.dtype and t.shape != p.shape and self.learned.inputs is None
        cls = ShapeChangeError if other_shape else StepMismatchError
        self._fail(
            cls(
                f"saved tensor {name!r} (pack {k}) is {got}; the plan's step has {want}: the "
                "step is not the one the plan was made for"
            )
        )

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        raise exc

    def _unpack(self, h: Any) -> torch.Tensor:
        if not isinstance(h, Handle):
            return h  # type: ignore[no-any-return]
        e = h.entry
        if self._prefetch:
            # The step is at this tensor's first backward reader: the copies back the
            # look-ahead admits from there start now.
            self._admit(int(self.inst.tensor_first_bwd_reader[e.index]))
        storage = self._materialise(e)
        if e.event is not None:
            torch.cuda.current_stream().wait_event(e.event)
        return view(storage, h.dtype, h.offset, h.size, h.stride)

    def _materialise(self, e: Entry) -> Any:
        if not e.on_device:
            if e.residency is Residency.HOST:
                self._fetch(e)
            elif e.action == RECOMP and self.rebuilder is not None:
                self._rebuild(e)
                self.stats.rebuilds += 1
                self._done(e.index)
        if not e.on_device:
            raise StateError(
                f"saved tensor {e.name!r} (#{e.index}) is needed while {e.residency.value}"
            )
        return e.device

    def _rebuild(self, e: Entry) -> None:
        """Rebuild ``e``; buffers its chain reads (batch-norm running statistics, which
        ``native_batch_norm`` updates in place without its schema saying so) are put back, so
        the model's state is that of one step."""
        assert self.rebuilder is not None and self.learned.replay is not None
        buffers = self.learned.replay.buffers
        if not buffers:
            self.rebuilder.rebuild(e)
            return
        saved = [b.detach().clone() for b in buffers]
        try:
            self.rebuilder.rebuild(e)
        finally:
            with torch.no_grad():
                for b, v in zip(buffers, saved, strict=True):
                    b.copy_(v)

    def _done(self, v: int) -> None:
        """Recomputed tensor ``v`` is rebuilt (or gone): its inputs need not wait for it."""
        for u in self.learned.replay.deps.get(v, ()) if self.learned.replay else ():
            waiting = self._pending.get(u)
            if waiting is None:
                continue
            waiting.discard(v)
            if not waiting:
                del self._pending[u]
                e = self.entries[u]
                if e.action == KEEP:
                    # No rebuild reads it any more, and autograd holds a kept one itself.
                    e.free()
                elif u in self._finished:
                    self._finished.discard(u)
                    self._release(e)

    # ----- copies -----------------------------------------------------------------------------
    def _offload(self, e: Entry, t: torch.Tensor) -> None:
        # Saved on the device, then on the host at once: the runtime keeps no device
        # reference (the allocator holds the buffer until the copy stream read it), and
        # ``event`` marks the copy's end while it may still run.
        e.move(Residency.DEVICE, device=t.untyped_storage())
        self.stats.swapped_bytes += e.nbytes
        host, event = copy_to_host(e.device, self._copy_stream)
        e.move(Residency.HOST, device=None, host=host, event=event)

    def _fetch(self, e: Entry) -> None:
        e.check(Residency.TO_DEVICE)
        host = e.host
        event = e.event
        if self.cuda:
            if self._h2d_stream is not None:
                self._h2d_stream.wait_stream(torch.cuda.current_stream())
                if e.event is not None:  # its offload: the host copy must be complete
                    self._h2d_stream.wait_event(e.event)
                with torch.cuda.stream(self._h2d_stream):
                    buf = torch.empty(host.nbytes(), dtype=torch.uint8, device="cuda")
                    buf.untyped_storage().copy_(host, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(self._h2d_stream)
                buf.record_stream(torch.cuda.current_stream())
            else:
                buf = torch.empty(host.nbytes(), dtype=torch.uint8, device="cuda")
                buf.untyped_storage().copy_(host)
                event = None
        else:
            buf = torch.empty(host.nbytes(), dtype=torch.uint8)
            buf.untyped_storage().copy_(host)
        e.move(Residency.TO_DEVICE, device=buf.untyped_storage(), event=event)
        self._admitted += e.nbytes
        self.stats.h2d_bytes += e.nbytes

    def _admit(self, o: int) -> None:
        """Start copies back in deadline order while the plan's memory before operator ``o``,
        the copies already admitted, the next one and the transient bytes of the runtime's
        look-ahead fit the budget (the simulator's rule, at the step's position ``o``)."""
        n = self.inst.n_ops
        end = min(o + self.policy.lookahead_ops, n)
        look = int(self._transient[end] - self._transient[min(o, end)])
        base = int(self._base[min(o, n - 1)])
        order = self.learned.swap_entries
        while self._cursor < len(order):  # the ones done with stay behind the cursor
            first = self.entries[order[self._cursor]]
            if not (first.released or first.residency is Residency.TO_DEVICE):
                break
            self._cursor += 1
        for i in order[self._cursor :]:
            e = self.entries[i]
            if e.residency is not Residency.HOST:
                continue  # not swapped out yet, copied back already, or released
            if base + self._admitted + e.nbytes + look > self.stats.budget_bytes:
                return
            self._fetch(e)

    def _release(self, e: Entry) -> None:
        """Autograd dropped the last handle: the tensor's last backward reader is done."""
        if e.action == RECOMP:
            self._done(e.index)
        if e.index in self._pending:
            # A rebuild still to come reads it: it stays (its host copy, fetched back when
            # read) and counts as released only once that rebuild is done.
            self._finished.add(e.index)
            return
        e.to(EntryState.RELEASED)
        if e.residency is Residency.TO_DEVICE:
            self._admitted -= e.nbytes  # its device storage goes now
        e.free()


def _fmt(sig: list[tuple[Any, ...]] | None) -> str:
    return ", ".join(f"{list(s)} {str(d).replace('torch.', '')}" for s, d in sig or []) or "none"
