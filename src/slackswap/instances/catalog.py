"""The catalog: bundled instance files and ``MODEL@GPU-LINK`` names built on demand.

``bert-large``, ``gpt2-xl``, ``llama-7b`` and ``vgg16`` resolve to files shipped in the package
(A100, PCIe 4.0); ``qwen3-1.7b``, ``qwen3-8b`` and ``llama-70b`` are built from their models.
Any model on any GPU and link resolves by a name such as ``llama-7b@h100-pcie5`` or
``gpt2-xl@a100`` (the GPU's default link), with other parameters after commas:
``llama-7b@h100-pcie5,seq=8192,batch=1``, ``gpt2-xl@a100-pcie4,layers=8,link-gbps=12``
(`slackswap.models.registry.instance_name`, the name a built instance carries). The models
are a registry (`slackswap.models.registry`): a module of `slackswap.models`, or another
package's module that its ``slackswap.models`` entry point names, adds one with
`register_model`.
"""

from __future__ import annotations

import math
import numbers
import os
import reprlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from slackswap.didyoumean import did_you_mean
from slackswap.errors import ArgumentError, ArgumentTypeError, UserError
from slackswap.instance import Instance
from slackswap.instances.format import load_instance
from slackswap.models.hardware import GPUS, LINKS
from slackswap.models.registry import (
    NAME_PARAMETERS,
    ModelBuilder,
    WorkloadModel,
    register_model,
    workload_models,
)

# The registry's names, importable from the catalog as before.
__all__ = [
    "BUNDLED",
    "DEFAULT_GPU",
    "DEFAULT_LINK",
    "ModelBuilder",
    "UnknownInstanceError",
    "WorkloadModel",
    "build_model",
    "bundled_path",
    "catalog_names",
    "load",
    "name_parameters",
    "parse_name",
    "register_model",
    "regenerate_bundled",
]

BUNDLED = ("bert-large", "gpt2-xl", "llama-7b", "vgg16")
#: Most layers a catalog model is built with: each layer adds operators and tensors (gpt2-xl at
#: 1,850 layers is a 16 MB instance, 40,710 operators), and a size past this would exhaust memory
#: before any check of the result could refuse it. Checked before anything is built.
MAX_LAYERS = 4096
DEFAULT_GPU, DEFAULT_LINK = "a100", "pcie4"


class LayersError(ValueError, UserError):
    """A model asked for with more layers than `MAX_LAYERS`."""


class UnknownInstanceError(KeyError, UserError):
    """Neither a catalog name nor an existing file."""

    def __str__(self) -> str:
        return str(self.args[0])


def build_model(
    model: str,
    gpu: str = DEFAULT_GPU,
    link: str | None = None,
    *,
    seq: int | None = None,
    batch: int | None = None,
    layers: int | None = None,
    link_bw_Bps: float | None = None,
    name: str | None = None,
) -> Instance:
    """Build an instance of a catalog model on a GPU and link, with optional overrides.

    A wrong type raises `ArgumentTypeError`, a value out of range `ArgumentError` (both a
    `UserError`), before anything is built."""
    _check_build_arguments(model, gpu, link, seq, batch, layers, link_bw_Bps, name)
    models = workload_models()
    entry = models.get(model.lower())
    if entry is None:
        raise UnknownInstanceError(
            f"unknown model {model!r}{did_you_mean(model, models)} (one of {', '.join(models)})"
        )
    if layers is not None and not isinstance(layers, bool) and layers > MAX_LAYERS:
        raise LayersError(
            f"layers = {layers} is more than the {MAX_LAYERS} layers a model may have"
        )
    return entry.build(
        gpu, link, seq=seq, batch=batch, layers=layers, link_bw_Bps=link_bw_Bps, name=name
    )


