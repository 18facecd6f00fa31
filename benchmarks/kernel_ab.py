"""Benchmark: two versions of the simulator kernel, side by side: same results, and which is faster.

A kernel change must leave every result bit-identical. This loads two copies of
``simulator/kernel.py`` (say, ``git show HEAD~1:src/slackswap/simulator/kernel.py > /tmp/old.py``
and the working copy), compiled without numba's cache, and

1. checks that both give the same per-plan outputs on a grid of catalog instances, budgets
   (100% down to 5% of the peak) and compiled runtimes, for the static solvers' plans, random
   plans and mutants of the former, and the same recorded timelines on a sample of them;
2. times both, interleaved (the VM's speed drifts, so only a ratio measured in one sitting
   means anything), on GA-like plans: SlackSwap's plan for GPT-2 XL at 20% with a few genes
   changed in a window of 8, as the genetic search makes them.

    .venv/bin/python benchmarks/kernel_ab.py OLD_KERNEL.py NEW_KERNEL.py [--rounds 12]
        [--models bert-large,gpt2-xl,llama-7b,vgg16,qwen3-1.7b] [--no-check]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

import slackswap
from slackswap.instance import Instance
from slackswap.plan import Budget
from slackswap.simulator.policies import get_runtime
from slackswap.simulator.static import static_for
from slackswap.solvers.deadline import Deadline
from slackswap.solvers.genetic.ga import seed_plans

RUNTIMES = ("barrier-free", "barriers", "layer-prefetch", "sync")
FRACTIONS = (1.0, 0.6, 0.4, 0.2, 0.1, 0.05)
RECORD_CAP = 20_000  # timeline rows per lane, ample for one plan of the catalog's models


def load_kernel(path: str, tmp: Path) -> ModuleType:
    """Import a kernel file as its own module, with numba's on-disk cache switched off (two
    copies of one module name would otherwise share cache entries)."""
    text = Path(path).read_text().replace('"cache": True', '"cache": False')
    copy = tmp / f"kernel_{len(list(tmp.iterdir()))}.py"
    copy.write_text(text)
    spec = importlib.util.spec_from_file_location(copy.stem, copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(
    k: ModuleType, inst: Instance, acts: np.ndarray, budget: int, runtime: str, cap: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-plan outputs, the timeline buffer and its row counts (one plan recorded if cap)."""
    s = static_for(inst)
    fw, hr, la = get_runtime(runtime).code()
    w = k.new_work(s.so.shape[1] - 1, inst.n_tensors)
    w.i[k.I_REC] = 1 if cap else 0
    out_f = np.zeros((len(acts), 6))
    out_i = np.zeros((len(acts), 9), dtype=np.int64)
    rec = k.new_record(cap)
    k.run_batch(
        s.so, s.base, s.st, s.trec, s.idx, s.hw, s.n_fwd, acts, budget, fw, hr, la,
        w.wt, w.fl, w.wo, w.f, w.i, rec, out_f, out_i, 0, len(acts),
    )  # fmt: skip
    return out_f, out_i, rec, w.i[k.I_NC : k.I_NM + 1].copy()


def plans_for(inst: Instance, budget: Budget, rng: np.random.Generator) -> np.ndarray:
    """The static solvers' plans, 150 random plans (10 with recomp where nothing can rebuild)
    and 10 mutants of each solver plan (5% of the genes redrawn)."""
    rebuildable = np.isfinite(inst.tensor_recompute_s)
    seeds = np.asarray(
        [a for _, a in seed_plans(inst, budget, deadline=Deadline.never(), seed=0)], np.int8
    )
    rand = rng.integers(0, 3, size=(150, inst.n_tensors)).astype(np.int8)
    rand[10:, ~rebuildable] = np.minimum(rand[10:, ~rebuildable], 1)
    mut = np.repeat(seeds, 10, axis=0)
    flip = rng.random(mut.shape) < 0.05
    mut[flip] = rng.integers(0, 3, size=int(flip.sum()))
    mut[:, ~rebuildable] = np.minimum(mut[:, ~rebuildable], 1)
    return np.ascontiguousarray(np.vstack([seeds, rand, mut]))


