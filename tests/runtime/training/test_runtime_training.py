"""The training path (`slackswap.runtime.prepare`): N planned steps equal N plain ones, bit for bit."""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.plan import KEEP, RECOMP, SWAP, Plan, PlanError  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import ShapeChangeError, apply, prepare  # noqa: E402
from slackswap.runtime.executor import PlanExecutor  # noqa: E402
from slackswap.runtime.observer import StepObserver  # noqa: E402
from slackswap.runtime.policy import runtime_policy  # noqa: E402
from slackswap.simulator import policies  # noqa: E402
from slackswap.simulator.policies import ExecutionMode, RuntimeSpec  # noqa: E402
from slackswap.solvers import run  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402
from tests.support.plans import static_solver_plans  # noqa: E402

pytestmark = pytest.mark.torch


class _Capture(StepObserver):
    """Keeps each executor of a checked step (`StepObserver.started`)."""

    def __init__(self, made: list[PlanExecutor]):
        self.made = made

    def started(self, executor: PlanExecutor) -> None:
        self.made.append(executor)


MODELS = ("gpt_dropout", "torch_encoder", "plain_cnn")
PLANS = ("keep-all", "all-swap", "all-recompute", "blocks-recompute", "slackswap@50%")
STEPS = 5


@pytest.fixture(autouse=True)
def _one_thread():  # type: ignore[no-untyped-def]
    # Bitwise comparisons between runs: one thread, so no reduction depends on scheduling.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Model:
    def __init__(self, name: str):
        made = getattr(pf, name)()
        self.model = made[0]
        self.inputs = made[1] if isinstance(made[1], tuple) else (made[1],)
        self.loss_fn = made[2] if len(made) == 3 else (lambda out: out.sum())
        self.inst = profile_step(self.model, self.inputs, self.loss_fn)
        self._plans: dict[str, tuple[Plan, Any]] = {}

    def plan(self, kind: str) -> tuple[Plan, Any]:
        if kind not in self._plans:
            self._plans[kind] = _plan(self.inst, kind)
        return self._plans[kind]


_MODELS: dict[str, Model] = {}


def _model(name: str) -> Model:
    if name not in _MODELS:
        _MODELS[name] = Model(name)
    return _MODELS[name]


def _in_blocks(inst: Any) -> np.ndarray:
    blocks = inst.meta["block_modules"]
    names = [inst.op_name[int(p)].rsplit("/", 1)[0] for p in inst.tensor_producer]
    return np.array([any(n == b or n.startswith(b + ".") for b in blocks) for n in names])


def _plan(inst: Any, kind: str) -> tuple[Plan, Any]:
    n = inst.n_tensors
    recomputable = np.isfinite(inst.tensor_recompute_s)
    if kind == "slackswap@50%":
        rec = run(inst, 0.5, "slackswap", time_limit=0.3, find_min_budget=False)
        assert rec.plan is not None
        return rec.plan, 0.5
    acts = {
        "keep-all": np.full(n, KEEP),
        "all-swap": np.full(n, SWAP),
        "all-recompute": np.where(recomputable, RECOMP, KEEP),
        "blocks-recompute": np.where(recomputable & _in_blocks(inst), RECOMP, KEEP),
    }[kind]
    return Plan(inst, acts.astype(np.int8)), 1.0


