"""The training path on vision models nobody tuned it for (torchvision's and timm's): every
static solver's plan, fast steps against unplanned training, bit for bit.

    .venv/bin/pip install torchvision timm   # not dependencies of slackswap
    PYTHONPATH=src .venv/bin/python benchmarks/heldout_vision.py
    PYTHONPATH=src .venv/bin/python benchmarks/heldout_vision.py --models tv_swin_t --steps 3

Per model (built from its constructor at a small size, no weights downloaded, in training mode
with dropout and stochastic depth where the model has them), profiled on one batch of images
with cross-entropy over 10 classes: each static solver at each budget (``--budgets``, fractions
of P; a solver that finds no plan there is run again at the smallest budget it reports), every
distinct plan the simulator finds feasible, as in `heldout_training.py`: ``--steps`` AdamW
steps under `prepare`, a new batch each step, against the same steps unplanned from the same
start and RNG seeds. Prints a Markdown row per plan (`heldout_training.plan_row`). Exit status
1 when a plan's training differs or raises.

The models cover what text models do not: batch-norm (running statistics a rebuild must put
back), in-place activations (``hardswish_``, ``relu_``), squeeze-and-excitation, stochastic
depth (random per sample), shifted windows (``roll``, padding), channel shuffles, dense
concatenation under torchvision's own ``memory_efficient`` checkpointing, attention with a
learned bias table (LeViT) and pooling mixers.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import heldout_training as ht  # noqa: E402

from slackswap.profiling import profile_step  # noqa: E402

CLASSES = 10


def import_vision() -> tuple[Any, Any]:
    """torchvision and timm. A torchvision wheel built for CUDA cannot load its own operators
    (``nms`` and the like) beside a CPU build of torch, and its import stops where it
    registers their fake kernels; the models used here call none of them, so that
    registration is skipped then."""
    try:
        import torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        register_fake = torch.library.register_fake
        torch.library.register_fake = lambda *a, **k: lambda f: f  # type: ignore[assignment]
        try:
            import torchvision
        finally:
            torch.library.register_fake = register_fake
    import timm

    return torchvision, timm


def makers(tv: Any, timm: Any) -> dict[str, tuple[Callable[[], torch.nn.Module], int]]:
    """Per model name: its constructor and the image side it is profiled at."""
    m = tv.models
    n = CLASSES
    return {
        "tv_mobilenet_v3_small": (lambda: m.mobilenet_v3_small(num_classes=n), 32),
        "tv_efficientnet_b0": (
            lambda: m.efficientnet_b0(num_classes=n, stochastic_depth_prob=0.2), 32),
        "tv_convnext_tiny": (
            lambda: m.convnext_tiny(num_classes=n, stochastic_depth_prob=0.1), 32),
        "tv_swin_t": (lambda: m.swin_t(num_classes=n), 64),
        "tv_shufflenet": (lambda: m.shufflenet_v2_x0_5(num_classes=n), 32),
        "tv_squeezenet": (lambda: m.squeezenet1_1(num_classes=n), 64),
        "tv_densenet_memory_efficient": (
            lambda: m.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16,
                               num_classes=n, memory_efficient=True), 32),
        "tv_regnet": (lambda: m.regnet_y_400mf(num_classes=n), 64),
        "tv_vit": (
            lambda: m.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                        hidden_dim=32, mlp_dim=64, dropout=0.1,
                                        num_classes=n), 32),
        "timm_vit": (
            lambda: timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                                      num_classes=n, drop_path_rate=0.1, drop_rate=0.1), 32),
        "timm_convnext": (
            lambda: timm.create_model("convnext_atto", num_classes=n, drop_path_rate=0.1), 32),
        "timm_resnet": (
            lambda: timm.create_model("resnet18", num_classes=n, drop_path_rate=0.1), 32),
        "timm_efficientnet": (
            lambda: timm.create_model("efficientnet_b0", num_classes=n, drop_path_rate=0.1), 32),
        "timm_mixer": (
            lambda: timm.models.mlp_mixer.MlpMixer(img_size=32, patch_size=8, num_blocks=2,
                                                   embed_dim=32, num_classes=n,
                                                   drop_path_rate=0.1), 32),
        "timm_levit": (lambda: timm.create_model("levit_128s", img_size=64, num_classes=n), 64),
        "timm_poolformer": (
            lambda: timm.create_model("poolformer_s12", num_classes=n, drop_path_rate=0.1), 32),
    }  # fmt: skip


def images(n: int, side: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches of two random images and their labels."""
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(2, 3, side, side, generator=g), torch.randint(0, CLASSES, (2,), generator=g))
        for _ in range(n)
    ]


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits, labels)


def main() -> int:
    tv, timm = import_vision()
    models = makers(tv, timm)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(models))
    ap.add_argument("--budgets", default="0.6,0.4")
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    unknown = [name for name in args.models.split(",") if name not in models]
    if unknown:
        print(f"heldout_vision: --models: no model {unknown[0]!r} (known: {', '.join(models)})",
              file=sys.stderr)  # fmt: skip
        return 2
    failed = 0
    print(ht.ROW_HEADER)
    for name in args.models.split(","):
        t0 = time.perf_counter()
        make, side = models[name]
        torch.manual_seed(0)
        model = make()
        model.train()
        data = images(args.steps, side)
        ref, _, _ = ht.train_on(model, data, cross_entropy)
        x, labels = data[0]
        inst = profile_step(copy.deepcopy(model), (x,),
                            lambda out, labels=labels: cross_entropy(out, labels))  # fmt: skip
        plans = ht.static_plans(inst, [float(b) for b in args.budgets.split(",")])
        failed += ht.run_plans(
            name, plans, ref,
            lambda plan, budget, m=model, d=data: ht.train_on(m, d, cross_entropy, plan, budget),
        )  # fmt: skip
        print(f"| {name} | ({inst.n_ops} operators, {inst.n_tensors} saved tensors, "
              f"{len(plans)} plans, {time.perf_counter() - t0:.0f} s) | | | | | |", flush=True)  # fmt: skip
    return ht.finished(failed)


if __name__ == "__main__":
    sys.exit(main())
