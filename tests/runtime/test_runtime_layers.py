"""The layers people use run under plans: LSTM, GRU, torch.utils.checkpoint, sparse gradients,
retain_graph. Each is profiled and run under every static solver's plan, bitwise identical to
the unplanned step, or refused in one line before anything goes wrong."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from slackswap.cli import main  # noqa: E402
from slackswap.errors import UserError  # noqa: E402
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime import StepMismatchError, apply  # noqa: E402
from slackswap.runtime.measure import (  # noqa: E402
    max_abs_diff,
    run_step,
    simulated_op_peaks,
    step_difference,
)
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import REGISTRY, run  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402

pytestmark = pytest.mark.torch

FACTORIES = Path(__file__).parent.parent / "support" / "profiling_factories.py"
LAYERS = (
    "lstm",
    "lstm_deep",
    "gru",
    "checkpoint_reentrant",
    "checkpoint_nonreentrant",
    "sparse_embedding",
)


class Case:
    def __init__(self, name: str):
        made = getattr(pf, name)()
        self.model = made[0]
        self.inputs = made[1] if isinstance(made[1], tuple) else (made[1],)
        self.loss_fn = made[2] if len(made) == 3 else None
        self.inst = profile_step(self.model, self.inputs, self.loss_fn)
        self.ref = run_step(self.model, self.inputs, self.loss_fn)

    def diff(self, acts: np.ndarray, budget: Budget | float = 1.0) -> str | None:
        out = run_step(self.model, self.inputs, self.loss_fn, Plan(self.inst, acts), budget)
        return step_difference(out, self.ref)


_CASES: dict[str, Case] = {}


def _case(name: str) -> Case:
    if name not in _CASES:
        _CASES[name] = Case(name)
    return _CASES[name]


def _uniform(inst) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    n = inst.n_tensors
    return {
        "all-swap": np.full(n, SWAP, dtype=np.int8),
        "all-recompute": np.where(np.isfinite(inst.tensor_recompute_s), RECOMP, KEEP).astype(
            np.int8
        ),
    }


#: The recurrent layers' cases that take longest (tens of seconds each on 2 busy cores): the
#: slow suite's; the fast suite keeps the other layers of each test.
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_SLOW) if n == "gru" else n for n in LAYERS]
)
def test_uniform_plans_are_bitwise_identical(name: str) -> None:
    case = _case(name)
    for label, acts in _uniform(case.inst).items():
        assert case.diff(acts) is None, f"{name} {label}"


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_SLOW) if n in ("gru", "lstm_deep") else n for n in LAYERS]
)
def test_every_static_solver_plan_is_bitwise_identical(name: str) -> None:
    """At 50% and 30% of P, or at the smallest budget that fits above that."""
    case = _case(name)
    inst = case.inst
    seen: set[bytes] = set()
    errors = []
    for b in (0.5, 0.3):
        for entry in REGISTRY:
            if not entry.tags.static_plan:
                continue
            budget = Budget.fraction(b)
            rec = run(inst, budget, entry.name, time_limit=0.2, find_min_budget=True)
            if rec.plan is None and rec.min_budget_bytes is not None:
                budget = Budget.fraction(max(b, rec.min_budget_bytes / inst.peak_bytes) * 1.001)
                rec = run(inst, budget, entry.name, time_limit=0.2, find_min_budget=False)
            if rec.plan is None:
                continue
            acts = np.asarray(rec.plan.actions)
            if not simulate(inst, acts, budget).feasible or acts.tobytes() in seen:
                continue
            seen.add(acts.tobytes())
            d = case.diff(acts, budget)
            if d is not None:
                errors.append(f"{entry.name}@{budget}: {d}")
    assert seen, f"{name}: no solver plan fits"
    assert not errors, f"{name}: " + "; ".join(errors)


def test_lstm_rebuilds_its_recurrent_layer() -> None:
    """nn.LSTM's CPU kernel returns its workspace only with grad on; the backward pass runs with
    grad off, so a rebuild that replayed it there got one output fewer (IndexError)."""
    case = _case("lstm")
    inst = case.inst
    rnn = [i for i in range(inst.n_tensors) if "mkldnn_rnn_layer" in inst.tensor_name[i]]
    assert rnn and all(np.isfinite(inst.tensor_recompute_s[i]) for i in rnn)
    acts = np.full(inst.n_tensors, KEEP, dtype=np.int8)
    acts[rnn] = RECOMP
    out = run_step(case.model, case.inputs, case.loss_fn, Plan(inst, acts))
    assert out.stats is not None and out.stats.rebuilds >= 1
    assert step_difference(out, case.ref) is None


def test_gru_gate_buffer_saved_at_several_values_is_one_tensor() -> None:
    """The CPU GRU cell fills one gate buffer in place and autograd saves views of it after each
    stage: the profile refused it ("reads a tensor before its producer"). It is one saved tensor,
    the earlier views are read from it."""
    case = _case("gru")
    earlier = case.inst.meta["runtime_signature"]["earlier_values"]
    assert earlier, "the GRU saves no storage at several values any more: the test is moot"
    gates = sorted({t for _, t in earlier})
    acts = np.full(case.inst.n_tensors, KEEP, dtype=np.int8)
    for action in (SWAP, RECOMP):
        acts[gates] = action
        assert case.diff(acts) is None, action


def test_reentrant_checkpoint_profiles_its_backward_rerun() -> None:
    """Reentrant checkpoint re-runs each block's forward inside backward and saves that graph's
    tensors there: they are the backward node's transient memory, not planned tensors."""
    case = _case("checkpoint_reentrant")
    inst = case.inst
    assert all(p < inst.n_forward_ops for p in inst.tensor_producer)
    reruns = [n for n in inst.op_name[inst.n_forward_ops :] if n.endswith("/gelu") or "gelu#" in n]
    assert any("gelu_backward" not in n for n in reruns)  # the forward re-run is recorded


