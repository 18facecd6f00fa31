"""The runtime runs plans on real PyTorch steps: bitwise-identical results, measured memory."""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("CI") or os.environ.get("SLACKSWAP_REQUIRE_TORCH"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan  # noqa: E402
from slackswap.profiling import profile_step  # noqa: E402
from slackswap.runtime.measure import (  # noqa: E402
    bitwise_equal,
    run_step,
    simulated_op_peaks,
    where_they_differ,
)
from slackswap.simulator import simulate  # noqa: E402
from slackswap.solvers import REGISTRY, run  # noqa: E402
from tests.support import profiling_factories as pf  # noqa: E402

pytestmark = pytest.mark.torch

MODELS = ("gpt_dropout", "bert", "torch_encoder", "plain_cnn")
#: Measured against simulated peak (and saving against keep-all): the issue's 10%.
TOLERANCE = 0.10


class Case:
    """A model, its profile and its unplanned reference step."""

    def __init__(self, name: str):
        made = getattr(pf, name)()
        self.name = name
        self.model = made[0]
        self.inputs = made[1] if isinstance(made[1], tuple) else (made[1],)
        self.loss_fn = made[2] if len(made) == 3 else None
        self.inst = profile_step(self.model, self.inputs, self.loss_fn)
        self.ref = run_step(self.model, self.inputs, self.loss_fn)
        self.keep = run_step(self.model, self.inputs, self.loss_fn, Plan.keep_all(self.inst))

        self._solver_plans: dict[str, tuple[np.ndarray, float]] | None = None
        self._runs: dict[tuple[bytes, str], tuple[Plan, object]] = {}

    def run(self, actions: np.ndarray, budget: float | Budget = 1.0):  # type: ignore[no-untyped-def]
        """(plan, measured step) of ``actions`` at ``budget``; each distinct case runs once."""
        acts = np.asarray(actions, dtype=np.int8)
        key = (acts.tobytes(), str(budget))
        if key not in self._runs:
            plan = Plan(self.inst, acts)
            self._runs[key] = (plan, run_step(self.model, self.inputs, self.loss_fn, plan, budget))
        return self._runs[key]

    def solver_plans(self) -> dict[str, tuple[np.ndarray, float]]:
        if self._solver_plans is None:
            self._solver_plans = _solver_plans(self.inst, self.name)
        return self._solver_plans


_CASES: dict[str, Case] = {}


@pytest.fixture(scope="module", params=MODELS)
def case(request) -> Case:
    if request.param not in _CASES:
        _CASES[request.param] = Case(request.param)
    return _CASES[request.param]


def _recomputable(inst) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.isfinite(inst.tensor_recompute_s)


def _uniform_plans(inst) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    n = inst.n_tensors
    return {
        "keep-all": np.full(n, KEEP),
        "all-swap": np.full(n, SWAP),
        "all-recompute": np.where(_recomputable(inst), RECOMP, KEEP),
    }


#: Budgets (fractions of P) the solvers plan at: the issue's 50% and 30%. (The CNN is 8 stages
#: deep at one resolution: the 3-stage `tiny_cnn`'s floor was 53% of P, so nothing fitted there.)
SOLVER_BUDGETS = (0.5, 0.3)


def _solver_plans(inst, name: str) -> dict[str, tuple[np.ndarray, float]]:  # type: ignore[no-untyped-def]
    """Every registered static solver's plan at `SOLVER_BUDGETS` that the barrier-free runtime
    can run (fits the budget there); identical plans are run once."""
    out: dict[str, tuple[np.ndarray, float]] = {}
    seen: set[tuple[bytes, float]] = set()
    for b in SOLVER_BUDGETS:
        for entry in REGISTRY:
            if not entry.tags.static_plan:
                continue
            rec = run(inst, b, entry.name, time_limit=0.3, find_min_budget=False)
            if rec.plan is None:
                continue
            acts = np.asarray(rec.plan.actions)
            if not simulate(inst, acts, b).feasible:  # e.g. offload plans meant for "sync"
                continue
            if (acts.tobytes(), b) in seen:
                continue
            seen.add((acts.tobytes(), b))
            out[f"{entry.name}@{b:.0%}"] = (acts, b)
    return out


def _memory_error(case: Case, plan: Plan, out, budget) -> str | None:  # type: ignore[no-untyped-def]
    """None when the measured peak and saving are within TOLERANCE of the simulated ones, else
    a line saying by how much and at which operator the two accountings differ most."""
    sim = simulate(case.inst, plan, budget)
    peak_err = (out.peak_bytes - sim.peak_bytes) / sim.peak_bytes
    sim_saving = case.inst.peak_bytes - sim.peak_bytes
    meas_saving = case.keep.peak_bytes - out.peak_bytes
    saving_err = (meas_saving - sim_saving) / sim_saving if sim_saving > 0 else 0.0
    if abs(peak_err) <= TOLERANCE and abs(saving_err) <= TOLERANCE:
        return None
    where = where_they_differ(out.op_peak_bytes, simulated_op_peaks(case.inst, plan, budget),
                              case.inst)  # fmt: skip
    return (
        f"peak measured {out.peak_bytes} B vs simulated {sim.peak_bytes} B ({peak_err:+.1%}), "
        f"saving {meas_saving} vs {sim_saving} B ({saving_err:+.1%}); {where}"
    )


def test_reference_step_is_deterministic(case: Case) -> None:
    again = run_step(case.model, case.inputs, case.loss_fn)
    assert bitwise_equal(again, case.ref)
    assert case.keep.stats is not None and case.keep.stats.swapped_bytes == 0


def test_uniform_plans_are_bitwise_identical(case: Case) -> None:
    for label, acts in _uniform_plans(case.inst).items():
        plan, out = case.run(acts)
        assert bitwise_equal(out, case.ref), f"{case.name} {label}: loss or gradients differ"
        assert out.stats is not None
        assert out.stats.swapped_bytes == plan.swap_bytes, label
        assert out.stats.recomputed_bytes == plan.recompute_bytes, label
        if label == "all-recompute" and plan.recompute_bytes:
            assert out.stats.rebuilds > 0


@pytest.mark.parametrize(
    "name",
    # every solver on every model: minutes; the fast suite keeps the quickest model's
    [m if m == "torch_encoder" else pytest.param(m, marks=pytest.mark.slow) for m in MODELS],
)
def test_every_static_solver_plan_is_bitwise_identical(name: str) -> None:
    if name not in _CASES:
        _CASES[name] = Case(name)
    case = _CASES[name]
    plans = case.solver_plans()
    assert plans, f"{case.name}: no solver plan fits barrier-free"
    for label, (acts, b) in plans.items():
        _, out = case.run(acts, b)
        assert bitwise_equal(out, case.ref), f"{case.name} {label}: loss or gradients differ"


@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_random_mixes_are_bitwise_identical(data) -> None:  # type: ignore[no-untyped-def]
    name = data.draw(st.sampled_from(("gpt_dropout", "plain_cnn")))
    if name not in _CASES:
        _CASES[name] = Case(name)
    case = _CASES[name]
    n = case.inst.n_tensors
    acts = np.array(data.draw(st.lists(st.sampled_from((KEEP, SWAP, RECOMP)), min_size=n,
                                       max_size=n)), dtype=np.int8)  # fmt: skip
    acts[(acts == RECOMP) & ~_recomputable(case.inst)] = KEEP
    budget = Budget.bytes(2 * case.inst.peak_bytes)  # room for any mix: correctness only here
    _, out = case.run(acts, budget)
    assert bitwise_equal(out, case.ref)


# Measured memory against the simulator. Where the two differ by more than 10% the failure names
# the operator where they differ most.
@pytest.mark.parametrize(
    "name",
    # a minute each on the larger models at a busy machine's pace: those are the slow suite's
    [pytest.param(m, marks=pytest.mark.slow) if m in ("bert", "plain_cnn") else m for m in MODELS],
)
def test_measured_memory_matches_the_simulator(name: str) -> None:
    if name not in _CASES:
        _CASES[name] = Case(name)
    case = _CASES[name]
    errors = []
    plans = {k: (v, 1.0) for k, v in _uniform_plans(case.inst).items()}
    plans.update(case.solver_plans())  # every static solver's plan at 50% and 30% of P
    for label, (acts, b) in plans.items():
        plan, out = case.run(acts, b)
        err = _memory_error(case, plan, out, b)
        if err:
            errors.append(f"{label}: {err}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(
    "name,label",
    [("gpt_dropout", "all-swap"), ("bert", "slackswap@30%"), ("bert", "vdnn@30%"),
     ("torch_encoder", "swap-first@30%"), ("tiny_cnn", "slackswap@60%")],
)  # fmt: skip
def test_memory_of_former_gaps(name: str, label: str) -> None:
    """Combinations that were more than 10% off, each for a reason now fixed.

    gpt all-swap (+10.7% at a backward layer norm): copies started before the autograd
    engine's own calls that precede an operator, while the previous node's gradient buffers
    were still held; they now start right before the operator. bert at 30% (+33%, layer 0's
    forward): BertLayer.forward's locals (q, k, v, probs) held swapped and unsaved buffers
    after their last reader until it returned; the profile now counts each buffer until the
    step drops it. torch_encoder swap-first at 30% (+14%) was 6% above once the profile counted
    those locals; a further difference of the two models was that a rebuild re-runs its chain
    (nn.MultiheadAttention's packed in-projection: mm, add, clone, 48 KB each) and the
    simulator's rebuild step allocated only the rebuilt tensor (+98,304 B at slackswap@30%'s
    rebuild); the profile now gives each tensor its rebuild workspace (the chain's live
    intermediates) and the simulator's rebuild step allocates it.

    tiny_cnn at 50% (peaks equal, saving 12.5% short): the plan swapped the model input
    (6144 B), which the caller holds for the whole step, so no runtime can free it, and which
    the measured figure leaves out as memory held before the step. Tensors that exist before
    the step and are still held when backward begins are the caller's, like the parameters:
    the profile does not offer them to the planner (nor counts them). That CNN's floor is 53%
    of P, so its case runs at 60%."""
    if name not in _CASES:
        _CASES[name] = Case(name)
    case = _CASES[name]
    if label == "all-swap":
        acts, b = np.full(case.inst.n_tensors, SWAP), 1.0
    else:
        solver, pct = label.split("@")
        b = float(pct.rstrip("%")) / 100
        rec = run(case.inst, b, solver)
        assert rec.plan is not None, f"{name}: {solver} finds no plan at {pct}"
        acts = np.asarray(rec.plan.actions)
    plan, out = case.run(acts, b)
    assert bitwise_equal(out, case.ref)
    err = _memory_error(case, plan, out, b)
    assert err is None, f"{name} {label}: {err}"


def test_a_rebuild_input_stays_until_the_rebuilds_that_read_it() -> None:
    """torch_encoder with layer 1's scaled q and k (mul#1, mul#2) recomputed, the rest kept, at
    P: both rebuild from the packed projection clone#2.out before bmm#3, after clone#2's own
    last backward reader. The simulator keeps clone#2 until those rebuilds (a kept input stays
    at least until the rebuilds that read it, `slackswap.simulator`); the runtime released it
    when autograd dropped its last handle, so the rebuild re-ran clone#2's whole chain (mm, add,
    clone: 3 x 48 KB) as intermediates: measured 656,392 B against 574,472 B simulated at bmm#3
    (+81,920 B, +14%). The runtime now holds such an input until its consumers' rebuilds
    (`CopyEngine._drop_released`). One of ga-random@30%'s plans met this, making
    `test_measured_memory_matches_the_simulator[torch_encoder]` fail now and then."""
    if "torch_encoder" not in _CASES:
        _CASES["torch_encoder"] = Case("torch_encoder")
    case = _CASES["torch_encoder"]
    inst = case.inst
    acts = np.full(inst.n_tensors, KEEP)
    q, k = (inst.tensor_index[f"encoder.layers.1.self_attn/{n}.out"] for n in ("mul#1", "mul#2"))
    acts[[q, k]] = RECOMP
    packed = inst.tensor_index["encoder.layers.1.self_attn/clone#2.out"]
    at = int(inst.tensor_first_bwd_reader[q])
    assert inst.tensor_rebuild_inputs[q] == (packed,) and inst.tensor_last_bwd_reader[packed] < at
    plan, out = case.run(acts, 1.0)
    assert bitwise_equal(out, case.ref)
    measured, simulated = out.op_peak_bytes[at], simulated_op_peaks(inst, plan, 1.0)[at]
    assert abs(measured - simulated) <= TOLERANCE * simulated, (
        f"at #{at} {inst.op_name[at]!r}: measured {measured} B, simulated {simulated} B"
    )
