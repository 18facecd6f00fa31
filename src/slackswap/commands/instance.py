"""``slackswap instance build|info``, ``slackswap linkbudget`` and ``slackswap offload``."""

from __future__ import annotations

import argparse
import sys

from slackswap.analysis.checks import output_file, text
from slackswap.commands.common import HelpFormatter, load_instance_arg
from slackswap.console import format_bytes, format_table, positive_float, positive_int, print_json
from slackswap.didyoumean import did_you_mean
from slackswap.errors import UserError
from slackswap.instances.catalog import build_model
from slackswap.instances.linkbudget import link_budget_table
from slackswap.models.hardware import GPUS, LINKS
from slackswap.models.offload_calculator import ESSAY_LINKS, estimate
from slackswap.models.transformer import TRANSFORMERS, transformer_config
from slackswap.models.vgg import VGGConfig

GB = 1e9
GIB = 2**30


class _KeepLinesFormatter(HelpFormatter):
    """The CLI's help, with the description and epilog printed line by line (a table)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("instance", help="build or inspect instances")
    isub = p.add_subparsers(dest="instance_command", metavar="ACTION")
    b = isub.add_parser(
        "build",
        help="build an instance from a workload model",
        description="Build an instance from a workload model. Its name is MODEL@GPU-LINK, then\n"
        "each option that differs from the default, e.g. llama-7b@h100-pcie5,seq=8192,batch=1\n"
        "or gpt2-xl@a100-pcie4,layers=8,link-gbps=12; every command loads the same instance\n"
        "back from that name.",
        epilog=_model_defaults(),
        formatter_class=_KeepLinesFormatter,
    )
    b.add_argument("model", help="bert-large, gpt2-xl, llama-7b, qwen3-1.7b, qwen3-8b, ...")
    b.add_argument("--gpu", default="a100", help="titanx, v100, a100, h100, h200 (default a100)")
    b.add_argument(
        "--link",
        default=None,
        help="pcie3, pcie4, pcie5, c2c (default: the GPU's, pcie3 on titanx and v100, pcie4 on "
        "a100, pcie5 on h100 and h200)",
    )
    b.add_argument("--seq", type=positive_int, help="sequence length, tokens (default below)")
    b.add_argument("--batch", type=positive_int, help="batch size (default below)")
    b.add_argument("--layers", type=positive_int, help="number of layers (default below)")
    b.add_argument(
        "--link-gbps",
        type=positive_float,
        help="link GB/s per direction (default the link's: pcie3 12.8, pcie4 25, pcie5 50, "
        "c2c 450)",
    )
    b.add_argument(
        "--name", help="instance name (default MODEL@GPU-LINK plus the options that differ)"
    )
    b.add_argument("-o", "--output", required=True, help="instance file to write (JSON)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    b.set_defaults(func=cmd_build)
    i = isub.add_parser("info", help="derived quantities of an instance (Table 1 columns)")
    i.add_argument("instance", help="instance file or catalog name")
    i.add_argument(
        "--json", action="store_true", help="one JSON object, SI units (null where not finite)"
    )
    i.set_defaults(func=cmd_info)
    p.set_defaults(func=lambda a: _usage(p))

    lb = sub.add_parser(
        "linkbudget",
        help="Eq. 1 across GPU generations and workloads (Fig. 1)",
        description=(
            "For every GPU and its host link and every catalogue workload: the link bandwidth, "
            "the GEMM intensity beta, the workload's saved activations A and intensity I, and "
            "the fraction f of A that the link can move while the forward pass runs (Eq. 1 of "
            "the paper, as Fig. 1 plots it)."
        ),
    )
    lb.add_argument("--json", action="store_true", help="rows as one JSON list, SI units")
    lb.set_defaults(func=cmd_linkbudget)

    o = sub.add_parser(
        "offload",
        help="checkpoint-offload calculator (the companion essay)",
        description=(
            "For a transformer at a sequence length and batch with gradient checkpointing: "
            "each layer's checkpoint and their total, the host memory a node needs for them, "
            "one layer's forward time, one checkpoint's copy over the host link, and the step's "
            "slowdown when the checkpoints are offloaded synchronously or overlapped with "
            "compute (the companion essay's first-order arithmetic)."
        ),
    )
    o.add_argument("model", help="a transformer model: qwen3-1.7b, qwen3-8b, llama-70b, ...")
    o.add_argument("--seq", type=positive_int, required=True, help="tokens per sequence")
    o.add_argument("--batch", type=positive_int, default=1, help="sequences per GPU")
    o.add_argument(
        "--link",
        default="pcie5",
        help="pcie4 (31 GB/s), pcie5 (55.43), c2c (450): the essay's figures, not the 25 and 50 "
        "GB/s of instances (see slackswap.models.hardware.Link)",
    )
    o.add_argument("--link-gbps", type=positive_float, help="override link GB/s per direction")
    o.add_argument(
        "--gpus-per-link",
        type=positive_int,
        default=1,
        help="GPUs sharing one host link (a PCIe switch); each gets link / N",
    )
    o.add_argument(
        "--gpus-per-node",
        type=positive_int,
        default=8,
        help="GPUs per node, for the host memory the checkpoints take per node",
    )
    o.add_argument("--tflops", type=positive_float, default=500.0, help="sustained TFLOP/s per GPU")
    o.add_argument("--json", action="store_true", help="one JSON object, SI units")
    o.set_defaults(func=cmd_offload)


def _model_defaults() -> str:
    """The bundled models' defaults, for ``instance build --help``."""

    lines = ["defaults (layers, seq, batch):"]
    for name, cfg in TRANSFORMERS.items():
        lines.append(f"  {name:<12}{cfg.layers:>4} layers, seq {cfg.seq:>5}, batch {cfg.batch}")
    vgg = VGGConfig()
    lines.append(
        f"  {vgg.name:<12}{vgg.image}x{vgg.image} images, batch {vgg.batch} (no --seq, --layers)"
    )
    return "\n".join(lines)


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def cmd_build(args: argparse.Namespace) -> int:
    output_file(args.output, "-o", overwrite=args.overwrite)  # before the work, not after
    text(args.name, "--name")
    if args.gpu.lower() not in GPUS:
        raise UserError(
            f"--gpu {args.gpu!r}: unknown GPU{did_you_mean(args.gpu, GPUS)} (one of {', '.join(GPUS)})"
        )
    if args.link is not None and args.link.lower() not in LINKS:
        raise UserError(
            f"--link {args.link!r}: unknown link{did_you_mean(args.link, LINKS)} "
            f"(one of {', '.join(LINKS)})"
        )
    try:
        inst = build_model(
            args.model,
            args.gpu,
            args.link,
            seq=args.seq,
            batch=args.batch,
            layers=args.layers,
            link_bw_Bps=args.link_gbps * GB if args.link_gbps else None,
            name=args.name,
        )
    except ValueError as exc:
        raise UserError(f"{args.model}: {exc}") from None
    try:
        inst.save(args.output)
    except OSError as exc:
        raise UserError(f"{args.output}: cannot write ({exc.strerror})") from None
    print(f"wrote {args.output}: {inst!r}")
    return 0


