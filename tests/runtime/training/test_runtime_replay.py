"""What a rebuild's replay does per operator, and what it does once (`rebuild.Rebuilder`,
`rebuild_program`)."""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.plan import KEEP, RECOMP  # noqa: E402
from slackswap.runtime import rebuild_program  # noqa: E402
from slackswap.runtime.entry import Entry, EntryState, Residency  # noqa: E402
from slackswap.runtime.rebuild import Rebuilder  # noqa: E402
from slackswap.runtime.rebuild_program import compile_rebuild  # noqa: E402
from slackswap.runtime.records import OpRecord, Ref, rng_state  # noqa: E402
from slackswap.torchstep.torchapi import tree_flatten  # noqa: E402

pytestmark = pytest.mark.torch


class _Chain:
    """Values 0 (a model input) -> 1 (operator 1) -> 2 (operator 2); values 1 and 2 are saved
    tensors 0 and 1."""

    def __init__(self) -> None:
        self.producers = {0: -1, 1: 1, 2: 2}
        self.asked = 0

    def producer(self, v: int) -> int:
        self.asked += 1
        return self.producers[v]

    def storage(self, v: int) -> int:
        return v


def _record(value_in: int, value_out: int, x: torch.Tensor, grad: bool = True) -> OpRecord:
    flat, spec = tree_flatten(((x,), {}))
    return OpRecord(
        torch.ops.aten.relu.default, (spec, [Ref(value_in, x)]), frozenset(), None, grad,
        {value_out: ("out", 0)},
    )  # fmt: skip


def _rebuilder(numbering: Any, entries: list[Entry]) -> Rebuilder:
    x = torch.ones(3)
    rb = Rebuilder(
        numbering, None,  # type: ignore[arg-type]
        entries, {1: 0, 2: 1},
        materialise=lambda e: e.device, quiet=lambda: torch.no_grad(),
    )  # fmt: skip
    rb.records = {1: _record(0, 1, x), 2: _record(1, 2, x)}
    rb.externals = {0: x}
    return rb


def _square_sum(out: torch.Tensor) -> torch.Tensor:
    return out.square().sum()


