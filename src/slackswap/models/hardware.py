"""GPUs and host links from datasheets and the paper's Sec. 4.1 (bytes/s, FLOP/s)."""

from __future__ import annotations

from dataclasses import dataclass

from slackswap.didyoumean import did_you_mean
from slackswap.instance import Hardware


@dataclass(frozen=True)
class GPU:
    """Datasheet peaks of one GPU for the training precision the paper uses on it."""

    key: str
    name: str
    peak_flops: float  # dense tensor-core (or FP32 for the Titan X) FLOP/s
    hbm_Bps: float  # memory bandwidth, bytes per second
    precision: str  # "bf16" or "fp32": element size of activations
    year: int
    default_link: str

    @property
    def bytes_per_element(self) -> int:
        return 4 if self.precision == "fp32" else 2


@dataclass(frozen=True)
class Link:
    """A host link, bandwidth per direction (bytes/s).

    ``bw_Bps`` is the paper's effective figure, which every instance and the simulator use.
    ``essay_bw_Bps`` is the figure the checkpoint-offload essay quotes, which only the offload
    calculator (``slackswap offload``, ``reproduce table1``) uses so that it reproduces the
    essay's numbers: the nominal x16 rate for PCIe 4.0 (31 GB/s; the paper takes 25 GB/s as what a
    copy achieves) and nvbandwidth's host-to-device measurement on an H200 node for PCIe 5.0
    (55.43 GB/s; the paper takes 50). None where the essay gives no figure.
    """

    key: str
    name: str
    bw_Bps: float
    essay_bw_Bps: float | None = None


GPUS: dict[str, GPU] = {
    g.key: g
    for g in (
        # Titan X (Maxwell): the paper's vDNN check uses 7 TFLOP/s FP32 and 336 GB/s.
        GPU("titanx", "Titan X", 7.0e12, 336e9, "fp32", 2015, "pcie3"),
        GPU("v100", "V100", 125e12, 900e9, "bf16", 2017, "pcie3"),
        GPU("a100", "A100", 312e12, 2.0e12, "bf16", 2020, "pcie4"),
        GPU("h100", "H100", 989.4e12, 3.35e12, "bf16", 2022, "pcie5"),
        GPU("h200", "H200", 989.4e12, 4.8e12, "bf16", 2024, "pcie5"),
    )
}

LINKS: dict[str, Link] = {
    lk.key: lk
    for lk in (
        Link("pcie3", "PCIe 3.0", 12.8e9),  # vDNN's figure; the paper also quotes 12.5 and 12.0
        Link("pcie4", "PCIe 4.0", 25e9, essay_bw_Bps=31e9),
        Link("pcie5", "PCIe 5.0", 50e9, essay_bw_Bps=55.43e9),
        Link("c2c", "NVLink-C2C", 450e9, essay_bw_Bps=450e9),
    )
}

COPY_LATENCY_S = 10e-6
DUPLEX_FACTOR = 0.85


def get_gpu(key: str) -> GPU:
    try:
        return GPUS[key.lower()]
    except KeyError:
        raise KeyError(
            f"unknown GPU {key!r}{did_you_mean(key, GPUS)} (one of {', '.join(GPUS)})"
        ) from None


def get_link(key: str) -> Link:
    try:
        return LINKS[key.lower()]
    except KeyError:
        raise KeyError(
            f"unknown link {key!r}{did_you_mean(key, LINKS)} (one of {', '.join(LINKS)})"
        ) from None


def hardware(gpu: str, link: str | None = None, link_bw_Bps: float | None = None) -> Hardware:
    """The `Hardware` record for a GPU and a link (its default link when none is named)."""
    g = get_gpu(gpu)
    lk = get_link(link or g.default_link)
    return Hardware(
        gpu=g.key,
        link=lk.key,
        link_bw_Bps=float(link_bw_Bps if link_bw_Bps is not None else lk.bw_Bps),
        copy_latency_s=COPY_LATENCY_S,
        duplex_factor=DUPLEX_FACTOR,
        gpu_flops=g.peak_flops,
        gpu_mem_Bps=g.hbm_Bps,
    )
