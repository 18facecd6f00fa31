"""A fast step of the training path: saved-tensor hooks alone, no dispatch mode (see
`slackswap.runtime.training`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import torch

from slackswap.errors import UserError
from slackswap.plan import KEEP, RECOMP, SWAP
from slackswap.runtime.copies import CopyEngine
from slackswap.runtime.entry import (
    CHECK_FAST_STATES,
    Entry,
    EntryState,
    Handle,
    Residency,
    StateError,
)
from slackswap.runtime.executor import StepMismatchError
from slackswap.runtime.memory import SavedBytesTracker
from slackswap.runtime.policy import RuntimePolicy
from slackswap.runtime.rebuild import Rebuilder
from slackswap.runtime.records import cpu_view, rng_state, view
from slackswap.runtime.stats import RunStats, forward_hooked_modules
from slackswap.runtime.training.checkpointing import checkpointed_block
from slackswap.runtime.training.facts import PlanFacts
from slackswap.runtime.training.learning import Learned, Pack, input_signature, storage_nbytes
from slackswap.runtime.training.replay import capturing_rng
from slackswap.torchstep.state import put_back
from slackswap.torchstep.torchapi import autocast_caching

#: Profile and solve the step again on the model's new inputs (args, kwargs), then start the
#: new plan's checked first step: its context (to close when the step ends) and its stats.
Replan = Callable[[Sequence[Any], dict[str, Any]], tuple[ExitStack, RunStats]]


class ShapeChangeError(UserError):
    """A step of a prepared plan saw other shapes than the profiled step (another batch size)."""


class FastStep:
    """One step with saved-tensor hooks alone (see `slackswap.runtime.training`).

    ``facts``: what the plan's steps read (`PlanFacts`, made once per plan); ``learned``: what
    its first step learned. ``replan``: what to do when the model's inputs change shape (None:
    a `ShapeChangeError`)."""

    def __init__(
        self,
        model: torch.nn.Module,
        facts: PlanFacts,
        learned: Learned,
        replan: Replan | None = None,
    ):
        self.model = model
        self.facts = facts
        self.learned = learned
        self.replan = replan
        self.expected = learned.expected
        self.actions = learned.actions
        self.inst = facts.instance
        self.pos = 0
        if learned.entry_fields is None:  # plain Python values, read once per plan
            learned.entry_fields = [
                (int(a), int(n), str(name))
                for a, n, name in zip(
                    learned.actions, self.inst.tensor_bytes, self.inst.tensor_name, strict=True
                )
            ]
        #: This step's entries, each made when first used (`_Entries`).
        self.entries = _Entries(learned.entry_fields)
        #: Per entry, the view its copy back or rebuild is made in (`whole_views`), or None.
        if learned.whole is None:
            learned.whole = whole_views(learned)
        self._whole = learned.whole
        # Per pack, in order: what is checked and what is done (`pack_program`), once per plan.
        if learned.program is None:
            learned.program = pack_program(learned, facts.late)
        self._program = learned.program
        self.error: BaseException | None = None
        self.stats = facts.new_stats()
        self.cuda = facts.cuda
        self.policy: RuntimePolicy = facts.policy
        # Copies back are started ahead (the look-ahead rule, at the position of the tensor
        # being unpacked) only with side streams; without, each is copied when read.
        self._prefetch = self.cuda and self.policy.overlap and self.policy.prefetch
        #: Check each state change of an entry (`CHECK_FAST_STATES`, a debug aid); off, the
        #: hot path sets the state itself.
        self._check_states = CHECK_FAST_STATES
        # Bound once: each handle of a swapped or recomputed tensor takes it (no new bound
        # method object per saved tensor).
        self._release = self._release  # type: ignore[method-assign]
        #: The step's copies out and back; None for a plan that swaps nothing, whose steps
        #: then make no engine (a step's set-up is a cost every step pays).
        self.copies: CopyEngine | None = None
        if facts.copies.deadline_order:
            self.copies = CopyEngine(
                self.inst,
                self.entries,
                self.stats.budget_bytes,
                facts.copies,
                lookahead_ops=self.policy.lookahead_ops,
                overlap=self.policy.overlap,
                prefetch=self._prefetch,
            )
            self.copies.use_device(self.cuda)
        self._first_bwd_reader = facts.first_bwd_reader
        self._view = view if self.cuda else cpu_view
        # The simulator's evictions (CPU), replayed where an unpack shows the step has reached
        # their operator: ``_next_evict`` the next one's operator (past the last: none left).
        self._evictions = facts.evictions
        self._evicted = 0
        self._next_evict = facts.evictions[0][0] if facts.evictions else _NEVER
        self._producer, self._external = facts.producer, facts.external
        # The step's memory, measured in its own hooks (`SavedBytesTracker`): every saved
        # tensor's storage, and the storage key of each entry's first pack (held or not).
        self.tracker = SavedBytesTracker(facts.transient)
        # Per first pack, (entry, weak reference to its storage): swapped or recomputed ones
        # (`_moved`), kept ones (`_kept`).
        self._moved: list[tuple[int, Any]] = []
        self._kept: list[tuple[int, Any]] = []
        self._backward = False
        #: The operator the step is at while an unpack materialises a tensor: the unpacked
        #: tensor's first backward reader (`_unpack`), also for the inputs its rebuild reads.
        self._at = 0
        self._held: set[int] = set()
        self._cuda_start = 0
        self._inner: ExitStack | None = None  # the new plan's checked step, after a replan
        #: The step was profiled and solved again and ran as the new plan's checked step
        #: (which measured it and warned itself).
        self.replanned = False
        self._inner_stats: Any = None
        #: The contexts a step enters besides its hooks (`__enter__`), when it has any.
        self._stack: ExitStack | None = None
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._inputs_hook: Any = None
        self._installed = False
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
                quiet=None,
                programs=rp.programs,
                values=rp.values,
                whole=self._whole,
            )
            self.rebuilder.records = dict(rp.records)  # random ones get today's RNG state
            self.rebuilder.allocs = rp.allocs
            self._pending = {u: set(vs) for u, vs in rp.consumers.items()}

    # ----- the step as a context: ``with FastStep(...) as stats:`` -----------------------------
    def __enter__(self) -> RunStats:
        """Install the step's hooks: the checkpointed blocks' wrappers, the check of the
        model's inputs, the RNG capture of a replay with random operators, and the saved-tensor
        hooks, always (also for a plan that keeps everything: they measure the step). A step
        with neither checkpointed blocks nor random replays makes no `ExitStack`: the set-up
        and end of a step are a fixed cost each step pays, so they stay short."""
        model = self.model
        learned = self.learned
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self._cuda_start = torch.cuda.memory_allocated()
        try:
            if learned.checkpointed or (learned.replay is not None and learned.replay.random):
                stack = self._stack = ExitStack()
                for b in learned.checkpointed:
                    stack.enter_context(
                        checkpointed_block(model, self.facts.blocks[b], self._saving_inputs)
                    )
                if learned.replay is not None and learned.replay.random:
                    assert self.rebuilder is not None
                    stack.enter_context(capturing_rng(model, learned.replay, self.rebuilder))
            self._inputs_hook = model.register_forward_pre_hook(
                self._check_inputs, with_kwargs=True
            )
        except BaseException:
            if self._stack is not None:  # what was entered goes, as a with statement would
                self._stack.close()
            raise
        self._hooks.__enter__()  # last: nothing after it can fail
        self._installed = True
        return self.stats

    def _uninstall(self) -> None:
        """Undo `__enter__` (once: a replan does it before the step ends)."""
        if not self._installed:
            return
        self._installed = False
        self._hooks.__exit__(None, None, None)
        self._inputs_hook.remove()
        if self._stack is not None:
            self._stack.close()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """End the step: its hooks go, its stats are filled (also when it raised), and a step
        that saved other tensors than the plan's first step raises."""
        inner, self._inner = self._inner, None
        try:
            self._uninstall()
            if exc is not None and inner is not None:
                inner.__exit__(exc_type, exc, tb)  # the new plan's checked step raises it
        finally:
            self._fill_stats()
            self._drop_all()
        if exc is not None:
            if inner is None and self.error is not None and exc is not self.error:
                raise self.error from exc
            return
        if inner is not None:
            inner.__exit__(None, None, None)
            self.stats.__dict__.update(self._inner_stats.__dict__)
            return
        if self.error is not None:
            raise self.error
        if self.pos != len(self.expected):
            raise StepMismatchError(
                f"the step saved {self.pos} tensors for autograd where the first step of "
                f"the plan saved {len(self.expected)} (forward and backward must both run "
                "inside the with block)"
            )

    def _fill_stats(self) -> None:
        """What the copy engine did and the tracker measured, into the step's stats. A swapped
        or recomputed tensor whose storage outlived its last forward reader (or the step) was
        held by a reference outside autograd: not counted as swapped or recomputed. A kept one
        whose storage outlived the step was held by autograd when a graph was kept (handles of
        other entries still held), else, when the model has a forward hook of the caller's, by
        that hook."""
        st = self.stats
        inst = self.inst
        if not self._backward:
            self._backward_begins()
        tr = self.tracker
        st.measured = "saved tensors, with modelled transients"
        st.measured_peak_bytes = tr.peak_bytes
        st.over_budget_bytes = max(0, tr.peak_bytes - st.budget_bytes)
        st.peak_op = str(inst.op_name[tr.peak_op]) if 0 <= tr.peak_op < inst.n_ops else ""
        if self.cuda:
            st.cuda_peak_bytes = int(torch.cuda.max_memory_allocated() - self._cuda_start)
        if self.copies is not None:
            st.swapped_bytes = self.copies.swapped_bytes
            st.h2d_bytes = self.copies.h2d_bytes
        shared = self.learned.shared
        held = set(self._held)
        held.update(i for i, ref in self._moved if ref() is not None and i not in shared)
        kept_alive = [
            i
            for i, ref in self._kept
            if ref() is not None and i not in shared and not self._external[i]
        ]
        handles = [e for e in self.entries.values() if e.handles > 0]
        if not (held or kept_alive or handles):
            return  # nothing outlived the step where the plan frees it: the usual step
        hooked = forward_hooked_modules(self.model) if held or kept_alive else []
        retained = [e.index for e in handles]
        if handles:
            retained += kept_alive
        elif hooked:
            held.update(kept_alive)
        # else a variable of the caller's (the model's output, say) keeps a kept tensor: the
        # caller's own memory, named only when a forward hook may be the holder.
        fields = self.entries.fields
        held_swap = sum(fields[i][1] for i in held if self.actions[i] == SWAP)
        held_recomp = sum(fields[i][1] for i in held if self.actions[i] == RECOMP)
        st.swapped_bytes -= held_swap
        st.recomputed_bytes -= held_recomp
        st.held_tensors = [str(inst.tensor_name[i]) for i in sorted(held)]
        st.held_bytes = sum(fields[i][1] for i in held)
        st.hooked_modules = hooked if held else []
        st.checkpoint_closure = not held.isdisjoint(self.learned.closure_held)
        st.retained_tensors = len(set(retained))
        st.retained_bytes = sum(fields[i][1] for i in set(retained))

    def _backward_begins(self) -> None:
        """The first unpack: the forward pass and its own references are done, so a swapped or
        recomputed tensor's storage still alive is held outside autograd."""
        self._backward = True
        shared = self.learned.shared
        for i, ref in self._moved:
            if ref() is not None and i not in shared:
                self._held.add(i)

    def _drop_all(self) -> None:
        for e in self.entries.values():
            e.free()
        if self.rebuilder is not None:
            self.rebuilder.externals = {}

    # ----- shapes -----------------------------------------------------------------------------
    def _check_inputs(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._inner is not None:
            return
        self.stats.autocast_cache = autocast_caching()
        if self.rebuilder is not None and self.learned.replay is not None:
            rp = self.learned.replay
            flat = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
            externals = dict(rp.constants)
            externals.update((v, flat[k]) for v, k in rp.externals.items() if k < len(flat))
            self.rebuilder.externals = externals
        want = self.learned.inputs
        if want is None:
            return
        got = input_signature(args, kwargs)
        if got == want:
            return
        if self.replan is None:
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
        assert self.replan is not None
        self._uninstall()  # this step's checkpoint wrappers and hooks go first
        self._inner, self._inner_stats = self.replan(args, kwargs)
        self.replanned = True

    # ----- saved-tensor hooks -----------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        """The hot path: a saved tensor is known by its place in the pack order; its shape,
        dtype and storage size are checked against the first step's and the action
        `pack_program` decided for that place is done, nothing else."""
        if self._saving_inputs[0]:
            return t  # a checkpointed block's kept inputs, held by torch.utils.checkpoint
        k = self.pos
        self.pos = k + 1
        try:
            shape, dtype, nbytes, i, do, whole, random = self._program[k]
        except IndexError:
            self._fail(
                StepMismatchError(
                    f"the step saves more tensors for autograd than the first step of the plan "
                    f"({len(self._program)}): it is not the step the plan was made for"
                )
            )
        if t.shape != shape or t.dtype != dtype:
            self._mismatch(k, self.expected[k], t)
        if random is not None:
            self._note_rng(random, t)
        if nbytes >= 0:
            storage = t.untyped_storage()
            if storage.nbytes() != nbytes:
                self._mismatch(k, self.expected[k], t)
        else:
            storage = None
        if do == PASS:
            return t
        if do == KEEP_FIRST:
            if storage is not None:  # counted until Python frees it
                self._kept.append((i, self.tracker.add(storage, nbytes, self._producer[i])))
            return t
        e = self.entries[i]
        # The first step saw the entry's whole storage as one contiguous tensor here; with the
        # shape, dtype and storage size checked, contiguous from the start means it still is.
        if whole is not None and not (t.is_contiguous() and t.storage_offset() == 0):
            whole = None
        if do == HANDLE:
            return Handle(e, t, False, self._release, whole)
        if storage is not None:  # its first pack: counted until Python frees it
            ref = self.tracker.add(storage, nbytes, self._producer[i])
            if do == KEEP_READ_FIRST or do == SWAP_HELD_FIRST:
                self._kept.append((i, ref))
            else:
                self._moved.append((i, ref))
        if self._check_states:
            e.to(EntryState.SAVED)
        else:
            e.state = _SAVED
        if do == SWAP_FIRST:
            # A rebuild that reads it fetches it back.
            assert self.copies is not None  # the plan swaps
            self.copies.offload(e, storage, None if whole is None else t)
        elif do == RECOMP_FIRST:
            self.stats.recomputed_bytes += e.nbytes
        elif do == SWAP_HELD_FIRST:
            # Copied out, and held on the device until released: never copied back.
            assert self.copies is not None
            self.copies.offload(e, storage, None if whole is None else t, hold=True)
            if whole is not None:
                e.tensor = t.detach()
        else:
            # KEEP_READ_FIRST: kept, and a rebuild reads it: held until that rebuild is done
            e.move(Residency.DEVICE, device=storage)
            if whole is not None:
                e.tensor = t.detach()  # a rebuild reads it as it is (no graph of its own)
            return t
        return Handle(e, t, False, self._release, whole)

    def _note_rng(self, ops: list[int], t: torch.Tensor) -> None:
        """The random operators ``ops`` a rebuild replays draw from the RNG state now (this
        pack's, as in the first step: no random operator draws between it and them)."""
        assert self.rebuilder is not None and self.learned.replay is not None
        state = rng_state([t])
        recorded = self.learned.replay.records
        for p in ops:
            self.rebuilder.records[p] = recorded[p].with_rng(state)

    def _mismatch(self, k: int, p: Pack, t: torch.Tensor) -> None:
        name = self.inst.tensor_name[p.entry] if p.entry >= 0 else f"saved tensor #{k}"
        got = f"{t.dtype}, shape {list(t.shape)}, {storage_nbytes(t)} storage bytes"
        want = f"{p.dtype}, shape {list(p.shape)}, {p.nbytes} storage bytes"
        # The model's inputs were checked before its first operator: with the same inputs, a
        # tensor of another shape means another step, not another batch size.
        other_shape = t.dtype == p.dtype and t.shape != p.shape and self.learned.inputs is None
        cls = ShapeChangeError if other_shape else StepMismatchError
        follows_data = t.dtype == p.dtype and t.shape != p.shape and not other_shape
        self._fail(
            cls(
                f"saved tensor {name!r} (pack {k}) is {got}; the plan's step has {want}: the "
                "step is not the one the plan was made for"
                + (_FOLLOWS_DATA if follows_data else "")
            )
        )

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        raise exc

    def _unpack(self, h: Any) -> torch.Tensor:
        if h.__class__ is not Handle:
            return h  # type: ignore[no-any-return]
        e = h.entry
        if not self._backward:
            self._backward_begins()
        at = self._first_bwd_reader[e.index]  # where the step is: this tensor's first reader
        if at >= self._next_evict:
            self._evict_due(at)
        if self._prefetch and self.copies is not None:
            # The copies back the look-ahead admits from here start now.
            self.copies.admit(at)
        storage = e.device
        if storage is None:
            self._at = at
            storage = self._materialise(e)
        if e.event is not None:
            torch.cuda.current_stream().wait_event(e.event)
        if h.direct:
            t = e.tensor
            if t is not None:
                return t  # type: ignore[no-any-return]
        return self._view(storage, h.dtype, h.offset, h.size, h.stride)

    def _evict_due(self, o: int) -> None:
        """The step is at operator ``o`` (an unpack's first backward reader): let go of the
        copies back the simulator evicts by then, as the checked step does (their host copies
        stay; a later read copies them back again). Without it a tensor copied back for one
        reader stays until its last, where the simulator, short of memory in between, evicts
        it and copies it back again."""
        evictions, k = self._evictions, self._evicted
        assert self.copies is not None  # the simulator evicts swapped tensors alone
        while k < len(evictions) and evictions[k][0] <= o:
            for i in evictions[k][1]:
                e = self.entries.get(i)
                if e is not None:
                    self.copies.evict(e)
            k += 1
        self._evicted = k
        self._next_evict = evictions[k][0] if k < len(evictions) else _NEVER

    def _materialise(self, e: Entry) -> Any:
        if e.device is not None:  # on the device (kept for a rebuild, copied back, rebuilt)
            return e.device
        if e.residency is Residency.HOST:
            assert self.copies is not None  # only a swapped tensor is on the host
            self.copies.fetch(e)
        elif e.action == RECOMP and self.rebuilder is not None:
            self._rebuild(e)
            self.stats.rebuilds += 1
            self._done(e.index)
        if e.device is None:
            raise StateError(
                f"saved tensor {e.name!r} (#{e.index}) is needed while {e.residency.value}"
            )
        # Copied back or rebuilt: counted until Python frees it, at the operator the step is
        # at (a rebuild's inputs are made there too, not at their own first readers).
        self.tracker.add(e.device, e.nbytes, self._at)
        return e.device

    def _rebuild(self, e: Entry) -> None:
        """Rebuild ``e``; buffers its chain reads (batch-norm running statistics, which
        ``native_batch_norm`` updates in place without its schema saying so) are put back, so
        the model's state is that of one step."""
        assert self.rebuilder is not None and self.learned.replay is not None
        buffers = self.learned.replay.buffers
        if not buffers:  # no context to enter: this runs once per rebuild
            t = self.rebuilder.rebuild(e)
        else:
            with put_back(buffers):
                t = self.rebuilder.rebuild(e)
        whole = self._whole[e.index]
        if whole is None:
            return
        known = self.learned.rebuilt_whole
        is_whole = known.get(e.index)
        if is_whole is None:
            is_whole = known[e.index] = _is_whole(t, whole)
        elif self._check_states and is_whole is not _is_whole(t, whole):
            raise StateError(
                f"saved tensor {e.name!r} (#{e.index}) was rebuilt in another layout than at "
                "the plan's first rebuild of it"
            )
        if is_whole:
            e.tensor = t  # the unpacks of its whole view return it as it is

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

    def _release(self, e: Entry) -> None:
        """Autograd dropped the last handle: the tensor's last backward reader is done."""
        if e.action == RECOMP:
            self._done(e.index)
        if e.index in self._pending:
            # A rebuild still to come reads it: it stays (its host copy, fetched back when
            # read) and counts as released only once that rebuild is done.
            self._finished.add(e.index)
            return
        if self._check_states:
            e.to(EntryState.RELEASED)
        else:
            e.state = _RELEASED
        if self.copies is not None:
            self.copies.let_go(e)  # a copy back's device storage goes now
        else:
            e.free()


_SAVED, _RELEASED = EntryState.SAVED, EntryState.RELEASED
_NEVER = 1 << 62  # past every operator index

#: Why a saved tensor's shape changes while the model's inputs keep theirs.
_FOLLOWS_DATA = (
    " (the model's inputs have the profiled shapes, so this shape follows the data: a mixture "
    "of experts' routing, a selection by value; a plan is made for a step whose saved tensors "
    "keep their shapes)"
)


class _Entries(dict[int, Entry]):
    """A fast step's entries by index, each made when first used: a kept tensor no rebuild
    reads never is (its pack hands the tensor back), so a step makes only the entries it
    moves. ``fields``: per entry, (action, bytes, name) (`Learned.entry_fields`)."""

    def __init__(self, fields: list[tuple[int, int, str]]):
        super().__init__()
        self.fields = fields

    def __missing__(self, i: int) -> Entry:
        a, n, name = self.fields[i]
        e = self[i] = Entry(i, a, n, name, checked=CHECK_FAST_STATES)
        return e


def _fmt(sig: list[tuple[Any, ...]] | None) -> str:
    return ", ".join(f"{list(s)} {str(d).replace('torch.', '')}" for s, d in sig or []) or "none"


#: What a fast step does with a saved tensor at one place in the pack order (`pack_program`):
#: hand it back (kept, a parameter or a value the plan does not cover); a handle to an entry
#: already saved; the first pack of a swapped tensor (copied out), of a recomputed one, of a
#: kept one a rebuild reads (held until that rebuild is done), of another kept one (counted
#: by the step's memory tracker), of a swapped one the simulator keeps on the device (copied
#: out and held: its offload had not ended when the backward pass began, `PlanFacts.late`).
PASS, HANDLE, SWAP_FIRST, RECOMP_FIRST, KEEP_READ_FIRST, KEEP_FIRST, SWAP_HELD_FIRST = range(7)


def _is_whole(t: torch.Tensor, whole: tuple[Any, int, Any, Any]) -> bool:
    """``t`` is the view ``whole`` (dtype, 0, shape, contiguous strides) names."""
    return (
        t.__class__ is torch.Tensor
        and t.dtype == whole[0]
        and t.shape == whole[2]
        and t.storage_offset() == 0
        and t.is_contiguous()
    )


def whole_views(learned: Learned) -> list[tuple[Any, int, Any, Any] | None]:
    """Per plan entry, the view (dtype, offset 0, shape, contiguous strides) of its first pack
    when the first step saw that pack as its whole storage in one contiguous tensor, else None:
    the view a fast step's copy back or rebuild of the entry is made in (`Entry.tensor`)."""
    out: list[tuple[Any, int, Any, Any] | None] = [None] * len(learned.actions)
    seen: set[int] = set()
    for p in learned.expected:
        if p.entry < 0 or p.entry in seen or p.earlier:
            continue
        seen.add(p.entry)
        if p.whole:
            shape = torch.Size(p.shape)
            out[p.entry] = (p.dtype, 0, shape, _contiguous_strides(shape))
    return out


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def pack_program(learned: Learned, late: frozenset[int] = frozenset()) -> list[tuple[Any, ...]]:
    """Per pack of a fast step, in order: (shape, dtype, storage bytes or -1 for a tensor whose
    storage is not checked (none, or handed back as it is), plan entry, what to do, the entry's
    whole view (`whole_views`) when this pack was that view in the first step, else None; the
    random operators a rebuild replays from the RNG state at this pack
    (`Replay.random_after_pack`), else None), from what the first step learned; ``late``: the
    swapped entries the simulator keeps on the device."""
    read = set(learned.replay.consumers) if learned.replay is not None else set()
    random = learned.replay.random_after_pack if learned.replay is not None else {}
    whole = learned.whole if learned.whole is not None else whole_views(learned)
    seen: set[int] = set()
    out: list[tuple[Any, ...]] = []
    for k, p in enumerate(learned.expected):
        i = p.entry
        # An earlier value's pack is not the entry's first: its bytes are copied out (or
        # counted) where the step saves the entry itself, after the in-place updates.
        first = i >= 0 and i not in seen and not p.earlier
        if not p.earlier:
            seen.add(i)
        if i < 0:
            do = PASS
        elif learned.actions[i] == KEEP:
            do = PASS if not first else KEEP_READ_FIRST if i in read else KEEP_FIRST
        elif not first:
            do = HANDLE
        elif learned.actions[i] == SWAP:
            do = SWAP_HELD_FIRST if i in late else SWAP_FIRST
        else:
            do = RECOMP_FIRST
        view_of = whole[i] if i >= 0 else None
        same = (
            view_of is not None
            and do not in (PASS, KEEP_FIRST)
            and p.whole
            and p.dtype == view_of[0]
            and torch.Size(p.shape) == view_of[2]
        )
        # A tensor handed back as it is needs no storage read: its shape and dtype tell a
        # step that differs, and nothing of it is counted or moved.
        nbytes = -1 if do == PASS else p.nbytes
        out.append(
            (torch.Size(p.shape), p.dtype, nbytes, i, do, view_of if same else None,
             random.get(k))
        )  # fmt: skip
    return out