@pytest.mark.parametrize("name", ["checkpoint_reentrant", "checkpoint_nonreentrant"])
def test_a_checkpoint_measures_no_more_than_simulated_at_any_operator(name: str) -> None:
    """Keep-all. Reentrant: inside the checkpoint's backward, the re-run forward's outputs stay
    allocated until the inner node that saved them returns, and the block input until the
    checkpoint's node returns. Non-reentrant: a node holds the block input it got through the
    checkpoint's hooks until it returns. The profile counts each there."""
    case = _case(name)
    plan = Plan(case.inst, np.full(case.inst.n_tensors, KEEP, dtype=np.int8))
    out = run_step(case.model, case.inputs, case.loss_fn, plan, 1.0)
    assert out.op_peak_bytes is not None
    sim = simulated_op_peaks(case.inst, plan, 1.0)
    above = {
        case.inst.op_name[o]: b - sim.get(o, 0)
        for o, b in out.op_peak_bytes.items()
        if b > sim.get(o, 0)
    }
    assert not above, above
    assert out.peak_bytes == case.inst.peak_bytes


def test_a_copy_back_the_simulator_evicted_again_before_its_operator_is_not_replayed() -> None:
    """A two-layer LSTM under SlackSwap's plan at 39.1% of P: the simulator's look-ahead
    starts copying a swapped cell state back while the rebuilds before the second layer's
    backward run, then evicts it before that operator for the memory it needs. Replayed
    before the operator (evictions first, then copies back), the copy stayed: 128 B above
    the simulated peak there, 9 B over the budget (swap-first's plan: 1,024 B and 905 B)."""
    case = _case("lstm_deep")
    acts = np.array([0, 0, 2, 2, 1, 2, 2, 2, 2, 0, 2, 0, 2, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0])
    assert len(acts) == case.inst.n_tensors
    plan, budget = Plan(case.inst, acts.astype(np.int8)), Budget.fraction(0.391015)
    assert simulate(case.inst, plan, budget).feasible
    out = run_step(case.model, case.inputs, case.loss_fn, plan, budget)
    assert out.stats is not None and out.op_peak_bytes is not None
    assert out.stats.over_budget_bytes == 0, out.stats.over_budget_bytes
    sim = simulated_op_peaks(case.inst, plan, budget)
    assert all(b <= sim.get(o, 0) for o, b in out.op_peak_bytes.items())


def test_sparse_gradients_compare_and_check(capsys) -> None:
    """An nn.Embedding(sparse=True) gradient: compared through its coalesced indices and values
    (max_abs_diff raised NotImplementedError), and `--check` trains with SGD."""
    case = _case("sparse_embedding")
    assert case.ref.grads[0] is not None and case.ref.grads[0].is_sparse
    out = run_step(case.model, case.inputs, case.loss_fn, Plan(case.inst, _uniform(case.inst)[
        "all-swap"]))  # fmt: skip
    assert max_abs_diff(out, case.ref) == (0.0, 0.0)
    # 100%: the profile counts the node-held readers of the tanh backward, and nothing smaller fits.
    rc = main(["run", f"{FACTORIES}:sparse_embedding", "--budget", "100%", "--solver",
               "slackswap", "--check", "--steps", "2", "--json"])  # fmt: skip
    captured = capsys.readouterr()
    r = json.loads(captured.out)
    assert rc == 0, captured.err
    assert r["bitwise_identical"] is True and r["check_optimizer"] == "SGD"


