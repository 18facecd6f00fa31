"""The instance file: versioned JSON, exact round trip, errors that name file, field, index, value.

Layout (schema_version 1)::

    {"schema_version": 1, "name": "...",
     "hardware": {"gpu": ..., "link": ..., "link_bw_Bps": ..., "copy_latency_s": ...,
                  "duplex_factor": ..., "gpu_flops": ..., "gpu_mem_Bps": ...},
     "ops": [{"name", "phase": "forward"|"backward", "block", "layer", "kind", "duration_s",
              "flops", "transient_bytes", "reads": [tensor names]}, ...],
     "tensors": [{"name", "bytes", "producer": op name, "last_fwd_reader": op name,
                  "first_bwd_reader": op name, "last_bwd_reader": op name,
                  "recompute_s": seconds or null (= infinite), "rebuild_inputs": [tensor names],
                  "block", "category"}, ...],
     "meta": {...}}

Operators and tensors are referred to by name, so files can be read and edited by hand.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from slackswap.problem import Hardware, Instance, InstanceError

SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = (1,)

_OP_FIELDS = (
    "name",
    "phase",
    "block",
    "layer",
    "kind",
    "duration_s",
    "flops",
    "transient_bytes",
    "reads",
)
_TENSOR_FIELDS = (
    "name",
    "bytes",
    "producer",
    "last_fwd_reader",
    "first_bwd_reader",
    "last_bwd_reader",
    "recompute_s",
    "rebuild_inputs",
    "block",
    "category",
)
_HW_FIELDS = ("gpu", "link", "link_bw_Bps")


class InstanceFileError(InstanceError):
    """A bad instance file; ``str(err)`` is the one-line message for the user."""


def instance_to_dict(inst: Instance) -> dict[str, Any]:
    """The JSON-ready form of an instance (plain Python types)."""
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
    return {
        "schema_version": SCHEMA_VERSION,
        "name": inst.name,
        "hardware": inst.hardware.to_dict(),
        "ops": ops,
        "tensors": tensors,
        "meta": inst.meta,
    }


def _err(source: str, where: str, value: Any, why: str) -> InstanceFileError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InstanceFileError(f"{source}: {where} = {shown}: {why}", field=where, value=value)


def _num(source: str, where: str, v: Any, integer: bool = False) -> float | int:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _err(source, where, v, "expected a number")
    if isinstance(v, float) and math.isnan(v):
        raise _err(source, where, v, "not a number")
    if integer:
        if isinstance(v, float):
            if not v.is_integer():
                raise _err(source, where, v, "expected an integer")
            v = int(v)
        return int(v)
    return float(v)


def instance_from_dict(d: Any, source: str = "<dict>") -> Instance:
    """Build and validate an instance from its JSON form; errors name ``source`` and the field."""
    if not isinstance(d, dict):
        raise _err(source, "(top level)", type(d).__name__, "expected a JSON object")
    if "schema_version" not in d:
        raise _err(source, "schema_version", None, "missing field")
    ver = d["schema_version"]
    if ver not in SUPPORTED_VERSIONS or isinstance(ver, bool):
        raise _err(
            source,
            "schema_version",
            ver,
            f"unknown schema version (this slackswap reads {SUPPORTED_VERSIONS})",
        )
    for key in ("name", "hardware", "ops", "tensors"):
        if key not in d:
            raise _err(source, key, None, "missing field")
    hw = d["hardware"]
    if not isinstance(hw, dict):
        raise _err(source, "hardware", hw, "expected an object")
    for key in _HW_FIELDS:
        if key not in hw:
            raise _err(source, f"hardware.{key}", None, "missing field")
    hardware = Hardware(
        gpu=str(hw["gpu"]),
        link=str(hw["link"]),
        link_bw_Bps=_num(source, "hardware.link_bw_Bps", hw["link_bw_Bps"]),
        copy_latency_s=_num(source, "hardware.copy_latency_s", hw.get("copy_latency_s", 10e-6)),
        duplex_factor=_num(source, "hardware.duplex_factor", hw.get("duplex_factor", 0.85)),
        gpu_flops=_num(source, "hardware.gpu_flops", hw.get("gpu_flops", 0.0)),
        gpu_mem_Bps=_num(source, "hardware.gpu_mem_Bps", hw.get("gpu_mem_Bps", 0.0)),
    )
    ops, tensors = d["ops"], d["tensors"]
    if not isinstance(ops, list):
        raise _err(source, "ops", ops, "expected a list")
    if not isinstance(tensors, list):
        raise _err(source, "tensors", tensors, "expected a list")
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise _err(source, f"ops[{i}]", op, "expected an object")
        for key in _OP_FIELDS:
            if key not in op:
                raise _err(source, f"ops[{i}].{key}", None, "missing field")
    for i, t in enumerate(tensors):
        if not isinstance(t, dict):
            raise _err(source, f"tensors[{i}]", t, "expected an object")
        for key in _TENSOR_FIELDS:
            if key not in t:
                raise _err(source, f"tensors[{i}].{key}", None, "missing field")

    op_index = {}
    for i, op in enumerate(ops):
        if op["name"] in op_index:
            raise _err(source, f"ops[{i}].name", op["name"], "duplicate operator name")
        op_index[op["name"]] = i
    t_index = {}
    for i, t in enumerate(tensors):
        if t["name"] in t_index:
            raise _err(source, f"tensors[{i}].name", t["name"], "duplicate tensor name")
        t_index[t["name"]] = i

    def op_ref(i: int, key: str) -> int:
        v = tensors[i][key]
        if v not in op_index:
            raise _err(source, f"tensors[{i}].{key}", v, "unknown operator name")
        return op_index[v]

    def t_refs(where: str, names: Any) -> list[int]:
        if not isinstance(names, list):
            raise _err(source, where, names, "expected a list of tensor names")
        out = []
        for n in names:
            if n not in t_index:
                raise _err(source, where, n, "unknown tensor name")
            out.append(t_index[n])
        return out

    phases = []
    for i, op in enumerate(ops):
        if op["phase"] not in ("forward", "backward"):
            raise _err(source, f"ops[{i}].phase", op["phase"], "expected 'forward' or 'backward'")
        phases.append(0 if op["phase"] == "forward" else 1)

    def col(rows: list[dict], key: str, prefix: str, integer: bool = False) -> list:
        return [_num(source, f"{prefix}[{i}].{key}", r[key], integer) for i, r in enumerate(rows)]

    recompute = []
    for i, t in enumerate(tensors):
        v = t["recompute_s"]
        recompute.append(math.inf if v is None else _num(source, f"tensors[{i}].recompute_s", v))

    try:
        cols: dict[str, Any] = dict(
            op_name=[op["name"] for op in ops],
            op_phase=np.array(phases, dtype=np.int8),
            op_block=col(ops, "block", "ops", True),
            op_layer=col(ops, "layer", "ops", True),
            op_kind=[op["kind"] for op in ops],
            op_duration_s=col(ops, "duration_s", "ops"),
            op_flops=col(ops, "flops", "ops"),
            op_transient_bytes=col(ops, "transient_bytes", "ops", True),
            op_reads=[t_refs(f"ops[{i}].reads", op["reads"]) for i, op in enumerate(ops)],
            tensor_name=[t["name"] for t in tensors],
            tensor_bytes=col(tensors, "bytes", "tensors", True),
            tensor_producer=[op_ref(i, "producer") for i in range(len(tensors))],
            tensor_last_fwd_reader=[op_ref(i, "last_fwd_reader") for i in range(len(tensors))],
            tensor_first_bwd_reader=[op_ref(i, "first_bwd_reader") for i in range(len(tensors))],
            tensor_last_bwd_reader=[op_ref(i, "last_bwd_reader") for i in range(len(tensors))],
            tensor_recompute_s=recompute,
            tensor_rebuild_inputs=[
                t_refs(f"tensors[{i}].rebuild_inputs", t["rebuild_inputs"])
                for i, t in enumerate(tensors)
            ],
            tensor_block=col(tensors, "block", "tensors", True),
            tensor_category=[t["category"] for t in tensors],
        )
        return Instance(name=str(d["name"]), hardware=hardware, meta=d.get("meta") or {}, **cols)
    except InstanceFileError:
        raise
    except InstanceError as exc:
        where = _file_field(exc)
        raise _err(source, where, exc.value, str(exc).split(": ", 1)[-1]) from None


_ARRAY_TO_FILE = {
    "op_name": ("ops", "name"),
    "op_phase": ("ops", "phase"),
    "op_block": ("ops", "block"),
    "op_layer": ("ops", "layer"),
    "op_kind": ("ops", "kind"),
    "op_duration_s": ("ops", "duration_s"),
    "op_flops": ("ops", "flops"),
    "op_transient_bytes": ("ops", "transient_bytes"),
    "op_reads": ("ops", "reads"),
    "tensor_name": ("tensors", "name"),
    "tensor_bytes": ("tensors", "bytes"),
    "tensor_producer": ("tensors", "producer"),
    "tensor_last_fwd_reader": ("tensors", "last_fwd_reader"),
    "tensor_first_bwd_reader": ("tensors", "first_bwd_reader"),
    "tensor_last_bwd_reader": ("tensors", "last_bwd_reader"),
    "tensor_recompute_s": ("tensors", "recompute_s"),
    "tensor_rebuild_inputs": ("tensors", "rebuild_inputs"),
    "tensor_block": ("tensors", "block"),
    "tensor_category": ("tensors", "category"),
}


def _file_field(exc: InstanceError) -> str:
    """Translate an array field name (``tensor_bytes``, index 3) to the file's ``tensors[3].bytes``."""
    if exc.field in _ARRAY_TO_FILE:
        group, key = _ARRAY_TO_FILE[exc.field]
        return f"{group}[{exc.index}].{key}" if exc.index is not None else f"{group}.{key}"
    return exc.field or "(instance)"


def load_instance(path: str | os.PathLike[str]) -> Instance:
    """Read an instance file; a bad file raises `InstanceFileError` with a one-line message."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InstanceFileError(f"{source}: cannot read file ({exc.strerror})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstanceFileError(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return instance_from_dict(d, source)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_instance(inst: Instance, path: str | os.PathLike[str]) -> None:
    """Write ``inst`` as a schema_version 1 JSON file, atomically."""
    atomic_write_text(path, json.dumps(instance_to_dict(inst), indent=1) + "\n")