def how(fa: np.ndarray, ia: np.ndarray, fb: np.ndarray, ib: np.ndarray) -> str:
    """How the second kernel's per-plan results differ from the first's: plans whose outputs
    differ, plans that turn feasible / infeasible, and among plans feasible under both, how many
    get a shorter / longer step and the largest changes of the compute delay (ms)."""
    rows = ~(np.all(fa == fb, axis=1) & np.all(ia == ib, axis=1))
    bad_a, bad_b = ia[:, 0] != 0, ib[:, 0] != 0
    both = ~bad_a & ~bad_b
    d = (fb[:, 0] - fa[:, 0])[both] * 1e3
    text = (
        f"{int(rows.sum())} of {len(rows)} plans differ; {int((bad_a & ~bad_b).sum())} turn "
        f"feasible, {int((~bad_a & bad_b).sum())} infeasible; {int((d < 0).sum())} faster, "
        f"{int((d > 0).sum())} slower"
    )
    if d.size and (d != 0).any():
        text += f" (step change {d.min():+.3f} .. {d.max():+.3f} ms)"
    return text


def check(a: ModuleType, b: ModuleType, models: list[str]) -> int:
    """Count the (instance, budget, runtime) cases where the two kernels differ."""
    rng = np.random.default_rng(0)
    cases = differ = events = 0
    for name in models:
        inst = slackswap.load(name)
        for frac in FRACTIONS:
            budget = Budget.fraction(frac)
            acts = plans_for(inst, budget, rng)
            nbytes = budget.bytes_for(inst)
            for runtime in RUNTIMES:
                fa, ia, _, _ = run(a, inst, acts, nbytes, runtime)
                fb, ib, _, _ = run(b, inst, acts, nbytes, runtime)
                same = np.array_equal(fa, fb) and np.array_equal(ia, ib)
                for p in range(0, len(acts), 37):
                    _, _, ra, na = run(a, inst, acts[p : p + 1], nbytes, runtime, RECORD_CAP)
                    _, _, rb, nb = run(b, inst, acts[p : p + 1], nbytes, runtime, RECORD_CAP)
                    events += int(na.sum())
                    same = same and np.array_equal(na, nb)
                    same = same and all(
                        np.array_equal(ra[lane, : na[lane]], rb[lane, : nb[lane]])
                        for lane in range(3)
                    )
                cases += 1
                if not same:
                    differ += 1
                    print(f"DIFFER: {name} at {frac:.0%}, runtime {runtime}: {how(fa, ia, fb, ib)}")
    print(f"{cases} cases ({len(models)} instances x {len(FRACTIONS)} budgets x "
          f"{len(RUNTIMES)} runtimes), {differ} differ; {events:,} timeline rows compared")  # fmt: skip
    return differ


def ga_like_plans(n: int, rng: np.random.Generator) -> tuple[Instance, np.ndarray, int]:
    inst = slackswap.load("gpt2-xl")
    budget = Budget.fraction(0.2)
    base = np.asarray(seed_plans(inst, budget, deadline=Deadline.never(), seed=0)[0][1], np.int8)
    arity = np.where(np.isfinite(inst.tensor_recompute_s), 3, 2)
    acts = np.repeat(base[None], n, axis=0)
    for row in acts:
        start = int(rng.integers(0, inst.n_tensors - 8))
        for t in range(start, start + 8):
            if rng.random() < 0.25:
                row[t] = (row[t] + rng.integers(1, arity[t])) % arity[t]
    return inst, acts, budget.bytes_for(inst)


def time_both(a: ModuleType, b: ModuleType, rounds: int) -> None:
    inst, acts, nbytes = ga_like_plans(400, np.random.default_rng(1))
    for k in (a, b):
        run(k, inst, acts[:3], nbytes, "barrier-free")  # compile outside the clock
    us: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(rounds):
        for label, k in (("old", a), ("new", b)):
            t0 = time.perf_counter()
            run(k, inst, acts, nbytes, "barrier-free")
            us[label].append((time.perf_counter() - t0) / len(acts) * 1e6)
    best = {k: min(v) for k, v in us.items()}
    med = {k: float(np.median(v)) for k, v in us.items()}
    print(f"GPT-2 XL 20%, 400 GA-like plans, {rounds} interleaved rounds, us per plan:")
    for label in ("old", "new"):
        print(f"  {label}: best {best[label]:.2f}  median {med[label]:.2f}")
    print(
        f"  new / old: best {best['new'] / best['old']:.3f}, median {med['new'] / med['old']:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--models", default="bert-large,gpt2-xl,llama-7b,vgg16,qwen3-1.7b")
    ap.add_argument("--no-check", action="store_true", help="time only")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = load_kernel(args.old, Path(tmp)), load_kernel(args.new, Path(tmp))
        differ = 0 if args.no_check else check(a, b, args.models.split(","))
        time_both(a, b, args.rounds)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
