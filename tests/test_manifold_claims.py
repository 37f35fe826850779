"""The manifold criteria M1, M2, M3 of docs/manifold.md as claims of the engine (analyses/manifold.py:
coverage_claims, coverage_overall), on synthetic tables shaped like coverage_table / coverage_rates."""

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ridgexr.verdicts import NO_STATE, VERDICTS, Null

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyses"))
import manifold  # noqa: E402  (analyses/manifold.py)

NS = (100, 316, 1000, 3162)
FLOOR = Null(0.1, 0.09, 0.12, how="ideal sampler")


def table(novelty: dict, delta_last: dict | None = None, draws: int = 4, excluded: int = 0) -> pd.DataFrame:
    """A coverage_table-shaped frame: per (model, draw, N); ``novelty[model]`` is the median novelty at the
    largest N of each draw (a list, one per draw); ``delta_last[model]`` the delta_N at the largest N per draw."""
    rows = []
    for model, nov in novelty.items():
        for j in range(draws):
            for n in NS:
                last = n == NS[-1]
                d = (delta_last or {}).get(model, [0.5] * draws)[j] if last else 1.0
                v = nov[j] if last else 0.5
                rows.append({"model": model, "draw": j, "N": n, "t_stop": 0.01, "delta_N": d, "ratio min": 0.5,
                             "ratio max": 1.5, "dist to M": 0.01, "novelty (median)": v, "memorized share": 0.0,
                             "W2 to smoothed target": 0.1, "novelty low": v - 0.05, "novelty high": v + 0.05,
                             "outputs": 1000 - excluded, "excluded outputs": excluded})
    return pd.DataFrame(rows)


def rates(slopes: dict, k: int = 2, draws: int = 4) -> pd.DataFrame:
    """A coverage_rates-shaped frame: ``slopes[model][metric] = (slope, low, high)``."""
    rows = [{"model": m, "metric": metric, "slope": s, "low": lo, "high": hi, "boot low": lo, "boot high": hi,
             "draws": draws} for m, per in slopes.items() for metric, (s, lo, hi) in per.items()]
    out = pd.DataFrame(rows)
    out["-1/k"] = -1.0 / k
    return out


def slopes(delta, dist=(-0.5, -0.51, -0.49), w2=(-0.4, -0.5, -0.3)):
    return {"delta_N": delta, "dist to M": dist, "W2 to smoothed target": w2}


def by_label(claims):
    return {(c.labels["model"], c.labels["criterion"]): c for c in claims}


def test_an_interval_across_both_regions_is_inconclusive_and_one_inside_disagree_disagrees():
    """k = 2 (-1/k = -0.5, M1's margin 0.1: -0.6): gamma-0's delta_N slope interval [-0.63, -0.41] crosses -0.6,
    gamma-0.25's [-0.43, -0.35] lies above it (the refutation region)."""
    df = table({"memorize": [0.0] * 4, "gamma-0": [1.8] * 4, "gamma-0.25": [0.6] * 4})
    r = rates({"memorize": slopes((-0.41, -0.47, -0.35)), "gamma-0": slopes((-0.52, -0.63, -0.41)),
               "gamma-0.25": slopes((-0.39, -0.43, -0.35))})
    c = by_label(manifold.coverage_claims(df, r, 2, floor=FLOOR))
    assert c[("gamma-0", "M1")].verdict == "inconclusive"
    assert c[("gamma-0.25", "M1")].verdict == "disagrees"
    # what would settle gamma-0's: the half-width below the estimate, 0.11, must shrink to the 0.08 between the
    # estimate and -0.6 (the estimate lies in the disagree region): 4 draws x (0.11 / 0.08)^2 -> 8
    assert c[("gamma-0", "M1")].note == f"~{math.ceil(4 * (0.11 / 0.08) ** 2)} draws would settle it at this spread"
    # the memorizer's interval lies above -1/k: the reference agrees; a model's row reads the rate it was given
    assert c[("memorize", "reference")].verdict == "agrees"
    assert [k for k in c if k[0] == "memorize"] == [("memorize", "reference")]
    assert c[("gamma-0", "M1")].row()["measured [95 %]"] == "-0.52 [-0.63, -0.41]"
    # M2 novelty (as novel as fresh draws, 1, within 0.25): 1.8 at every draw (zero spread) agrees; 0.6
    # disagrees; M2 distance and M3 agree
    assert c[("gamma-0", "M2 novelty")].verdict == "agrees"
    assert c[("gamma-0.25", "M2 novelty")].verdict == "disagrees"
    assert c[("gamma-0", "M2 distance")].verdict == c[("gamma-0", "M3")].verdict == "agrees"
    # an interval of the W2 slope across -0.25 is inconclusive
    r2 = rates({"gamma-0": slopes((-0.75, -0.85, -0.65), w2=(-0.3, -0.5, -0.1))})
    c2 = by_label(manifold.coverage_claims(table({"gamma-0": [1.8] * 4}), r2, 2, floor=FLOOR))
    assert c2[("gamma-0", "M3")].verdict == "inconclusive"
    assert c2[("gamma-0", "M1")].verdict == "agrees"


