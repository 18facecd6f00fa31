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
                  "block", "category", optional "rebuild_workspace_bytes"}, ...],
     "meta": {...}}

Operators and tensors are referred to by name, so files can be read and edited by hand.
``rebuild_workspace_bytes`` (bytes of temporaries a rebuild holds beside the rebuilt tensor;
`Instance.tensor_rebuild_workspace_bytes`) is optional, 0 when absent, and written only when
not 0, so files of instances without multi-operator rebuilds keep their exact bytes.

Physical ranges (`slackswap.validation.RANGES`, inclusive; bytes, seconds, FLOP). A value
outside is refused at load, naming the field, its index, the value and the range. The bounds
are wide enough for hand-worked toy instances (100 B/s links, 1 s operators) and narrow enough
that the event simulators' float64 clocks stay meaningful (a denormal bandwidth or a 1e308 s
operator would stall or overflow them):

=========================  ================  ===============================================
field                      range             why
=========================  ================  ===============================================
hardware.link_bw_Bps       1 .. 1e15 B/s     1 B/s: one byte a second; 1 PB/s is 100x HBM3e
hardware.copy_latency_s    0 .. 1 s          DMA set-up takes microseconds
hardware.duplex_factor     0.1 .. 1          share of the bandwidth each direction keeps
hardware.gpu_flops         0 .. 1e18 FLOP/s  0 = unknown; 1 EFLOP/s is ~1000x an H100
hardware.gpu_mem_Bps       0 .. 1e15 B/s     0 = unknown; as the link's upper bound
ops[i].duration_s          0 .. 3600 s       no single kernel of a training step runs an hour
ops[i].flops               0 .. 1e18 FLOP    an hour at 1e18 / 3600 FLOP/s
ops[i].transient_bytes     0 .. 2**50 B      1 PiB, far beyond any device's memory
ops[i].block              -1 .. 2**31-1     int32 indices, -1 outside any block
ops[i].layer               -1 .. 2**31-1     as ops[i].block
tensors[i].bytes           0 .. 2**50 B      1 PiB as above
tensors[i].recompute_s     0 .. 3600 s|null  as duration_s; null = cannot be rebuilt
tensors[i].block           -1 .. 2**31-1     as ops[i].block
=========================  ================  ===============================================

``tensors[i].rebuild_workspace_bytes`` (too long a name for the table) lies in 0 .. 2**50 B,
as ``tensors[i].bytes``; and three sums: the saved bytes are at least 1 (F / A and fractions of P
stay finite) and, plus the largest temporary (an operator's or a rebuild's), at most 2**53 (exact in float64, no int64 overflow); the forward pass
takes >= 1 ns (F / T_F and beta stay finite). An instance needs at least one operator and one
saved tensor. Every name (instance, GPU, link, operators,
tensors, kinds, categories, the names in ``reads``, ``producer`` and the other references) is a
JSON string of valid Unicode (no lone surrogates); ``meta`` is an object nested at most
`MAX_META_DEPTH` levels. Files are UTF-8.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from slackswap.errors import InstanceError
from slackswap.instance import Hardware, Instance
from slackswap.textfile import read_user_bytes
from slackswap.userdoc import (
    iter_json_array,
    json_members,
    json_opens_list,
    json_value_at,
    parse_json,
)
from slackswap.validation import in_range, range_text

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
#: Deepest nesting of ``meta`` (free-form information); deeper is refused, not a RecursionError.
MAX_META_DEPTH = 32


class InstanceFileError(InstanceError):
    """A bad instance file; ``str(err)`` is the one-line message for the user."""


def instance_to_dict(inst: Instance) -> dict[str, Any]:
    """The JSON-ready form of an instance (plain Python types): `Instance.to_dict`."""
    return inst.to_dict()


def _err(source: str, where: str, value: Any, why: str) -> InstanceFileError:
    try:
        shown = repr(value)
    except RecursionError:  # a deeply nested list or object
        shown = f"<deeply nested {type(value).__name__}>"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InstanceFileError(f"{source}: {where} = {shown}: {why}", field=where, value=value)


