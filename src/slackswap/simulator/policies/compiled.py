"""The compiled runtimes: `RuntimeSpec` (policy switches of the numba kernel) and its driver."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from slackswap.console import format_bytes
from slackswap.instance import Instance
from slackswap.simulator import kernel as K
from slackswap.simulator.policies.base import ExecutionMode, Runtime
from slackswap.simulator.result import BatchResult, SimResult, Timeline
from slackswap.simulator.static import static_for

#: Forward-pass waits for offloads (``RuntimeSpec.fwd_wait``).
FWD_WAIT_NONE = 0  # compute never waits for a D2H copy except for memory
FWD_WAIT_LAYER = 1  # a layer's first operator waits for the offloads earlier layers read last
FWD_WAIT_EVERY_OP = 2  # every operator waits until every earlier offload is done (copies inline)

#: When swapped tensors are released to the H2D engine (``RuntimeSpec.h2d_release``).
H2D_ALL_AT_BACKWARD = 0  # all of them when the backward pass starts, in deadline order
H2D_LAYER_AHEAD_BARRIER = 1  # closest layer with prefetches; a layer waits for all its own
H2D_LAYER_AHEAD = 2  # one layer ahead; compute waits only for the tensors it reads
H2D_ON_DEMAND = 3  # only when compute needs the tensor (no prefetch)


_N_OUT_F = 6
_N_OUT_I = 9
_local = threading.local()


def _work(inst: Instance) -> K.Work:
    """A thread's scratch arrays for this instance's sizes (reused across calls)."""
    key = (inst.n_ops, inst.n_tensors)
    cache = getattr(_local, "work", None)
    if cache is None or cache[0] != key:
        cache = (key, K.new_work(*key))
        _local.work = cache
    return cache[1]


_NO_RECORD = K.new_record(0)


def _reason(inst: Instance, code: int, op: int, tensor: int, over: int) -> str:
    if code == K.R_NO_RECOMPUTE:
        return (
            f"invalid plan: tensor {inst.tensor_name[tensor]!r} is marked recomp but no "
            "operator rebuilds it (infinite recompute cost)"
        )
    where = f"operator {inst.op_name[op]!r} (#{op})" if op >= 0 else "the start"
    if code == K.R_OOM_COMPUTE:
        return (
            f"out of memory at {where}: no copy in flight and nothing evictable "
            f"(run on, the step peaks {format_bytes(over)} over the budget)"
        )
    if code == K.R_OOM_H2D:
        return (
            f"out of memory at {where}: the prefetch of {inst.tensor_name[tensor]!r} does not "
            f"fit and nothing is evictable (run on, the step peaks {format_bytes(over)} over the budget)"
        )
    if code == K.R_NOT_FINITE:
        return (
            "simulation stopped: a time is not finite (a duration, recompute cost, link "
            "bandwidth or copy latency outside any physical range)"
        )
    if code == K.R_LIMIT:
        return f"simulation stopped at {where}: more evictions than any run can need (a bug)"
    if code == K.R_STUCK and tensor >= 0:
        return (
            f"simulation stuck at {where}: the copy of {inst.tensor_name[tensor]!r} never ends "
            "or cannot start (no progress possible)"
        )
    return f"simulation stuck at {where} (no progress possible)"


def _run(
    inst: Instance,
    acts: np.ndarray,
    budget_bytes: int,
    code: tuple[int, int, int],
    record: np.ndarray,
    lo: int,
    hi: int,
    out_f: np.ndarray,
    out_i: np.ndarray,
) -> K.Work:
    """Run plans lo..hi-1 through the kernel with this thread's scratch arrays."""
    fw, hr, la = code
    S = static_for(inst)
    W = _work(inst)
    W.i[K.I_REC] = 1 if record.shape[1] else 0
    K.run_batch(
        S.so, S.base, S.st, S.trec, S.idx, S.hw, S.n_fwd, acts, budget_bytes, fw, hr, la,
        W.wt, W.fl, W.wo, W.f, W.i, record, out_f, out_i, lo, hi,
    )  # fmt: skip
    return W