def info_rows(s: dict) -> list[tuple[str, str]]:
    rows = [
        ("instance", s["name"]),
        ("hardware", f"{s['gpu']} / {s['link']} ({s['link_bw_Bps'] / GB:.4g} GB/s)"),
    ]
    for key, label in (("layers", "layers"), ("seq", "sequence length"), ("batch", "batch")):
        if s.get(key) is not None:  # a workload model's; a profiled step has none
            rows.append((label, f"{s[key]:,}"))
    rows += [
        ("saved activations A", format_bytes(s["saved_bytes"])),
        ("forward T_F", f"{s['forward_s'] * 1e3:.1f} ms"),
        ("ideal step", f"{s['ideal_step_s'] * 1e3:.1f} ms"),
        ("forward FLOPs F", f"{s['forward_flops'] / 1e12:.2f} TFLOP"),
        ("intensity I = F/A", f"{s['intensity']:,.0f} FLOP/B"),
        ("beta", f"{s['beta']:,.0f} FLOP/B"),
        ("hideable fraction f", f"{s['hideable_fraction'] * 100:.1f}%"),
        ("no-swap peak P", format_bytes(s["peak_bytes"])),
        ("link budget (1-g) W T_F", format_bytes(s["link_budget_bytes"])),
        ("operators", str(s["n_ops"])),
        ("saved tensors", str(s["n_tensors"])),
    ]
    workspace = s.get("max_rebuild_workspace_bytes", 0)
    if workspace:  # only profiled instances have multi-operator rebuilds
        rows.append(("largest rebuild workspace", format_bytes(workspace)))
    return rows


