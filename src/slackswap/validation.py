"""Validation of an `Instance`: every rule once, every error naming field, index and value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from slackswap.problem import CATEGORIES, OP_KINDS, InstanceError

if TYPE_CHECKING:
    from slackswap.problem import Instance


def _fail(field: str, index: int | None, value: Any, why: str) -> InstanceError:
    where = field if index is None else f"{field}[{index}]"
    return InstanceError(f"{where} = {value!r}: {why}", field=field, index=index, value=value)


def _first_bad(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(mask)
    return int(bad[0]) if bad.size else None


def _check_finite_nonneg(inst: Instance, name: str, allow_inf: bool = False) -> None:
    a = getattr(inst, name)
    i = _first_bad(np.isnan(a))
    if i is not None:
        raise _fail(name, i, float(a[i]), "not a number")
    if not allow_inf:
        i = _first_bad(~np.isfinite(a))
        if i is not None:
            raise _fail(name, i, float(a[i]), "must be finite")
    i = _first_bad(a < 0)
    if i is not None:
        raise _fail(name, i, a[i].item(), "must not be negative")


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
    ):
        if len(getattr(inst, name)) != n_t:
            raise _fail(
                name, None, len(getattr(inst, name)), f"length differs from tensor_name ({n_t})"
            )
    if n_ops == 0:
        raise _fail("op_name", None, [], "an instance needs at least one operator")

    hw = inst.hardware
    for attr in ("link_bw_Bps", "copy_latency_s", "duplex_factor"):
        v = getattr(hw, attr)
        if not isinstance(v, int | float) or not np.isfinite(v) or v < 0:
            raise _fail(f"hardware.{attr}", None, v, "must be a finite non-negative number")
    if hw.link_bw_Bps <= 0:
        raise _fail("hardware.link_bw_Bps", None, hw.link_bw_Bps, "must be positive")
    if not 0 < hw.duplex_factor <= 1:
        raise _fail("hardware.duplex_factor", None, hw.duplex_factor, "must lie in (0, 1]")

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
    _check_finite_nonneg(inst, "op_duration_s")
    _check_finite_nonneg(inst, "op_flops")
    _check_finite_nonneg(inst, "op_transient_bytes")
    _check_finite_nonneg(inst, "tensor_bytes")
    _check_finite_nonneg(inst, "tensor_recompute_s", allow_inf=True)
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
        if fwd and max(fwd) < prod[t]:
            raise _fail(
                "op_reads", fwd[0], inst.tensor_name[t], "reads a tensor before its producer"
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
