"""A `Timeline` as Chrome trace-event JSON (opens in Perfetto / chrome://tracing)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from slackswap.instance import Instance
from slackswap.simulator.result import SimResult, Timeline
from slackswap.textfile import atomic_write_text

PID = 1
TID_COMPUTE, TID_D2H, TID_H2D = 1, 2, 3
LANES = {TID_COMPUTE: "compute", TID_D2H: "D2H copy engine", TID_H2D: "H2D copy engine"}
_US = 1e6  # trace timestamps are microseconds


def trace_events(instance: Instance, result: SimResult) -> list[dict[str, Any]]:
    """Trace events: three lanes (compute, D2H, H2D), stalls and rebuilds, a memory counter."""
    tl = result.timeline
    if tl is None:
        raise ValueError("the result has no timeline: simulate(..., timeline=True)")
    ev: list[dict[str, Any]] = [
        {
            "name": "process_name",
            "ph": "M",
            "pid": PID,
            "tid": 0,
            "args": {"name": f"slackswap {instance.name} ({result.runtime})"},
        }
    ]
    for tid, name in LANES.items():
        ev.append(
            {"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}}
        )
        ev.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": PID,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    ev.extend(_compute_events(instance, tl))
    ev.extend(_copy_events(instance, tl))
    ev.extend(_memory_events(tl, result.budget_bytes))
    return ev


def _compute_events(inst: Instance, tl: Timeline) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    nf = inst.n_forward_ops
    for t0, t1, kind, op, tensor in zip(
        tl.compute_start_s,
        tl.compute_end_s,
        tl.compute_kind,
        tl.compute_op,
        tl.compute_tensor,
        strict=True,
    ):
        op, tensor = int(op), int(tensor)
        tname = inst.tensor_name[tensor] if tensor >= 0 else None
        args: dict[str, Any] = {"op": inst.op_name[op], "op_index": op}
        if tname is not None:
            args["tensor"] = tname
        if kind == 0:
            name = inst.op_name[op]
            cat = "forward" if op < nf else "backward"
        elif kind == 1:
            name, cat = f"rebuild {tname}", "recompute"
        elif kind == 2:
            name, cat = "stall: copy", "stall"
        elif kind == 3:
            name, cat = "stall: memory", "stall"
        else:
            out.append(
                {
                    "name": f"evict {tname}",
                    "cat": "evict",
                    "ph": "i",
                    "s": "t",
                    "ts": float(t0) * _US,
                    "pid": PID,
                    "tid": TID_COMPUTE,
                    "args": args,
                }
            )
            continue
        out.append(
            {
                "name": name,
                "cat": cat,
                "ph": "X",
                "ts": float(t0) * _US,
                "dur": max(0.0, float(t1 - t0)) * _US,
                "pid": PID,
                "tid": TID_COMPUTE,
                "args": args,
            }
        )
    return out


def _copy_events(inst: Instance, tl: Timeline) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e, tensor, t0, t1 in zip(
        tl.copy_engine, tl.copy_tensor, tl.copy_start_s, tl.copy_end_s, strict=True
    ):
        t = int(tensor)
        out.append(
            {
                "name": inst.tensor_name[t],
                "cat": "D2H" if e == 0 else "H2D",
                "ph": "X",
                "ts": float(t0) * _US,
                "dur": max(0.0, float(t1 - t0)) * _US,
                "pid": PID,
                "tid": TID_D2H if e == 0 else TID_H2D,
                "args": {"bytes": int(inst.tensor_bytes[t])},
            }
        )
    return out


def _memory_events(tl: Timeline, budget_bytes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # Several changes at one instant: the counter shows the last value of each instant.
    times = tl.mem_time_s
    keep = np.ones(times.shape[0], dtype=bool)
    if times.shape[0] > 1:
        keep[:-1] = times[1:] != times[:-1]
    for t, b in zip(times[keep], tl.mem_bytes[keep], strict=True):
        out.append(
            {
                "name": "device memory",
                "ph": "C",
                "ts": float(t) * _US,
                "pid": PID,
                "args": {"used_GB": int(b) / 1e9, "budget_GB": budget_bytes / 1e9},
            }
        )
    return out


def write_chrome_trace(path: str | os.PathLike[str], instance: Instance, result: SimResult) -> None:
    """Write the timeline of ``result`` as Chrome trace JSON, atomically."""
    doc = {
        "traceEvents": trace_events(instance, result),
        "displayTimeUnit": "ms",
        "otherData": {
            "instance": instance.name,
            "runtime": result.runtime,
            "step_ms": result.step_s * 1e3 if result.feasible else None,
            "ideal_ms": result.ideal_s * 1e3,
            "budget_GB": result.budget_bytes / 1e9,
            "feasible": result.feasible,
            "reason": result.reason,
        },
    }
    atomic_write_text(path, json.dumps(doc, separators=(",", ":")) + "\n")
