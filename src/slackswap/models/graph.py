"""A small builder that records operators and saved tensors by name and emits an `Instance`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from slackswap.instance import Hardware, Instance


@dataclass
class _Op:
    name: str
    phase: int
    block: int
    layer: int
    kind: str
    duration_s: float
    flops: float
    transient_bytes: int
    reads: list[str]


@dataclass
class _Tensor:
    name: str
    nbytes: int
    producer: str
    category: str
    block: int
    recompute_s: float
    rebuild_inputs: list[str] = field(default_factory=list)
    rebuild_workspace_bytes: int = 0


class GraphBuilder:
    """Record forward operators, then backward ones; readers are derived from ``reads``."""

    def __init__(self, name: str, hardware: Hardware, meta: dict[str, Any] | None = None):
        self.name = name
        self.hardware = hardware
        self.meta = dict(meta or {})
        self._ops: list[_Op] = []
        self._op_names: set[str] = set()
        self._tensors: dict[str, _Tensor] = {}
        self._backward_started = False

    def op(
        self,
        name: str,
        *,
        backward: bool = False,
        block: int,
        layer: int | None = None,
        kind: str,
        duration_s: float,
        flops: float = 0.0,
        transient_bytes: float = 0,
        reads: list[str] | tuple[str, ...] = (),
    ) -> str:
        """Append an operator; returns its name."""
        if name in self._op_names:
            raise ValueError(f"duplicate operator {name!r}")
        if backward:
            self._backward_started = True
        elif self._backward_started:
            raise ValueError(f"forward operator {name!r} after the backward pass began")
        for t in reads:
            if t not in self._tensors:
                raise ValueError(f"operator {name!r} reads unknown tensor {t!r}")
        self._ops.append(
            _Op(
                name,
                int(backward),
                block,
                block if layer is None else layer,
                kind,
                float(duration_s),
                float(flops),
                int(round(transient_bytes)),
                list(reads),
            )
        )
        self._op_names.add(name)
        return name

    def saved(
        self,
        name: str,
        *,
        nbytes: float,
        producer: str,
        category: str,
        block: int,
        recompute_s: float = math.inf,
        rebuild_inputs: list[str] | tuple[str, ...] = (),
        rebuild_workspace_bytes: float = 0,
    ) -> str:
        """Declare a tensor saved for backward, produced by the (already recorded) ``producer``;
        ``rebuild_workspace_bytes``: temporaries its rebuild holds beside it (a chain's
        intermediates)."""
        if name in self._tensors:
            raise ValueError(f"duplicate tensor {name!r}")
        if producer not in self._op_names:
            raise ValueError(f"tensor {name!r}: unknown producer {producer!r}")
        self._tensors[name] = _Tensor(
            name,
            int(round(nbytes)),
            producer,
            category,
            block,
            float(recompute_s),
            list(rebuild_inputs),
            int(round(rebuild_workspace_bytes)),
        )
        return name

    def build(self) -> Instance:
        op_index = {op.name: i for i, op in enumerate(self._ops)}
        n_fwd = sum(1 for op in self._ops if op.phase == 0)
        tnames = list(self._tensors)
        t_index = {n: i for i, n in enumerate(tnames)}
        fwd_readers: dict[str, list[int]] = {n: [] for n in tnames}
        bwd_readers: dict[str, list[int]] = {n: [] for n in tnames}
        for i, op in enumerate(self._ops):
            for tn in op.reads:
                (fwd_readers if i < n_fwd else bwd_readers)[tn].append(i)
        tensors = list(self._tensors.values())
        for t in tensors:
            if not bwd_readers[t.name]:
                raise ValueError(f"saved tensor {t.name!r} is never read in the backward pass")
        cols: dict[str, Any] = dict(
            op_name=[op.name for op in self._ops],
            op_phase=[op.phase for op in self._ops],
            op_block=[op.block for op in self._ops],
            op_layer=[op.layer for op in self._ops],
            op_kind=[op.kind for op in self._ops],
            op_duration_s=[op.duration_s for op in self._ops],
            op_flops=[op.flops for op in self._ops],
            op_transient_bytes=[op.transient_bytes for op in self._ops],
            op_reads=[[t_index[t] for t in op.reads] for op in self._ops],
            tensor_name=tnames,
            tensor_bytes=[t.nbytes for t in tensors],
            tensor_producer=[op_index[t.producer] for t in tensors],
            tensor_last_fwd_reader=[
                max([op_index[t.producer], *fwd_readers[t.name]]) for t in tensors
            ],
            tensor_first_bwd_reader=[min(bwd_readers[t.name]) for t in tensors],
            tensor_last_bwd_reader=[max(bwd_readers[t.name]) for t in tensors],
            tensor_recompute_s=[t.recompute_s for t in tensors],
            tensor_rebuild_inputs=[[t_index[u] for u in t.rebuild_inputs] for t in tensors],
            tensor_block=[t.block for t in tensors],
            tensor_category=[t.category for t in tensors],
            tensor_rebuild_workspace_bytes=[t.rebuild_workspace_bytes for t in tensors],
        )
        return Instance(name=self.name, hardware=self.hardware, meta=self.meta, **cols)
