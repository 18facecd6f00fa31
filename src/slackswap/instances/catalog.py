"""The catalog: bundled instance files and ``MODEL@GPU-LINK`` names built on demand.

``bert-large``, ``gpt2-xl``, ``llama-7b`` and ``vgg16`` resolve to files shipped in the package
(A100, PCIe 4.0); ``qwen3-1.7b``, ``qwen3-8b`` and ``llama-70b`` are built from their models.
Any model on any GPU and link resolves by a name such as ``llama-7b@h100-pcie5`` or
``gpt2-xl@a100`` (the GPU's default link). The models are a registry: another package adds one
with `register_model` from the module its ``slackswap.models`` entry point names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Protocol

from slackswap import plugins
from slackswap.instances.format import load_instance
from slackswap.models.hardware import GPUS, LINKS
from slackswap.models.transformer import TRANSFORMERS, build_transformer, transformer_config
from slackswap.models.vgg import build_vgg, vgg_config
from slackswap.problem import Instance, UserError

BUNDLED = ("bert-large", "gpt2-xl", "llama-7b", "vgg16")
DEFAULT_GPU, DEFAULT_LINK = "a100", "pcie4"


class UnknownInstanceError(KeyError, UserError):
    """Neither a catalog name nor an existing file."""

    def __str__(self) -> str:
        return str(self.args[0])


class ModelBuilder(Protocol):
    """Builds a workload model's instance on a GPU and link (None: the GPU's default link);
    ``seq``/``batch``/``layers`` override the model's defaults, None keeps them; a builder
    refuses an override its model does not take with a ValueError."""

    def __call__(
        self,
        gpu: str,
        link: str | None,
        *,
        seq: int | None,
        batch: int | None,
        layers: int | None,
        link_bw_Bps: float | None,
        name: str | None,
    ) -> Instance: ...


@dataclass(frozen=True)
class WorkloadModel:
    name: str
    build: ModelBuilder
    description: str = ""


_MODELS: dict[str, WorkloadModel] = {}


def register_model(name: str, build: ModelBuilder, description: str = "") -> WorkloadModel:
    """Add a workload model to the catalog (``NAME`` and ``NAME@GPU-LINK`` then resolve to it);
    refuses a name already taken, or one that is not lower case or holds ``@``."""
    if name != name.lower() or "@" in name or not name:
        raise ValueError(f"workload model name {name!r}: use lower case, without '@'")
    if name in _MODELS:
        raise ValueError(f"workload model {name!r} is already registered")
    model = WorkloadModel(name, build, description)
    _MODELS[name] = model
    return model


def _models() -> dict[str, WorkloadModel]:
    plugins.load_group(plugins.MODELS, _MODELS.keys)  # once per process; raises on a bad one
    return _MODELS


def _transformer(model: str) -> ModelBuilder:
    def build(
        gpu: str,
        link: str | None,
        *,
        seq: int | None,
        batch: int | None,
        layers: int | None,
        link_bw_Bps: float | None,
        name: str | None,
    ) -> Instance:
        cfg = transformer_config(model, seq=seq, batch=batch, layers=layers)
        return build_transformer(cfg, gpu, link, name=name, link_bw_Bps=link_bw_Bps)

    return build


def _vgg16(
    gpu: str,
    link: str | None,
    *,
    seq: int | None,
    batch: int | None,
    layers: int | None,
    link_bw_Bps: float | None,
    name: str | None,
) -> Instance:
    if seq is not None or layers is not None:
        raise ValueError("vgg16 takes no --seq or --layers")
    return build_vgg(vgg_config(batch=batch), gpu, link, name=name, link_bw_Bps=link_bw_Bps)


for _name in TRANSFORMERS:
    register_model(_name, _transformer(_name), "transformer (models/transformer.py)")
register_model("vgg16", _vgg16, "VGG-16 (models/vgg.py)")


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
    """Build an instance of a catalog model on a GPU and link, with optional overrides."""
    models = _models()
    entry = models.get(model.lower())
    if entry is None:
        raise UnknownInstanceError(f"unknown model {model!r} (one of {', '.join(models)})")
    return entry.build(
        gpu, link, seq=seq, batch=batch, layers=layers, link_bw_Bps=link_bw_Bps, name=name
    )


def bundled_path(name: str) -> Path:
    return Path(str(resources.files("slackswap.instances") / "catalog" / f"{name}.json"))


def parse_name(name: str) -> tuple[str, str, str | None]:
    """``model@gpu-link`` -> (model, gpu, link or None)."""
    model, _, hw = name.lower().partition("@")
    if not hw:
        return model, DEFAULT_GPU, DEFAULT_LINK
    gpu, _, link = hw.partition("-")
    if gpu not in GPUS:
        raise UnknownInstanceError(f"{name}: unknown GPU {gpu!r} (one of {', '.join(GPUS)})")
    if link and link not in LINKS:
        raise UnknownInstanceError(f"{name}: unknown link {link!r} (one of {', '.join(LINKS)})")
    return model, gpu, link or None


@lru_cache(maxsize=32)
def _resolve_name(name: str) -> Instance:
    model, gpu, link = parse_name(name)
    if model not in _models():
        raise UnknownInstanceError(
            f"{name!r} is neither a file nor a catalog name (models: {', '.join(_models())}; "
            "add @GPU-LINK, e.g. llama-7b@h100-pcie5)"
        )
    if "@" not in name and model in BUNDLED and bundled_path(model).exists():
        return load_instance(bundled_path(model))
    canonical = model if "@" not in name else name.lower()
    return build_model(model, gpu, link, name=canonical)


def load(name_or_path: str | os.PathLike[str]) -> Instance:
    """An instance by catalog name (``gpt2-xl``, ``llama-7b@h100-pcie5``) or instance-file path."""
    s = str(name_or_path)
    if os.path.exists(s) or s.endswith(".json") or os.sep in s:
        return load_instance(s)
    return _resolve_name(s)


def catalog_names() -> list[str]:
    """The workload models' names, plug-ins' included."""
    return list(_models())


def regenerate_bundled(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Rewrite the bundled files from the models (run after a model change; see the README)."""
    out = []
    for model in BUNDLED:
        inst = build_model(model, DEFAULT_GPU, DEFAULT_LINK, name=model)
        path = Path(directory) / f"{model}.json" if directory else bundled_path(model)
        inst.save(path)
        out.append(path)
    return out