def _adamw_steps(
    model: torch.nn.Module,
    xs: list[torch.Tensor],
    planned: Any = None,
    *,
    loss_of: Any = _square_sum,
    seed: int | None = None,
    region: Any = contextlib.nullcontext,
) -> tuple[list[torch.Tensor], list[int]]:
    """One AdamW step per input of ``xs``, each forward and backward inside ``region()`` and
    under ``planned.step()`` when given (the RNG seeded ``seed + k`` at step k when given): the
    parameters after them, and each planned step's rebuilds."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rebuilds = []
    for k, x in enumerate(xs):
        opt.zero_grad(set_to_none=True)
        if seed is not None:
            torch.manual_seed(seed + k)
        with region():
            if planned is None:
                loss_of(model(x)).backward()
            else:
                with planned.step() as stats:
                    loss_of(model(x)).backward()
                rebuilds.append(stats.rebuilds)
        opt.step()
    return [p.detach().clone() for p in model.parameters()], rebuilds


def test_a_rebuild_is_walked_again_only_when_a_rebuild_input_changes() -> None:
    """With ``programs`` (a fast step's), a later step's rebuild runs the program the first one
    walked; once saved tensor 0 is released and let go, the chain is walked again and runs
    operator 1 too, from the model input."""
    numbering = _Chain()
    rb = _rebuilder(numbering, [])
    rb.programs = {}
    rb._values = [1, 2]  # saved tensor -> its value
    resident = torch.full((3,), -2.0)

    def rebuilt(released: bool) -> torch.Tensor:
        entries = [Entry(0, KEEP, 12), Entry(1, RECOMP, 12)]  # each step has its own
        entries[0].to(EntryState.SAVED)
        if released:
            entries[0].to(EntryState.RELEASED)
        else:
            entries[0].move(Residency.DEVICE, device=resident.untyped_storage())
        rb.entries = entries
        out = rb.rebuild(entries[1])
        assert entries[1].residency is Residency.DEVICE
        return out  # type: ignore[no-any-return]

    assert torch.equal(rebuilt(False), torch.zeros(3))  # relu of the resident input
    walked = numbering.asked
    assert walked > 0
    assert torch.equal(rebuilt(False), torch.zeros(3))
    assert numbering.asked == walked  # the program, not a second walk
    assert torch.equal(rebuilt(True), torch.ones(3))  # relu(relu(the model input))
    assert numbering.asked > walked
    assert [s[0] for s in rb.programs[2].steps] == [
        rebuild_program.EXTERNAL_INPUT,
        rebuild_program.OP,
        rebuild_program.OP,
    ]


def test_a_replay_sets_the_grad_mode_only_where_the_record_differs(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    set_to: list[bool] = []
    real = rebuild_program.set_grad_mode

    def spy(mode: bool) -> None:
        set_to.append(mode)
        real(mode)

    monkeypatch.setattr(rebuild_program, "set_grad_mode", spy)
    seen: list[bool] = []

    def op(t: torch.Tensor) -> torch.Tensor:
        seen.append(torch.is_grad_enabled())
        return t + 1

    x = torch.ones(2)
    flat, spec = tree_flatten(((x,), {}))
    for grad in (False, True):
        rec = OpRecord(op, (spec, flat), frozenset(), None, grad, {})
        step = (rebuild_program.OP, 0, rec.call(), (), ((0, True, 0),), (), None)
        program = rebuild_program.RebuildProgram([step], 0, [])
        with torch.no_grad():
            set_to.clear()
            got = program.run(SimpleNamespace(records={0: rec}))  # type: ignore[arg-type]
            assert not torch.is_grad_enabled()
            calls = list(set_to)
        assert torch.equal(got, x + 1)
        # The first ran in the mode it recorded (off, as the backward pass runs); the second
        # was recorded with grad on: on for the call, off again after.
        assert calls == ([] if grad is False else [True, False])
    assert seen == [False, True]


def test_a_replay_of_an_operator_that_draws_no_random_numbers_leaves_the_generators(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    entered: list[Any] = []
    real = rebuild_program.set_rng

    def spy(rng: Any) -> Any:
        entered.append(rng)
        return real(rng)

    monkeypatch.setattr(rebuild_program, "set_rng", spy)
    numbering = _Chain()
    entries = [Entry(0, KEEP, 12), Entry(1, RECOMP, 12)]
    rb = _rebuilder(numbering, entries)
    x = rb.externals[0]
    rb.records[1] = rb.records[1].with_rng(rng_state([x]))
    entries[0].to(EntryState.SAVED)
    entries[0].to(EntryState.RELEASED)
    assert torch.equal(compile_rebuild(rb, 2).run(rb), torch.ones(3))
    # Operator 1 alone: its recorded state put in, then the generators' own put back.
    assert len(entered) == 2 and entered[0] is rb.records[1].rng


def test_a_compiled_rebuild_takes_the_walks_steps_and_is_made_again_when_an_input_changes() -> None:
    """`compile_rebuild` walks the chain into its steps: with saved tensor 0 a rebuild input,
    one operator from it; once it is released and let go, both operators from the model input,
    the intermediate dropped after its last reader. The program says when it no longer holds,
    and each run gives the value worked out by hand."""
    from slackswap.runtime.rebuild_program import EXTERNAL_INPUT, INPUT, OP

    numbering = _Chain()
    entries = [Entry(0, KEEP, 12), Entry(1, RECOMP, 12)]
    rb = _rebuilder(numbering, entries)
    x = rb.externals[0]
    flat, spec = tree_flatten(((Ref(1, x), Ref(1, x)), {}))  # value 1 times itself
    square = torch.ops.aten.mul.Tensor
    rb.records[2] = OpRecord(square, (spec, flat), frozenset(), None, True, {2: ("out", 0)})
    resident = torch.full((3,), 2.0)
    entries[0].to(EntryState.SAVED)
    entries[0].move(Residency.DEVICE, device=resident.untyped_storage())
    one = compile_rebuild(rb, 2)
    assert [s[0] for s in one.steps] == [INPUT, OP]
    assert one.holds(entries)
    assert torch.equal(one.run(rb), torch.full((3,), 4.0))  # 2 * 2, from the resident input
    entries[0].to(EntryState.RELEASED)
    entries[0].free()
    assert not one.holds(entries)
    two = compile_rebuild(rb, 2)
    assert [s[0] for s in two.steps] == [EXTERNAL_INPUT, OP, OP]
    (_, _, _, _, writes, _, returns), (_, _, _, _, _, drops, _) = two.steps[1], two.steps[2]
    assert drops == (writes[0][0],)  # value 1 goes after its last reader; the target stays
    assert returns == 1  # aten.mul.Tensor returns one tensor: its output is taken as it is
    assert torch.equal(two.run(rb), torch.ones(3))  # 1 * 1, from the model input


def _one_op_program(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A program of one recorded call, its first tensor argument a `Ref` filled from slot 0
    (an `INPUT` of saved tensor 0), its output written to slot 1."""
    from slackswap.runtime.rebuild_program import AS_VIEW, INPUT, OP, RebuildProgram

    flat, spec = tree_flatten((args, kwargs))
    at = next(i for i, x in enumerate(flat) if isinstance(x, torch.Tensor))
    ref = Ref(1, flat[at])
    flat[at] = ref
    rec = OpRecord(func, (spec, flat), frozenset(), None, False, {2: ("out", 0)})
    steps = [
        (INPUT, 0, 0),
        (OP, 7, rec.call(), ((at, 0, ref, AS_VIEW),), ((1, True, 0),), (), None),
    ]
    return RebuildProgram(steps, 1, [(0, True)]), rec


def _run_on(program: Any, rec: OpRecord, x: torch.Tensor) -> torch.Tensor:
    e = Entry(0, KEEP, x.untyped_storage().nbytes())
    e.to(EntryState.SAVED)
    e.move(Residency.DEVICE, device=x.untyped_storage())
    step = SimpleNamespace(entries=[e], records={7: rec}, materialise=lambda e: e.device)
    with torch.no_grad():
        return program.run(step)  # type: ignore[no-any-return]


def test_a_program_runs_as_one_written_function_shared_by_programs_of_its_shape() -> None:
    """Two programs of one shape (a saved tensor in, one call, with other constants) share the
    function written for them, and each gives its own call's value, worked out by hand: 2 * 3
    and 2 - 5."""
    x = torch.full((4,), 2.0)
    times, rec_t = _one_op_program(torch.ops.aten.mul.Tensor, (x, torch.tensor(3.0)), {})
    minus, rec_m = _one_op_program(torch.ops.aten.sub.Tensor, (x, torch.tensor(5.0)), {})
    assert times._fn is minus._fn
    assert torch.equal(_run_on(times, rec_t, x), torch.full((4,), 6.0))
    assert torch.equal(_run_on(minus, rec_m, x), torch.full((4,), -3.0))


def test_a_written_call_passes_nested_arguments_and_keywords_python_reserves() -> None:
    """A varying argument inside a list (``cat``'s tensors) goes through the recorded call's
    pytree; a keyword argument named like a Python keyword (``from``) is passed by name."""
    x = torch.arange(3.0)
    cat, rec_c = _one_op_program(torch.ops.aten.cat.default, ([x, torch.ones(1)],), {})
    assert torch.equal(_run_on(cat, rec_c, x), torch.tensor([0.0, 1.0, 2.0, 1.0]))

    def shifted(t: torch.Tensor, **kw: Any) -> torch.Tensor:
        return t + kw["from"]

    kw, rec_k = _one_op_program(shifted, (x,), {"from": 10})
    assert torch.equal(_run_on(kw, rec_k, x), torch.tensor([10.0, 11.0, 12.0]))


def test_an_error_inside_a_rebuild_shows_the_written_line_it_came_from() -> None:
    """A recorded operator that raises during a rebuild: the traceback shows the written
    function's line that called it, not a file it cannot find."""
    import traceback

    def refuses(t: torch.Tensor) -> torch.Tensor:
        raise ValueError("no")

    x = torch.ones(2)
    program, rec = _one_op_program(refuses, (x,), {})
    with pytest.raises(ValueError) as caught:
        _run_on(program, rec, x)
    shown = "".join(traceback.format_exception(caught.value))
    assert "<slackswap rebuild program" in shown
    assert "out = rec.func(a0)" in shown


class _EmptyCache(torch.nn.Module):
    """A key-value cache's first step as Hugging Face decoders take it: an empty tensor made
    outside the step's operators (``torch.tensor([])``, the cache's start) concatenated with an
    activation, whose result a later operator saves. ``filled``: the tensor holds data instead
    (made each call, so a rebuild in a later step would read the first step's stale one)."""

    def __init__(self, filled: bool = False, as_buffer: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.filled = filled
        # as_buffer: the same values made once, as a buffer: what the refusal suggests
        self.register_buffer("start", torch.tensor([[0.5] * 8]) if as_buffer else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        start = self.start
        if isinstance(start, torch.Tensor):
            c = torch.cat([start, h], dim=0)
        elif self.filled:
            c = torch.cat([torch.tensor([[0.5] * 8]), h], dim=0)
        else:
            c = torch.cat([torch.tensor([]), h], dim=-1)  # the empty 1-D tensor is skipped
        return self.b(torch.sigmoid(c) * c)


def _cat_recomputed(model: torch.nn.Module, x: torch.Tensor) -> Any:
    from slackswap.plan import Plan
    from slackswap.profiling import profile_step

    inst = profile_step(model, (x,), lambda out: out.square().sum())
    acts = [KEEP] * inst.n_tensors
    cats = [i for i, n in enumerate(inst.tensor_name) if "/cat" in str(n)]
    assert len(cats) == 1, list(inst.tensor_name)
    acts[cats[0]] = RECOMP
    return Plan(inst, acts)


def test_an_empty_tensor_made_outside_the_operators_is_taken_as_it_is_by_a_fast_rebuild() -> None:
    """The cache's empty start holds no data: a fast step's rebuild of the concatenation takes
    the first step's, so the plan runs fast (Hugging Face's GPT-2 and Llama under plans that
    recompute an attention's concatenation ran the checked path at every step), bitwise."""
    import copy

    from slackswap.runtime import prepare

    torch.manual_seed(0)
    model = _EmptyCache()
    xs = [torch.randn(4, 8) for _ in range(4)]
    plan = _cat_recomputed(model, xs[0])

    ref, _ = _adamw_steps(copy.deepcopy(model), xs)
    mine = copy.deepcopy(model)
    planned = prepare(mine, plan, 1.0)
    got, rebuilds = _adamw_steps(mine, xs, planned)
    assert planned.fast, planned.reason
    assert rebuilds == [1, 1, 1, 1]  # the checked first step, then three fast ones
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))


def test_a_tensor_with_data_made_outside_the_operators_keeps_its_readers_from_recompute() -> None:
    """A tensor with data the model makes each call outside its operators (GPT-Neo's and
    DeBERTa-v2's ``torch.tensor`` of a scale) is one no fast step sees: the profile gives the
    concatenation that reads it no rebuild, so no solver recomputes it and every plan runs its
    later steps fast, bitwise. Empty, or made once as a buffer, it is read as it is."""
    import copy

    from slackswap.profiling import profile_step
    from slackswap.runtime import prepare
    from tests.support.plans import static_solver_plans

    x = torch.randn(4, 8)
    costs = {}
    for kind, kw in (("filled", {"filled": True}), ("empty", {}), ("buffer", {"as_buffer": True})):
        torch.manual_seed(0)
        inst = profile_step(_EmptyCache(**kw), (x,), _square_sum)
        (cat,) = [i for i, n in enumerate(inst.tensor_name) if "/cat" in str(n)]
        costs[kind] = float(inst.tensor_recompute_s[cat])
    assert costs["filled"] == float("inf")
    assert 0 < costs["empty"] < float("inf") and 0 < costs["buffer"] < float("inf")

    torch.manual_seed(0)
    model = _EmptyCache(filled=True)
    xs = [torch.randn(4, 8) for _ in range(4)]
    inst = profile_step(model, (xs[0],), _square_sum)
    ref, _ = _adamw_steps(copy.deepcopy(model), xs)
    plans = static_solver_plans(inst, (1.0, 0.8, 0.6, 0.5))
    recomputing = [p for p, _ in plans.values() if RECOMP in np.asarray(p.actions)]
    assert recomputing, "no solver recomputes anything here: the test shows nothing"
    for plan, budget in plans.values():
        mine = copy.deepcopy(model)
        planned = prepare(mine, plan, budget)
        got, _ = _adamw_steps(mine, xs, planned)
        assert planned.fast, planned.reason
        assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))


