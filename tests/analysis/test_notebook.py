"""The gap-analysis notebook runs top to bottom (its own small sweep) and shows its figures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parent.parent.parent / "notebooks" / "gap_analysis.ipynb"


def test_notebook_executes_and_renders_figures(tmp_path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "SLACKSWAP_RESULTS"}
    old = os.environ.copy()
    os.environ.clear()
    # The notebook's knobs at a fraction of their defaults: what it draws, not its figures' values.
    short = {"SLACKSWAP_TIME_LIMIT_S": "0.4", "SLACKSWAP_SEARCH_S": "1"}
    os.environ.update({**env, **short, "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
    try:
        client = nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]  # fmt: skip
    assert not errors, errors
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]  # fmt: skip
    # Fig. 4, Table 2 bars, heat map, plan time, the performance profile, the ECDF, the anytime
    # curves, Fig. 3, Fig. 5, Fig. 6a, search convergence
    assert len(images) >= 11
    text = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "gap best" in text and "runs," in text
    assert "Wilcoxon signed-rank p =" in text and "| instance | budget | solver |" in text
    assert "ga: " in text and "ga-random: " in text and " plans, " in text  # the searches ran


def test_notebook_is_committed_without_outputs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
