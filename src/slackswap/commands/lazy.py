"""The command line's one lazy boundary: a command's module is imported when that command is
chosen (to run it or to print its help), never to build the parser.

Below this boundary every import sits at the top of its module, so a reader (or a tool) can
follow a command's arguments straight to the solvers and the simulator; above it, ``slackswap
--help`` and ``--version`` load nothing of numba, scipy, pandas or matplotlib. The idea is
Optuna's lazy imports: a name that stands for a module until it is used.

`LazyCommands` is the parser's subcommand action (``add_subparsers(action=LazyCommands)``).
A command added with `LazyCommands.add_lazy` is a stub parser (its name and one-line help)
until argparse dispatches to it; then its module is imported and either its
``register(subparsers)`` (a command module) or its ``add_arguments(parser)`` and ``main(args)``
(a report under `slackswap.reproduce`) build the real parser.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any

#: Called with each parser a lazy command loads and its command line (``slackswap solve``).
LoadHook = Callable[[argparse.ArgumentParser, str], None]


class LazyCommands(argparse._SubParsersAction):
    """Subcommands whose modules are imported only when chosen."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._modules: dict[str, str] = {}
        self.on_load: LoadHook | None = None

    def add_lazy(self, name: str, module: str, help: str) -> argparse.ArgumentParser:
        """Add ``name`` as a stub whose module is imported when it is chosen. ``help`` is the
        one line the parent's help shows (a test holds it equal to the module's own)."""
        # argparse %-formats help strings (not descriptions): "40% of" must be escaped.
        stub = self.add_parser(name, help=help.replace("%", "%%"), description=help)
        self._modules[name] = module
        return stub

    def lazy_names(self) -> dict[str, str]:
        """The commands not loaded yet, with their modules."""
        return dict(self._modules)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, list | tuple) and values  # nargs=PARSER: the name, then its args
        self.load(str(values[0]))
        super().__call__(parser, namespace, values, option_string)

    def load(self, name: str) -> argparse.ArgumentParser:
        """The full parser of command ``name``, importing its module on first use. A module
        that fails to import is an error, never a command quietly missing."""
        module_name = self._modules.pop(name, None)
        if module_name is None:
            return self._name_parser_map[name]
        module = importlib.import_module(module_name)
        if hasattr(module, "register"):
            scratch = LazyCommands(
                option_strings=[], prog=self._prog_prefix, parser_class=self._parser_class
            )
            module.register(scratch)
            full = scratch._name_parser_map[name]
            self._name_parser_map[name] = full
        else:
            full = self._name_parser_map[name]
            module.add_arguments(full)
            full.set_defaults(func=module.main)
        for action in full._actions:  # nested lazy commands (reproduce REPORT) report too
            if isinstance(action, LazyCommands):
                action.on_load = self.on_load
        if self.on_load is not None:
            self.on_load(full, f"{self._prog_prefix} {name}")
        return full

    def load_all(self) -> None:
        """Load every command and, recursively, theirs (tests and documentation walk them)."""
        for name in list(self._name_parser_map):
            full = self.load(name)
            for action in full._actions:
                if isinstance(action, LazyCommands):
                    action.load_all()