def test_an_older_profile_that_recomputes_such_a_tensor_runs_checked_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An instance profiled without the model's inputs noted (as before they were) may
    recompute that concatenation: the fast step refuses it, naming the tensor and the remedy,
    and every step runs the checked path."""
    from slackswap.profiling.recorder import Recorder
    from slackswap.runtime import prepare

    monkeypatch.setattr(Recorder, "note_model_inputs", lambda self, inputs: None)
    torch.manual_seed(0)
    model = _EmptyCache(filled=True)
    x = torch.randn(4, 8)
    planned = prepare(model, _cat_recomputed(model, x), 1.0)
    with planned.step():
        model(x).square().sum().backward()
    assert not planned.fast
    assert "a float32 tensor of shape [1, 8] the model makes outside its operators" in (
        planned.reason
    )
    assert "as a buffer of the module" in planned.reason


class _TwoDropouts(torch.nn.Module):
    """Dropout called twice in one module call, as Hugging Face's OPT and BART layers call
    ``nn.functional.dropout``: the second draws from the RNG state the first left, not from the
    state at the start of the call; ``between``: a random operator draws in between, with no
    saved tensor after it."""

    def __init__(self, between: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.between = between

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.dropout(torch.tanh(self.a(x)), 0.3, self.training)
        g = torch.sigmoid(self.b(h))
        if self.between:
            g = g + torch.rand(8).sum()
        return torch.nn.functional.dropout(g, 0.3, self.training) * h


def _second_dropout_recomputed(model: torch.nn.Module, x: torch.Tensor) -> Any:
    from slackswap.plan import Plan
    from slackswap.profiling import profile_step

    inst = profile_step(model, (x,), lambda out: out.square().sum())
    masks = [i for i, n in enumerate(inst.tensor_name) if "/div_" in str(n)]
    assert len(masks) == 2, list(inst.tensor_name)
    acts = [KEEP] * inst.n_tensors
    acts[masks[1]] = RECOMP
    return Plan(inst, acts)


def test_a_second_dropout_in_one_module_call_is_replayed_from_the_state_at_the_last_pack() -> None:
    """A fast step notes the RNG state where it packs the last tensor before the second
    dropout (the sigmoid's output), so the rebuilt mask is this step's: the training is bitwise,
    with every step after the first fast."""
    import copy

    from slackswap.runtime import prepare

    torch.manual_seed(0)
    model = _TwoDropouts()
    xs = [torch.randn(4, 8) for _ in range(4)]
    plan = _second_dropout_recomputed(model, xs[0])

    ref, _ = _adamw_steps(copy.deepcopy(model), xs, seed=10)  # each step's masks differ
    mine = copy.deepcopy(model)
    planned = prepare(mine, plan, 1.0)
    got, rebuilds = _adamw_steps(mine, xs, planned, seed=10)
    assert planned.fast, planned.reason
    assert rebuilds == [1, 1, 1, 1]
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))


def test_a_random_operator_drawing_after_another_with_no_pack_between_is_named() -> None:
    from slackswap.runtime import prepare

    torch.manual_seed(0)
    model = _TwoDropouts(between=True)
    x = torch.randn(4, 8)
    planned = prepare(model, _second_dropout_recomputed(model, x), 1.0)
    with planned.step():
        model(x).square().sum().backward()
    assert not planned.fast
    assert "after another random operator drew, with no saved tensor in between" in (planned.reason)


class _AppendOnlyCache:
    """A key-value cache as Hugging Face's ``DynamicCache`` keeps one: each call of a layer
    appends its keys and reads all kept so far."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []

    def update(self, k: torch.Tensor) -> torch.Tensor:
        self.keys.append(k)
        return torch.cat(self.keys, dim=0)


class _CachedLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.key = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, cache: _AppendOnlyCache) -> torch.Tensor:
        keys = cache.update(torch.tanh(self.key(x)))
        weights = torch.softmax(x @ keys.t(), dim=-1)  # (rows of x, keys so far)
        return self.out(weights @ keys)


