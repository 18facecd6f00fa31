"""The paper's numbers for its baselines (Table 2 at 40%, Fig. 4 facts) on the A100 catalog.

Full catalog instances (a few seconds in all). Tolerances are the issue's: 15%, or 0.03
absolute under 0.2; percentages quoted by the paper are taken as rounded to the point.
Rows the toolkit does not reproduce are left out here and explained in the reproduction report
(vDNN on Llama-7B).
"""

from __future__ import annotations

import pytest

import slackswap
from slackswap.solvers import run

# (model, solver): step, recompute, fwd stall, bwd stall (multiples of ideal), D2H GB.
TABLE2 = {
    ("gpt2-xl", "vdnn"): (4.52, 0.000, 1.85, 1.67, 22.3),
    ("gpt2-xl", "superneurons"): (1.90, 0.027, 0.43, 0.44, 5.1),
    ("gpt2-xl", "swapadvisor"): (2.82, 0.000, 0.99, 0.83, 14.0),
    ("gpt2-xl", "checkpoint"): (1.16, 0.163, 0.00, 0.00, 0.0),
    ("llama-7b", "superneurons"): (1.43, 0.009, 0.27, 0.15, 11.3),
    ("llama-7b", "swapadvisor"): (1.20, 0.000, 0.19, 0.01, 21.6),
    ("llama-7b", "checkpoint"): (1.18, 0.176, 0.00, 0.00, 0.0),
}


def close(got: float, want: float) -> bool:
    return abs(got - want) <= (0.03 if want < 0.2 else 0.15 * want)


@pytest.mark.parametrize("model,solver", sorted(TABLE2))
def test_table2_row_at_40_percent(model: str, solver: str) -> None:
    inst = slackswap.load(model)
    rec = run(inst, 0.4, solver)
    assert rec.status.value == "feasible", rec.reason
    ideal = rec.ideal_s
    got = (
        rec.step_s / ideal,
        rec.recompute_s / ideal,
        rec.fwd_stall_s / ideal,
        rec.bwd_stall_s / ideal,
        rec.d2h_bytes / 1e9,
    )
    keys = ("step", "recomp", "fwd", "bwd", "d2h")
    for name, g, w in zip(keys, got, TABLE2[model, solver], strict=True):
        assert close(g, w), f"{model} {solver} {name}: {g:.3f} vs paper {w}"


@pytest.mark.parametrize("model", ["bert-large", "gpt2-xl", "llama-7b"])
def test_fig4_checkpoint_floor(model: str) -> None:
    inst = slackswap.load(model)
    assert run(inst, 0.10, "checkpoint").status.value == "infeasible"
    assert 0.795 <= run(inst, 0.15, "checkpoint").throughput < 0.825


@pytest.mark.parametrize("model", ["bert-large", "gpt2-xl", "llama-7b"])
def test_fig4_superneurons_holds_96_percent_down_to_70(model: str) -> None:
    inst = slackswap.load(model)
    for frac in (0.9, 0.8, 0.7):
        assert 0.955 <= run(inst, frac, "superneurons").throughput < 0.995


def test_fig4_half_memory_gpt2_xl() -> None:
    # vDNN / SuperNeurons / SwapAdvisor at 36% / 66% / 43% of ideal, within 2.5 points.
    inst = slackswap.load("gpt2-xl")
    for solver, paper in (("vdnn", 0.36), ("superneurons", 0.66), ("swapadvisor", 0.43)):
        assert run(inst, 0.5, solver).throughput == pytest.approx(paper, abs=0.025), solver


def test_fig4_vgg16_baselines_stop_fitting_below_70_percent() -> None:
    # Fig. 4: on VGG-16 vDNN and Checkpoint have a plan at 70% and none at 60% (the sweep's
    # grid). SlackSwap: the paper has 95-100% of ideal down to 65%; the toolkit holds 95% down
    # to 80%, then 94% at 70% and 92% at 65%. Its plans there recompute convolution outputs and
    # swap nothing (the exact solvers find no faster plan); each recompute re-runs the cuDNN
    # convolution, its separate bias add and the ReLU (`reproduce fig4` says so).
    inst = slackswap.load("vgg16")
    for solver in ("vdnn", "checkpoint"):
        assert run(inst, 0.7, solver).status.value == "feasible", solver
        assert run(inst, 0.6, solver).status.value == "infeasible", solver
    for frac in (0.9, 0.8):
        assert run(inst, frac, "slackswap").throughput >= 0.95, frac
    assert run(inst, 0.7, "slackswap").throughput >= 0.94
    assert run(inst, 0.65, "slackswap").throughput >= 0.92
