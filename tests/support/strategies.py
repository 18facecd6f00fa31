"""Hypothesis strategies: random small valid instances (a chain network, forward then backward)."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from slackswap.instance import Hardware, Instance
from slackswap.models.graph import GraphBuilder
from slackswap.validation import CATEGORIES


@st.composite
def small_instances(draw: st.DrawFn, max_layers: int = 5) -> Instance:
    """A chain of 1..max_layers forward ops; each saves 1-2 tensors read by its backward op."""
    n = draw(st.integers(1, max_layers))
    hw = Hardware(
        gpu="test",
        link="test",
        link_bw_Bps=draw(st.sampled_from([1e9, 10e9, 25e9])),
        copy_latency_s=draw(st.sampled_from([0.0, 10e-6])),
        duplex_factor=draw(st.sampled_from([0.85, 1.0])),
    )
    durations = st.floats(1e-4, 1e-2, allow_nan=False, allow_infinity=False)
    sizes = st.integers(1, 10**8)
    b = GraphBuilder(f"random-{n}", hw)
    saved: list[list[str]] = []
    prev: str | None = None
    for i in range(n):
        reads = [prev] if prev else []
        b.op(f"f{i}", block=i, kind="gemm", duration_s=draw(durations),
             flops=draw(st.floats(0, 1e12)), transient_bytes=draw(st.integers(0, 10**7)),
             reads=reads)  # fmt: skip
        mine = []
        for j in range(draw(st.integers(1, 2))):
            name = f"t{i}.{j}"
            finite = prev is not None and draw(st.booleans())
            b.saved(name, nbytes=draw(sizes), producer=f"f{i}",
                    category=draw(st.sampled_from(CATEGORIES)), block=i,
                    recompute_s=draw(durations) if finite else math.inf,
                    rebuild_inputs=[prev] if finite and prev else [])  # fmt: skip
            mine.append(name)
        saved.append(mine)
        prev = mine[0]
    for i in reversed(range(n)):
        b.op(f"b{i}", backward=True, block=i, kind="gemm", duration_s=draw(durations),
             transient_bytes=draw(st.integers(0, 10**7)), reads=saved[i])  # fmt: skip
    return b.build()
