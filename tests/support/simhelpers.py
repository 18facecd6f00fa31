"""Tiny hand-built instances for the simulator tests (1 GB/s link, 10 us per copy)."""

from __future__ import annotations

from slackswap.instance import Hardware, Instance
from slackswap.models.graph import GraphBuilder

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


def random_instance(draw, *, max_fwd: int = 6) -> Instance:  # type: ignore[no-untyped-def]
    """A valid small instance drawn by hypothesis: a forward chain, each op saving one tensor,
    extra forward and backward reads, rebuild inputs among earlier tensors, a reversed backward."""
    from hypothesis import strategies as st

    n = draw(st.integers(2, max_fwd))
    bw = draw(st.sampled_from([2e8, 1e9, 1e10]))
    hw = Hardware(gpu="test", link="test", link_bw_Bps=bw, copy_latency_s=10e-6, duplex_factor=0.85)
    g = GraphBuilder("random", hw)
    dur = st.floats(1e-5, 2e-3)
    size = st.integers(0, 2_000_000)
    names: list[str] = []
    for k in range(n):
        reads = draw(st.lists(st.sampled_from(names), max_size=2, unique=True)) if names else []
        g.op(
            f"f{k}",
            block=k // 2,
            kind="memory",
            duration_s=draw(dur),
            transient_bytes=draw(st.integers(0, 1_000_000)),
            reads=reads,
        )
        finite = draw(st.booleans()) or k == 0
        inputs = (
            draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
            if finite and names
            else []
        )
        name = f"t{k}"
        g.saved(
            name,
            nbytes=draw(size if k else st.integers(1, 2_000_000)),  # instances save >= 1 byte
            producer=f"f{k}",
            category="elementwise" if finite else "block_input",
            block=k // 2,
            recompute_s=draw(st.floats(1e-6, 1e-3)) if finite else float("inf"),
            rebuild_inputs=inputs,
        )
        names.append(name)
    for k in reversed(range(n)):
        extra = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
        g.op(
            f"b{k}",
            backward=True,
            block=k // 2,
            kind="memory",
            duration_s=draw(dur),
            transient_bytes=draw(st.integers(0, 1_000_000)),
            reads=sorted({f"t{k}", *extra}),
        )
    return g.build()
