"""The shared problem representation: one profiled training iteration on a GPU and a host link.

An `Instance` holds the operator sequence (forward, then backward), the saved tensors with their
lifetimes and recompute costs, and the hardware link. Arrays are numpy and read-only; the instance
is validated once, on construction, and every error names the field and the offending index.
Units: bytes and seconds everywhere.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

import numpy as np

from slackswap.console import format_bytes

# The errors live below this module: validation raises them, and this module validates every
# instance.
from slackswap.errors import InstanceError
from slackswap.textfile import atomic_write_text
from slackswap.validation import validate_instance

FORWARD = 0
BACKWARD = 1

#: Guard g of Algorithm 1: the link budget leaves 2% of the forward pass free.
LINK_GUARD = 0.02

#: schema_version of the instance file `Instance.to_dict` writes.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Hardware:
    """The GPU and its host link as the simulator sees them."""

    gpu: str
    link: str
    link_bw_Bps: float  # bytes per second, per direction
    copy_latency_s: float = 10e-6
    duplex_factor: float = 0.85  # share of link_bw_Bps each direction gets while both are busy
    gpu_flops: float = 0.0  # datasheet peak FLOP/s of the precision used (information only)
    gpu_mem_Bps: float = 0.0  # datasheet HBM bandwidth, bytes per second (information only)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "link": self.link,
            "link_bw_Bps": self.link_bw_Bps,
            "copy_latency_s": self.copy_latency_s,
            "duplex_factor": self.duplex_factor,
            "gpu_flops": self.gpu_flops,
            "gpu_mem_Bps": self.gpu_mem_Bps,
        }


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _csr(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    for i, items in enumerate(lists):
        ptr[i + 1] = ptr[i] + len(items)
    idx = np.fromiter((x for items in lists for x in items), dtype=np.int64, count=int(ptr[-1]))
    return ptr, idx


@dataclass(frozen=True, eq=False)
class Instance:
    """One profiled iteration: operators in execution order, saved tensors, hardware.

    Operators (length ``n_ops``), forward ones first, then backward:
      ``op_name``, ``op_phase`` (0 forward, 1 backward), ``op_block`` (block / layer index, -1
      outside any block), ``op_layer`` (finest unit vDNN synchronises on; equals the block for
      transformers), ``op_kind`` (see `OP_KINDS`), ``op_duration_s``, ``op_flops``,
      ``op_transient_bytes`` (temporaries, workspace, unsaved outputs and gradient buffers that
      live only while the operator runs) and ``op_reads`` (saved tensors the operator reads).

    Saved tensors (length ``n_tensors``): ``tensor_name``, ``tensor_bytes``, ``tensor_producer``
    (forward operator index), ``tensor_last_fwd_reader`` (the producer when nothing else reads it
    in the forward pass), ``tensor_first_bwd_reader``, ``tensor_last_bwd_reader``,
    ``tensor_recompute_s`` (``inf`` when no operator chain rebuilds it from saved tensors),
    ``tensor_rebuild_inputs`` (saved tensors the rebuild reads), ``tensor_block`` and
    ``tensor_category`` (see `CATEGORIES`). Optional: ``tensor_rebuild_workspace_bytes``, the
    bytes of temporaries a rebuild holds beside the rebuilt tensor itself (the unsaved
    intermediates of a multi-operator chain at their largest moment; 0, the default, for a
    single-operator rebuild); ``None`` means all zeros.
    """

    name: str
    hardware: Hardware
    op_name: tuple[str, ...]
    op_phase: np.ndarray
    op_block: np.ndarray
    op_layer: np.ndarray
    op_kind: tuple[str, ...]
    op_duration_s: np.ndarray
    op_flops: np.ndarray
    op_transient_bytes: np.ndarray
    op_reads: tuple[tuple[int, ...], ...]
    tensor_name: tuple[str, ...]
    tensor_bytes: np.ndarray
    tensor_producer: np.ndarray
    tensor_last_fwd_reader: np.ndarray
    tensor_first_bwd_reader: np.ndarray
    tensor_last_bwd_reader: np.ndarray
    tensor_recompute_s: np.ndarray
    tensor_rebuild_inputs: tuple[tuple[int, ...], ...]
    tensor_block: np.ndarray
    tensor_category: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    tensor_rebuild_workspace_bytes: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.tensor_rebuild_workspace_bytes is None:
            zeros = np.zeros(len(self.tensor_name), dtype=np.int64)
            object.__setattr__(self, "tensor_rebuild_workspace_bytes", zeros)
        conv = {
            "op_phase": np.int8,
            "op_block": np.int32,
            "op_layer": np.int32,
            "op_duration_s": np.float64,
            "op_flops": np.float64,
            "op_transient_bytes": np.int64,
            "tensor_bytes": np.int64,
            "tensor_producer": np.int32,
            "tensor_last_fwd_reader": np.int32,
            "tensor_first_bwd_reader": np.int32,
            "tensor_last_bwd_reader": np.int32,
            "tensor_recompute_s": np.float64,
            "tensor_block": np.int32,
            "tensor_rebuild_workspace_bytes": np.int64,
        }
        for name, dtype in conv.items():
            raw = getattr(self, name)
            try:
                arr = np.asarray(raw, dtype=dtype)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InstanceError(
                    f"{name}: not a numeric array ({exc})", field=name, value=raw
                ) from None
            if arr.ndim != 1:
                raise InstanceError(f"{name}: expected a 1-d array", field=name)
            object.__setattr__(self, name, _ro(arr))
        for name in ("op_name", "op_kind", "tensor_name", "tensor_category"):
            object.__setattr__(self, name, tuple(str(x) for x in getattr(self, name)))
        for name in ("op_reads", "tensor_rebuild_inputs"):
            raw = getattr(self, name)
            try:
                rows = tuple(tuple(int(x) for x in row) for row in raw)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InstanceError(
                    f"{name}: not lists of tensor indices ({exc})", field=name, value=raw
                ) from None
            object.__setattr__(self, name, rows)
        if not isinstance(self.meta, dict):
            raise InstanceError(
                f"meta = {self.meta!r}: expected a dict", field="meta", value=self.meta
            )
        object.__setattr__(self, "meta", dict(self.meta))
        validate_instance(self)

    # ----- sizes -----------------------------------------------------------------------------
    @property
    def n_ops(self) -> int:
        return len(self.op_name)

    @property
    def n_tensors(self) -> int:
        return len(self.tensor_name)

    @cached_property
    def n_forward_ops(self) -> int:
        """Operators of the forward pass; they come first."""
        return int(np.count_nonzero(self.op_phase == FORWARD))

    @cached_property
    def op_reads_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``op_reads`` as CSR (ptr of length n_ops + 1, tensor indices); read-only."""
        ptr, idx = _csr(self.op_reads)
        return _ro(ptr), _ro(idx)

    @cached_property
    def rebuild_inputs_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``tensor_rebuild_inputs`` as CSR; read-only."""
        ptr, idx = _csr(self.tensor_rebuild_inputs)
        return _ro(ptr), _ro(idx)

    @cached_property
    def tensor_index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.tensor_name)}

    # ----- derived quantities (paper Sec. 2.2, Eq. 1) ------------------------------------------
    @cached_property
    def forward_s(self) -> float:
        """T_F: the forward pass, seconds."""
        return float(self.op_duration_s[: self.n_forward_ops].sum())

    @cached_property
    def ideal_step_s(self) -> float:
        """Step with every tensor kept and unlimited memory: the sum of operator times."""
        return float(self.op_duration_s.sum())

    @cached_property
    def saved_bytes(self) -> int:
        """A: bytes saved for the backward pass."""
        return int(self.tensor_bytes.sum())

    @cached_property
    def forward_flops(self) -> float:
        """F: FLOPs of the forward pass (2 per multiply-add)."""
        return float(self.op_flops[: self.n_forward_ops].sum())

    @cached_property
    def intensity(self) -> float:
        """I = F / A, forward FLOPs per saved byte."""
        return self.forward_flops / self.saved_bytes if self.saved_bytes else math.inf

    @cached_property
    def beta(self) -> float:
        """beta = (F / T_F) / W: sustained FLOP/s per byte/s of host link."""
        return (self.forward_flops / self.forward_s) / self.hardware.link_bw_Bps

    @cached_property
    def hideable_fraction(self) -> float:
        """f = min(1, W T_F / A) (Eq. 1): share of saved bytes the link copies during forward."""
        if self.saved_bytes == 0:
            return 1.0
        return min(1.0, self.hardware.link_bw_Bps * self.forward_s / self.saved_bytes)

    @cached_property
    def link_budget_bytes(self) -> float:
        """(1 - g) W T_F: bytes the D2H engine can move before the forward pass ends."""
        return (1.0 - LINK_GUARD) * self.hardware.link_bw_Bps * self.forward_s

    @cached_property
    def memory_profile_keep_all(self) -> np.ndarray:
        """Bytes in use during each operator when every tensor is kept (saved + transient)."""
        delta = np.zeros(self.n_ops + 1, dtype=np.int64)
        np.add.at(delta, self.tensor_producer, self.tensor_bytes)
        np.add.at(delta, self.tensor_last_bwd_reader + 1, -self.tensor_bytes)
        resident = np.cumsum(delta)[: self.n_ops]
        out = resident + self.op_transient_bytes
        out.setflags(write=False)
        return out

    @cached_property
    def peak_bytes(self) -> int:
        """P: peak activation memory with every tensor kept."""
        return int(self.memory_profile_keep_all.max()) if self.n_ops else 0

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON form (name excluded): what results cite."""
        d = self.to_dict()
        d.pop("name", None)
        d.pop("meta", None)
        blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def summary(self) -> dict[str, Any]:
        """The derived quantities under their JSON names (SI units); ``layers``, ``seq`` and
        ``batch`` are the workload model's (None for a profiled step)."""
        config = self.meta.get("config")
        config = config if isinstance(config, dict) else {}
        return {
            "name": self.name,
            "gpu": self.hardware.gpu,
            "link": self.hardware.link,
            "link_bw_Bps": self.hardware.link_bw_Bps,
            "layers": config.get("layers"),
            "seq": config.get("seq"),
            "batch": config.get("batch"),
            "saved_bytes": self.saved_bytes,
            "forward_s": self.forward_s,
            "ideal_step_s": self.ideal_step_s,
            "forward_flops": self.forward_flops,
            "intensity": self.intensity,
            "beta": self.beta,
            "hideable_fraction": self.hideable_fraction,
            "peak_bytes": self.peak_bytes,
            "link_budget_bytes": self.link_budget_bytes,
            "n_ops": self.n_ops,
            "n_tensors": self.n_tensors,
            "max_rebuild_workspace_bytes": int(self.tensor_rebuild_workspace_bytes.max()),
        }

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (plain Python types): the layout of `slackswap.instances.format`."""
        inst = self
        ops = []
        names = inst.op_name
        tnames = inst.tensor_name
        for i in range(inst.n_ops):
            ops.append(
                {
                    "name": names[i],
                    "phase": "forward" if inst.op_phase[i] == 0 else "backward",
                    "block": int(inst.op_block[i]),
                    "layer": int(inst.op_layer[i]),
                    "kind": inst.op_kind[i],
                    "duration_s": float(inst.op_duration_s[i]),
                    "flops": float(inst.op_flops[i]),
                    "transient_bytes": int(inst.op_transient_bytes[i]),
                    "reads": [tnames[t] for t in inst.op_reads[i]],
                }
            )
        tensors = []
        for t in range(inst.n_tensors):
            c = float(inst.tensor_recompute_s[t])
            tensors.append(
                {
                    "name": tnames[t],
                    "bytes": int(inst.tensor_bytes[t]),
                    "producer": names[inst.tensor_producer[t]],
                    "last_fwd_reader": names[inst.tensor_last_fwd_reader[t]],
                    "first_bwd_reader": names[inst.tensor_first_bwd_reader[t]],
                    "last_bwd_reader": names[inst.tensor_last_bwd_reader[t]],
                    "recompute_s": c if math.isfinite(c) else None,
                    "rebuild_inputs": [tnames[u] for u in inst.tensor_rebuild_inputs[t]],
                    "block": int(inst.tensor_block[t]),
                    "category": inst.tensor_category[t],
                }
            )
            workspace = int(inst.tensor_rebuild_workspace_bytes[t])
            if workspace:  # absent means 0: files without multi-operator rebuilds stay unchanged
                tensors[-1]["rebuild_workspace_bytes"] = workspace
        return {
            "schema_version": SCHEMA_VERSION,
            "name": inst.name,
            "hardware": inst.hardware.to_dict(),
            "ops": ops,
            "tensors": tensors,
            "meta": inst.meta,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the instance as versioned JSON (`to_dict`), atomically."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    def __repr__(self) -> str:
        return (
            f"Instance({self.name!r}, ops={self.n_ops}, tensors={self.n_tensors}, "
            f"A={format_bytes(self.saved_bytes)}, P={format_bytes(self.peak_bytes)}, "
            f"ideal={self.ideal_step_s * 1e3:.1f} ms, {self.hardware.gpu}/{self.hardware.link})"
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Pickle the fields and rebuild through the constructor: cached properties, read-only
        # flags and validation come back as on any construction.
        return (_rebuild, ({f.name: getattr(self, f.name) for f in fields(self)},))


def _rebuild(kwargs: dict[str, Any]) -> Instance:
    """An unpickled instance (see `Instance.__reduce__`)."""
    return Instance(**kwargs)
