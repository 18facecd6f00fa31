"""Load ``SCRIPT_OR_MODULE:FACTORY`` and check what the factory returns: (model, inputs[, loss])."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from slackswap.errors import UserError


class FactoryError(UserError):
    """A bad ``SCRIPT_OR_MODULE:FACTORY`` spec or a factory that returns the wrong thing."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _load_module(where: str) -> ModuleType:
    path = Path(where)
    if where.endswith(".py") or path.is_file():
        if not path.is_file():
            raise FactoryError(f"{where}: no such script")
        spec = importlib.util.spec_from_file_location(
            f"_slackswap_profile_{abs(hash(str(path.resolve())))}", path
        )
        if spec is None or spec.loader is None:
            raise FactoryError(f"{where}: cannot load as a Python script")
        module = importlib.util.module_from_spec(spec)
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            # As ``python SCRIPT`` does: the script (and its factory, later) may import neighbours.
            sys.path.insert(0, folder)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - user code: report it in one line
            raise FactoryError(f"{where}: loading the script raised {_one_line(exc)}") from exc
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as ``python -m`` does: modules of the working directory
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise FactoryError(f"{where}: no such module or script ({_one_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001
        raise FactoryError(f"{where}: importing the module raised {_one_line(exc)}") from exc


def load_factory(spec: str) -> Callable[[], Any]:
    """The callable named by ``SCRIPT_OR_MODULE:FACTORY`` (a ``.py`` path or a dotted module)."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise FactoryError(
            f"{spec!r}: expected SCRIPT_OR_MODULE:FACTORY, e.g. train.py:make_model or "
            "mypkg.models:make_model"
        )
    obj: Any = _load_module(where)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise FactoryError(f"{spec}: {where} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise FactoryError(f"{spec}: {attr!r} is a {type(obj).__name__}, not a callable")
    return obj  # type: ignore[no-any-return]


def call_factory(spec: str) -> tuple[Any, tuple[Any, ...], Callable[[Any], Any] | None]:
    """Call the factory of ``spec``; returns (model, inputs, loss_fn or None), checked."""
    import torch

    factory = load_factory(spec)
    try:
        made = factory()
    except Exception as exc:  # noqa: BLE001
        raise FactoryError(f"{spec}: the factory raised {_one_line(exc)}") from exc
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise FactoryError(
            f"{spec}: the factory returned {type(made).__name__}; expected (model, inputs) or "
            "(model, inputs, loss_fn)"
        )
    model, inputs = made[0], made[1]
    loss_fn = made[2] if len(made) == 3 else None
    if not isinstance(model, torch.nn.Module):
        raise FactoryError(
            f"{spec}: the factory's model is a {type(model).__name__}, not a torch.nn.Module"
        )
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, list | tuple) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise FactoryError(
            f"{spec}: the factory's inputs must be a tensor or a tuple of tensors, got "
            f"{type(inputs).__name__}"
        )
    if loss_fn is not None and not callable(loss_fn):
        raise FactoryError(f"{spec}: the factory's loss_fn is a {type(loss_fn).__name__}")
    return model, tuple(inputs), loss_fn
