"""slackswap: plan activation memory in DNN training (keep, swap to host, or recompute).

The public API loads lazily, so ``import slackswap`` stays fast and optional dependencies load
only when used::

    inst = slackswap.load("gpt2-xl")
    plan = slackswap.Plan(inst, actions)
    result = slackswap.simulate(inst, plan, 0.5)
    record = slackswap.solve(inst, 0.5, solver="slackswap")
"""

# First, before any other import: when this is the `slackswap` command (``python -m slackswap``
# or the console script, which both import the package first), a Ctrl-C from here on ends with
# one line and exit status 130, not a traceback from whatever was importing.
from slackswap._startup import take_sigint_if_command

take_sigint_if_command()

import importlib  # noqa: E402
from typing import Any  # noqa: E402

__version__ = "0.1.0"

_LAZY = {
    "load": "slackswap.instances.catalog:load",
    "build_model": "slackswap.instances.catalog:build_model",
    "load_instance": "slackswap.instances.format:load_instance",
    "Instance": "slackswap.instance:Instance",
    "Hardware": "slackswap.instance:Hardware",
    "InstanceError": "slackswap.errors:InstanceError",
    "UserError": "slackswap.errors:UserError",
    "Plan": "slackswap.plan:Plan",
    "Budget": "slackswap.plan:Budget",
    "KEEP": "slackswap.plan:KEEP",
    "SWAP": "slackswap.plan:SWAP",
    "RECOMP": "slackswap.plan:RECOMP",
    "simulate": "slackswap.simulator:simulate",
    "simulate_many": "slackswap.simulator:simulate_many",
    "SimResult": "slackswap.simulator:SimResult",
    "solve": "slackswap.solvers:solve",
    "run": "slackswap.solvers:run",
    "RunRecord": "slackswap.solvers:RunRecord",
    "Status": "slackswap.solvers:Status",
    "compile": "slackswap.compile:compile",
    "warm_up": "slackswap.analysis.warmup:warm_up",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'slackswap' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
