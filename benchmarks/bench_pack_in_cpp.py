"""What a fast step's first pack of a swapped or recomputed tensor would cost in C++: the same
work (`pack_in_cpp.cpp`: the pack program's checks, the entry, the storage counted until freed,
a handle), timed inside the training step beside the Python pack that really runs.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_pack_in_cpp.py

A measurement for deciding where the hooks' per-tensor work should run, not a runtime: the
step still runs `FastStep._pack`. Per model of `bench_hook_python` (SlackSwap at 50% of P, one
thread), each first pack of a swapped or recomputed tensor first calls the C++ function on the
same tensor at the same pack position, then the Python pack; each call is timed on
``time.perf_counter_ns`` (the C++ call's time includes its call from Python). Compiles the C++
file at its first run (about 40 s; `torch.utils.cpp_extension.load`, cached by torch in
``~/.cache/torch_extensions``): needs a C++ compiler and Python's headers. Prints, per model,
each kind's calls per step and us per call in C++ and in Python (the Python swaps include their
copy to the host).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def measure(model: int, steps: int) -> None:
    from bench_hook_python import slackswap_at_half
    from torch.utils.cpp_extension import load

    from slackswap.runtime.training import fast

    cpp = load("slackswap_bench_pack_in_cpp", [str(HERE / "pack_in_cpp.cpp")], extra_cflags=["-O2"])
    _, case, step, planned = slackswap_at_half(model)

    def run(n: int, before: Any = None) -> None:
        for _ in range(n):
            for q in case.model.parameters():
                q.grad = None
            if before is not None:
                before()
            with step():
                case.loss_fn(case.model(*case.inputs)).backward()

    run(2)  # the plan's pack program is written at its first fast step
    learned = planned._learned
    producer = [int(p) for p in case.inst.tensor_producer]
    packs = [(list(shape), dtype, nbytes, max(i, 0), producer[i] if i >= 0 else 0)
             for shape, dtype, nbytes, i, *_ in learned.program]  # fmt: skip
    transient = [int(x) for x in planned._plan_facts().transient]

    def start() -> None:
        cpp.start(packs, len(learned.actions), transient)

    kinds = {fast.SWAP_FIRST: "swap, first", fast.RECOMP_FIRST: "recompute, first"}
    clock = time.perf_counter_ns
    spent: dict[str, int] = {}
    calls: dict[str, int] = {}
    pack = fast.FastStep._pack

    def both(self: Any, t: Any) -> Any:
        k = self.pos
        program = self._program
        kind = kinds.get(program[k][4]) if k < len(program) and not self._saving_inputs[0] else None
        if kind is None:
            return pack(self, t)
        t0 = clock()
        cpp.pack_at(k, t)
        t1 = clock()
        out = pack(self, t)
        t2 = clock()
        for key, took in ((f"{kind}, C++", t1 - t0), (f"{kind}, Python", t2 - t1)):
            spent[key] = spent.get(key, 0) + took
            calls[key] = calls.get(key, 0) + 1
        return out

    fast.FastStep._pack = both  # type: ignore[method-assign]
    try:
        run(3, start)
        spent.clear()
        calls.clear()
        run(steps, start)
    finally:
        fast.FastStep._pack = pack  # type: ignore[method-assign]
    print(f"{case.label}:")
    for key in sorted(spent):
        print(
            f"  {key}: {calls[key] / steps:.1f} a step, {spent[key] / calls[key] / 1e3:.2f} us each"
        )


def main() -> None:
    import sys

    sys.path.insert(0, str(HERE))
    from bench_hook_python import MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    for m in range(len(MODELS)):
        measure(m, args.steps)


if __name__ == "__main__":
    main()
