"""The simulator's API and CLI: inputs, refusals, runtimes, populations, the Chrome trace."""

import json
from pathlib import Path

import numpy as np
import pytest

import slackswap
from slackswap.cli import main
from slackswap.errors import UserError
from slackswap.plan import KEEP, RECOMP, SWAP, Budget, Plan
from slackswap.simulator import RUNTIMES, simulate, simulate_many
from slackswap.simulator.chrome_trace import LANES, trace_events, write_chrome_trace
from tests.support.simhelpers import MS, chain


@pytest.fixture(scope="module")
def small() -> slackswap.Instance:
    return slackswap.build_model("gpt2-xl", layers=2, seq=128, batch=1)


def _random_plans(inst: slackswap.Instance, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    acts = rng.integers(0, 3, (n, inst.n_tensors)).astype(np.int8)
    inf = np.isinf(inst.tensor_recompute_s)
    acts[:, inf] %= 2
    return acts


def test_top_level_api(small: slackswap.Instance) -> None:
    plan = slackswap.Plan(small, np.zeros(small.n_tensors, dtype=int))
    r = slackswap.simulate(small, plan, 1.0)
    assert isinstance(r, slackswap.SimResult) and r.throughput == 1.0
    assert slackswap.simulate(small, plan, slackswap.Budget.fraction(1.0)) == r
    assert slackswap.simulate(small, plan, "100%") == r


def test_plan_for_another_instance_is_refused(small: slackswap.Instance) -> None:
    other = slackswap.build_model("gpt2-xl", layers=2, seq=256, batch=1)
    with pytest.raises(UserError, match="not for"):
        simulate(other, Plan.keep_all(small), 1.0)


def test_bad_inputs_are_user_errors(small: slackswap.Instance) -> None:
    with pytest.raises(UserError, match="runtime"):
        simulate(small, Plan.keep_all(small), 1.0, runtime="teleport")
    with pytest.raises(UserError, match="budget"):
        simulate(small, Plan.keep_all(small), -1.0)
    with pytest.raises(UserError, match="expected"):
        simulate(small, np.zeros(3), 1.0)
    with pytest.raises(UserError, match="shape"):
        simulate_many(small, np.zeros(small.n_tensors), 1.0)
    with pytest.raises(UserError, match=r"actions_2d\[0, 1\] = 7"):
        bad = np.zeros((2, small.n_tensors), dtype=np.int8)
        bad[0, 1] = 7
        simulate_many(small, bad, 1.0)


def test_runtime_defaults_to_the_plans(small: slackswap.Instance) -> None:
    acts = _random_plans(small, 1)[0]
    plan = Plan(small, acts, runtime="sync")
    assert simulate(small, plan, 0.6).runtime == "sync"
    assert simulate(small, plan, 0.6) == simulate(small, acts, 0.6, runtime="sync")
    assert simulate(small, plan, 0.6, runtime="barriers").runtime == "barriers"


def test_population_matches_single_runs_and_threads(small: slackswap.Instance) -> None:
    pop = _random_plans(small, 24, seed=1)
    one = simulate_many(small, pop, 0.5)
    two = simulate_many(small, pop, 0.5, n_jobs=2)
    for field in ("step_s", "feasible", "overflow_bytes", "peak_bytes", "d2h_bytes"):
        assert np.array_equal(getattr(one, field), getattr(two, field))
    for k in (0, 7, 23):
        r = simulate(small, pop[k], 0.5)
        assert one.step_s[k] == r.step_s and one.peak_bytes[k] == r.peak_bytes
        assert one.feasible[k] == r.feasible and one.overflow_bytes[k] == r.overflow_bytes
    assert len(one) == 24 and np.all(one.throughput <= 1.0)
    # The population array is not modified and a read-only one is accepted.
    pop.setflags(write=False)
    assert np.array_equal(simulate_many(small, pop, 0.5).step_s, one.step_s)


@pytest.mark.parametrize("runtime", ["barrier-free", "barriers", "on-demand-lru"])
@pytest.mark.parametrize("fraction", [0.9, 0.65])  # this model fits down to 63%
def test_score_many_gives_simulate_many_values(
    small: slackswap.Instance, runtime: str, fraction: float
) -> None:
    from slackswap.simulator.api import score_many

    pop = _random_plans(small, 30, seed=2)
    unrebuildable = np.isinf(small.tensor_recompute_s)
    pop[:4, np.flatnonzero(unrebuildable)[:2]] = RECOMP  # four plans recompute the impossible
    planned = slackswap.solve(small, fraction, solver="slackswap").plan
    assert planned is not None
    pop = np.vstack([pop, planned.actions[None]]).astype(np.int8)  # and one plan that fits
    full = simulate_many(small, pop, fraction, runtime)
    step, over, invalid = score_many(small, pop, fraction, runtime)
    assert np.array_equal(step, full.step_s) and np.array_equal(over, full.overflow_bytes)
    assert invalid.tolist() == ((pop == RECOMP) & unrebuildable).any(axis=1).tolist()
    assert invalid[:4].all() and np.isinf(step[:4]).all()
    if runtime == "barrier-free":
        assert full.feasible[-1] and np.isfinite(step[-1])  # a fitting plan is compared too


def test_infeasible_results_rank_by_overflow(small: slackswap.Instance) -> None:
    keep = np.zeros((1, small.n_tensors), dtype=np.int8)
    r = simulate_many(small, np.repeat(keep, 1, axis=0), 0.5)
    assert not r.feasible[0] and r.overflow_bytes[0] > 0
    one = simulate(small, keep[0], 0.5)
    assert one.overflow_bytes == r.overflow_bytes[0] and one.fail_op >= 0
    # Less kept memory: less overflow.
    finite = np.isfinite(small.tensor_recompute_s)
    rec = np.where(finite, RECOMP, KEEP).astype(np.int8)
    lighter = simulate(small, rec, 0.2)
    assert lighter.overflow_bytes < simulate(small, keep[0], 0.2).overflow_bytes


def test_barriers_wait_for_each_layers_offloads() -> None:
    # f0 (layer 0) makes a, f1 (layer 1, 0.2 ms) reads it: a's offload (1.0 -> 1.51 ms) overlaps
    # f1 and the backward pass, the next layer, starts only when it is done.
    inst = chain(f1_s=0.2 * MS)
    r = simulate(inst, Plan(inst, [SWAP, KEEP]), 1.0, runtime="barriers")
    assert r.fwd_stall_s == 0
    assert r.bwd_stall_copy_s == pytest.approx(0.31 * MS, rel=1e-12)
    free = simulate(inst, Plan(inst, [SWAP, KEEP]), 1.0)
    assert free.bwd_stall_copy_s < r.bwd_stall_copy_s and r.step_s > free.step_s


def test_sync_copies_block_compute() -> None:
    inst = chain()
    r = simulate(inst, Plan(inst, [SWAP, KEEP]), 1.0, runtime="sync")
    # D2H right after f0 (0.51 ms), H2D right before b0 (0.51 ms), nothing overlapped.
    assert r.fwd_stall_copy_s == pytest.approx(0.51 * MS, rel=1e-12)
    assert r.bwd_stall_copy_s == pytest.approx(0.51 * MS, rel=1e-12)
    assert r.step_s == pytest.approx(4 * MS + 1.02 * MS, rel=1e-12)


def test_rebuild_chain_runs_inputs_first() -> None:
    from slackswap.models.graph import GraphBuilder
    from tests.support.simhelpers import HW

    g = GraphBuilder("rebuild-chain", HW)
    g.op("f0", block=0, kind="memory", duration_s=1 * MS)
    g.saved("x", nbytes=1e6, producer="f0", category="block_input", block=0)
    g.op("f1", block=0, kind="memory", duration_s=1 * MS, reads=["x"])
    g.saved("y", nbytes=1e6, producer="f1", category="elementwise", block=0,
            recompute_s=0.2 * MS, rebuild_inputs=["x"])  # fmt: skip
    g.op("f2", block=0, kind="memory", duration_s=1 * MS, reads=["y"])
    g.saved("z", nbytes=1e6, producer="f2", category="elementwise", block=0,
            recompute_s=0.3 * MS, rebuild_inputs=["y"])  # fmt: skip
    g.op("b2", backward=True, block=0, kind="memory", duration_s=1 * MS, reads=["z"])
    g.op("b1", backward=True, block=0, kind="memory", duration_s=1 * MS, reads=["y"])
    g.op("b0", backward=True, block=0, kind="memory", duration_s=1 * MS, reads=["x"])
    inst = g.build()
    r = simulate(inst, Plan(inst, [KEEP, RECOMP, RECOMP]), 1.0, timeline=True)
    assert r.feasible and r.recompute_s == pytest.approx(0.5 * MS, rel=1e-12)
    assert r.step_s == pytest.approx(6.5 * MS, rel=1e-12)
    tl = r.timeline
    assert tl is not None
    rebuilt = tl.compute_tensor[tl.compute_kind == 1]
    assert list(rebuilt) == [1, 2]  # y (the input) before z, both before b2
    assert set(tl.compute_op[tl.compute_kind == 1]) == {3}
    # Chained y stays until its own reader b1: x, y, z resident together before b2.
    assert r.peak_bytes == 3_000_000


def test_deadlock_rule_admits_without_look_ahead() -> None:
    from slackswap.models.graph import GraphBuilder
    from tests.support.simhelpers import HW

    # b0 needs a; the next ops' transients make the look-ahead refuse a forever.
    g = GraphBuilder("deadlock", HW)
    g.op("f0", block=0, kind="memory", duration_s=1 * MS)
    g.saved("a", nbytes=1e6, producer="f0", category="block_input", block=0)
    g.op("f1", block=1, kind="memory", duration_s=2 * MS)
    g.op("b0", backward=True, block=0, kind="memory", duration_s=1 * MS, reads=["a"])
    g.op("b1", backward=True, block=0, kind="memory", duration_s=1 * MS, transient_bytes=1e6)
    inst = g.build()
    budget = Budget.bytes(1.5e6)
    r = simulate(inst, Plan(inst, [SWAP]), budget)
    # H2D of a admitted at 3 ms without the look-ahead (1 + 1 > 1.5 MB), lands at 4.01 ms.
    assert r.feasible and r.bwd_stall_copy_s == pytest.approx(1.01 * MS, rel=1e-12)
    assert r.peak_bytes == 1_000_000


def test_runtimes_registry_describes_each() -> None:
    for name in ("barrier-free", "barriers", "layer-prefetch", "sync"):
        assert RUNTIMES[name]


# ----- Chrome trace -----------------------------------------------------------------------------
def _check_trace_format(doc: dict) -> None:
    """A small schema check of the Chrome trace-event format (the JSON object form)."""
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    for ev in doc["traceEvents"]:
        assert isinstance(ev["name"], str) and ev["ph"] in ("X", "M", "C", "i")
        assert isinstance(ev["pid"], int)
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "thread_sort_index")
            assert isinstance(ev["args"], dict)
            continue
        assert isinstance(ev["ts"], float | int) and ev["ts"] >= 0
        if ev["ph"] == "X":
            assert isinstance(ev["tid"], int) and ev["dur"] >= 0
        if ev["ph"] == "C":
            assert ev["args"] and all(isinstance(v, float | int) for v in ev["args"].values())
        if ev["ph"] == "i":
            assert ev["s"] in ("g", "p", "t")