def _num(source: str, where: str, v: Any, key: str, integer: bool = False) -> float | int:
    """A number of field ``key`` (a `RANGES` key), checked against its physical range."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _err(source, where, v, "expected a number")
    if isinstance(v, float) and math.isnan(v):
        raise _err(source, where, v, "not a number")
    # Compared before any conversion: a 400-digit integer must not overflow float or int64.
    if not in_range(key, v):
        raise _err(source, where, v, range_text(key))
    if integer:
        if isinstance(v, float):
            if not v.is_integer():
                raise _err(source, where, v, "expected an integer")
            v = int(v)
        return int(v)
    return float(v)


def _text(source: str, where: str, v: Any) -> str:
    """A name: a JSON string that is valid Unicode (a lone surrogate cannot be printed or hashed)."""
    if not isinstance(v, str):
        raise _err(source, where, v, "expected a string")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _err(source, where, v, "not valid Unicode (a lone surrogate)") from None
    return v


def _check_meta(source: str, meta: Any) -> None:
    """``meta`` is an object of valid-Unicode text nested at most `MAX_META_DEPTH` levels."""
    if not isinstance(meta, dict):
        raise _err(source, "meta", meta, "expected an object")
    stack: list[tuple[str, Any, int]] = [("meta", meta, 1)]
    while stack:  # iterative: a recursive walk could itself overflow the stack
        where, v, depth = stack.pop()
        if isinstance(v, str):
            _text(source, where, v)
        elif isinstance(v, dict | list):
            if depth > MAX_META_DEPTH:
                raise _err(source, where, v, f"nested deeper than {MAX_META_DEPTH} levels")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, item in items:
                if isinstance(k, str):
                    _text(source, f"{where} (key)", k)
                stack.append((f"{where}[{k!r}]", item, depth + 1))


def _other_kind_of_file(d: dict[str, Any]) -> str:
    """What a JSON object that slackswap wrote but is no instance is ("" when unknown)."""
    if "traceEvents" in d:
        return "a Chrome trace of a simulated step (`slackswap simulate --trace`)"
    if d.get("format") == "slackswap-plan":
        return "a plan file (`slackswap solve -o`)"
    return ""


def instance_from_dict(d: Any, source: str = "<dict>") -> Instance:
    """Build and validate an instance from its JSON form; errors name ``source`` and the field."""
    name, meta, hardware = _head(d, source)
    return _body(d, source, name, meta, hardware)


def _head(d: Any, source: str) -> tuple[str, dict[str, Any], Hardware]:
    """The checks of everything but the operators and tensors (which need only be present):
    the schema version, the name, ``meta`` and the hardware."""
    if not isinstance(d, dict):
        raise _err(source, "(top level)", type(d).__name__, "expected a JSON object")
    if "schema_version" not in d:
        other = _other_kind_of_file(d)
        if other:  # the other JSON files slackswap writes, named rather than half-parsed
            raise InstanceFileError(
                f"{source}: {other}, not an instance file (write one with `slackswap instance "
                "build` or `slackswap profile -o FILE`)",
                field="schema_version",
                value=None,
            )
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
    name = _text(source, "name", d["name"])
    meta = d.get("meta")
    meta = {} if meta is None else meta
    _check_meta(source, meta)
    hw = d["hardware"]
    if not isinstance(hw, dict):
        raise _err(source, "hardware", hw, "expected an object")
    for key in _HW_FIELDS:
        if key not in hw:
            raise _err(source, f"hardware.{key}", None, "missing field")

    def hw_num(key: str, default: float | None = None) -> float:
        where = f"hardware.{key}"
        return float(
            _num(source, where, hw[key] if default is None else hw.get(key, default), where)
        )

    hardware = Hardware(
        gpu=_text(source, "hardware.gpu", hw["gpu"]),
        link=_text(source, "hardware.link", hw["link"]),
        link_bw_Bps=hw_num("link_bw_Bps"),
        copy_latency_s=hw_num("copy_latency_s", 10e-6),
        duplex_factor=hw_num("duplex_factor", 0.85),
        gpu_flops=hw_num("gpu_flops", 0.0),
        gpu_mem_Bps=hw_num("gpu_mem_Bps", 0.0),
    )
    return name, meta, hardware


def _body(
    d: dict[str, Any], source: str, name: str, meta: dict[str, Any], hardware: Hardware
) -> Instance:
    ops, tensors = d["ops"], d["tensors"]
    if not isinstance(ops, list):
        raise _err(source, "ops", ops, "expected a list")
    if not isinstance(tensors, list):
        raise _err(source, "tensors", tensors, "expected a list")
    for i, op in enumerate(ops):
        _check_shape(source, "ops", i, op, _OP_FIELDS)
    for i, t in enumerate(tensors):
        _check_shape(source, "tensors", i, t, _TENSOR_FIELDS)

    op_index: dict[str, int] = {}
    for i, op in enumerate(ops):
        n = _text(source, f"ops[{i}].name", op["name"])
        if n in op_index:
            raise _err(source, f"ops[{i}].name", n, "duplicate operator name")
        op_index[n] = i
    t_index: dict[str, int] = {}
    for i, t in enumerate(tensors):
        n = _text(source, f"tensors[{i}].name", t["name"])
        if n in t_index:
            raise _err(source, f"tensors[{i}].name", n, "duplicate tensor name")
        t_index[n] = i

    def op_ref(i: int, key: str) -> int:
        v = _text(source, f"tensors[{i}].{key}", tensors[i][key])
        if v not in op_index:
            raise _err(source, f"tensors[{i}].{key}", v, "unknown operator name")
        return op_index[v]

    def t_refs(where: str, names: Any) -> list[int]:
        if not isinstance(names, list):
            raise _err(source, where, names, "expected a list of tensor names")
        out = []
        for n in names:
            if _text(source, where, n) not in t_index:
                raise _err(source, where, n, "unknown tensor name")
            out.append(t_index[n])
        return out

    def texts(rows: list[dict], key: str, prefix: str) -> list[str]:
        return [_text(source, f"{prefix}[{i}].{key}", r[key]) for i, r in enumerate(rows)]

    phases = []
    for i, op in enumerate(ops):
        if op["phase"] not in ("forward", "backward"):
            raise _err(source, f"ops[{i}].phase", op["phase"], "expected 'forward' or 'backward'")
        phases.append(0 if op["phase"] == "forward" else 1)

    def col(rows: list[dict], key: str, prefix: str, integer: bool = False) -> list:
        rkey = f"{'op' if prefix == 'ops' else 'tensor'}_{key}"
        return [
            _num(source, f"{prefix}[{i}].{key}", r[key], rkey, integer) for i, r in enumerate(rows)
        ]

    recompute = []
    for i, t in enumerate(tensors):
        v = t["recompute_s"]
        where = f"tensors[{i}].recompute_s"
        recompute.append(math.inf if v is None else _num(source, where, v, "tensor_recompute_s"))

    try:
        cols: dict[str, Any] = dict(
            op_name=texts(ops, "name", "ops"),
            op_phase=np.array(phases, dtype=np.int8),
            op_block=col(ops, "block", "ops", True),
            op_layer=col(ops, "layer", "ops", True),
            op_kind=texts(ops, "kind", "ops"),
            op_duration_s=col(ops, "duration_s", "ops"),
            op_flops=col(ops, "flops", "ops"),
            op_transient_bytes=col(ops, "transient_bytes", "ops", True),
            op_reads=[t_refs(f"ops[{i}].reads", op["reads"]) for i, op in enumerate(ops)],
            tensor_name=texts(tensors, "name", "tensors"),
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
            tensor_category=texts(tensors, "category", "tensors"),
            tensor_rebuild_workspace_bytes=[
                _num(
                    source,
                    f"tensors[{i}].rebuild_workspace_bytes",
                    t.get("rebuild_workspace_bytes", 0),
                    "tensor_rebuild_workspace_bytes",
                    True,
                )
                for i, t in enumerate(tensors)
            ],
        )
        return Instance(name=name, hardware=hardware, meta=meta, **cols)
    except InstanceFileError:
        raise
    except InstanceError as exc:
        where = _file_field(exc)
        raise _err(source, where, exc.value, str(exc).split(": ", 1)[-1]) from None


def _check_shape(source: str, group: str, i: int, item: Any, fields: tuple[str, ...]) -> None:
    """``ops[i]`` or ``tensors[i]`` is an object with every field of ``fields``."""
    if not isinstance(item, dict):
        raise _err(source, f"{group}[{i}]", item, "expected an object")
    for key in fields:
        if key not in item:
            raise _err(source, f"{group}[{i}].{key}", None, "missing field")


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
    "tensor_rebuild_workspace_bytes": ("tensors", "rebuild_workspace_bytes"),
}


def _file_field(exc: InstanceError) -> str:
    """Translate an array field name (``tensor_bytes``, index 3) to the file's ``tensors[3].bytes``."""
    if exc.field in _ARRAY_TO_FILE:
        group, key = _ARRAY_TO_FILE[exc.field]
        return f"{group}[{exc.index}].{key}" if exc.index is not None else f"{group}.{key}"
    return exc.field or "(instance)"