def test_the_nulls_appear_in_the_rows_and_r_reads_delta_n_at_the_largest_n_against_the_floor():
    last = [0.28, 0.31, 0.33, 0.36]
    df = table({"gamma-0": [0.7, 0.8, 0.75, 0.8]}, delta_last={"gamma-0": last})
    r = rates({"gamma-0": slopes((-0.6, -0.7, -0.55))})
    nov_null = Null(1.01, 0.96, 1.07, how="fresh draws of the law")
    w2_null = {"gamma-0": Null(0.01, -0.05, 0.07, how="a perfect sampler of the target")}
    c = by_label(manifold.coverage_claims(df, r, 2, floor=FLOOR, novelty_null=nov_null, target_null=w2_null))
    rr = c[("gamma-0", "R")].row()
    assert rr["null"] == "0.1 [0.09, 0.12]" and rr["null from"] == "ideal sampler"
    # the mean over the 4 draws with its Student-t interval, computed here by scipy
    lo, hi = stats.t.interval(0.95, 3, loc=np.mean(last), scale=stats.sem(last))
    assert rr["measured [95 %]"] == f"{np.mean(last):.3g} [{lo:.3g}, {hi:.3g}]"
    # its regions: >= 3 x 0.1 resolved (agrees), <= 1.5 x 0.12 at the floor; [0.26, 0.38] crosses 0.3
    assert c[("gamma-0", "R")].verdict == "inconclusive"
    assert c[("gamma-0", "R")].row()["criterion"].startswith("post hoc: ")  # chosen after the data were seen
    assert c[("gamma-0", "M2 novelty")].row()["null"] == "1.01 [0.96, 1.07]"
    assert c[("gamma-0", "M2 novelty")].verdict == "inconclusive"  # 0.7625 +- t: across 0.75
    assert c[("gamma-0", "M3")].row()["null"] == "0.01 [-0.05, 0.07]"
    assert c[("gamma-0", "M1")].row()["null"] == "-0.5"  # the memorizer's spacing, -1/k
    assert c[("gamma-0", "M2 distance")].row()["null"] == "0"
    # without a floor there is no R row
    assert ("gamma-0", "R") not in by_label(manifold.coverage_claims(df, r, 2))


def overall(novelty, slope_by_model, *, delta_last=None, floor=FLOOR, ref=(-0.41, -0.47, -0.35)):
    df = table(novelty, delta_last=delta_last)
    r = rates({"memorize": slopes(ref), **slope_by_model})
    claims = manifold.coverage_claims(df, r, 2, floor=floor)
    return manifold.coverage_overall(claims)


def test_the_overall_rule_on_constructed_cases():
    steep, across, shallow = (-0.75, -0.85, -0.65), (-0.55, -0.7, -0.4), (-0.4, -0.45, -0.35)
    novel, not_novel, resolved = [1.8] * 4, [0.5] * 4, [0.5] * 4  # 0.5 >= 3 x the floor's 0.1
    mem = [0.0] * 4
    # every criterion agrees for one model, the reference agrees: agrees
    v, why = overall({"memorize": mem, "a": novel, "b": novel}, {"a": slopes(steep), "b": slopes(across)},
                     delta_last={"a": resolved, "b": resolved})
    assert v == "agrees" and "for a" in why
    # ... but the memorizer covers faster than -1/k: the comparison fails, inconclusive
    v, why = overall({"memorize": mem, "a": novel}, {"a": slopes(steep)}, delta_last={"a": resolved},
                     ref=(-0.7, -0.8, -0.6))
    assert v == "inconclusive" and "reference disagrees" in why
    # M1 disagrees for every stopped model and delta_N is resolved: disagrees
    v, why = overall({"memorize": mem, "a": novel, "b": novel}, {"a": slopes(shallow), "b": slopes(shallow)},
                     delta_last={"a": resolved, "b": resolved})
    assert v == "disagrees" and "M1" in why
    # the same slopes with delta_N at the floor (<= 1.5 x its max, 0.18): inconclusive, and it says why
    v, why = overall({"memorize": mem, "a": novel, "b": novel}, {"a": slopes(shallow), "b": slopes(shallow)},
                     delta_last={"a": [0.15] * 4, "b": resolved})
    assert v == "inconclusive" and "a (R disagrees)" in why and "more samples" in why
    # M1 disagrees for one model only: inconclusive, naming what stands in the way per model
    v, why = overall({"memorize": mem, "a": novel, "b": novel}, {"a": slopes(shallow), "b": slopes(across)},
                     delta_last={"a": resolved, "b": resolved})
    assert v == "inconclusive" and "a: M1 disagrees" in why and "b: M1 inconclusive" in why
    # not novel for every stopped model: disagrees, whatever M1 says
    v, why = overall({"memorize": mem, "a": not_novel, "b": not_novel}, {"a": slopes(steep), "b": slopes(across)},
                     delta_last={"a": resolved, "b": resolved})
    assert v == "disagrees" and "novelty" in why
    # a model whose distance to M does not fall cannot make the entry agree
    v, _ = overall({"memorize": mem, "a": novel}, {"a": slopes(steep, dist=(0.03, 0.02, 0.04))},
                   delta_last={"a": resolved})
    assert v == "inconclusive"
    assert v in VERDICTS


