"""The comparison forms of optimisation research, against hand-worked examples and direct library
calls: the performance profile, the ECDF of runs reaching a gap, anytime curves, statistics over
seeds (bootstrap interval, Wilcoxon) and the paper tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from slackswap.analysis import anytime as A
from slackswap.analysis import profiles as P
from slackswap.analysis import stats as S
from slackswap.analysis import tables as T
from slackswap.analysis.results import rows_to_frame


def frame(runs: list[tuple[str, float, str, int, float | None]], **extra: object) -> pd.DataFrame:
    """Results rows from (instance, budget, solver, seed, step s or None); ideal step 1 s."""
    rows = []
    for inst, b, solver, seed, step in runs:
        rows.append(
            {
                "instance": inst,
                "budget_fraction": b,
                "solver": solver,
                "seed": seed,
                "status": "feasible" if step is not None else "infeasible",
                "stopped_by": "finished",
                "step_s": step,
                "throughput": None if step is None else 1.0 / step,
                "ideal_s": 1.0,
                "plan_s": 0.1,
                "seed_independent": 0,
                **extra,
            }
        )
    return rows_to_frame(rows)


#: 3 solvers x 4 cases; C finds no plan on case 3. The values (s) and ratios, by hand:
#:   case 1: A 1.0  B 1.1  C 1.2   -> 1, 1.1, 1.2
#:   case 2: A 2.0  B 2.0  C 3.0   -> 1, 1, 1.5
#:   case 3: A 1.5  B 1.0  C none  -> 1.5, 1, inf
#:   case 4: A 4.0  B 5.0  C 4.0   -> 1, 1.25, 1
PROFILE_CASES = {
    ("m", 0.9): {"A": 1.0, "B": 1.1, "C": 1.2},
    ("m", 0.5): {"A": 2.0, "B": 2.0, "C": 3.0},
    ("n", 0.9): {"A": 1.5, "B": 1.0, "C": None},
    ("n", 0.5): {"A": 4.0, "B": 5.0, "C": 4.0},
}


def profile_frame() -> pd.DataFrame:
    return frame(
        [
            (inst, b, solver, 0, step)
            for (inst, b), steps in PROFILE_CASES.items()
            for solver, step in steps.items()
        ]
    )


@pytest.mark.parametrize(
    ("tau", "expected"),
    [
        (1.0, {"A": 3 / 4, "B": 2 / 4, "C": 1 / 4}),
        (1.1, {"A": 3 / 4, "B": 3 / 4, "C": 1 / 4}),
        (1.2, {"A": 3 / 4, "B": 3 / 4, "C": 2 / 4}),
        (1.25, {"A": 3 / 4, "B": 1.0, "C": 2 / 4}),
        (1.5, {"A": 1.0, "B": 1.0, "C": 3 / 4}),
        (1e9, {"A": 1.0, "B": 1.0, "C": 3 / 4}),  # C never reaches case 3
    ],
)
def test_performance_profile_matches_the_hand_worked_example(
    tau: float, expected: dict[str, float]
) -> None:
    prof = P.performance_ratios(profile_frame())
    assert prof.unsolved == 0 and len(prof.ratios) == 4
    got = prof.rho(tau * (1 + 1e-12))  # 1.1 / 1.0 is 1.1000000000000001 in floating point
    assert got == pytest.approx(expected)


def test_performance_profile_curve_and_a_case_nobody_solves() -> None:
    df = pd.concat([profile_frame(), frame([("o", 0.1, s, 0, None) for s in "ABC"])])
    prof = P.performance_ratios(df)
    assert prof.unsolved == 1 and len(prof.ratios) == 4  # left out, and counted
    ratios, share = prof.curve("C")
    np.testing.assert_allclose(ratios, [1.0, 1.2, 1.5])
    np.testing.assert_allclose(share, [1 / 4, 2 / 4, 3 / 4])


def test_performance_profile_takes_the_median_over_seeds() -> None:
    # B's seeds on one case: 1.0, 3.0, 2.0 -> median 2.0 = ratio 2 against A's 1.0; a seed
    # without a plan counts as infinite: C's median of (1.0, inf, inf) is inf.
    df = frame([("m", 0.5, "A", 0, 1.0), ("m", 0.5, "B", 0, 1.0), ("m", 0.5, "B", 1, 3.0),
                ("m", 0.5, "B", 2, 2.0), ("m", 0.5, "C", 0, 1.0), ("m", 0.5, "C", 1, None),
                ("m", 0.5, "C", 2, None)])  # fmt: skip
    r = P.performance_ratios(df).ratios.iloc[0]
    assert r["A"] == 1.0 and r["B"] == 2.0 and math.isinf(r["C"])


def test_bootstrap_interval_is_scipys() -> None:
    x = np.array([0.431, 0.4309, 0.4312, 0.4315, 0.4308])
    direct = sps.bootstrap(
        (x,), np.mean, confidence_level=0.95, n_resamples=S.N_RESAMPLES, method="percentile",
        **S._rng_argument(S.BOOTSTRAP_SEED),
    )  # fmt: skip
    low, high = S.bootstrap_ci(x)
    assert (low, high) == (direct.confidence_interval.low, direct.confidence_interval.high)
    assert x.min() <= low <= x.mean() <= high <= x.max()  # a mean's interval, by hand


def test_describe_by_hand() -> None:
    d = S.describe([1.0, 2.0, 6.0, float("nan")])
    assert d["mean"] == 3.0 and d["median"] == 2.0 and d["min"] == 1.0
    assert d["std"] == pytest.approx(math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2))
    one = S.describe([5.0])  # one run says nothing about the spread: NaN, not 0
    assert one["mean"] == 5.0 and math.isnan(one["std"]) and math.isnan(one["ci_low"])
    assert S.bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)


def test_seed_stats_per_case() -> None:
    df = frame([("m", 0.5, "A", s, v) for s, v in enumerate([1.0, 1.2, 1.1])]
               + [("m", 0.5, "B", 0, 1.5)])  # fmt: skip
    st = S.seed_stats(df).set_index("solver")
    assert st.loc["A", "runs"] == 3 and st.loc["A", "step_s_mean"] == pytest.approx(1.1)
    assert st.loc["A", "step_s_std"] == pytest.approx(0.1)
    # gap to the fastest plan of the case (A's 1.0): A's runs 0, 20%, 10%; B 50%
    assert st.loc["A", "gap_to_best_mean"] == pytest.approx(0.1)
    assert st.loc["B", "gap_to_best_mean"] == pytest.approx(0.5)
    assert st.loc["A", "gap_to_bound_min"] == pytest.approx(0.0)  # the ideal step is 1 s


def test_wilcoxon_paired_comparison_is_scipys() -> None:
    a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    b = [1.1, 2.3, 2.9, 4.4, 5.6, 6.7, 7.0]  # a lower in 5, b in 1, one tie
    df = frame([("m", 0.1 * (i + 1), "A", 0, v) for i, v in enumerate(a)]
               + [("m", 0.1 * (i + 1), "B", 0, v) for i, v in enumerate(b)])  # fmt: skip
    cmp = S.paired_comparison(df, "A", "B")
    direct = sps.wilcoxon(a, b, zero_method="wilcox")
    assert (cmp.a_better, cmp.b_better, cmp.ties, cmp.cases) == (5, 1, 1, 7)
    assert cmp.p_value == pytest.approx(direct.pvalue) and cmp.statistic == direct.statistic
    assert "fewer than 6 differing cases" not in cmp.note
    with pytest.raises(ValueError, match="'Z' is not in the results"):
        S.paired_comparison(df, "A", "Z")


def test_ecdf_by_hand() -> None:
    # One case, best known step 1.0 (the heuristic H at 0.01 s). The search G improves to
    # 1.005 at 0.2 s and to 1.0 at 0.8 s, ending at 1 s. Targets 0.1% and 1%:
    #   H reaches both at 0.01 s; G reaches 1% at 0.2 s and 0.1% at 0.8 s.
    hist = json.dumps([[0.05, 10, 1.2], [0.2, 40, 1.005], [0.8, 90, 1.0]])
    df = pd.concat(
        [
            frame([("m", 0.5, "G", 0, 1.0)], history=hist, plan_s=1.0),
            frame([("m", 0.5, "H", 0, 1.0)], plan_s=0.01),
        ]
    )
    reach = P.run_reach_times(df, targets=(0.001, 0.01))
    times = {(r.solver, r.target): r.time_s for r in reach.itertuples()}
    assert times == {("G", 0.001): 0.8, ("G", 0.01): 0.2, ("H", 0.001): 0.01, ("H", 0.01): 0.01}
    curves = P.ecdf(reach, np.array([0.1, 0.5, 1.0]))
    np.testing.assert_allclose(curves["G"], [0.0, 0.5, 1.0])
    np.testing.assert_allclose(curves["H"], [1.0, 1.0, 1.0])


def test_ecdf_weighs_each_case_once_per_solver() -> None:
    # G has two seeds, one reaching the best plan and one 10% above; H one run at the best:
    # G's two runs each weigh 1/2.
    df = frame([("m", 0.5, "G", 0, 1.0), ("m", 0.5, "G", 1, 1.1), ("m", 0.5, "H", 0, 1.0)])
    reach = P.run_reach_times(df, targets=(0.01,))
    curves = P.ecdf(reach, np.array([1.0]))
    assert curves["G"][0] == pytest.approx(0.5) and curves["H"][0] == pytest.approx(1.0)


def test_anytime_band_by_hand() -> None:
    points = [(0.1, 2.0), (1.0, 1.5), (2.0, 1.6)]  # a later, worse point never raises the best
    np.testing.assert_allclose(A.best_at(points, np.array([0.05, 0.1, 0.5, 1.5, 3.0])),
                               [np.inf, 2.0, 2.0, 1.5, 1.5])  # fmt: skip
    med, q25, q75 = A._quantiles(np.array([[np.inf, 0.1], [np.inf, 0.2], [0.3, 0.3]]))
    # column 0: two runs without a plan yet -> median and upper quartile infinite
    assert math.isinf(med[0]) and math.isinf(q75[0]) and q25[0] == math.inf
    assert med[1] == pytest.approx(0.2) and q25[1] == pytest.approx(0.15)


def test_tables_mean_std_and_best_in_bold() -> None:
    df = frame([("m", 0.5, "A", s, v) for s, v in enumerate([1.0, 1.2, 1.1])]
               + [("m", 0.5, "B", s, 1.5) for s in range(3)])  # fmt: skip
    md = T.format_table(df, "markdown")
    a_row = next(line for line in md.splitlines() if "| A |" in line)
    assert "**1100.00 ± 100.00**" in a_row  # ms, the case's best
    b_row = next(line for line in md.splitlines() if "| B |" in line)
    assert "1500.00 ± 0.00" in b_row and "**1500" not in b_row
    tex = T.format_table(df, "latex")
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\textbf{1100.00 $\pm$ 100.00}" in tex
    obj = json.loads(T.format_table(df, "json"))
    assert obj["seeds"] == [0, 1, 2] and obj["solvers"] == ["A", "B"]
    row = next(r for r in obj["rows"] if r["solver"] == "A")
    assert row["step_s_mean"] == pytest.approx(1.1) and row["step_s_std"] == pytest.approx(0.1)
    assert obj["performance_profile"]["share_within"]["1"] == {"A": 1.0, "B": 0.0}
    csv = T.format_table(df, "csv").splitlines()
    assert csv[0].startswith("instance,budget_fraction,solver,runs") and len(csv) == 3


def test_latex_escapes_names() -> None:
    assert T.latex_escape("ga(pop_size=4) 50%") == r"ga(pop\_size=4) 50\%"


def test_command_table_formats_are_the_modules() -> None:
    from slackswap.commands import report

    assert report.TABLE_FORMATS == T.TABLE_FORMATS
