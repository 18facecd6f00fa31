"""The workload-model registry: model name -> builder of its instance on a GPU and link.

The catalog (`slackswap.instances.catalog`) resolves ``NAME`` and ``NAME@GPU-LINK`` through it.
It fills itself on first use: every public module of `slackswap.models` is imported (a module
that defines a workload registers it with `register_model`, so a new model is one new module
there), then the ``slackswap.models`` entry points of other packages (`slackswap.plugins`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from slackswap import plugins
from slackswap.instance import Instance

__all__ = [
    "NAME_PARAMETERS",
    "ModelBuilder",
    "WorkloadModel",
    "instance_name",
    "register_model",
    "workload_models",
]

#: The parameters a catalog name carries after ``MODEL@GPU-LINK``, in the order it writes them.
NAME_PARAMETERS = ("layers", "seq", "batch", "link-gbps")


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


def instance_name(
    model: str,
    gpu: str,
    link: str,
    *,
    layers: int | None = None,
    seq: int | None = None,
    batch: int | None = None,
    link_bw_Bps: float | None = None,
) -> str:
    """The catalog name of a built instance: ``MODEL@GPU-LINK``, then ``,key=value`` for each
    parameter given, e.g. ``llama-7b@h100-pcie5,seq=8192,batch=1`` or
    ``gpt2-xl@a100-pcie4,layers=8,link-gbps=12``; a builder passes only the parameters that
    differ from its model's defaults, so two different instances never share a name, and the
    catalog (`slackswap.instances.catalog.load`) builds the same instance back from it.
    """
    values: dict[str, object] = {"layers": layers, "seq": seq, "batch": batch}
    if link_bw_Bps is not None:
        values["link-gbps"] = format(link_bw_Bps / 1e9, ".12g")  # GB/s; 12 digits: no collisions
    extras = "".join(f",{k}={values[k]}" for k in NAME_PARAMETERS if values.get(k) is not None)
    return f"{model}@{gpu}-{link}{extras}"


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


def workload_models() -> dict[str, WorkloadModel]:
    """Every registered workload model by name: this package's, then the plug-ins'."""
    plugins.import_modules(__package__ or "slackswap.models", skip={"registry"})
    plugins.load_group(plugins.MODELS, _MODELS.keys)  # once per process; raises on a bad one
    return _MODELS