def cmd_info(args: argparse.Namespace) -> int:
    inst = load_instance_arg(args.instance)
    s = inst.summary()
    if args.json:
        print_json(s)
    else:
        for k, v in info_rows(s):
            print(f"{k:<26}{v}")
    return 0


def cmd_linkbudget(args: argparse.Namespace) -> int:
    rows = link_budget_table()
    if args.json:
        print_json([r.to_dict() for r in rows])
        return 0
    table = [
        (
            r.gpu,
            r.link,
            f"{r.link_Bps / GB:.1f}",
            f"{r.gemm_flops_per_link_byte / 1e3:.1f}K",
            r.workload,
            f"{r.saved_bytes / GB:.1f}",
            f"{r.intensity:,.0f}",
            f"{r.beta:,.0f}",
            f"{r.hideable_fraction * 100:.0f}%",
        )
        for r in rows
    ]
    header = ("gpu", "link", "GB/s", "GEMM FLOP/B", "workload", "A GB", "I", "beta", "f")
    print(format_table(table, header))
    return 0


def cmd_offload(args: argparse.Namespace) -> int:
    if args.model not in TRANSFORMERS:
        raise UserError(
            f"offload: unknown transformer {args.model!r} (one of {', '.join(TRANSFORMERS)})"
        )
    if args.link_gbps:
        bw = args.link_gbps * GB
    elif args.link in ESSAY_LINKS:
        bw = ESSAY_LINKS[args.link]
    else:
        raise UserError(f"--link {args.link!r}: one of {', '.join(ESSAY_LINKS)} or --link-gbps")
    cfg = transformer_config(args.model, seq=args.seq, batch=args.batch)
    e = estimate(
        cfg,
        link_Bps=bw,
        gpus_per_link=args.gpus_per_link,
        gpus_per_node=args.gpus_per_node,
        sustained_flops=args.tflops * 1e12,
    )
    if args.json:
        print_json(e.to_dict())
        return 0
    print(f"{cfg.name}: {cfg.layers} layers, {cfg.tokens:,} tokens per GPU, {bw / GB:.2f} GB/s")
    rows = [
        ("checkpoint per layer", f"{e.checkpoint_bytes_per_layer / GIB:.3f} GiB"),
        ("checkpoints in total", f"{e.checkpoint_bytes_total / GIB:.2f} GiB"),
        ("host memory per node", f"{e.host_bytes_per_node / GIB:.1f} GiB"),
        ("layer forward", f"{e.layer_forward_s * 1e3:.3f} ms"),
        ("one checkpoint copy", f"{e.copy_s * 1e3:.3f} ms"),
        ("synchronous offload slowdown", f"{e.sync_slowdown * 100:.1f}%"),
        ("overlapped offload slowdown", f"{e.overlap_slowdown * 100:.1f}%"),
    ]
    for k, v in rows:
        print(f"{k:<30}{v}")
    return 0