def _train(m: Model, steps: int, planned: Any = None, *, start: Any = None) -> tuple[Any, Any]:
    """``steps`` AdamW steps from a copy of the model (or ``start``: (model, optimizer))."""
    if start is None:
        model = copy.deepcopy(m.model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    else:
        model, opt = start
    p = planned(model) if planned is not None else None
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        if p is None:
            m.loss_fn(model(*m.inputs)).backward()
        else:
            with p.step():
                m.loss_fn(model(*m.inputs)).backward()
        opt.step()
    return model, opt


def _after_a_synced_first_step(m: Model, plan: Plan, budget: Any) -> tuple[Any, Any, Any]:
    """A one-step reference run (seed 1), and a copy of its model prepared under ``plan`` whose
    checked first step ran and was then set to the reference's state (its batch-norm double
    update is the executor's), so later steps compare with the reference's: (reference (model,
    optimizer), the `PlannedStep`, (model, optimizer))."""
    torch.manual_seed(1)
    ref = _train(m, 1)
    model = copy.deepcopy(ref[0])
    planned = prepare(model, plan, budget)
    model.zero_grad(set_to_none=True)
    with planned.step():
        m.loss_fn(model(*m.inputs)).backward()
    model.load_state_dict(ref[0].state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt.load_state_dict(copy.deepcopy(ref[1].state_dict()))
    return ref, planned, (model, opt)


def _after_its_first_step(m: Model, plan: Plan, budget: Any) -> tuple[Any, Any]:
    """A copy of ``m``'s model and a `PlannedStep` of ``plan`` on it whose checked first step
    ran (the next step is fast when the plan allows it)."""
    model = copy.deepcopy(m.model)
    planned = prepare(model, plan, budget)
    with planned.step():
        m.loss_fn(model(*m.inputs)).backward()
    return model, planned


def _planned_steps(m: Model, planned: Any, model: Any, opt: Any, steps: int) -> list[Any]:
    """``steps`` AdamW steps of ``model`` under ``planned``: each step's `RunStats`."""
    stats = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with planned.step() as st:
            m.loss_fn(model(*m.inputs)).backward()
        opt.step()
        stats.append(st)
    return stats


def _differences(a: tuple[Any, Any], b: tuple[Any, Any]) -> list[str]:
    """Parameters, buffers and optimizer state that are not bitwise equal."""
    out = [k for (k, x), (_, y) in zip(a[0].state_dict().items(), b[0].state_dict().items(),
                                        strict=True) if not torch.equal(x, y)]  # fmt: skip
    for pa, pb in zip(a[0].parameters(), b[0].parameters(), strict=True):
        sa, sb = a[1].state[pa], b[1].state[pb]
        for key in sa:
            if not torch.equal(sa[key], sb[key]):
                out.append(f"optimizer {key}")
    return out


#: Plans whose steps after the first run on saved-tensor hooks alone (the rest, the checked path).
FAST = {
    (m, p) for m in MODELS for p in ("keep-all", "all-swap", "blocks-recompute", "slackswap@50%")
}


@pytest.mark.parametrize(
    ("name", "plan_kind"),
    [(n, k) for n in MODELS for k in PLANS],
)
def test_planned_training_is_bitwise_identical(name: str, plan_kind: str) -> None:
    m = _model(name)
    plan, budget = m.plan(plan_kind)
    made: list[Any] = []

    def planned(model: Any) -> Any:
        made.append(prepare(model, plan, budget))
        return made[0]

    torch.manual_seed(1)
    ref = _train(m, STEPS)
    torch.manual_seed(1)
    got = _train(m, STEPS, planned)
    assert _differences(ref, got) == []
    assert made[0].steps == STEPS
    if (name, plan_kind) in FAST:
        assert made[0].fast, made[0].reason


def test_a_block_given_one_tensor_twice_is_recomputed_as_it_ran() -> None:
    # The decoder's self-attention block gets x as query, key and value; checkpoint saves its
    # tensor arguments through the step's hooks, which would hand three distinct tensors to
    # the recomputation (and nn.MultiheadAttention would project them separately, saving other
    # tensors than the forward did: torch's CheckpointError). Each tensor is saved once.
    m = _model("torch_decoder")
    plan, budget = m.plan("blocks-recompute")
    made: list[Any] = []

    def planned(model: Any) -> Any:
        made.append(prepare(model, plan, budget))
        return made[0]

    torch.manual_seed(1)
    ref = _train(m, 3)
    torch.manual_seed(1)
    got = _train(m, 3, planned)
    assert _differences(ref, got) == []
    assert made[0].fast, made[0].reason
    assert made[0].checkpointed_blocks == list(m.inst.meta["block_modules"])


def test_a_fast_step_whose_set_up_fails_leaves_nothing_installed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A fast step that cannot install its second checkpointed block's wrapper raises, and
    undoes what it had installed, as a with statement would: the first block's forward is its
    own again, no hook is left on the model, and no saved-tensor hook sees a later step."""
    from slackswap.runtime.training import fast as fast_module

    m = _model("torch_decoder")
    model, planned = _after_its_first_step(m, *m.plan("blocks-recompute"))
    blocks = list(m.inst.meta["block_modules"])
    assert planned.fast and planned.checkpointed_blocks == blocks and len(blocks) >= 2
    forwards = {b: model.get_submodule(b).forward for b in blocks}
    wrap = fast_module.checkpointed_block
    entered: list[str] = []

    def second_fails(model: Any, path: str, saving: Any) -> Any:
        entered.append(path)
        if len(entered) == 2:
            raise RuntimeError("cannot wrap the second block")
        return wrap(model, path, saving)

    monkeypatch.setattr(fast_module, "checkpointed_block", second_fails)
    with pytest.raises(RuntimeError, match="cannot wrap the second block"):
        with planned.step():
            pass
    assert entered == blocks[:2]
    assert {b: model.get_submodule(b).forward for b in blocks} == forwards
    assert not model._forward_pre_hooks
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None  # none pushed
    monkeypatch.undo()
    with planned.step():  # the next step installs and undoes its own as usual
        m.loss_fn(model(*m.inputs)).backward()
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def test_fast_steps_update_batch_norm_statistics_once() -> None:
    # Step 1 (checked) is synchronised to the reference, so only the fast steps are compared.
    m = _model("plain_cnn")
    plan, budget = m.plan("all-recompute")
    torch.manual_seed(1)
    ref = _train(m, 1)
    torch.manual_seed(1)
    got = _train(m, 1)
    planned = prepare(got[0], plan, budget)
    opt = got[1]
    got[0].zero_grad(set_to_none=True)
    with planned.step():
        m.loss_fn(got[0](*m.inputs)).backward()
    got[0].load_state_dict(ref[0].state_dict())
    opt.load_state_dict(copy.deepcopy(ref[1].state_dict()))  # else both share the tensors
    assert planned.fast, planned.reason
    ref = _train(m, STEPS - 1, start=ref)
    got = _train(m, STEPS - 1, lambda model: planned, start=got)
    assert _differences(ref, got) == []


def test_a_cnns_block_recompute_is_replayed_with_the_convolutions_alone() -> None:
    # The CNN's profiled blocks are its convolutions, whose outputs the batch-norm after each
    # saves: each is rebuilt from the first step's records (the convolution alone, not under
    # torch.utils.checkpoint with its batch-norm, which would run the batch-norm again too),
    # and the state stays one step's.
    m = _model("plain_cnn")
    plan, budget = m.plan("blocks-recompute")
    ref, planned, (model, opt) = _after_a_synced_first_step(m, plan, budget)
    torch.manual_seed(2)
    ref = _train(m, STEPS - 1, start=ref)
    torch.manual_seed(2)
    rebuilds = [st.rebuilds for st in _planned_steps(m, planned, model, opt, STEPS - 1)]
    assert _differences(ref, (model, opt)) == []
    assert planned.fast, planned.reason
    assert planned.checkpointed_blocks == []
    # Every convolution after the stem but the last, whose output the profile does not
    # recompute (the pooling's input), rebuilt once per step.
    convs = [k for k, mod in enumerate(model.features) if isinstance(mod, torch.nn.Conv2d)]
    assert rebuilds == [len(convs) - 2] * (STEPS - 1)


def test_a_block_whose_recomputed_output_is_saved_after_it_is_replayed_not_checkpointed() -> None:
    # Each Fire block's output (the concatenation) is saved by the max-pooling after the block.
    # A plan recomputing everything the blocks make (block checkpointing's plan) recomputes the
    # first block's output too (the profile keeps the last one's, a boundary of the step),
    # which torch.utils.checkpoint on the block would not make again: that block is replayed
    # from the first step's records instead, the other checkpointed, the steps fast, bitwise.
    m = _model("fire_net")
    assert m.inst.meta["block_modules"] == ["fires.0", "fires.1"]
    plan, budget = m.plan("blocks-recompute")
    first_block = [k for k, p in enumerate(m.inst.tensor_producer)
                   if m.inst.op_name[int(p)].startswith("fires.0")]  # fmt: skip
    names = [m.inst.tensor_name[k] for k in first_block]
    assert "fires.0/cat.out" in names and all(plan.actions[k] == RECOMP for k in first_block)
    ref, planned, (model, opt) = _after_a_synced_first_step(m, plan, budget)
    ref = _train(m, STEPS - 1, start=ref)
    stats = _planned_steps(m, planned, model, opt, STEPS - 1)
    rebuilds = [(st.rebuilds, st.over_budget_bytes) for st in stats]
    assert _differences(ref, (model, opt)) == []
    assert planned.fast, planned.reason
    assert planned.checkpointed_blocks == ["fires.1"]
    assert rebuilds == [(len(first_block), 0)] * (STEPS - 1)


def test_a_block_whose_recomputed_tensor_a_later_rebuild_reads_is_replayed_not_checkpointed() -> (
    None
):
    # The patch merging's concatenation reads the last block's output through strided views,
    # which save nothing; the plan recomputes the concatenation and everything the blocks make,
    # so the concatenation's rebuild reads the sum the last block's multiplication saves.
    # torch.utils.checkpoint on that block would not make the sum again where the rebuild
    # needs it: the block is replayed instead (before, every step ran the checked path: "its
    # rebuild reads 'blocks.1/add.out', which a fast step does not see saved"), the first
    # block checkpointed, the steps fast, bitwise.
    m = _model("merge_net")
    inst = m.inst
    assert inst.meta["block_modules"] == ["blocks.0", "blocks.1"]
    blocks_plan, _ = m.plan("blocks-recompute")
    acts = np.array(blocks_plan.actions, dtype=np.int8)
    cat = inst.tensor_name.index("merge/cat.out")
    last_sum = inst.tensor_name.index("blocks.1/add.out")
    acts[cat] = RECOMP
    assert last_sum in inst.tensor_rebuild_inputs[cat] and acts[last_sum] == RECOMP
    plan = Plan(inst, acts)
    ref, planned, (model, opt) = _after_a_synced_first_step(m, plan, 1.0)
    ref = _train(m, STEPS - 1, start=ref)
    stats = _planned_steps(m, planned, model, opt, STEPS - 1)
    assert _differences(ref, (model, opt)) == []
    assert planned.fast, planned.reason
    assert planned.checkpointed_blocks == ["blocks.0"]
    last_block = [k for k, p in enumerate(inst.tensor_producer)
                  if inst.op_name[int(p)].startswith("blocks.1")]  # fmt: skip
    # Each step rebuilds the last block's tensors and the concatenation, each once.
    assert [(st.rebuilds, st.over_budget_bytes) for st in stats] == [(len(last_block) + 1, 0)] * (
        STEPS - 1
    )


def test_a_replay_reads_a_convolutions_input_the_plan_swaps() -> None:
    # Each convolution's input swapped, its output recomputed (what SlackSwap chooses for the
    # CNN): the replay of the convolution reads the input fetched back, within the simulated
    # peak, and the state stays one step's.
    from slackswap.runtime.memory import StorageTracker
    from slackswap.simulator import simulate

    m = _model("plain_cnn")
    inst = m.inst
    acts = np.full(inst.n_tensors, KEEP, dtype=np.int8)
    for k, name in enumerate(inst.tensor_name):
        if name.endswith("/convolution.out") and np.isfinite(inst.tensor_recompute_s[k]):
            acts[k] = RECOMP
        elif name.startswith("block") and name.endswith(".in"):
            acts[k] = SWAP
    plan = Plan(inst, acts)
    ref, planned, (model, opt) = _after_a_synced_first_step(m, plan, 1.0)
    ref = _train(m, STEPS - 1, start=ref)
    got = []
    for _ in range(STEPS - 1):
        opt.zero_grad(set_to_none=True)
        with StorageTracker(list(model.parameters())) as tracker:
            with planned.step() as stats:
                m.loss_fn(model(*m.inputs)).backward()
        opt.step()
        got.append((stats.rebuilds, stats.h2d_bytes > 0, tracker.peak_bytes))
    assert _differences(ref, (model, opt)) == []
    assert planned.fast, planned.reason
    assert planned.checkpointed_blocks == []
    assert [(r, h) for r, h, _ in got] == [(int((acts == RECOMP).sum()), True)] * (STEPS - 1)
    assert max(p for _, _, p in got) <= simulate(inst, plan, 1.0).peak_bytes * 1.10


def test_a_keep_all_plans_fast_steps_only_count_what_autograd_saves(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Keeping every saved tensor is autograd's own behaviour: after the checked first step the
    # training path's hooks hand every tensor back as it is (the plain step's bits) and only
    # count its storage, so the step is measured: at most every saved tensor at once beside
    # the largest operator's modelled transient bytes.
    m = _model("gpt_dropout")
    plan, budget = m.plan("keep-all")
    model = copy.deepcopy(m.model)
    planned = prepare(model, plan, budget)
    with planned.step() as first:
        m.loss_fn(model(*m.inputs)).backward()
    packed: list[Any] = []
    unpacked: list[Any] = []
    real = torch.autograd.graph.saved_tensors_hooks

    def spying(pack: Any, unpack: Any) -> Any:
        def spy_pack(t: Any) -> Any:
            out = pack(t)
            packed.append(out is t)
            return out

        def spy_unpack(h: Any) -> Any:
            out = unpack(h)
            unpacked.append(out is h)
            return out

        return real(spy_pack, spy_unpack)

    monkeypatch.setattr(torch.autograd.graph, "saved_tensors_hooks", spying)
    model.zero_grad(set_to_none=True)
    with planned.step() as later:
        m.loss_fn(model(*m.inputs)).backward()
    assert planned.fast, planned.reason
    assert packed and all(packed) and unpacked and all(unpacked)
    assert later.measured == "saved tensors, with modelled transients"
    assert first.measured == "operator outputs"
    saved = int(np.asarray(m.inst.tensor_bytes).sum())
    most = saved + int(np.asarray(m.inst.op_transient_bytes).max())
    assert 0 < later.measured_peak_bytes <= most
    assert later.swapped_bytes == later.recomputed_bytes == later.h2d_bytes == 0


@pytest.mark.parametrize("plan_kind", ["keep-all", "all-swap", "blocks-recompute", "slackswap@50%"])
def test_steps_after_the_first_enter_no_dispatch_mode(plan_kind: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    m = _model("gpt_dropout")
    plan, budget = m.plan(plan_kind)
    model = copy.deepcopy(m.model)
    planned = prepare(model, plan, budget)
    entered: list[str] = []
    seen: list[int] = []
    real_enter = torch.utils._python_dispatch.TorchDispatchMode.__enter__

    def spy(self: Any) -> Any:
        entered.append(type(self).__name__)
        return real_enter(self)

    monkeypatch.setattr(torch.utils._python_dispatch.TorchDispatchMode, "__enter__", spy)
    for step in range(3):
        entered.clear()
        hooks = [
            mod.register_forward_hook(lambda *a: seen.append(torch._C._len_torch_dispatch_stack()))
            for mod in model.modules()
        ]
        with planned.step():
            m.loss_fn(model(*m.inputs)).backward()
        for h in hooks:
            h.remove()
        if step == 0:
            assert entered, "the first step is the checked one"
            seen.clear()
    assert planned.fast, planned.reason
    assert entered == [] and seen and max(seen) == 0


def test_a_shape_change_is_one_clear_error() -> None:
    m = _model("gpt_dropout")
    plan, budget = m.plan("all-swap")
    model = copy.deepcopy(m.model)
    planned = prepare(model, plan, budget)
    for _ in range(2):
        with planned.step():
            m.loss_fn(model(*m.inputs)).backward()
    ids = m.inputs[0][:1]
    with pytest.raises(ShapeChangeError, match=r"inputs are \[1, 32\] int64.*made for \[2, 32\]"):
        with planned.step():
            model(ids).sum().backward()
    # Nothing stays installed: a plain step runs, and the plan's shapes still run planned.
    model(ids).sum().backward()
    with planned.step():
        m.loss_fn(model(*m.inputs)).backward()


def test_a_shape_change_replans_when_asked() -> None:
    m = _model("gpt_dropout")
    plan, budget = m.plan("slackswap@50%")
    model = copy.deepcopy(m.model)

    def solver(inst: Any, b: Any) -> Any:
        return run(inst, b, "slackswap", time_limit=0.3, find_min_budget=False).plan

    planned = prepare(model, plan, budget, replan=True, solver=solver)
    with planned.step():
        m.loss_fn(model(*m.inputs)).backward()
    first = planned.plan
    ids = m.inputs[0][:1]
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(3)
    ref = model(ids).sum()
    ref.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(3)
    with planned.step():
        loss = model(ids).sum()
        loss.backward()
    assert planned.plan is not first
    assert planned.plan.instance.tensor_bytes.sum() < first.instance.tensor_bytes.sum()
    assert torch.equal(loss, ref)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), ref_grads, strict=True))
    model.zero_grad(set_to_none=True)
    with planned.step():  # the new plan's fast steps
        model(ids).sum().backward()
    assert planned.fast, planned.reason


def test_replan_needs_the_solver() -> None:
    m = _model("gpt_dropout")
    plan, budget = m.plan("keep-all")
    with pytest.raises(Exception, match="pass solver="):
        prepare(m.model, plan, budget, replan=True, solver="slackswap")


def test_a_step_that_raises_leaves_nothing_installed() -> None:
    m = _model("gpt_dropout")
    model, planned = _after_its_first_step(m, *m.plan("blocks-recompute"))
    with pytest.raises(ValueError, match="boom"):
        with planned.step():
            model(*m.inputs)
            raise ValueError("boom")
    assert all("forward" not in mod.__dict__ for mod in model.modules())
    with torch.autograd.graph.saved_tensors_hooks(lambda t: ("mine", t), lambda h: h[1]):
        model(*m.inputs).sum().backward()  # no hook of the runtime's left to see these


# ----- one runtime policy ---------------------------------------------------------------------
def _register(monkeypatch, spec: RuntimeSpec) -> None:  # type: ignore[no-untyped-def]
    policies._registered()
    monkeypatch.setitem(policies._REGISTRY, spec.name, spec)


def test_the_executor_takes_its_look_ahead_from_the_registry(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _register(monkeypatch, RuntimeSpec("test-late-prefetch", "one-operator look-ahead",
                                       lookahead_ops=1,
                                       execution=ExecutionMode(overlap=True, prefetch=True)))  # fmt: skip
    assert runtime_policy("test-late-prefetch", live=True).lookahead_ops == 1
    assert runtime_policy("barrier-free", live=True).lookahead_ops == 3
    m = _model("gpt_dropout")
    plan, _ = m.plan("all-swap")
    made: list[PlanExecutor] = []
    spy = _Capture(made)

    model = copy.deepcopy(m.model)
    with apply(plan, 1.0, model=model, runtime="test-late-prefetch", schedule="live",
               observer=spy):  # fmt: skip
        m.loss_fn(model(*m.inputs)).backward()
    assert made[0].copies.lookahead_ops == 1


def test_a_runtime_the_executor_cannot_follow_live_is_refused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _register(monkeypatch, RuntimeSpec("test-barriers", "forward waits per layer", fwd_wait=1,
                                       execution=ExecutionMode(overlap=True, prefetch=True)))  # fmt: skip
    m = _model("gpt_dropout")
    plan, _ = m.plan("all-swap")
    for name in ("test-barriers", "layer-prefetch"):
        with pytest.raises(PlanError, match=f"runtime = '{name}'.*cannot be followed live"):
            with apply(plan, 1.0, model=m.model, runtime=name, schedule="live"):
                pass
        # Replayed, the simulator's own schedule for the runtime is followed.
        assert runtime_policy(name, live=False).overlap


def test_another_step_after_the_first_is_a_step_mismatch() -> None:
    from slackswap.runtime import StepMismatchError

    m = _model("gpt_dropout")
    model, planned = _after_its_first_step(m, *m.plan("all-swap"))
    model.eval()  # no dropout: other tensors saved, in another order
    model.zero_grad(set_to_none=True)
    with pytest.raises(StepMismatchError, match="plan's step has|saved .* tensors"):
        with planned.step():
            m.loss_fn(model(*m.inputs)).backward()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("plan_kind", ["keep-all", "all-swap", "blocks-recompute", "slackswap@50%"])
def test_cuda_planned_training_is_bitwise_identical(plan_kind: str) -> None:
    # Side-stream copies into pinned memory, prefetched by the look-ahead rule: same bits.
    made = pf.gpt_dropout()
    model = made[0].cuda()
    ids = made[1][0].cuda()
    targets = torch.roll(ids, -1, dims=1)

    def loss_fn(logits: Any) -> Any:
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]),
                                                 targets.view(-1))  # fmt: skip

    inst = profile_step(model, (ids,), loss_fn)
    plan, budget = _plan(inst, plan_kind)
    m = Model.__new__(Model)
    m.model, m.inputs, m.loss_fn, m.inst = model, (ids,), loss_fn, inst
    torch.manual_seed(1)
    ref = _train(m, STEPS)
    planned_steps: list[Any] = []

    def planned(mod: Any) -> Any:
        planned_steps.append(prepare(mod, plan, budget))
        return planned_steps[0]

    torch.manual_seed(1)
    got = _train(m, STEPS, planned)
    assert _differences(ref, got) == []
    assert planned_steps[0].fast, planned_steps[0].reason


@pytest.mark.parametrize("plan_kind", PLANS)
@pytest.mark.parametrize("name", MODELS)
def test_fast_steps_stay_within_the_plans_memory(name: str, plan_kind: str) -> None:
    # Measured by the storage tracker (a dispatch mode of its own, outside the runtime): a later
    # step holds no more than the simulator's peak for the plan, within the runtime tests' 10%
    # (host copies are not device memory; a swapped rebuild input comes back when read).
    from slackswap.runtime.memory import StorageTracker
    from slackswap.simulator import simulate

    m = _model(name)
    plan, budget = m.plan(plan_kind)
    model = copy.deepcopy(m.model)
    planned = prepare(model, plan, budget)
    peaks = []
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        with StorageTracker(list(model.parameters())) as tracker:
            with planned.step():
                m.loss_fn(model(*m.inputs)).backward()
        peaks.append(tracker.peak_bytes)
    sim = simulate(m.inst, plan, budget)
    assert peaks[1] <= sim.peak_bytes * 1.10, (peaks, sim.peak_bytes)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", MODELS)
def test_random_mixes_in_fast_steps_are_bitwise_identical(name: str, seed: int) -> None:
    # Each saved tensor kept, swapped or (where it can be) recomputed at random. The checked
    # first step is synchronised to the reference, so the fast steps alone are compared.
    m = _model(name)
    rng = np.random.default_rng(seed)
    acts = rng.integers(0, 3, m.inst.n_tensors)
    acts[(acts == RECOMP) & ~np.isfinite(m.inst.tensor_recompute_s)] = KEEP
    plan = Plan(m.inst, acts.astype(np.int8))
    torch.manual_seed(1)
    ref = _train(m, 1)
    got = (copy.deepcopy(ref[0]), None)
    planned = prepare(got[0], plan, 1.0)
    got[0].zero_grad(set_to_none=True)
    with planned.step():
        m.loss_fn(got[0](*m.inputs)).backward()
    got[0].load_state_dict(ref[0].state_dict())
    opt = torch.optim.AdamW(got[0].parameters(), lr=1e-2)
    opt.load_state_dict(copy.deepcopy(ref[1].state_dict()))
    torch.manual_seed(2)
    ref = _train(m, 3, start=ref)
    torch.manual_seed(2)
    got = _train(m, 3, lambda model: planned, start=(got[0], opt))
    assert _differences(ref, got) == [], planned.reason


@pytest.mark.parametrize(
    "name",
    # every solver's plan trained on every model: minutes; the fast suite keeps the quicker two
    [
        pytest.param(m, marks=pytest.mark.slow) if m in ("torch_encoder", "plain_cnn") else m
        for m in MODELS
    ],
)
def test_every_static_solvers_plan_trains_bitwise_identically(name: str) -> None:
    # Five AdamW steps per plan; the checked first step is synchronised to the reference (its
    # batch-norm double update is the executor's), so the four fast steps are what is compared.
    m = _model(name)
    plans = static_solver_plans(m.inst)
    assert plans
    wrong, slow = [], []
    for label, (plan, budget) in plans.items():
        ref, planned, (model, opt) = _after_a_synced_first_step(m, plan, budget)
        torch.manual_seed(2)
        ref = _train(m, STEPS - 1, start=ref)
        torch.manual_seed(2)
        got = _train(m, STEPS - 1, lambda _, p=planned: p, start=(model, opt))
        if _differences(ref, got):
            wrong.append(label)
        if not planned.fast:
            slow.append(f"{label}: {planned.reason}")
    assert wrong == []
    print(f"{len(plans)} plans; checked at every step: {slow}")


def _cnn_swap_and_recompute(inst: Any) -> Plan:
    """Each convolution's output recomputed (where it can be), each block's input swapped, the
    rest kept: a fast step then swaps, rebuilds, and holds kept rebuild inputs."""
    acts = np.full(inst.n_tensors, KEEP, dtype=np.int8)
    for k, name in enumerate(inst.tensor_name):
        if name.endswith("/convolution.out") and np.isfinite(inst.tensor_recompute_s[k]):
            acts[k] = RECOMP
        elif name.startswith("block") and name.endswith(".in"):
            acts[k] = SWAP
    return Plan(inst, acts)


def _fast_step_paths(
    m: Model, plan: Plan, budget: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[int, list[Any]], Any, list[tuple[int, int]]]:
    """Each entry's residencies, in order, over the second (fast) step of ``plan``; that step
    (a `FastStep`); and, at each unpack, the bytes it counts as copied back against those of
    its entries that are copied back."""
    from slackswap.runtime.entry import Entry, Residency
    from slackswap.runtime.training import fast as fast_module
    from slackswap.runtime.training.fast import FastStep

    model = copy.deepcopy(m.model)
    planned = prepare(model, plan, budget)
    with planned.step():
        m.loss_fn(model(*m.inputs)).backward()
    paths: dict[int, list[Any]] = {}
    steps: list[FastStep] = []
    move, init = Entry.move, FastStep.__init__

    def recording(e: Entry, r: Any, **kw: Any) -> None:
        move(e, r, **kw)
        paths.setdefault(e.index, []).append(r)

    def keeping(self: FastStep, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        steps.append(self)

    counted: list[tuple[int, int]] = []
    unpack = FastStep._unpack

    def counting(self: FastStep, h: Any) -> Any:
        back = sum(e.nbytes for e in self.entries.values() if e.residency is Residency.TO_DEVICE)
        # a plan that swaps nothing has no copy engine, and copies nothing back
        counted.append((self.copies.admitted_bytes if self.copies is not None else 0, back))
        return unpack(self, h)

    monkeypatch.setattr(Entry, "move", recording)
    monkeypatch.setattr(fast_module, "CHECK_FAST_STATES", True)  # every change checked
    monkeypatch.setattr(FastStep, "__init__", keeping)
    monkeypatch.setattr(FastStep, "_unpack", counting)
    model.zero_grad(set_to_none=True)
    with planned.step():
        m.loss_fn(model(*m.inputs)).backward()
    monkeypatch.undo()
    assert planned.fast, planned.reason
    assert len(steps) == 1
    return paths, steps[0], counted


def test_a_fast_step_moves_each_saved_tensor_through_its_residencies(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Swapped: on the device when saved, on the host at once (the runtime keeps no device
    reference), copied back when read, freed when released (a rebuild's input once that
    rebuild is done too). Recomputed: rebuilt when first read, then freed. Kept: autograd
    holds it, so the runtime holds nothing until the step closes. Every entry ends freed, and
    the bytes counted as copied back are always those of the entries copied back."""
    from slackswap.runtime.entry import EntryState, Residency

    R = Residency
    m = _model("plain_cnn")
    paths, step, counted = _fast_step_paths(m, _cnn_swap_and_recompute(m.inst), 1.0, monkeypatch)
    entries = list(step.entries.values())  # the entries the step made (`_Entries`)
    assert counted and all(n == back for n, back in counted), counted
    assert any(back for _, back in counted)
    by_action: dict[int, set[tuple[Any, ...]]] = {KEEP: set(), SWAP: set(), RECOMP: set()}
    for e in entries:
        by_action[e.action].add(tuple(paths.get(e.index, ())))
    assert by_action[SWAP] == {(R.HOST, R.TO_DEVICE, R.FREED)}  # copied out as it is saved
    assert by_action[RECOMP] == {(R.REBUILDING, R.DEVICE, R.FREED)}
    # The rebuilds read swapped inputs alone: the step made no entry for a kept tensor.
    assert by_action[KEEP] == set()
    assert {e.index for e in entries} == {i for i, a in enumerate(step.actions) if a != KEEP}
    assert {e.residency for e in entries} == {R.FREED}
    assert all(e.device is None and e.host is None and e.event is None for e in entries)
    assert {e.state for e in entries if e.action != KEEP} == {EntryState.RELEASED}


def test_a_fast_step_holds_a_kept_rebuild_input_until_its_last_rebuild(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every recomputable tensor recomputed: the rebuilds read kept inputs, which the runtime
    holds from their save (on the device) until the last rebuild reading them (freed), and
    recomputed ones, rebuilt, then freed once released and no rebuild reads them."""
    from slackswap.runtime.entry import Residency as R

    m = _model("plain_cnn")
    plan, budget = m.plan("all-recompute")
    paths, step, _ = _fast_step_paths(m, plan, budget, monkeypatch)
    entries = list(step.entries.values())  # the entries the step made (`_Entries`)
    kept_paths = {e.index: tuple(paths.get(e.index, ())) for e in entries if e.action == KEEP}
    held = {i for i, path in kept_paths.items() if path == (R.DEVICE, R.FREED)}
    # A kept tensor no rebuild reads gets no entry; each one a rebuild reads is held.
    assert set(kept_paths.values()) == {(R.DEVICE, R.FREED)}
    read = set().union(*step.learned.replay.deps.values())  # what the rebuilds read
    assert held == {i for i in read if step.actions[i] == KEEP}
    assert {tuple(paths[e.index]) for e in entries if e.action == RECOMP} == {
        (R.REBUILDING, R.DEVICE, R.FREED)
    }
    assert {e.residency for e in entries} == {R.FREED}


def test_a_fast_step_of_an_all_swap_plan_frees_every_entry(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from slackswap.runtime.entry import Residency as R

    m = _model("gpt_dropout")
    plan, budget = m.plan("all-swap")
    paths, step, _ = _fast_step_paths(m, plan, budget, monkeypatch)
    entries = list(step.entries.values())
    assert len(entries) == len(step.actions)
    # Copied out, back when read, freed; or, where the simulator keeps a tensor on the device
    # (its offload had not ended when the backward pass began), copied out and held until freed.
    late = step.facts.late
    assert late
    assert {tuple(paths[e.index]) for e in entries if e.index not in late} == {
        (R.HOST, R.TO_DEVICE, R.FREED)
    }
    assert {tuple(paths[i]) for i in late} == {(R.TO_HOST, R.FREED)}
    assert {e.residency for e in entries} == {R.FREED}


def test_a_refused_change_in_a_fast_step_names_the_tensor(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A runtime bug (copying back a tensor autograd released) is caught where it happens,
    naming the tensor, not as a failure on a missing host copy."""
    from slackswap.runtime.entry import StateError

    m = _model("gpt_dropout")
    plan, budget = m.plan("all-swap")
    _, step, _ = _fast_step_paths(m, plan, budget, monkeypatch)
    e = step.entries[0]
    with pytest.raises(
        StateError, match=rf"{m.inst.tensor_name[0]!r} \(#0\): freed -> copied back"
    ):
        step.copies.fetch(e)


def test_a_copy_back_a_rebuild_still_reads_counts_until_that_rebuild_is_done(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A swapped rebuild input that autograd releases before the rebuild reading it is done
    keeps its device storage until then, so the bytes counted as copied back (the look-ahead's
    admission rule reads them) stay until it is freed."""
    from slackswap.runtime.entry import EntryState, Residency
    from slackswap.runtime.training.fast import FastStep

    m = _model("plain_cnn")
    _, done, _ = _fast_step_paths(m, _cnn_swap_and_recompute(m.inst), 1.0, monkeypatch)
    step = FastStep(done.model, done.facts, done.learned)
    u = next(i for i in step._pending if step.entries[i].action == SWAP)
    e = step.entries[u]
    e.to(EntryState.SAVED)
    step.copies.offload(e, torch.zeros(e.nbytes, dtype=torch.uint8).untyped_storage())
    step._materialise(e)
    assert e.residency is Residency.TO_DEVICE and step.copies.admitted_bytes == e.nbytes
    step._release(e)  # autograd is done with it; a rebuild is not
    assert e.residency is Residency.TO_DEVICE and step.copies.admitted_bytes == e.nbytes
    for v in sorted(step._pending[u]):
        step._done(v)
    assert e.residency is Residency.FREED and e.released and step.copies.admitted_bytes == 0


def test_a_fast_step_hands_back_whole_saved_tensors_as_copied_back_or_rebuilt(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The CNN's swapped block inputs and recomputed convolution outputs are each saved as their
    # whole storage, one contiguous tensor: a fast step's unpacks and its replays take the
    # clone copied back, the convolution's own output, or the kept input itself, and make no
    # tensor over a storage (the view each costs 4-5 us of Python on a CPU); the training stays
    # bitwise.
    from slackswap.runtime import rebuild_program
    from slackswap.runtime.training import fast as fast_module

    m = _model("plain_cnn")
    plan = _cnn_swap_and_recompute(m.inst)
    views: list[Any] = []
    real = rebuild_program.view

    def counting(*args: Any) -> Any:
        views.append(args[1:])
        return real(*args)

    made: list[Any] = []

    def planned(model: Any) -> Any:
        made.append(prepare(model, plan, 1.0))
        return made[0]

    monkeypatch.setattr(rebuild_program, "view", counting)
    monkeypatch.setattr(fast_module, "view", counting)
    torch.manual_seed(1)
    ref = _train(m, STEPS)
    torch.manual_seed(1)
    got = _train(m, STEPS, planned)
    assert _differences(ref, got) == []
    assert made[0].fast, made[0].reason
    stats = made[0].last_stats
    assert stats.rebuilds > 0 and stats.h2d_bytes > 0
    # The checked first step makes its views (it rebuilds from storages); fast steps none.
    first = len(views)
    views.clear()
    with made[0].step():
        m.loss_fn(got[0](*m.inputs)).backward()
    assert views == [], f"{len(views)} tensors made over a storage (first step: {first})"


class _UnsafeGates(torch.nn.Module):
    """Two gates in one storage, updated in place in turn (``unsafe_chunk``, as PyTorch's GRU
    cell on the CPU does): the first gate's slice is saved while the second still holds its
    earlier value, which an in-place update then changes before the step saves it."""

    def __init__(self) -> None:
        super().__init__()
        self.gates = torch.nn.Linear(8, 16)
        self.other = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.gates(x).unsafe_chunk(2, 1)
        a = a.sigmoid_()
        b = b.mul_(self.other(x)).tanh_()
        return a * b


def test_a_swapped_storage_updated_in_place_after_an_earlier_pack_is_copied_out_when_saved() -> (
    None
):
    """The first step sees the sigmoid's slice packed while the storage holds an earlier value
    (the tanh's slice not yet written): that pack reads the storage as the step leaves it. A
    fast step copied the storage out at that pack, before the tanh wrote its slice, and the
    training differed (a bidirectional ``nn.GRU`` under SlackSwap); it copies out where the
    step saves the entry itself."""
    torch.manual_seed(0)
    model = _UnsafeGates()
    xs = [torch.randn(4, 8) for _ in range(3)]

    def loss_of(out: torch.Tensor) -> torch.Tensor:
        return out.square().sum()

    inst = profile_step(model, (xs[0],), loss_of)
    plan = Plan(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8))

    def train(m: torch.nn.Module, planned: Any) -> list[torch.Tensor]:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for x in xs:
            opt.zero_grad(set_to_none=True)
            if planned is None:
                loss_of(m(x)).backward()
            else:
                with planned.step():
                    loss_of(m(x)).backward()
            opt.step()
        return [p.detach().clone() for p in m.parameters()]

    ref = train(copy.deepcopy(model), None)
    mine = copy.deepcopy(model)
    planned = prepare(mine, plan, 1.0)
    got = train(mine, planned)
    assert planned.fast, planned.reason
    learned = planned._learned
    assert learned is not None and any(p.earlier for p in learned.expected)
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))


class _SelectByValue(torch.nn.Module):
    """Rows picked by their values (as a mixture of experts routes tokens): the saved tensors'
    shapes follow the batch's data, not its shape."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        picked = h[h.sum(-1) > 0]
        return torch.nn.functional.gelu(picked).sum() + h.square().sum()


def test_a_saved_tensor_whose_shape_follows_the_data_is_named_as_such() -> None:
    from slackswap.runtime.executor import StepMismatchError

    torch.manual_seed(0)
    model = _SelectByValue()
    x = torch.randn(16, 8)
    inst = profile_step(model, (x,), lambda out: out)
    planned = prepare(model, Plan(inst, np.full(inst.n_tensors, KEEP, dtype=np.int8)), 1.0)
    with planned.step():
        model(x).backward()
    other = torch.randn(16, 8)
    with torch.no_grad():
        picked = int((model.lin(x).sum(-1) > 0).sum()), int((model.lin(other).sum(-1) > 0).sum())
    assert picked[0] != picked[1]  # the same shape, other rows picked
    with pytest.raises(StepMismatchError, match="this shape follows the data"):
        with planned.step():
            model(other).backward()


class _SharedFactor(torch.nn.Module):
    """Every layer multiplies by one tensor (``r``, as rotary embeddings are shared): swapped,
    it is copied back for the last layer's backward and read again by every layer before."""

    def __init__(self, d: int = 16, layers: int = 6):
        super().__init__()
        self.rot = torch.nn.Linear(d, d)
        self.ups = torch.nn.ModuleList(torch.nn.Linear(d, 4 * d) for _ in range(layers))
        self.downs = torch.nn.ModuleList(torch.nn.Linear(4 * d, d) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.sin(self.rot(x))
        y = x
        for up, down in zip(self.ups, self.downs, strict=True):
            y = down(torch.nn.functional.gelu(up(y * r))) + y
        return y


def _copied_back_by_the_simulator(inst: Any, plan: Plan, budget: float) -> int:
    """The bytes the simulator's timeline copies back to the device for ``plan``."""
    from slackswap.simulator import simulate

    tl = simulate(inst, plan, budget, timeline=True).timeline
    return int(inst.tensor_bytes[tl.copy_tensor[tl.copy_engine == 1]].sum())


def _planned_beside_unplanned(model: Any, x: Any, plan: Plan, budget: float) -> list[Any]:
    """Three AdamW steps of ``plan`` beside three unplanned ones, from copies of ``model``: each
    planned step's stats; asserts the two end bitwise equal, every step within its budget and
    the steps after the first fast."""
    ref_model = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(ref_model.parameters(), lr=1e-2)
    got_model = copy.deepcopy(model)
    got_opt = torch.optim.AdamW(got_model.parameters(), lr=1e-2)
    planned = prepare(got_model, plan, budget)
    stats = []
    for _ in range(3):
        ref_opt.zero_grad(set_to_none=True)
        ref_model(x).sum().backward()
        ref_opt.step()
        got_opt.zero_grad(set_to_none=True)
        with planned.step() as st:
            got_model(x).sum().backward()
        got_opt.step()
        stats.append(st)
        assert st.over_budget_bytes == 0, st
    assert planned.fast, planned.reason
    assert _differences((ref_model, ref_opt), (got_model, got_opt)) == []
    return stats


def test_a_fast_step_replays_the_simulators_evictions() -> None:
    # The oracle is the simulator: the bytes its timeline copies back for the plan. Short of
    # memory between two readers of a copied-back tensor, it evicts the tensor and copies it
    # back again; a fast step that held each copy back until its last reader copied back
    # fewer bytes (1,280 of 1,536 here) and held more than the plan.
    from slackswap.simulator import simulate

    torch.manual_seed(0)
    model, x = _SharedFactor(), torch.randn(4, 16)
    inst = profile_step(model, (x,))
    rec = run(inst, 0.9, "offload-sync", time_limit=1.0, find_min_budget=False)
    assert rec.plan is not None
    assert simulate(inst, rec.plan, 0.9).evictions > 0  # the case this test is about
    copied_back = _copied_back_by_the_simulator(inst, rec.plan, 0.9)
    stats = _planned_beside_unplanned(model, x, rec.plan, 0.9)
    assert [st.h2d_bytes for st in stats] == [copied_back] * 3


def test_a_fast_step_keeps_what_the_simulator_never_copies_back() -> None:
    # Swapping everything, the last tensors' offloads have not ended when the backward pass
    # begins: the simulator keeps them on the device and never copies them back. A fast step
    # on a CPU copies them out as the checked step does and holds them (it copied back 15,616
    # B a step where the simulator copies back 8,448).
    from slackswap.runtime.schedule import simulated_schedule

    torch.manual_seed(0)
    model, x = _SharedFactor(), torch.randn(4, 16)
    inst = profile_step(model, (x,))
    plan = Plan(inst, np.full(inst.n_tensors, SWAP, dtype=np.int8))
    late = simulated_schedule(inst, plan.actions, int(inst.peak_bytes), "barrier-free")["late"]
    assert late  # the case this test is about
    copied_back = _copied_back_by_the_simulator(inst, plan, 1.0)
    stats = _planned_beside_unplanned(model, x, plan, 1.0)
    assert [st.h2d_bytes for st in stats] == [copied_back] * 3
    assert {st.swapped_bytes for st in stats} == {int(inst.tensor_bytes.sum())}


def test_a_rebuilt_tensor_in_another_layout_than_before_is_caught_when_checking(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """A fast step takes a rebuilt tensor's layout (its whole view or not) from the plan's
    first fast rebuild of it; with the state checks on, a rebuild that comes out otherwise is
    a `StateError` naming the tensor, not a wrong view handed to autograd."""
    from slackswap.runtime.entry import StateError
    from slackswap.runtime.training import fast as fast_module

    m = _model("plain_cnn")
    model = copy.deepcopy(m.model)
    planned = prepare(model, _cnn_swap_and_recompute(m.inst), 1.0)
    for _ in range(2):  # the checked step, then the fast one that sees each rebuild's layout
        model.zero_grad(set_to_none=True)
        with planned.step():
            m.loss_fn(model(*m.inputs)).backward()
    assert planned.fast, planned.reason
    seen = planned._learned.rebuilt_whole
    assert seen, "the plan rebuilds no tensor that has a whole view"
    monkeypatch.setattr(fast_module, "CHECK_FAST_STATES", True)
    model.zero_grad(set_to_none=True)
    with planned.step():  # as seen: the checks pass
        m.loss_fn(model(*m.inputs)).backward()
    i = next(iter(seen))
    seen[i] = not seen[i]
    model.zero_grad(set_to_none=True)
    with pytest.raises(StateError, match=r"rebuilt in another layout"), planned.step():
        m.loss_fn(model(*m.inputs)).backward()