@pytest.mark.parametrize("action", [KEEP, SWAP, RECOMP])
def test_a_second_backward_inside_the_block_is_refused_naming_retain_graph(action: int) -> None:
    case = _case("lstm")
    acts = _uniform(case.inst)["all-recompute"] if action == RECOMP else np.full(
        case.inst.n_tensors, action, dtype=np.int8
    )  # fmt: skip
    with pytest.raises(StepMismatchError, match="retain_graph=True") as err:
        with apply(Plan(case.inst, acts), 1.0, model=case.model):
            loss = case.loss_fn(case.model(*case.inputs))
            loss.backward(retain_graph=True)
            loss.backward()
    assert "\n" not in str(err.value)
    for p in case.model.parameters():
        p.grad = None


def test_a_backward_after_the_block_is_refused_naming_retain_graph() -> None:
    case = _case("lstm")
    for p in case.model.parameters():
        p.grad = None
    with apply(Plan(case.inst, _uniform(case.inst)["all-swap"]), 1.0, model=case.model):
        loss = case.loss_fn(case.model(*case.inputs))
        loss.backward(retain_graph=True)
    # The first backward pass ran under the plan, bitwise as the unplanned one.
    assert all(
        torch.equal(p.grad, g) for p, g in zip(case.model.parameters(), case.ref.grads, strict=True)
    )
    with pytest.raises(UserError, match="retain_graph=True") as err:
        loss.backward()
    assert "\n" not in str(err.value)
    for p in case.model.parameters():
        p.grad = None


def test_a_graph_kept_with_retain_graph_is_named_as_why_the_step_ended_over_budget() -> None:
    """Keep-all on the LSTM: with retain_graph=True autograd keeps every saved tensor to the
    end, 3.08 KB above the plan's model at the backward of the LSTM layer (no kernel
    workspace: the tracker sees only returned storages). The warning says so; without
    retain_graph the same step is within its budget."""
    from slackswap.runtime import BudgetWarning

    case = _case("lstm")
    keep = Plan(case.inst, np.full(case.inst.n_tensors, KEEP, dtype=np.int8))
    for retain in (False, True):
        for p in case.model.parameters():
            p.grad = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with apply(keep, 1.0, model=case.model) as stats:
                loss = case.loss_fn(case.model(*case.inputs))
                loss.backward(retain_graph=retain)
        del loss
        over = [str(w.message) for w in caught if issubclass(w.category, BudgetWarning)]
        if not retain:
            assert stats.retained_tensors == 0 and stats.over_budget_bytes == 0 and not over
            continue
        assert stats.retained_tensors == case.inst.n_tensors
        assert stats.retained_bytes == int(case.inst.tensor_bytes.sum())
        assert stats.over_budget_bytes > 0 and len(over) == 1
        assert f"autograd still held {case.inst.n_tensors} saved tensor(s)" in over[0]
        assert "retain_graph=True" in over[0] and "\n" not in over[0]
    for p in case.model.parameters():
        p.grad = None


def test_a_kept_graph_runs_again_after_the_block_when_the_plan_kept_everything() -> None:
    """Kept tensors are autograd's own: nothing to refuse."""
    case = _case("lstm")
    for p in case.model.parameters():
        p.grad = None
    keep = np.full(case.inst.n_tensors, KEEP, dtype=np.int8)
    with apply(Plan(case.inst, keep), 1.0, model=case.model):
        loss = case.loss_fn(case.model(*case.inputs))
        loss.backward(retain_graph=True)
    loss.backward()
    for p in case.model.parameters():
        p.grad = None


@pytest.mark.parametrize(
    "name,budget",
    [
        ("lstm_deep", "50%"),
        ("gru", "50%"),
        # 93%: the smallest budget with a plan. The checkpoint's node holds its input through
        # its inner backward pass, where the peak is, so swapping it cannot help there.
        ("checkpoint_reentrant", "93%"),
    ],
)
def test_run_check_passes_on_the_layers(capsys, name: str, budget: str) -> None:
    """`slackswap run --check` end to end: planned, run, compared, trained; exit 0."""
    rc = main(["run", f"{FACTORIES}:{name}", "--budget", budget, "--solver", "slackswap",
               "--check", "--steps", "2", "--time-limit", "1", "--json"])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    r = json.loads(captured.out)
    assert r["bitwise_identical"] is True and r["first_difference"] is None
    assert r["swapped_bytes"] + r["recomputed_bytes"] > 0
