"""Tiny hand-built instances for the simulator tests (1 GB/s link, 10 us per copy)."""

from __future__ import annotations

from slackswap.models.graph import GraphBuilder
from slackswap.problem import Hardware, Instance

MS = 1e-3
HW = Hardware(gpu="test", link="test", link_bw_Bps=1e9, copy_latency_s=10e-6, duplex_factor=0.85)


def chain(
    *,
    f1_s: float = 1 * MS,
    b1_s: float = 1 * MS,
    a_bytes: float = 0.5e6,
    c_bytes: float = 0.0,
) -> Instance:
    """Two layers: f0 makes a; f1 reads a (and makes c if c_bytes); b1 reads c, b0 reads a."""
    g = GraphBuilder("chain", HW)
    g.op("f0", block=0, kind="memory", duration_s=1 * MS)
    g.saved("a", nbytes=a_bytes, producer="f0", category="block_input", block=0)
    g.op("f1", block=1, kind="memory", duration_s=f1_s, reads=["a"])
    g.saved("c", nbytes=c_bytes, producer="f1", category="elementwise", block=1)
    g.op("b1", backward=True, block=1, kind="memory", duration_s=b1_s, reads=["c"])
    g.op("b0", backward=True, block=0, kind="memory", duration_s=1 * MS, reads=["a"])
    return g.build()


def eviction_case() -> Instance:
    """a is prefetched early, then a big transient four operators later forces it out."""
    g = GraphBuilder("evict", HW)
    g.op("f0", block=0, kind="memory", duration_s=1 * MS)
    g.saved("a", nbytes=1e6, producer="f0", category="block_input", block=0)
    g.op("f1", block=1, kind="memory", duration_s=2 * MS, reads=["a"])
    g.saved("c", nbytes=1e6, producer="f1", category="elementwise", block=1)
    g.op("g0", backward=True, block=1, kind="memory", duration_s=1 * MS, reads=["c"])
    for k in (1, 2, 3):
        g.op(f"g{k}", backward=True, block=1, kind="memory", duration_s=1 * MS)
    g.op("g4", backward=True, block=1, kind="memory", duration_s=1 * MS, transient_bytes=1.5e6)
    g.op("g5", backward=True, block=0, kind="memory", duration_s=1 * MS, reads=["a"])
    return g.build()