#: The parser's bounds for instance files: the fields' own checks name a field that holds a
#: huge integer or deep ``meta``; these only keep the parser itself safe.
_FILE_MAX_DEPTH = 500
_FILE_MAX_INT_DIGITS = 4300
#: The members parsed one item at a time, each item's shape checked before the next is built.
_LISTS = {"ops": _OP_FIELDS, "tensors": _TENSOR_FIELDS}


def load_instance(path: str | os.PathLike[str]) -> Instance:
    """Read an instance file; a bad file raises `InstanceFileError` with a one-line message.

    The file's shape is checked before it is built: its top-level fields are found by a scan
    that builds nothing (`slackswap.userdoc.json_members`), so a missing field is refused at
    once, and the operators and tensors are parsed one at a time, each checked as it comes, so
    a bad item is refused with no more than the items before it in memory."""
    source = str(path)
    raw = read_user_bytes(path, "an instance file", InstanceFileError)
    scanned = json_members(raw)
    if scanned is None or not _readable_version(raw, scanned[0]):
        # not one object at its top level, or another kind of file or version: the whole
        # parser and `instance_from_dict` say what is wrong, as they always have
        text = _utf8(raw, source)
        d = parse_json(
            text, source, InstanceFileError,
            max_depth=_FILE_MAX_DEPTH, max_int_digits=_FILE_MAX_INT_DIGITS,
        )  # fmt: skip
        return instance_from_dict(d, source)
    members, deepest = scanned
    if deepest > _FILE_MAX_DEPTH:
        raise InstanceFileError(
            f"{source}: nested too deeply ({deepest:,} levels; at most {_FILE_MAX_DEPTH})"
        )
    spans = {key: (start, end) for key, start, end in members}  # the last one wins, as in json
    missing = next((k for k in ("name", "hardware", "ops", "tensors") if k not in spans), "")
    if missing:  # refused before any value is built, in the order instance_from_dict checks
        raise _err(source, missing, None, "missing field")
    text = _utf8(raw, source)
    if not raw.isascii():  # byte offsets to character offsets
        chars = _char_offsets(raw, [b for span in spans.values() for b in span])
        spans = {k: (chars[s], chars[e]) for k, (s, e) in spans.items()}
    del raw
    d = {k: _value_at(text, s, e, source) for k, (s, e) in spans.items() if k not in _LISTS}
    lists = {k: spans[k] for k in _LISTS if json_opens_list(text, *spans[k])}
    d.update({k: _value_at(text, *spans[k], source) for k in _LISTS if k not in lists})
    d.update({k: [] for k in lists})  # present; their items are checked below, one at a time
    name, meta, hardware = _head(d, source)
    if len(lists) == len(_LISTS):
        for group, fields in _LISTS.items():
            items = d[group]
            found = iter_json_array(
                text, *lists[group], source, group, InstanceFileError,
                max_int_digits=_FILE_MAX_INT_DIGITS,
            )  # fmt: skip
            for i, item in enumerate(found):
                _check_shape(source, group, i, item, fields)
                items.append(item)
    else:  # one is no list: the body's checks say so, in the order they always have
        d.update({k: _value_at(text, *lists[k], source) for k in lists})
    return _body(d, source, name, meta, hardware)


def _readable_version(raw: bytes, members: list[tuple[str, int, int]]) -> bool:
    """Whether the file's (last) ``schema_version`` is one this slackswap reads."""
    spans = [(start, end) for key, start, end in members if key == "schema_version"]
    if not spans:
        return False
    try:
        version = json.loads(raw[spans[-1][0] : spans[-1][1]])
    except ValueError:
        return False
    return not isinstance(version, bool) and version in SUPPORTED_VERSIONS


def _utf8(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InstanceFileError(
            f"{source}: not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})"
        ) from None


def _char_offsets(raw: bytes, offsets: list[int]) -> dict[int, int]:
    """Character offsets of the byte ``offsets`` of the UTF-8 text ``raw`` (each at a character
    boundary: structure characters are ASCII), in one pass over the text."""
    out: dict[int, int] = {}
    at_byte = at_char = 0
    for b in sorted(set(offsets)):
        at_char += len(raw[at_byte:b].decode("utf-8"))
        at_byte = b
        out[b] = at_char
    return out


def _value_at(text: str, start: int, end: int, source: str) -> Any:
    return json_value_at(
        text, start, end, source, InstanceFileError, max_int_digits=_FILE_MAX_INT_DIGITS
    )