class _CachedModel(torch.nn.Module):
    """Two layers given a fresh cache each call (Hugging Face's Falcon, BLOOM and GPT-Neo pass
    ``layer_past=DynamicCache`` to every layer, also in training)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([_CachedLayer(), _CachedLayer()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cache = _AppendOnlyCache()
        for layer in self.layers:
            x = layer(x, cache)
        return x


def test_a_block_given_a_cache_it_updates_is_replayed_not_run_again() -> None:
    """Run again under torch.utils.checkpoint, a layer would append its keys to the cache a
    second time (the recomputation then reads twice the keys); a block given an object other
    than tensors and plain values is never checkpointed, and its recomputed tensors are
    replayed from the operators the first step recorded: fast, bitwise."""
    import copy

    from slackswap.plan import Plan
    from slackswap.profiling import profile_step
    from slackswap.runtime import prepare
    from slackswap.runtime.training.learning import holds_objects

    assert holds_objects(((torch.ones(1), _AppendOnlyCache()), {}))
    assert not holds_objects(((torch.ones(1), 2, None), {"dim": -1, "dtype": torch.float32}))
    torch.manual_seed(0)
    model = _CachedModel()
    xs = [torch.randn(4, 8) for _ in range(3)]
    blocks = [model.layers[0], model.layers[1]]
    inst = profile_step(model, (xs[0],), lambda out: out.square().sum(), blocks=blocks)
    assert inst.meta["block_modules"] == ["layers.0", "layers.1"]
    # Every tensor made inside a layer recomputed, its inputs kept: what the fast path would
    # otherwise run under torch.utils.checkpoint.
    inside = [
        str(inst.op_name[int(p)]).startswith("layers.") and bool(s < float("inf"))
        for p, s in zip(inst.tensor_producer, inst.tensor_recompute_s, strict=True)
    ]
    plan = Plan(inst, [RECOMP if i else KEEP for i in inside])

    ref, _ = _adamw_steps(copy.deepcopy(model), xs)
    mine = copy.deepcopy(model)
    planned = prepare(mine, plan, 1.0)
    got, _ = _adamw_steps(mine, xs, planned)
    assert planned.fast, planned.reason
    assert planned.checkpointed_blocks == []
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))


class _Fp32Scores(torch.nn.Module):
    """Attention scores computed in float32 inside an autocast region (``autocast(enabled=
    False)`` around them, as models do for stability; BERT's CPU attention runs its ``bmm`` in
    float32 the same way)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q(x).float().view(2, 4, 8)
        with torch.autocast("cpu", enabled=False):
            scores = torch.bmm(q, q.transpose(1, 2))
        return torch.tanh(scores) * scores