def _check_build_arguments(
    model: object,
    gpu: object,
    link: object,
    seq: object,
    batch: object,
    layers: object,
    link_bw_Bps: object,
    name: object,
) -> None:
    for what, v, optional in (("model", model, False), ("gpu", gpu, False), ("link", link, True),
                              ("name", name, True)):  # fmt: skip
        if not (isinstance(v, str) or (optional and v is None)):
            none = " or None" if optional else ""
            raise ArgumentTypeError(
                f"{what}: expected a name (a string){none}, got {reprlib.repr(v)}"
            )
    for what, v in (("seq", seq), ("batch", batch), ("layers", layers)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ArgumentTypeError(
                f"{what}: expected a positive integer or None, got {reprlib.repr(v)}"
            )
        if v < 1:
            raise ArgumentError(
                f"{what}: expected a positive integer or None, got {reprlib.repr(v)}"
            )
    if link_bw_Bps is not None:
        if isinstance(link_bw_Bps, bool) or not isinstance(link_bw_Bps, numbers.Real):
            raise ArgumentTypeError(
                f"link_bw_Bps: expected a positive number of bytes/s or None, got {reprlib.repr(link_bw_Bps)}"
            )
        try:
            bw = float(link_bw_Bps)
        except OverflowError:
            bw = math.inf
        if not (math.isfinite(bw) and bw > 0):
            raise ArgumentError(
                f"link_bw_Bps: expected a positive number of bytes/s or None, got {reprlib.repr(link_bw_Bps)}"
            )


def bundled_path(name: str) -> Path:
    return Path(str(resources.files("slackswap.instances") / "catalog" / f"{name}.json"))


def parse_name(name: str) -> tuple[str, str, str | None]:
    """``model@gpu-link[,key=value...]`` -> (model, gpu, link or None)."""
    model, _, hw = name.lower().partition(",")[0].partition("@")
    if not hw:
        return model, DEFAULT_GPU, DEFAULT_LINK
    gpu, _, link = hw.partition("-")
    if gpu not in GPUS:
        raise UnknownInstanceError(
            f"{name}: unknown GPU {gpu!r}{did_you_mean(gpu, GPUS)} (one of {', '.join(GPUS)})"
        )
    if link and link not in LINKS:
        raise UnknownInstanceError(
            f"{name}: unknown link {link!r}{did_you_mean(link, LINKS)} (one of {', '.join(LINKS)})"
        )
    return model, gpu, link or None


def name_parameters(name: str) -> dict[str, int | float]:
    """The ``build_model`` keywords a name's ``,key=value`` parameters set (after ``@GPU-LINK``):
    ``layers``, ``seq``, ``batch`` (positive integers) and ``link-gbps`` (GB/s per direction,
    as ``link_bw_Bps`` in bytes/s)."""
    out: dict[str, int | float] = {}
    for item in name.lower().split(",")[1:]:
        key, eq, text = item.strip().partition("=")
        if key not in NAME_PARAMETERS or not eq:
            raise UnknownInstanceError(
                f"{name}: {item!r} is not a parameter (KEY=VALUE, keys {', '.join(NAME_PARAMETERS)})"
            )
        if ("link_bw_Bps" if key == "link-gbps" else key) in out:
            raise UnknownInstanceError(f"{name}: {key} given twice")
        try:
            value = float(text) if key == "link-gbps" else int(text)
        except ValueError:
            value = 0
        if not 0 < value < math.inf:
            want = "a positive number (GB/s)" if key == "link-gbps" else "a positive integer"
            raise UnknownInstanceError(f"{name}: {key}={text!r}: expected {want}")
        if key == "link-gbps":
            out["link_bw_Bps"] = value * 1e9
        else:
            out[key] = value
    return out


def _int(parameters: dict[str, int | float], key: str) -> int | None:
    v = parameters.get(key)
    return None if v is None else int(v)


@lru_cache(maxsize=32)
def _resolve_name(name: str) -> Instance:
    model, gpu, link = parse_name(name)
    parameters = name_parameters(name)
    if model not in workload_models():
        raise UnknownInstanceError(
            f"{name!r} is neither a file nor a catalog name{did_you_mean(model, workload_models())} "
            f"(models: {', '.join(workload_models())}; add @GPU-LINK, e.g. llama-7b@h100-pcie5)"
        )
    plain = "@" not in name and not parameters
    if plain and model in BUNDLED and bundled_path(model).exists():
        return load_instance(bundled_path(model))
    canonical = model if plain else name.lower()
    try:
        return build_model(
            model, gpu, link, name=canonical, layers=_int(parameters, "layers"),
            seq=_int(parameters, "seq"), batch=_int(parameters, "batch"),
            link_bw_Bps=parameters.get("link_bw_Bps"),
        )  # fmt: skip
    except ValueError as exc:  # a parameter the model does not take
        raise UnknownInstanceError(f"{name}: {exc}") from None


def load(name_or_path: str | os.PathLike[str]) -> Instance:
    """An instance by catalog name (``gpt2-xl``, ``llama-7b@h100-pcie5``) or instance-file path."""
    s = str(name_or_path)
    if os.path.exists(s) or s.endswith(".json") or os.sep in s:
        return load_instance(s)
    return _resolve_name(s)


def catalog_names() -> list[str]:
    """The workload models' names, plug-ins' included."""
    return list(workload_models())


def regenerate_bundled(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Rewrite the bundled files from the models (run after a model change; see the README)."""
    out = []
    for model in BUNDLED:
        inst = build_model(model, DEFAULT_GPU, DEFAULT_LINK, name=model)
        path = Path(directory) / f"{model}.json" if directory else bundled_path(model)
        inst.save(path)
        out.append(path)
    return out
