"""``slackswap instance build|info``, ``slackswap linkbudget`` and ``slackswap offload``."""

from __future__ import annotations

import argparse
import sys

from slackswap.commands.common import (
    format_table,
    load_instance_arg,
    positive_float,
    positive_int,
    print_json,
)
from slackswap.problem import UserError

GB = 1e9
GIB = 2**30


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("instance", help="build or inspect instances")
    isub = p.add_subparsers(dest="instance_command", metavar="ACTION")
    b = isub.add_parser("build", help="build an instance from a workload model")
    b.add_argument("model", help="bert-large, gpt2-xl, llama-7b, qwen3-1.7b, qwen3-8b, ...")
    b.add_argument("--gpu", default="a100", help="titanx, v100, a100, h100, h200 (default a100)")
    b.add_argument("--link", default=None, help="pcie3, pcie4, pcie5, c2c (default: the GPU's)")
    b.add_argument("--seq", type=positive_int, help="sequence length (tokens)")
    b.add_argument("--batch", type=positive_int, help="batch size")
    b.add_argument("--layers", type=positive_int, help="number of layers")
    b.add_argument("--link-gbps", type=positive_float, help="override link GB/s per direction")
    b.add_argument("--name", help="instance name (default MODEL@GPU-LINK)")
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

    lb = sub.add_parser("linkbudget", help="Eq. 1 across GPU generations and workloads (Fig. 1)")
    lb.add_argument("--json", action="store_true", help="rows as one JSON list, SI units")
    lb.set_defaults(func=cmd_linkbudget)

    o = sub.add_parser("offload", help="checkpoint-offload calculator (the companion essay)")
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


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def cmd_build(args: argparse.Namespace) -> int:
    from slackswap.analysis.checks import output_file, text
    from slackswap.instances.catalog import build_model
    from slackswap.models.hardware import GPUS, LINKS

    output_file(args.output, "-o", overwrite=args.overwrite)  # before the work, not after
    text(args.name, "--name")
    if args.gpu.lower() not in GPUS:
        raise UserError(f"--gpu {args.gpu!r}: unknown GPU (one of {', '.join(GPUS)})")
    if args.link is not None and args.link.lower() not in LINKS:
        raise UserError(f"--link {args.link!r}: unknown link (one of {', '.join(LINKS)})")
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
        ("hardware", f"{s['gpu']} / {s['link']}"),
        ("saved activations A", f"{s['saved_bytes'] / GB:.2f} GB"),
        ("forward T_F", f"{s['forward_s'] * 1e3:.1f} ms"),
        ("ideal step", f"{s['ideal_step_s'] * 1e3:.1f} ms"),
        ("forward FLOPs F", f"{s['forward_flops'] / 1e12:.2f} TFLOP"),
        ("intensity I = F/A", f"{s['intensity']:,.0f} FLOP/B"),
        ("beta", f"{s['beta']:,.0f} FLOP/B"),
        ("hideable fraction f", f"{s['hideable_fraction'] * 100:.1f}%"),
        ("no-swap peak P", f"{s['peak_bytes'] / GB:.2f} GB"),
        ("link budget (1-g) W T_F", f"{s['link_budget_bytes'] / GB:.2f} GB"),
        ("operators", str(s["n_ops"])),
        ("saved tensors", str(s["n_tensors"])),
    ]
    workspace = s.get("max_rebuild_workspace_bytes", 0)
    if workspace:  # only profiled instances have multi-operator rebuilds
        rows.append(("largest rebuild workspace", f"{workspace / GB:.4g} GB"))
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
    from slackswap.instances.linkbudget import link_budget_table

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
    from slackswap.models.offload_calculator import ESSAY_LINKS, estimate
    from slackswap.models.transformer import TRANSFORMERS, transformer_config

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
