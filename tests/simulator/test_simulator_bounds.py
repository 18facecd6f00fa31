"""The compiled kernel ends on pathological numbers instead of hanging.

A timer signal cannot interrupt compiled code, so ``--job-timeout`` cannot stop a loop inside the
kernel: every loop must end by itself. These cases bypass instance validation on purpose (they
patch the kernel's per-instance arrays), since the kernel must not rely on it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from slackswap.plan import RECOMP, SWAP
from slackswap.simulator import kernel as K
from slackswap.simulator.policies import get_runtime
from slackswap.simulator.static import Static, static_for
from tests.support.simhelpers import chain

LIMIT_S = 20.0  # a run takes microseconds; past this the kernel is taken to hang


def run_kernel(
    s: Static, acts: list[int], budget: int, runtime: str, limit_s: float | None = LIMIT_S
) -> np.ndarray:
    """One plan through `kernel.run_batch` in a daemon thread (the kernel releases the GIL);
    fails the test instead of hanging it (``limit_s=None``: in this thread, no limit, for the
    first call, which may compile). Returns the plan's integer outputs."""
    fw, hr, la = get_runtime(runtime).code()
    a = np.asarray([acts], dtype=np.int8)
    w = K.new_work(s.n_ops, a.shape[1])
    out_f, out_i = np.zeros((1, 6)), np.zeros((1, 9), dtype=np.int64)

    def go() -> None:
        K.run_batch(
            s.so, s.base, s.st, s.trec, s.idx, s.hw, s.n_fwd, a, budget, fw, hr, la,
            w.wt, w.fl, w.wo, w.f, w.i, K.new_record(0), out_f, out_i, 0, 1,
        )  # fmt: skip

    if limit_s is None:
        go()
        return out_i[0]
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"the kernel still runs after {limit_s} s"
    return out_i[0]


@pytest.fixture(scope="module")
def base_case() -> Static:
    inst = chain(c_bytes=0.3e6)
    s = static_for(inst)
    for runtime in ("barrier-free", "barriers", "sync"):  # compiles; the case runs clean
        assert run_kernel(s, [SWAP, SWAP], 10**9, runtime, limit_s=None)[0] == 0
    return s


def _frozen(a: np.ndarray) -> np.ndarray:
    """Read-only, as `static_for` leaves its arrays (numba compiles a writable one anew)."""
    a.setflags(write=False)
    return a


def _durations(s: Static, durations_s: list[float]) -> Static:
    base = np.zeros(len(durations_s) + 1)
    with np.errstate(over="ignore"):
        np.cumsum(durations_s, out=base[1:])
    return s._replace(base=_frozen(base))


def test_overflowing_durations_end_not_finite(base_case: Static) -> None:
    # 1e308 + 1e308 = inf: the op start is inf and the engine loop used to spin on it.
    s = _durations(base_case, [1e308, 1e308, 1e-3, 1e-3])
    out = run_kernel(s, [SWAP, SWAP], 10**9, "barrier-free")
    assert out[0] == 1 and out[1] == K.R_NOT_FINITE


def test_overflowing_recompute_costs_end_not_finite(base_case: Static) -> None:
    s = base_case._replace(trec=_frozen(np.array([1e308, 1e308])))
    out = run_kernel(s, [RECOMP, RECOMP], 10**9, "barrier-free")
    assert out[0] == 1 and out[1] == K.R_NOT_FINITE


@pytest.mark.parametrize("runtime", ["barrier-free", "barriers", "sync"])
@pytest.mark.parametrize(
    ("field", "value", "budget"),
    # A 5e-324 B/s link: a's offload never ends; at 0.6 MB f1 (a + c, 0.8 MB) waits for it.
    # A 1e308 s latency: a's offload ends at 1e308 s, c's would start after 2e308 = inf s.
    [(K.H_BW, 5e-324, 600_000), (K.H_LATENCY, 1e308, 10**9)],
    ids=["denormal-bw", "latency"],
)
def test_a_copy_that_never_ends_is_stuck(
    base_case: Static, runtime: str, field: int, value: float, budget: int
) -> None:
    hw = base_case.hw.copy()
    hw[field] = value
    s = base_case._replace(hw=_frozen(hw))
    out = run_kernel(s, [SWAP, SWAP], budget, runtime)
    assert out[0] == 1 and out[1] in (K.R_STUCK, K.R_NOT_FINITE)


def test_the_reasons_are_worded() -> None:
    from slackswap.simulator.policies.compiled import _reason

    inst = chain(c_bytes=0.3e6)
    assert "not finite" in _reason(inst, K.R_NOT_FINITE, -1, -1, 0)
    stuck = _reason(inst, K.R_STUCK, 2, 0, 0)
    assert "stuck at operator 'b1' (#2)" in stuck and "'a' never ends" in stuck
    assert "evictions" in _reason(inst, K.R_LIMIT, 3, 1, 0)