def test_a_replay_inside_an_autocast_region_runs_the_operators_as_recorded() -> None:
    """Forward and backward inside ``torch.autocast``: a rebuild's replayed ``bmm`` was
    recorded in float32 (autocast off around it); replayed with autocast on, autocast cast it to
    bfloat16 and the training differed. The replay runs below autocast: bitwise."""
    import copy

    from slackswap.plan import Plan
    from slackswap.profiling import profile_step
    from slackswap.runtime import prepare

    torch.manual_seed(0)
    model = _Fp32Scores()
    xs = [torch.randn(8, 8) for _ in range(3)]

    def loss_of(out: torch.Tensor) -> torch.Tensor:
        return out.float().square().sum()

    with torch.autocast("cpu", dtype=torch.bfloat16):
        inst = profile_step(model, (xs[0],), loss_of)
    scores = [i for i, n in enumerate(inst.tensor_name) if "/bmm" in str(n)]
    assert len(scores) == 1, list(inst.tensor_name)
    acts = [KEEP] * inst.n_tensors
    acts[scores[0]] = RECOMP
    plan = Plan(inst, acts)

    def bf16() -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16)

    ref, _ = _adamw_steps(copy.deepcopy(model), xs, loss_of=loss_of, region=bf16)
    mine = copy.deepcopy(model)
    got, rebuilds = _adamw_steps(mine, xs, prepare(mine, plan, 1.0), loss_of=loss_of, region=bf16)
    assert rebuilds == [1, 1, 1]
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))


