"""`ModuleContext`: where in the model a step is (module path, block), for the profiler and the
runtime alike.

Module forward hooks give the module path and the block in the forward pass; in backward, the
autograd node being run (`torchapi.current_node_key`) is mapped back to the forward context that
created it, through its sequence number. A block call's inputs and outputs are numbered when it
is entered and left (`ValueNumbering.value_of`), so a live step numbers its values in the order
its profile did.

Imported only after torch has been found.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from slackswap.torchstep.torchapi import current_node_key, node_key
from slackswap.torchstep.values import ValueNumbering, tensors

__all__ = ["Context", "ModuleContext"]

Context = tuple[str, int, bool]  # module path, last block entered, inside it


class ModuleContext:
    """Hooks a model's modules; `forward_context` and `backward_context` say where the step is.

    ``on_block_input`` / ``on_block_output``: called with (value, block) for each tensor a block
    call takes or returns. ``block_modules``: the module path of each block call, in order.
    """

    def __init__(
        self,
        numbering: ValueNumbering,
        *,
        on_block_input: Callable[[int, int], object] | None = None,
        on_block_output: Callable[[int, int], object] | None = None,
    ):
        self.numbering = numbering
        self.on_block_input = on_block_input
        self.on_block_output = on_block_output
        self.block_modules: list[str] = []
        self.block = -1
        self.in_block = False
        self.model_done = False
        self._module_stack: list[str] = []
        # node sequence nr -> (module, block, in_block) of the forward operator that made it
        self._fwd_context: dict[int, Context] = {}
        self._pending: list[tuple[weakref.ref[torch.Tensor], Context]] = []
        self._last_bwd_context: Context | None = None
        self._hooks: list[Any] = []
        self._block_ids: set[int] = set()

    def attach(self, model: torch.nn.Module, blocks: list[torch.nn.Module]) -> None:
        """Hook every module of ``model``; ``blocks`` are the block modules."""
        self._block_ids = {id(m) for m in blocks}
        names = {id(m): n for n, m in model.named_modules()}
        for m in model.modules():
            name = names[id(m)]
            self._hooks.append(m.register_forward_pre_hook(self._pre_hook(name, m)))
            self._hooks.append(
                m.register_forward_hook(self._post_hook(name, m, m is model), always_call=True)
            )

    def add_hook(self, handle: Any) -> None:
        """Remove ``handle`` with the module hooks (`remove_hooks`)."""
        self._hooks.append(handle)

    def remove_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def _pre_hook(self, name: str, module: torch.nn.Module):  # type: ignore[no-untyped-def]
        def hook(mod: torch.nn.Module, args: Any) -> None:
            self._module_stack.append(name)
            if id(module) in self._block_ids and not self.in_block:
                self.block = len(self.block_modules)
                self.in_block = True
                self.block_modules.append(name)
                for t in tensors(args):
                    v = self.numbering.value_of(t)
                    if v is not None and self.on_block_input is not None:
                        self.on_block_input(v, self.block)

        return hook

    def _post_hook(self, name: str, module: torch.nn.Module, root: bool):  # type: ignore[no-untyped-def]
        def hook(mod: torch.nn.Module, args: Any, output: Any) -> None:
            if self._module_stack and self._module_stack[-1] == name:
                self._module_stack.pop()
            if id(module) in self._block_ids and self.in_block and self.block >= 0:
                if self.block_modules[self.block] == name:
                    for t in tensors(output):
                        v = self.numbering.value_of(t)
                        if v is not None and self.on_block_output is not None:
                            self.on_block_output(v, self.block)
                    self.in_block = False
            if root:
                self.model_done = True

        return hook

    def forward_context(self) -> Context:
        if self._module_stack:
            module = self._module_stack[-1] or "model"
        else:
            module = "loss" if self.model_done else "input"
        return module, self.block, self.in_block

    def backward_context(self) -> Context:
        node = current_node_key()
        ctx = None
        if node >= 0:
            ctx = self._fwd_context.get(node)
        if ctx is None:
            # Engine work outside any recorded node (the seed gradient, AccumulateGrad): it
            # belongs with the operator that ran just before it.
            ctx = self._last_bwd_context or ("loss", self.block, self.in_block)
        self._last_bwd_context = ctx
        return ctx

    def note_outputs(self, outputs: Iterable[torch.Tensor], ctx: Context) -> None:
        """Forward: the tensors a call made or wrote in context ``ctx`` (their autograd node
        is known once the call has returned, `resolve_grad_fns`)."""
        self._pending.extend((weakref.ref(t), ctx) for t in outputs)

    def resolve_grad_fns(self) -> None:
        """Map the autograd nodes of the last forward outputs to their forward context."""
        for ref, ctx in self._pending:
            t = ref()
            fn = None if t is None else t.grad_fn
            if fn is not None:
                self._fwd_context.setdefault(node_key(fn), ctx)
        self._pending.clear()

    def release(self) -> None:
        self._pending.clear()
