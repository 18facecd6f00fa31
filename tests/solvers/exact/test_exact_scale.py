"""The relaxation's row generation at depth: its work arrays stay linear in the operator count."""

from __future__ import annotations

import numpy as np

from slackswap.instances.catalog import build_model
from slackswap.plan import Budget
from slackswap.solvers.exact._lp import BoundProgram


def _model_and_point() -> tuple[BoundProgram, np.ndarray]:
    inst = build_model("gpt2-xl", layers=2)
    model = BoundProgram(inst, Budget.fraction(0.3).bytes_for(inst))
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 1.0, model.n_vars)  # any point: slacks are plain arithmetic on it
    return model, x


def test_lazy_slacks_come_in_blocks_of_bounded_size() -> None:
    """One row per pair of operators: a whole matrix is quadratic (0.5 GB per kind at 17k
    operators), so no block may hold more than the cells asked for (or one row)."""
    model, x = _model_and_point()
    cells = 500
    blocks = list(model._lazy_slacks(x, chunk_cells=cells))
    assert len(blocks) > 4  # the four kinds, split further
    for _, src, dst, slack in blocks:
        assert slack.shape == (src.size, dst.size)
        assert slack.size <= max(cells, dst.size)


def test_blocked_slacks_and_picks_equal_the_whole_matrix() -> None:
    """Blocking changes memory only: the same slacks, and the same rows picked (the k smallest
    slacks of each source by a full sort, as the row generation did before)."""
    model, x = _model_and_point()
    whole = {k: (s, d, v) for k, s, d, v in model._lazy_slacks(x, chunk_cells=1 << 40)}
    parts: dict[str, list[np.ndarray]] = {}
    for kind, _src, dst, slack in model._lazy_slacks(x, chunk_cells=300):
        parts.setdefault(kind, []).append(slack)
        assert np.array_equal(dst, whole[kind][1])
    assert set(parts) == set(whole) == {"fw", "bx", "pf", "rf"}
    for kind, (src, dst, slack) in whole.items():
        np.testing.assert_array_equal(np.vstack(parts[kind]), slack)
        for per_row in (1, 2, 3):
            picked = BoundProgram._pick(slack, kind, src, dst, per_row)
            expect = [
                (kind, int(src[a]), int(dst[c]))
                for a in range(slack.shape[0])
                for c in np.argsort(slack[a], kind="stable")[:per_row]
                if slack[a, c] < -1e-9
            ]
            assert sorted(picked) == sorted(expect)
            assert len(picked) > 0 or kind == "fw"