def test_excluded_outputs_and_draws_are_counted_in_the_rows():
    # one training draw: M2 novelty rests on the finite outputs and counts the others; a slope over the N of one
    # training draw rests on one independent draw: too few
    df = table({"gamma-0": [1.5]}, draws=1, excluded=300)
    r = rates({"gamma-0": slopes((-0.6, -0.7, -0.55))}, draws=1).drop(columns=["draws"])
    c = by_label(manifold.coverage_claims(df, r, 2, floor=FLOOR))
    row = c[("gamma-0", "M2 novelty")].row()
    assert (row["n"], row["excluded"]) == (700, 300)
    assert row["measured [95 %]"] == "1.5 [1.45, 1.55]"  # the table's interval over the outputs, one draw
    assert c[("gamma-0", "M1")].row()["n"] == 1
    assert c[("gamma-0", "M1")].verdict == "untestable: too few resolved draws (1 of 1)"
    # several draws: a draw without a slope is excluded; a model without any is untestable
    df4 = table({"gamma-0": [1.5] * 4, "gamma-1": [1.5] * 4})
    r4 = rates({"gamma-0": slopes((-0.6, -0.7, -0.55)), "gamma-1": slopes((-0.6, -0.7, -0.55))}, draws=3)
    r4.loc[r4.model == "gamma-1", ["slope", "low", "high", "draws"]] = np.nan
    c4 = by_label(manifold.coverage_claims(df4, r4, 2, floor=FLOOR))
    assert (c4[("gamma-0", "M1")].n, c4[("gamma-0", "M1")].excluded) == (3, 1)
    assert c4[("gamma-1", "M1")].verdict == NO_STATE
    assert c4[("gamma-1", "M1")].excluded == 4


def test_planted_rates_through_coverage_rates_give_the_planted_verdicts():
    """The real coverage_rates on a table with planted power laws: delta_N ~ N^-0.3 (k = 1: shallower than -1,
    M1 disagrees) and N^-1.5 (steeper: agrees), distance ~ N^-0.5, W2 ~ N^-0.5, per-draw noise."""
    rng = np.random.default_rng(0)
    rows = []
    for model, rate in (("flat", -0.3), ("steep", -1.5)):
        for j in range(4):
            for n in NS:
                e = np.exp(0.05 * rng.standard_normal(3))
                rows.append({"model": model, "draw": j, "N": n, "delta_N": 3 * n ** rate * e[0],
                             "dist to M": n ** -0.5 * e[1], "W2 to smoothed target": n ** -0.5 * e[2],
                             "novelty (median)": 2.0 + 0.1 * j, "novelty low": 1.9, "novelty high": 2.1,
                             "outputs": 500, "excluded outputs": 0})
    df = pd.DataFrame(rows)
    r = manifold.coverage_rates(df, 1)
    c = by_label(manifold.coverage_claims(df, r, 1))
    assert abs(c[("flat", "M1")].estimate + 0.3) < 0.05 and c[("flat", "M1")].verdict == "disagrees"
    assert abs(c[("steep", "M1")].estimate + 1.5) < 0.05 and c[("steep", "M1")].verdict == "agrees"
    assert c[("steep", "M2 distance")].verdict == c[("steep", "M3")].verdict == "agrees"
    assert c[("steep", "M1")].n == 4  # the independent draws
    # with no floor there is no R claim, so M1's disagreement cannot refute: the steep model agrees anyway
    assert manifold.coverage_overall(list(c.values()))[0] == "agrees"


def test_the_docstring_example_runs():
    import doctest

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(manifold.coverage_claims, "coverage_claims", globs=vars(manifold).copy()):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


@pytest.mark.parametrize("k", [1, 2])
def test_the_criteria_regions_are_the_written_thresholds(k):
    crit = manifold.coverage_criteria(k, FLOOR)
    m1 = -1 / k - 0.1  # the memorizer's -1/k less the margin
    assert crit["M1"].agrees == (-math.inf, pytest.approx(m1))
    assert crit["M1"].disagrees == ((pytest.approx(m1), math.inf),)
    assert crit["M2 novelty"].agrees == (0.75, math.inf) and crit["M2 novelty"].disagrees == ((-math.inf, 0.75),)
    assert crit["M2 distance"].agrees == (-math.inf, -0.1)
    assert crit["M3"].agrees == (-math.inf, -0.25)
    assert crit["R"].agrees == (pytest.approx(0.3), math.inf)
    assert crit["R"].disagrees == ((-math.inf, pytest.approx(0.18)),) and crit["R"].post_hoc
    assert not any(crit[c].post_hoc for c in ("M1", "M2 novelty", "M2 distance", "M3", "reference"))
