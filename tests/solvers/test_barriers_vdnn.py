"""vDNN's per-layer barriers on the Titan X check (paper Sec. 4.1: VGG-16, 3.4% / 22%)."""

from __future__ import annotations

import slackswap
from slackswap.solvers import run


def test_titanx_vdnn_overheads() -> None:
    inst = slackswap.load("vgg16@titanx-pcie3")
    over = {}
    for policy in ("conv", "all"):
        rec = run(inst, "129%", "vdnn", options={"policy": policy})
        assert rec.status.value == "feasible", rec.reason
        over[policy] = rec.step_s / rec.ideal_s - 1
    # Offloads overlap the layer reading their tensor and prefetches skip layers without any:
    # vDNN-all within 2 points of the paper's 22% (toolkit 20.3%); vDNN-conv near-free (toolkit
    # 0.6%, 1.1% before the convolution bias got its own kernels, which lengthen the layers the
    # offloads hide behind; the old all-earlier-offloads barrier gave 25%). The paper's 3.4% is
    # 2.8 points above it, outside the 2-point check, which `reproduce fig4` reports as
    # not holding.
    assert abs(over["all"] - 0.22) <= 0.02
    assert over["conv"] < 0.034
