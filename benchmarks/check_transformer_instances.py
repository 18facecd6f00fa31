"""Hash every transformer instance the catalog builds, to compare a model refactor before/after.

Usage (from a worktree root)::

    PYTHONPATH=src python benchmarks/check_transformer_instances.py > after.txt
    PYTHONPATH=/path/to/old/src python benchmarks/check_transformer_instances.py > before.txt
    diff before.txt after.txt   # empty: every instance file is byte-identical

Each line is ``model gpu link layers seq batch link_bw sha256`` of the saved instance JSON.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import tempfile
from pathlib import Path

from slackswap.instances.catalog import build_model
from slackswap.models.hardware import GPUS, LINKS
from slackswap.models.transformer import TRANSFORMERS

LAYERS = (None, 1, 2, 3)
SHAPES = ((None, None), (128, 2), (64, 1))  # (seq, batch); None keeps the catalog's value
LINK_BWS = (None, 20e9)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "instance.json"
        for model, gpu, link, layers, (seq, batch), bw in itertools.product(
            TRANSFORMERS, GPUS, (None, *LINKS), LAYERS, SHAPES, LINK_BWS
        ):
            if layers is None and (seq, batch) != (None, None):
                continue  # full-depth models only at their catalog shape, to keep this quick
            inst = build_model(
                model, gpu, link, layers=layers, seq=seq, batch=batch, link_bw_Bps=bw
            )
            inst.save(path)
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            print(model, gpu, link, layers, seq, batch, bw, digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