def test_a_program_reads_an_operators_outputs_by_its_schema() -> None:
    """An operator whose schema returns tensors alone has its output taken as it is (one
    tensor, or the tuple of them); a list among its returns, or a callable with no schema, goes
    the general way (outputs flattened, their count checked)."""
    from slackswap.runtime.rebuild_program import _tensor_returns

    assert _tensor_returns(torch.ops.aten.mul.Tensor) == 1
    assert _tensor_returns(torch.ops.aten.native_dropout.default) == 2
    assert _tensor_returns(torch.ops.aten.native_layer_norm.default) == 3
    assert _tensor_returns(torch.ops.aten.split.Tensor) is None  # Tensor[]
    assert _tensor_returns(torch.ops.aten._local_scalar_dense.default) is None  # a number
    assert _tensor_returns(lambda t: t + 1) is None


class _SinCos(torch.nn.Module):
    """``cos`` reads ``sin``'s output: recomputing both, the first backward reader of ``cos``'s
    output (the second linear's backward) rebuilds it, and ``sin``'s output with it, well before
    ``sin``'s output has a reader of its own (``cos``'s backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.cos(torch.sin(self.a(x))))


def test_a_rebuilds_inputs_are_counted_at_the_operator_the_step_is_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The memory tracker counts a tensor rebuilt for another's rebuild where the step is (the
    first reader of the tensor being unpacked), with that operator's transient bytes, not at
    its own first reader, later: there, another operator's transient bytes on top of it made a
    fast step report itself over a budget the step kept (a Hugging Face GPT-2 plan, 3,231 B)."""
    from slackswap.plan import Plan
    from slackswap.profiling import profile_step
    from slackswap.runtime import memory, prepare
    from slackswap.runtime.training import fast

    torch.manual_seed(0)
    model = _SinCos()
    xs = [torch.randn(4, 8) for _ in range(2)]
    inst = profile_step(model, (xs[0],), _square_sum, blocks=[])  # no block inputs: all rebuilt
    names = [str(n) for n in inst.tensor_name]
    (sin,) = [i for i, n in enumerate(names) if n.endswith("/sin.out")]
    (cos,) = [i for i, n in enumerate(names) if n.endswith("/cos.out")]
    acts = [KEEP] * inst.n_tensors
    acts[sin] = acts[cos] = RECOMP
    fbr = inst.tensor_first_bwd_reader
    assert fbr[cos] < fbr[sin]  # cos's output is read first: its rebuild rebuilds sin's

    counted: list[tuple[int, int]] = []  # (entry materialised, operator it was counted at)
    making: list[int] = []
    add, materialise = memory.SavedBytesTracker.add, fast.FastStep._materialise

    def noting_add(self: Any, storage: Any, nbytes: int, op: int) -> Any:
        if making:
            counted.append((making[-1], op))
        return add(self, storage, nbytes, op)

    def noting_materialise(self: Any, e: Any) -> Any:
        making.append(e.index)
        try:
            return materialise(self, e)
        finally:
            making.pop()

    planned = prepare(model, Plan(inst, acts), 1.0)
    _adamw_steps(model, xs[:1], planned)  # the checked first step
    monkeypatch.setattr(memory.SavedBytesTracker, "add", noting_add)
    monkeypatch.setattr(fast.FastStep, "_materialise", noting_materialise)
    _, rebuilds = _adamw_steps(model, xs[1:], planned)
    assert planned.fast, planned.reason
    assert rebuilds == [2]
    assert sorted(counted) == sorted([(sin, int(fbr[cos])), (cos, int(fbr[cos]))])