def test_trace_of_a_gpt2_xl_plan(tmp_path: Path) -> None:
    inst = slackswap.load("gpt2-xl")
    acts = _random_plans(inst, 1, seed=5)[0]
    r = simulate(inst, acts, 0.7, timeline=True)
    path = tmp_path / "trace.json"
    write_chrome_trace(path, inst, r)
    doc = json.loads(path.read_text())
    _check_trace_format(doc)
    evs = doc["traceEvents"]
    lanes = {e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    assert lanes == set(LANES.values())
    tids = {e["tid"] for e in evs if e["ph"] == "X"}
    assert tids == set(LANES)  # compute, D2H and H2D all carry events
    cats = {e.get("cat") for e in evs if e["ph"] == "X"}
    assert {"forward", "backward", "recompute", "D2H", "H2D"} <= cats
    assert any(e["ph"] == "C" and "used_GB" in e["args"] for e in evs)
    ops = [e for e in evs if e.get("cat") in ("forward", "backward")]
    assert len(ops) == inst.n_ops
    assert max(e["ts"] + e["dur"] for e in ops) == pytest.approx(r.step_s * 1e6, rel=1e-9)


def test_trace_needs_a_timeline(small: slackswap.Instance) -> None:
    with pytest.raises(ValueError, match="timeline"):
        trace_events(small, simulate(small, Plan.keep_all(small), 1.0))


# ----- CLI -------------------------------------------------------------------------------------
def test_cli_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inst = slackswap.build_model("gpt2-xl", layers=2, seq=128, batch=1)
    ipath, ppath, tpath = tmp_path / "i.json", tmp_path / "p.json", tmp_path / "t.json"
    inst.save(ipath)
    acts = _random_plans(inst, 1, seed=2)[0]
    Plan(inst, acts).save(ppath)
    want = simulate(inst, acts, 0.8)
    code = main(["simulate", str(ipath), str(ppath), "--budget", "80%", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if want.feasible else 1)
    assert out["feasible"] == want.feasible and out["peak_bytes"] == want.peak_bytes
    assert main(["simulate", str(ipath), "keep-all", "--budget", "1.0", "--trace", str(tpath)]) == 0
    table = capsys.readouterr().out
    assert "throughput (%)" in table and "100.00" in table
    _check_trace_format(json.loads(tpath.read_text()))
    assert main(["simulate", str(ipath), "keep-all", "--budget", "0.3"]) == 1
    assert "infeasible: out of memory" in capsys.readouterr().out
    lru = ["simulate", str(ipath), "keep-all", "--budget", "1.0", "--runtime", "on-demand-lru"]
    assert main(lru) == 0  # a runtime registered outside the kernel is accepted too


@pytest.mark.parametrize(
    "args,needle",
    [
        (["nosuch-model", "keep-all", "--budget", "0.5"], "nosuch-model"),
        (["{i}", "{d}/missing.json", "--budget", "0.5"], "no such plan file"),
        (["{i}", "keep-all", "--budget", "lots"], "budget"),
        (["{i}", "keep-all", "--budget", "0.5", "--runtime", "warp"], "runtime"),
        (["{i}", "{other}", "--budget", "0.5"], "not for"),
        (["{i}", "keep-all", "--budget", "0.5", "--trace", "{i}/t.json"], "--trace"),
    ],
)
def test_cli_bad_input_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    inst = slackswap.build_model("gpt2-xl", layers=2, seq=128, batch=1)
    other = slackswap.build_model("gpt2-xl", layers=2, seq=64, batch=1)
    ipath, opath = tmp_path / "i.json", tmp_path / "other-plan.json"
    inst.save(ipath)
    Plan.keep_all(other).save(opath)
    fill = {"i": str(ipath), "d": str(tmp_path), "other": str(opath)}
    code = main(["simulate", *(a.format(**fill) for a in args)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and "\n" not in err and err.startswith("slackswap: error:")
