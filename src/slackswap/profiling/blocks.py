"""Find a model's blocks (layers): its repeated child modules, or the ones the user names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slackswap.errors import UserError


def _n_params(m: Any) -> int:
    return sum(p.numel() for p in m.parameters())


def find_blocks(model: Any, spec: str | Sequence[Any] | None = None) -> list[Any]:
    """The block modules of ``model`` (a ``torch.nn.Module``), in registration order.

    ``spec`` None: the largest group of two or more sibling modules of one class (children of a
    ``ModuleList`` or ``Sequential`` first, then most parameters, most members, the shallowest),
    e.g. the layers of a transformer's ``ModuleList`` or the stages of a CNN's ``Sequential``;
    the model's direct children when no class repeats. A string: a module path whose children are the blocks (``"blocks"``), or a
    class name whose instances are (``"Block"``). A sequence: those modules (empty: no blocks).
    """
    named = list(model.named_modules())
    if spec is not None and not isinstance(spec, str):
        mods = list(spec)
        ids = {id(m) for _, m in named}
        for m in mods:
            if id(m) not in ids:
                raise UserError(f"blocks: {type(m).__name__} is not a submodule of the model")
        return mods
    if isinstance(spec, str):
        by_path = dict(named)
        if spec in by_path and spec != "":
            children = list(by_path[spec].children())
            if children:
                return children
        outer = [m for n, m in named if type(m).__name__ == spec and m is not model]
        # Only the outermost instances: a block class may nest a module of the same class.
        inner = {id(c) for m in outer for c in m.modules() if c is not m}
        chosen = [m for m in outer if id(m) not in inner]
        if not chosen:
            raise UserError(
                f"blocks: {spec!r} is neither a module path with children nor a module class "
                f"of {type(model).__name__}"
            )
        return chosen
    import torch

    containers = (torch.nn.ModuleList, torch.nn.Sequential)
    best: tuple[bool, int, int, int] | None = None
    chosen = []
    for path, parent in named:
        groups: dict[type, list[Any]] = {}
        for child in parent.children():
            groups.setdefault(type(child), []).append(child)
        depth = path.count(".") + (1 if path else 0)
        for members in groups.values():
            if len(members) < 2:
                continue
            score = (
                isinstance(parent, containers),
                sum(_n_params(m) for m in members),
                len(members),
                -depth,
            )
            if best is None or score > best:
                best, chosen = score, members
    if chosen:
        return chosen
    return list(model.children())
