"""Validation of an `Instance`: every rule once, every error naming field, index and value."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from slackswap.errors import InstanceError

if TYPE_CHECKING:
    from slackswap.instance import Instance

#: Saved-tensor categories (paper Sec. 2.1 and Fig. 2).
CATEGORIES = (
    "block_input",
    "residual",
    "gemm_output",
    "attention_output",
    "elementwise",
    "dropout_mask",
)

#: Operator kinds the roofline knows.
OP_KINDS = ("gemm", "attention", "memory", "conv", "pool", "loss", "embedding")

#: Largest saved tensor or operator temporary: 1 PiB, far beyond any device's memory.
MAX_BYTES = 2**50
#: Largest sum of saved bytes plus the largest temporary: 2**53 keeps every byte count exact in
#: float64 (budgets, fractions) and every int64 sum of them far from overflow.
MAX_TOTAL_BYTES = 2**53
#: Shortest forward pass: 1 ns (one kernel launch takes microseconds); a shorter or empty one
#: makes the sustained FLOP/s F / T_F and beta overflow.
MIN_FORWARD_S = 1e-9
_INDEX_MAX = 2**31 - 1  # block and layer indices are int32

#: Control characters (C0, DEL, C1): no name may hold one. A NUL, a newline or an escape in
#: an instance, GPU, link, operator or tensor name breaks results files (CSV readers refuse a
#: NUL), terminal tables and traces, and no real name needs one.
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")


def control_character(text: str) -> str | None:
    """The first control character in ``text``, shown as an escape (``'\\x00'``), or None."""
    m = CONTROL_CHARACTERS.search(text)
    return None if m is None else repr(m.group())[1:-1]


#: Physical range (inclusive) of every numeric field, in the unit its name carries; values
#: outside are refused at load. Why each bound: `slackswap.instances.format`'s docstring.
RANGES: dict[str, tuple[float, float]] = {
    "hardware.link_bw_Bps": (1.0, 1e15),
    "hardware.copy_latency_s": (0.0, 1.0),
    "hardware.duplex_factor": (0.1, 1.0),
    "hardware.gpu_flops": (0.0, 1e18),
    "hardware.gpu_mem_Bps": (0.0, 1e15),
    "op_block": (-1, _INDEX_MAX),
    "op_layer": (-1, _INDEX_MAX),
    "op_duration_s": (0.0, 3600.0),
    "op_flops": (0.0, 1e18),
    "op_transient_bytes": (0, MAX_BYTES),
    "tensor_bytes": (0, MAX_BYTES),
    "tensor_rebuild_workspace_bytes": (0, MAX_BYTES),
    "tensor_recompute_s": (0.0, 3600.0),  # or infinite: no operator chain rebuilds the tensor
    "tensor_block": (-1, _INDEX_MAX),
}


def range_text(key: str) -> str:
    """``'outside the physical range [lo, hi]'`` for the message of a value out of range."""
    lo, hi = RANGES[key]
    return f"outside the physical range [{_show(lo)}, {_show(hi)}]"


def _show(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def in_range(key: str, value: Any) -> bool:
    """Whether ``value`` (a Python or numpy number, any size) lies in the range of ``key``."""
    lo, hi = RANGES[key]
    return bool(lo <= value <= hi)


def _fail(field: str, index: int | None, value: Any, why: str) -> InstanceError:
    where = field if index is None else f"{field}[{index}]"
    return InstanceError(f"{where} = {value!r}: {why}", field=field, index=index, value=value)


def _first_bad(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(mask)
    return int(bad[0]) if bad.size else None


def _check_range(inst: Instance, name: str, allow_inf: bool = False) -> None:
    a = getattr(inst, name)
    i = _first_bad(np.isnan(a)) if a.dtype.kind == "f" else None
    if i is not None:
        raise _fail(name, i, float(a[i]), "not a number")
    lo, hi = RANGES[name]
    bad = (a < lo) | (a > hi)
    if allow_inf:
        bad &= ~np.isposinf(a)
    i = _first_bad(bad)
    if i is not None:
        raise _fail(name, i, a[i].item(), range_text(name))


def _check_names(inst: Instance) -> None:
    """Names hold no control character (`CONTROL_CHARACTERS`)."""
    for field, value in (
        ("name", inst.name),
        ("hardware.gpu", inst.hardware.gpu),
        ("hardware.link", inst.hardware.link),
    ):
        if not isinstance(value, str):
            raise _fail(field, None, value, "expected a string")
        bad = control_character(value)
        if bad is not None:
            raise _fail(field, None, value, f"holds the control character {bad}")
    for field in ("op_name", "tensor_name"):
        names = getattr(inst, field)
        if CONTROL_CHARACTERS.search("".join(names)) is None:  # one search for the common case
            continue
        for k, n in enumerate(names):
            bad = control_character(n)
            if bad is not None:
                raise _fail(field, k, n, f"holds the control character {bad}")


def validate_instance(inst: Instance) -> None:
    """Raise `InstanceError` on the first broken rule; return None when the instance is sound."""
    n_ops, n_t = len(inst.op_name), len(inst.tensor_name)
    for name in (
        "op_phase",
        "op_block",
        "op_layer",
        "op_kind",
        "op_duration_s",
        "op_flops",
        "op_transient_bytes",
        "op_reads",
    ):
        if len(getattr(inst, name)) != n_ops:
            raise _fail(
                name, None, len(getattr(inst, name)), f"length differs from op_name ({n_ops})"
            )
    for name in (
        "tensor_bytes",
        "tensor_producer",
        "tensor_last_fwd_reader",
        "tensor_first_bwd_reader",
        "tensor_last_bwd_reader",
        "tensor_recompute_s",
        "tensor_rebuild_inputs",
        "tensor_block",
        "tensor_category",
        "tensor_rebuild_workspace_bytes",
    ):
        if len(getattr(inst, name)) != n_t:
            raise _fail(
                name, None, len(getattr(inst, name)), f"length differs from tensor_name ({n_t})"
            )
    if n_ops == 0:
        raise _fail("op_name", None, [], "an instance needs at least one operator")
    if n_t == 0:
        raise _fail("tensor_name", None, [], "an instance needs at least one saved tensor")

    _check_names(inst)
    hw = inst.hardware
    for attr in ("link_bw_Bps", "copy_latency_s", "duplex_factor", "gpu_flops", "gpu_mem_Bps"):
        v = getattr(hw, attr)
        if isinstance(v, bool) or not isinstance(v, int | float | np.number):
            raise _fail(f"hardware.{attr}", None, v, "expected a number")
        if not in_range(f"hardware.{attr}", v):
            raise _fail(f"hardware.{attr}", None, v, range_text(f"hardware.{attr}"))

    seen: set[str] = set()
    for k, n in enumerate(inst.op_name):
        if n in seen:
            raise _fail("op_name", k, n, "duplicate operator name")
        seen.add(n)
    seen = set()
    for k, n in enumerate(inst.tensor_name):
        if n in seen:
            raise _fail("tensor_name", k, n, "duplicate tensor name")
        seen.add(n)

    phase = inst.op_phase
    i: int | None = _first_bad((phase != 0) & (phase != 1))
    if i is not None:
        raise _fail("op_phase", i, int(phase[i]), "must be 0 (forward) or 1 (backward)")
    # Forward operators first, then backward.
    i = _first_bad(np.diff(phase.astype(np.int64)) < 0)
    if i is not None:
        raise _fail("op_phase", i + 1, int(phase[i + 1]), "a forward operator after a backward one")
    for j, kind in enumerate(inst.op_kind):
        if kind not in OP_KINDS:
            raise _fail("op_kind", j, kind, f"unknown kind (one of {', '.join(OP_KINDS)})")
    for name in (
        "op_block",
        "op_layer",
        "op_duration_s",
        "op_flops",
        "op_transient_bytes",
        "tensor_bytes",
        "tensor_block",
        "tensor_rebuild_workspace_bytes",
    ):
        _check_range(inst, name)
    _check_range(inst, "tensor_recompute_s", allow_inf=True)
    # Exact sums (Python ints): a numpy int64 sum of many large tensors could wrap around.
    saved = sum(int(b) for b in inst.tensor_bytes)
    if saved == 0:  # the intensity F / A and every budget's fraction of P would divide by 0
        raise _fail("tensor_bytes", None, 0, "the saved tensors hold no bytes at all")
    # A rebuild's workspace is a temporary too: it lives beside the saved tensors.
    temporary = max(
        int(inst.op_transient_bytes.max()), int(inst.tensor_rebuild_workspace_bytes.max())
    )
    total = saved + temporary
    if total > MAX_TOTAL_BYTES:
        raise _fail(
            "tensor_bytes",
            None,
            total,
            f"saved bytes plus the largest temporary exceed {MAX_TOTAL_BYTES} (2**53)",
        )
    forward_s = float(inst.op_duration_s[phase == 0].sum())
    if not forward_s >= MIN_FORWARD_S:
        raise _fail(
            "op_duration_s", None, forward_s, f"the forward pass must take >= {MIN_FORWARD_S:g} s"
        )
    for j, c in enumerate(inst.tensor_category):
        if c not in CATEGORIES:
            raise _fail(
                "tensor_category", j, c, f"unknown category (one of {', '.join(CATEGORIES)})"
            )

    for i, row in enumerate(inst.op_reads):
        for t in row:
            if not 0 <= t < n_t:
                raise _fail("op_reads", i, t, f"no saved tensor with index {t}")
    for i, row in enumerate(inst.tensor_rebuild_inputs):
        for t in row:
            if not 0 <= t < n_t:
                raise _fail("tensor_rebuild_inputs", i, t, f"no saved tensor with index {t}")
            if t == i:
                raise _fail("tensor_rebuild_inputs", i, t, "a tensor cannot rebuild from itself")

    n_fwd = int(np.count_nonzero(phase == 0))
    prod, lfr = inst.tensor_producer, inst.tensor_last_fwd_reader
    fbr, lbr = inst.tensor_first_bwd_reader, inst.tensor_last_bwd_reader
    for name, arr in (
        ("tensor_producer", prod),
        ("tensor_last_fwd_reader", lfr),
        ("tensor_first_bwd_reader", fbr),
        ("tensor_last_bwd_reader", lbr),
    ):
        i = _first_bad((arr < 0) | (arr >= n_ops))
        if i is not None:
            raise _fail(name, i, int(arr[i]), f"operator index out of range [0, {n_ops})")
    i = _first_bad(prod >= n_fwd)
    if i is not None:
        raise _fail("tensor_producer", i, int(prod[i]), "must be a forward operator")
    i = _first_bad(lfr < prod)
    if i is not None:
        raise _fail("tensor_last_fwd_reader", i, int(lfr[i]), "a reader before the producer")
    i = _first_bad(lfr >= n_fwd)
    if i is not None:
        raise _fail("tensor_last_fwd_reader", i, int(lfr[i]), "must be a forward operator")
    i = _first_bad(fbr < n_fwd)
    if i is not None:
        raise _fail("tensor_first_bwd_reader", i, int(fbr[i]), "must be a backward operator")
    i = _first_bad(lbr < fbr)
    if i is not None:
        raise _fail("tensor_last_bwd_reader", i, int(lbr[i]), "before the first backward reader")

    # The read lists must agree with the lifetimes.
    readers: list[list[int]] = [[] for _ in range(n_t)]
    for op, row in enumerate(inst.op_reads):
        for t in row:
            readers[t].append(op)
    for t in range(n_t):
        fwd = [o for o in readers[t] if o < n_fwd]
        bwd = [o for o in readers[t] if o >= n_fwd]
        if fwd and min(fwd) < prod[t]:  # the earliest reader, not the latest
            raise _fail(
                "op_reads", min(fwd), inst.tensor_name[t], "reads a tensor before its producer"
            )
        if fwd and max(fwd) != lfr[t]:
            raise _fail(
                "tensor_last_fwd_reader",
                t,
                int(lfr[t]),
                f"op_reads says the last forward reader is {max(fwd)}",
            )
        if not bwd:
            raise _fail(
                "tensor_first_bwd_reader",
                t,
                int(fbr[t]),
                f"no backward operator reads {inst.tensor_name[t]!r} in op_reads",
            )
        if min(bwd) != fbr[t] or max(bwd) != lbr[t]:
            raise _fail(
                "tensor_first_bwd_reader",
                t,
                int(fbr[t]),
                f"op_reads says backward readers span {min(bwd)}..{max(bwd)}",
            )
    # Rebuild inputs must exist before the rebuilt tensor is produced (no cycles).
    for t, row in enumerate(inst.tensor_rebuild_inputs):
        for u in row:
            if prod[u] >= prod[t]:
                raise _fail(
                    "tensor_rebuild_inputs",
                    t,
                    inst.tensor_name[u],
                    "rebuild input not produced before the tensor it rebuilds",
                )
        if row and not np.isfinite(inst.tensor_recompute_s[t]):
            raise _fail(
                "tensor_recompute_s",
                t,
                float(inst.tensor_recompute_s[t]),
                "infinite recompute cost but rebuild inputs are listed",
            )
