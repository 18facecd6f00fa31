"""``slackswap profile SCRIPT_OR_MODULE:FACTORY -o FILE``: a real PyTorch step as an instance."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from slackswap import profiling
from slackswap.analysis.checks import output_file, text
from slackswap.analysis.progress import add_progress_arguments, phase
from slackswap.console import format_bytes, positive_float, print_json
from slackswap.errors import UserError
from slackswap.models.hardware import get_gpu, hardware
from slackswap.profiling import require_torch
from slackswap.profiling.factory import call_factory

if TYPE_CHECKING:
    from slackswap.instance import Instance

GB, MS = 1e9, 1e3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="profile one training step of a torch model into an instance file (needs torch)",
        description=(
            "Run one forward and backward pass of the model a factory returns and write the "
            "instance: every operator, every saved tensor, the blocks. FACTORY is a callable "
            "returning (model, inputs) or (model, inputs, loss_fn); the default loss is the sum "
            "of the output."
        ),
    )
    p.add_argument("factory", metavar="SCRIPT_OR_MODULE:FACTORY", help="e.g. train.py:make")
    p.add_argument("-o", "--output", required=True, help="instance file to write (JSON)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    p.add_argument("--gpu", default="a100", help="titanx, v100, a100, h100, h200 (default a100)")
    p.add_argument("--link", default=None, help="pcie3, pcie4, pcie5, c2c (default: the GPU's)")
    p.add_argument("--link-gbps", type=positive_float, help="override link GB/s per direction")
    p.add_argument(
        "--timing",
        choices=("roofline", "measured"),
        default="roofline",
        help="operator times: roofline of --gpu (default) or measured on this machine's device",
    )
    p.add_argument(
        "--blocks",
        help="module path whose children are the blocks, or the block class name "
        "(default: the model's repeated child modules)",
    )
    p.add_argument("--name", help="instance name (default MODEL@GPU-LINK)")
    p.add_argument("--seed", type=int, default=0, help="torch seed set before the factory runs")
    p.add_argument("--json", action="store_true", help="print the instance summary as JSON")
    add_progress_arguments(p)
    p.set_defaults(func=cmd_profile)


def _note_precision(inst: Instance, gpu: str) -> None:
    """Say so when the step's activations are not in the precision the GPU's roofline assumes:
    sizes are recorded as the step ran them, never rescaled."""

    want = "float32" if get_gpu(gpu).precision == "fp32" else "bfloat16"
    floats = [d for d in inst.meta.get("saved_dtypes", []) if "float" in d]
    if floats and want not in floats:
        print(
            f"note: the step saved {', '.join(floats)} activations; {gpu} plans assume {want} "
            f"(run the model in {want} for those sizes)",
            file=sys.stderr,
        )


def cmd_profile(args: argparse.Namespace) -> int:
    # Before the work, not after, and before torch's import (seconds of it, on a loaded machine).
    script = args.factory.rpartition(":")[0] or args.factory
    output_file(
        args.output, "-o", overwrite=args.overwrite, inputs={"the factory's script": script}
    )
    text(args.name, "--name")

    torch = require_torch()

    try:
        hardware(args.gpu, args.link)  # fail before the factory builds the model
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    torch.manual_seed(args.seed)
    phase("profile", f"building the model of {args.factory} and profiling its training step",
          args.progress)  # fmt: skip
    model, inputs, loss_fn = call_factory(args.factory)
    inst = profiling.profile_step(  # the package imports torch here, on first use
        model,
        inputs,
        loss_fn,
        gpu=args.gpu,
        link=args.link,
        timing=args.timing,
        blocks=args.blocks,
        name=args.name,
        link_bw_Bps=args.link_gbps * GB if args.link_gbps else None,
    )
    inst.meta["source"] = args.factory
    try:
        inst.save(args.output)
    except OSError as exc:
        raise UserError(f"-o {args.output}: cannot write ({exc.strerror})") from None
    _note_precision(inst, args.gpu)
    if args.json:
        print_json({**inst.summary(), "file": args.output, "n_blocks": inst.meta["n_blocks"]})
    else:
        print(
            f"wrote {args.output}: {inst.name}, {inst.n_ops} ops, {inst.n_tensors} saved tensors, "
            f"{inst.meta['n_blocks']} blocks, A = {format_bytes(inst.saved_bytes)}, "
            f"P = {format_bytes(inst.peak_bytes)}, T_F = {inst.forward_s * MS:.4g} ms "
            f"({args.timing})"
        )
    return 0