def _timeline(rec: np.ndarray, nc: int, nk: int, nm: int) -> Timeline:
    c, k, m = rec[K.LANE_COMPUTE, :nc], rec[K.LANE_COPY, :nk], rec[K.LANE_MEM, :nm]
    # The kernel records every memory change, zero ones too (see `kernel._mem`); a zero change
    # leaves the bytes in use as the row before it, so only rows that differ are kept.
    m = m[np.r_[True, m[1:, 1] != m[:-1, 1]]] if len(m) else m
    return Timeline(
        compute_start_s=c[:, 0].copy(),
        compute_end_s=c[:, 1].copy(),
        compute_kind=c[:, 2].astype(np.int64),
        compute_op=c[:, 3].astype(np.int64),
        compute_tensor=c[:, 4].astype(np.int64),
        copy_engine=k[:, 2].astype(np.int64),
        copy_tensor=k[:, 3].astype(np.int64),
        copy_start_s=k[:, 0].copy(),
        copy_end_s=k[:, 1].copy(),
        mem_time_s=m[:, 0].copy(),
        mem_bytes=m[:, 1].astype(np.int64),
    )


@dataclass(frozen=True)
class RuntimeSpec(Runtime):
    """A runtime of the compiled kernel: its policy switches (see `slackswap.simulator` for the
    semantics). Registered with `slackswap.simulator.policies.register_runtime` like any runtime.

    ``lookahead_ops``: an H2D copy is admitted when used memory + its bytes + the transient
    bytes of the next ``lookahead_ops`` operators not yet started fit in the budget, tested at
    the instants `slackswap.simulator` lists (at the end of an operator, the one about to start
    is the first of them). ``execution``: how the real PyTorch runtime runs it (`Runtime`),
    None when it cannot.
    """

    name: str
    description: str
    fwd_wait: int = FWD_WAIT_NONE
    h2d_release: int = H2D_ALL_AT_BACKWARD
    lookahead_ops: int = 3
    execution: ExecutionMode | None = None

    def __post_init__(self) -> None:
        if self.fwd_wait not in (0, 1, 2) or self.h2d_release not in (0, 1, 2, 3):
            raise ValueError(f"runtime {self.name!r}: unknown policy code")
        if self.lookahead_ops < 0:
            raise ValueError(f"runtime {self.name!r}: lookahead_ops must be >= 0")

    def code(self) -> tuple[int, int, int]:
        """The kernel's three switches: (fwd_wait, h2d_release, lookahead_ops)."""
        return (self.fwd_wait, self.h2d_release, self.lookahead_ops)

    def simulate(
        self, instance: Instance, actions: np.ndarray, budget_bytes: int, timeline: bool = False
    ) -> SimResult:
        code = self.code()
        b = budget_bytes
        acts2 = np.array(actions, dtype=np.int8).reshape(1, -1)  # writable: one kernel signature
        out_f = np.zeros((1, _N_OUT_F))
        out_i = np.zeros((1, _N_OUT_I), dtype=np.int64)
        tl = None
        if timeline:
            cap = 4 * (instance.n_ops + 4 * instance.n_tensors) + 64
            while True:
                rec = K.new_record(cap)
                W = _run(instance, acts2, b, code, rec, 0, 1, out_f, out_i)
                if W.i[K.I_RECFULL] == 0:
                    break
                cap *= 4
            tl = _timeline(rec, *(int(W.i[K.I_NC + k]) for k in range(3)))
        else:
            _run(instance, acts2, b, code, _NO_RECORD, 0, 1, out_f, out_i)
        f, i = out_f[0], out_i[0]
        ideal = instance.ideal_step_s
        bad = bool(i[0])
        step = math.inf if bad else ideal + float(f[0])
        fail_op = int(i[2])
        if bad and fail_op < 0 and int(i[3]) >= 0:
            fail_op = int(instance.tensor_first_bwd_reader[int(i[3])])
        return SimResult(
            step_s=step,
            ideal_s=ideal,
            throughput=0.0 if bad else ideal / step,
            recompute_s=float(f[1]),
            fwd_stall_s=float(f[2]) + float(f[3]),
            fwd_stall_copy_s=float(f[2]),
            fwd_stall_mem_s=float(f[3]),
            bwd_stall_s=float(f[4]) + float(f[5]),
            bwd_stall_copy_s=float(f[4]),
            bwd_stall_mem_s=float(f[5]),
            d2h_bytes=int(i[5]),
            h2d_bytes=int(i[6]),
            peak_bytes=int(i[7]),
            budget_bytes=b,
            feasible=not bad,
            reason=_reason(instance, int(i[1]), int(i[2]), int(i[3]), int(i[4])) if bad else "",
            fail_op=fail_op if bad else -1,
            overflow_bytes=int(i[4]) if bad else 0,
            evictions=int(i[8]),
            runtime=self.name,
            timeline=tl,
        )

    def simulate_population(
        self, instance: Instance, actions_2d: np.ndarray, budget_bytes: int, n_jobs: int = 1
    ) -> BatchResult:
        """The compiled kernel loops over plans with scratch arrays reused; ``n_jobs=2`` splits
        the population over two threads (the kernel releases the GIL)."""
        code = self.code()
        b = budget_bytes
        n = actions_2d.shape[0]
        out_f = np.zeros((n, _N_OUT_F))
        out_i = np.zeros((n, _N_OUT_I), dtype=np.int64)
        jobs = max(1, min(int(n_jobs), n))
        if jobs == 1:
            _run(instance, actions_2d, b, code, _NO_RECORD, 0, n, out_f, out_i)
        else:
            static_for(instance)
            bounds = np.linspace(0, n, jobs + 1).astype(int)
            with ThreadPoolExecutor(jobs) as pool:
                futs = [
                    pool.submit(
                        _run, instance, actions_2d, b, code, _NO_RECORD, lo, hi, out_f, out_i
                    )
                    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
                ]
                for fut in futs:
                    fut.result()
        ideal = instance.ideal_step_s
        bad = out_i[:, 0] != 0
        step = np.where(bad, np.inf, ideal + out_f[:, 0])
        return BatchResult(
            step_s=step,
            feasible=~bad,
            overflow_bytes=np.where(bad, out_i[:, 4], 0),
            recompute_s=out_f[:, 1].copy(),
            fwd_stall_s=out_f[:, 2] + out_f[:, 3],
            bwd_stall_s=out_f[:, 4] + out_f[:, 5],
            d2h_bytes=out_i[:, 5].copy(),
            h2d_bytes=out_i[:, 6].copy(),
            peak_bytes=out_i[:, 7].copy(),
            evictions=out_i[:, 8].copy(),
            ideal_s=ideal,
            budget_bytes=b,
        )

    def score_population(
        self, instance: Instance, actions_2d: np.ndarray, budget_bytes: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`simulate_population`'s values, bit for bit, in one thread: it skips the other
        metrics' arrays and reads the unrebuildable case off the kernel's failure reason."""
        code = self.code()
        b = budget_bytes
        n = actions_2d.shape[0]
        out_f = np.empty((n, _N_OUT_F))
        out_i = np.empty((n, _N_OUT_I), dtype=np.int64)
        _run(instance, actions_2d, b, code, _NO_RECORD, 0, n, out_f, out_i)
        bad = out_i[:, 0] != 0
        step = np.where(bad, np.inf, instance.ideal_step_s + out_f[:, 0])
        return step, np.where(bad, out_i[:, 4], 0), bad & (out_i[:, 1] == K.R_NO_RECOMPUTE)
