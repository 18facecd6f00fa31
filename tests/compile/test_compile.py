"""The compile path: the joint graph's saved tensors, a plan applied through torch's min-cut
partitioner (measured from the partitioned graphs), and the refusals."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from slackswap.cli import main  # noqa: E402
from slackswap.compile.capture import GraphBreakError, capture  # noqa: E402
from slackswap.compile.partition import PlanKeyError, mark, prepare_joint  # noqa: E402
from slackswap.compile.profile import build_compiled_instance  # noqa: E402
from slackswap.compile.step import check_compiled  # noqa: E402
from slackswap.plan import RECOMP, SWAP, Plan  # noqa: E402
from slackswap.torchstep.compileapi import (  # noqa: E402
    UnsupportedTorchError,
    require_supported_torch,
)
from tests.support.profiling_factories import TINY_GPT, gpt, tiny_cnn  # noqa: E402

pytestmark = pytest.mark.torch


def _mlp():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return model, (torch.randn(3, 4),)


def test_an_mlp_saves_what_its_backward_reads_worked_by_hand() -> None:
    # By hand: the second Linear's weight gradient and ReLU's backward read ReLU's output
    # (3 x 8 float32 = 96 bytes); the first Linear's weight gradient reads the input x, a
    # placeholder the caller holds. So one saved tensor, rebuilt by relu from the first
    # Linear's output, itself rebuilt from x and the parameters (both placeholders).
    model, inputs = _mlp()
    cap = capture(model, inputs, "aot_eager")
    joint = prepare_joint(cap.copy(), cap.kwargs["num_fwd_outputs"])
    assert [(g.key, g.nbytes) for g in joint.groups] == [("1/relu#0", 96)]
    (relu,) = joint.groups
    assert [str(n.target) for n in relu.chain] == ["aten.addmm.default", "aten.relu.default"]
    assert relu.rebuild_inputs == []
    inst = build_compiled_instance(cap, name="mlp", gpu="a100", torch_budgets=())
    assert inst.tensor_name == ("1/relu#0",) and list(inst.tensor_bytes) == [96]
    assert inst.op_phase[inst.tensor_producer[0]] == 0
    assert inst.op_phase[inst.tensor_first_bwd_reader[0]] == 1


def test_keys_are_stable_across_recompiles() -> None:
    model, inputs, _ = gpt(**TINY_GPT)
    keys = []
    for _ in range(2):
        cap = capture(model, inputs, "aot_eager")
        keys.append(
            [g.key for g in prepare_joint(cap.copy(), cap.kwargs["num_fwd_outputs"]).groups]
        )
    assert keys[0] == keys[1] and len(keys[0]) > 10
    assert "blocks.1.fc1/addmm#0" in keys[0]  # module path, operator, index in the module


@pytest.mark.parametrize("factory", [gpt, tiny_cnn], ids=["gpt", "cnn-batchnorm"])
def test_plans_are_applied_as_planned_and_bitwise_under_aot_eager(factory) -> None:  # type: ignore[no-untyped-def]
    if factory is gpt:
        model, inputs, loss_fn = factory(**TINY_GPT)
    else:
        (model, inputs), loss_fn = factory(), None
        inputs = (inputs,)
    cap = capture(model, inputs, "aot_eager")
    inst = build_compiled_instance(cap, name="m", gpu="a100", torch_budgets=())
    n = inst.n_tensors
    rebuildable = [t for t in range(n) if inst.tensor_recompute_s[t] < float("inf")]
    mixed = [0] * n
    for i, t in enumerate(rebuildable):
        mixed[t] = (0, SWAP, RECOMP)[i % 3]
    all_recomp = [RECOMP if t in rebuildable else 0 for t in range(n)]
    for actions in ([0] * n, mixed, all_recomp):
        plan = Plan(inst, actions)
        got = check_compiled(model, inputs, loss_fn, plan, "aot_eager")
        assert got["recomputed_ops_measured"] == got["recomputed_ops_planned"], got
        assert got["recomputed_ops_unplanned"] == [] and got["recomputed_ops_not_run"] == []
        assert got["saved_bytes_measured"] == got["saved_bytes_planned"], got
        assert got["bitwise_identical"] and got["loss_abs_diff"] == 0.0, got
        assert got["checks_pass"]
    # The all-recompute plan re-runs forward operators and saves less than keeping all.
    assert got["recomputed_ops_planned"] > 0
    assert got["saved_bytes_planned"] < int(inst.tensor_bytes.sum())


def test_a_plan_with_a_wrong_key_is_refused_in_one_line() -> None:
    model, inputs = _mlp()
    cap = capture(model, inputs, "aot_eager")
    joint = prepare_joint(cap.copy(), cap.kwargs["num_fwd_outputs"])
    with pytest.raises(PlanKeyError) as err:
        mark(joint, {"1/relu#0": "keep", "blocks.9/gelu#0": "recomp"})
    assert "'blocks.9/gelu#0'" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(PlanKeyError, match="no action for .*'1/relu#0'"):
        mark(prepare_joint(cap.copy(), cap.kwargs["num_fwd_outputs"]), {})


class _Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        torch._dynamo.graph_break()
        return self.b(h.relu())


def test_a_graph_break_is_refused_in_one_line_naming_it() -> None:
    with pytest.raises(GraphBreakError) as err:
        capture(_Breaks(), (torch.randn(2, 4),), "aot_eager")
    text = str(err.value)
    assert "graph break" in text and "2 graphs" in text and "\n" not in text


def test_an_untested_torch_is_refused_in_one_line() -> None:
    require_supported_torch()  # the installed one is tested
    with pytest.raises(UnsupportedTorchError) as err:
        require_supported_torch("2.0.1")
    assert str(err.value).startswith("torch 2.0.1: ") and "\n" not in str(err.value)


def test_run_compile_prints_the_checks(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["run", "tests.support.profiling_factories:tiny_cnn", "--compile", "--backend", "aot_eager",
         "--budget", "60%", "--solver", "slackswap", "--check", "--json", "--no-progress"]
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["compiled"] is True and out["graph_breaks"] == 0
    assert out["recomputed_ops_measured"] == out["recomputed_ops_planned"]
    assert out["saved_bytes_measured"] == out["saved_bytes_planned"]
    assert out["bitwise_identical"] is True and out["grad_max_abs_diff"] == 0.0


@pytest.mark.slow
def test_inductor_applies_the_plan_within_its_tolerance() -> None:
    model, inputs, loss_fn = gpt(**TINY_GPT)
    cap = capture(model, inputs, "inductor")
    inst = build_compiled_instance(cap, name="m", gpu="a100", torch_budgets=())
    actions = [RECOMP if inst.tensor_recompute_s[t] < float("inf") and t % 2 else 0
               for t in range(inst.n_tensors)]  # fmt: skip
    got = check_compiled(model, inputs, loss_fn, Plan(inst, actions), "inductor")
    assert got["recomputed_ops_measured"] == got["recomputed_ops_planned"] > 0, got
    assert got["saved_bytes_measured"] == got["saved_bytes_planned"], got
    assert max(got["loss_abs_diff"], got["grad_max_abs_diff"]) <= got["tolerance"], got


def test_torch_budget_picks_the_largest_torch_budget_that_fits() -> None:
    from slackswap.plan import Budget
    from slackswap.simulator import simulate
    from slackswap.solvers import run
    from slackswap.solvers.baselines.torch_budget import actions_of
    from slackswap.testing import check_solver

    model, inputs, _ = gpt(**TINY_GPT)
    inst = build_compiled_instance(capture(model, inputs, "aot_eager"), name="g", gpu="a100")
    grid = inst.meta["compile"]["torch_budget"]
    assert [d["activation_memory_budget"] for d in grid][:2] == [1.0, 0.9]
    # torch's own partitioner at budget 1.0 keeps every saved tensor of this graph; at 0.0
    # it keeps none (it recomputes everything from the inputs)
    assert len(grid[0]["kept"]) == inst.n_tensors and grid[-1]["kept"] == []
    for frac in (0.9, 0.6, 0.4):
        budget = Budget.parse(frac)
        rec = run(inst, budget, "torch-budget", seed=0)
        # The oracle: walk the grid from the largest torch budget, first plan that fits.
        want = None
        for d in sorted(grid, key=lambda d: -d["activation_memory_budget"]):
            plan = Plan(inst, actions_of(inst, d["kept"]))
            if simulate(inst, plan, budget).feasible:
                want = plan
                break
        assert (rec.plan is None) == (want is None)
        if want is not None:
            assert rec.plan is not None and list(rec.plan.actions) == list(want.actions)
    check_solver("torch-budget", instances=[inst], fresh_process=False)


def test_torch_budget_refuses_an_instance_without_torch_decisions() -> None:
    from slackswap.solvers import run
    from slackswap.testing import small_instances

    rec = run(small_instances()[0], 0.5, "torch-budget", seed=0)
    assert rec.status == "error" and rec.plan is None
    assert "no torch partitioner decisions" in str(rec.error) and "\n" not in str(rec.error)


def breaks() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A factory for the CLI test: a model with a graph break."""
    torch.manual_seed(0)
    return _Breaks(), (torch.randn(2, 4),)


def test_run_compile_refuses_a_break_and_an_untested_torch_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["run", "tests.compile.test_compile:breaks", "--compile", "--backend", "aot_eager",
            "--budget", "50%", "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "graph break" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    monkeypatch.setattr(torch, "__version__", "2.0.1")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "torch 2.0.1" in err and len(err.splitlines()) == 1


def test_slackswap_compile_returns_the_compiled_model_under_the_plan() -> None:
    import slackswap

    model, inputs, loss_fn = gpt(**TINY_GPT)
    compiled = slackswap.compile(model, inputs, loss_fn, budget="80%", backend="aot_eager")
    plan = compiled.slackswap_plan
    assert plan.instance.meta["compile"]["backend"] == "aot_eager"
    loss = loss_fn(compiled(*inputs))
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    eager = loss_fn(model(*inputs))
    eager.backward()
    # against eager PyTorch: the same operators, so equal to rounding
    assert torch.allclose(loss, eager, rtol=1e-5, atol=1e-6)
    for g, p in zip(grads, model.parameters(), strict=True):
        assert torch.allclose(g, p.grad, rtol=1e-4, atol=1e-6)
