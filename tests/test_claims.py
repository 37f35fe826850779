"""The claims engine (ridgexr.analysis.claims) and the store's claims (ridgexr.claims, `ridgexr claims`)."""

import math
import shutil

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from typer.testing import CliRunner

import ridgexr
from ridgexr.analysis.claims import (NO_STATE, UNTESTABLE, Claim, Criterion, draws_to_resolve, interval_verdict,
                                     median_interval)
from ridgexr.catalog import ClaimSpec, experiment_from_file
from ridgexr.claims import CRITERIA, _align, store_claims
from ridgexr.cli import app
from ridgexr.run import run_experiment

finite = st.floats(-100, 100, allow_nan=False)


def test_an_interval_across_both_regions_is_inconclusive_and_one_inside_disagree_disagrees():
    c = Criterion.below(0.35, disagree_above=0.5)
    assert interval_verdict(0.0, 0.19, c) == "agrees"
    assert interval_verdict(0.2, 0.7, c) == "inconclusive"  # across both regions
    assert interval_verdict(0.55, 0.9, c) == "disagrees"
    assert interval_verdict(0.36, 0.49, c) == "inconclusive"  # between the regions
    assert interval_verdict(math.nan, 0.3, c) == NO_STATE
    with pytest.raises(ValueError, match="low"):
        interval_verdict(0.5, 0.1, c)
    with pytest.raises(ValueError, match="overlaps"):
        Criterion((0, 1), ((0.5, 2),), "overlapping")


@given(lo=finite, width=st.floats(0, 50), a=finite, b=finite)
def test_a_verdict_is_agrees_exactly_when_the_interval_lies_in_the_agree_region(lo, width, a, b):
    level, other = min(a, b), max(a, b)
    c = Criterion.above(other, disagree_below=level)
    hi = lo + width
    v = interval_verdict(lo, hi, c)
    assert (v == "agrees") == (lo >= other)
    assert (v == "disagrees") == (hi <= level and not lo >= other)
    assert v in ("agrees", "disagrees", "inconclusive")


@given(est=st.floats(-1, 1), below=st.floats(0.01, 2), above=st.floats(0.01, 2), n=st.integers(2, 500))
@settings(max_examples=200)
def test_draws_to_resolve_shrink_the_interval_into_the_region_holding_the_estimate(est, below, above, n):
    c = Criterion.within(-1.5, 1.5)
    need = draws_to_resolve(est, est - below, est + above, n, c)
    assert need is not None and need >= n
    k = math.sqrt(n / need)  # the half-widths at `need` draws
    assert interval_verdict(est - below * k, est + above * k, c) == "agrees" or math.isclose(
        max(-1.5 - (est - below * k), (est + above * k) - 1.5), 0, abs_tol=1e-9)
    if need > n:  # one draw fewer would not do
        k1 = math.sqrt(n / (need - 1))
        assert est - below * k1 < -1.5 + 1e-12 or est + above * k1 > 1.5 - 1e-12
    # an estimate between the regions cannot be settled by more draws
    gap = Criterion.below(0.35, disagree_above=0.5)
    assert draws_to_resolve(0.4, 0.3, 0.5, n, gap) is None


def test_a_claim_counts_its_excluded_draws_and_the_gate_overrides_its_evidence():
    c = CRITERIA["does-not-memorize"]
    claim = Claim("x", "m", 0.0, 0.0, 0.19, 16, c, excluded=16, gate="generates")
    assert claim.verdict == "agrees" and claim.excluded_share == 0.5
    assert "rests on 16 of 32 draws" in claim.note
    assert Claim("x", "m", 0.0, 0.0, 0.19, 16, c, gate="does not generate").verdict == UNTESTABLE
    wide = Claim("x", "m", 0.2, 0.05, 0.45, 16, c)
    assert wide.verdict == "inconclusive" and "draws would settle it" in wide.note
    cells = Claim("x", "m", 0.2, 0.05, 0.45, 16, c, unit="cells")  # n counts cells (a correlation over cells)
    assert "cells would settle it" in cells.note and "draws" not in cells.note
    assert Claim("x", "m", math.nan, math.nan, math.nan, 0, c).verdict == NO_STATE
    # an estimate of exactly 0 against "above 0": the scaling asks ~10^20 draws; the note says why instead
    edge = Claim("x", "m", 0.0, -0.01, 0.01, 32, Criterion.above(1e-12))
    assert draws_to_resolve(0.0, -0.01, 0.01, 32, Criterion.above(1e-12)) > 10_000 * 32
    assert edge.verdict == "inconclusive" and "region's edge" in edge.note and "would settle" not in edge.note


def test_median_interval_matches_numpy_and_counts_finite_values(rng):
    v = rng.normal(size=301)
    v[:7] = np.nan
    med, lo, hi, n = median_interval(v)
    assert n == 294 and med == np.median(v[7:]) and lo < med < hi


@pytest.mark.parametrize("n", [401, 400])  # odd: one order statistic; even: the mean of two
def test_bootstrap_medians_by_order_statistics_have_the_resampling_law(n):
    """The order-statistic draws of the bootstrap median and the plain resampling draws agree in law (two-sample
    Kolmogorov-Smirnov over 4 000 medians each, on values with ties), and large inputs take the first path."""
    from scipy import stats

    from ridgexr.analysis import arrays

    v = np.random.default_rng(n).exponential(size=n).round(2)  # ties
    limit = arrays.RESAMPLE_LIMIT
    arrays.RESAMPLE_LIMIT = 100  # the order-statistic path at this size
    try:
        fast = arrays.bootstrap_medians(v, 4000, np.random.default_rng(1))
    finally:
        arrays.RESAMPLE_LIMIT = limit
    slow = np.median(v[np.random.default_rng(2).integers(0, n, size=(4000, n))], axis=1)
    assert stats.ks_2samp(fast, slow).pvalue > 1e-3
    assert not stats.ks_2samp(fast, slow + 0.02).pvalue > 1e-3  # the test sees a shift of a fifth of the spread
    big = np.random.default_rng(3).normal(size=arrays.RESAMPLE_LIMIT + 1)
    med, lo, hi, m = median_interval(big)
    half = 1.96 * np.sqrt(np.pi / 2 / big.size)  # the median's asymptotic standard error for N(0, 1)
    assert m == big.size and lo < med < hi and abs((hi - lo) / 2 - half) < 0.15 * half


def test_the_align_null_an_isotropic_error_matches_the_f_distribution():
    """(|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)) of an isotropic Gaussian error is sqrt(F(d*, d - d*))."""
    import xarray as xr

    d, d_star, n = 12, 3, 40_000
    e = np.random.default_rng(0).normal(size=(n, d))
    tangent = np.concatenate([e[:, :d_star], np.zeros((n, d - d_star))], axis=1)
    normal = np.concatenate([np.zeros((n, d_star)), e[:, d_star:]], axis=1)
    at = xr.Dataset({"residual_tangent": (("sample", "dim"), tangent), "residual_normal": (("sample", "dim"), normal),
                     "frame_degenerate": (("sample",), np.zeros(n, bool))})
    ratio = _align(at, d_star)
    assert np.median(ratio) == pytest.approx(math.sqrt(stats.f.median(d_star, d - d_star)), rel=0.02)


def test_claim_specs_are_validated_by_kind():
    assert ClaimSpec(kind="reach-falls", t=[1.0, 0.1]).t == [1.0, 0.1]
    for bad, msg in [(dict(kind="reach-falls", t=[1.0]), "2 diffusion time"), (dict(kind="memorizes", t=[1.0]),
                     "compares no times"), (dict(kind="align-tangent"), "one or more"),
                     (dict(kind="reach-as-exact", t=[-1.0]), "finite diffusion times")]:
        with pytest.raises(ValueError, match=msg):
            ClaimSpec(**bad)
    with pytest.raises(ValueError, match="kind"):
        ClaimSpec(kind="memorises")


CLAIMS = """    claims:
      - {kind: memorizes, written: test}
      - {kind: does-not-memorize}
      - {kind: reach-falls, t: [1.0, 0.05]}
      - {kind: align-tangent, t: [0.5]}
      - {kind: slide-slower, t: [1.0, 0.05]}
"""


@pytest.fixture(scope="module")
def claims_store(tmp_path_factory, catalog_text):
    tmp = tmp_path_factory.mktemp("claims")
    f = tmp / "cat.yaml"
    f.write_text(catalog_text(steps=12, samples=16) + CLAIMS)
    return run_experiment(experiment_from_file(f), data_dir=tmp / "data").store


def _brute_memorized(x, train):
    d = np.sort(np.linalg.norm(x[:, None, :] - train[None], axis=-1), axis=1)
    ok = np.isfinite(d[:, 0])
    return int((d[ok, 0] / d[ok, 1] < 1 / 3).sum()), int(ok.sum())


def test_the_store_claims_follow_the_entry_and_match_a_brute_force_count(claims_store):
    ds = ridgexr.open_dataset(claims_store)
    claims = store_claims(ds)
    run = (ds["cell_applies"] & ds["cell_complete"]).compute()
    exact = int(run.sel(schedule="exact").sum())  # a one-model store: include_exact adds the schedule 'exact'
    others = int(run.sum()) - exact
    # memorizes: the exact cells; does-not-memorize, reach-falls, align-tangent, slide-slower: every other cell
    assert len(claims) == exact + 4 * others and exact >= 1 and others >= 2
    assert sum(c.labels["schedule"] == "exact" for c in claims) == exact
    train = ds["train_data"].values
    for c in claims:
        if "memoriz" not in c.statement:
            continue
        cell = ds.sel(c.labels).isel(step=-1)
        x = cell["trajectory"].transpose("sample", "dim").values / float(cell["alpha"])
        k, n = _brute_memorized(x, train)
        assert (c.n, c.estimate) == (n, k / n)


def test_changing_a_stored_number_changes_the_table_and_dropped_samples_are_counted(claims_store, tmp_path):
    copy = tmp_path / "copy.zarr"
    shutil.copytree(claims_store, copy)
    before = {(c.statement, tuple(c.labels.values())): c for c in store_claims(ridgexr.open_dataset(copy))}
    ds = ridgexr.open_dataset(copy)
    cell = next(c for c in before.values() if c.statement.startswith("the exact denoiser memorizes")).labels
    index = {d: int(np.flatnonzero(ds[d].values == v)[0]) for d, v in cell.items()}
    arr = zarr.open_group(str(copy), mode="r+")["trajectory"]
    dims = ds["trajectory"].dims
    sel = tuple(index.get(d, slice(None)) for d in dims)
    values = arr[sel]  # (sample, step, dim) at this cell
    s_axis = [d for d in dims if d not in index].index("sample")
    t_axis = [d for d in dims if d not in index].index("step")
    values = np.moveaxis(values, (s_axis, t_axis), (0, 1))
    values[:5, -1] = np.nan  # five samples dropped at the last step
    values[5:, -1] = 0.0  # the others halfway between the two training points: not memorized
    arr[sel] = np.moveaxis(values, (0, 1), (s_axis, t_axis))
    after = {(c.statement, tuple(c.labels.values())): c for c in store_claims(ridgexr.open_dataset(copy))}
    key = next(k for k, c in before.items() if c.labels == cell and "memorizes" in c.statement)
    assert (after[key].n, after[key].excluded) == (before[key].n - 5, 5)
    assert after[key].estimate == 0.0 and after[key].verdict == "disagrees"
    assert before[key].verdict == "agrees"


def test_cli_claims_prints_the_table_and_markdown(claims_store):
    out = CliRunner().invoke(app, ["claims", str(claims_store)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "memorizes" in out.output and "agrees" in out.output and "Wilson lower bound > 0.8" in out.output
    md = CliRunner().invoke(app, ["claims", str(claims_store), "--markdown"])
    assert md.exit_code == 0 and "| schedule | width |" in md.output and "criteria recorded in the store" in md.output


def test_the_report_shows_the_claims_table_with_every_claim_and_its_verdict(claims_store, tmp_path):
    from bs4 import BeautifulSoup

    from ridgexr.report import make_report

    ds = ridgexr.open_dataset(claims_store)
    paths = make_report(ds, tmp_path, title="tiny", n_frames=2)
    soup = BeautifulSoup(paths["html"].read_text(), "html.parser")
    table = soup.find("table", id="claims")
    header = [th.get_text() for th in table.find("thead").find_all("th")]
    rows = [[td.get_text() for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")]
    claims = store_claims(ds)
    assert len(rows) == len(claims)
    assert [r[header.index("verdict")] for r in rows] == [c.verdict for c in claims]
    assert "criteria recorded in the store" in soup.find("p", class_="claims").get_text()


def test_the_slide_contrast_is_the_log_fall_of_the_tangential_median_less_the_ridge_one():
    """slide-slower's kernel: T falling by 2 and R by 4 gives log 2; the pairs with any NaN are excluded and
    counted; scaling T or R by a constant changes nothing (a ratio of falls); the interval holds the estimate."""
    from ridgexr.claims import _relative_fall_contrast

    rng = np.random.default_rng(3)
    t0 = rng.uniform(1.0, 2.0, 400)
    r0 = rng.uniform(1.0, 2.0, 400)
    t1, r1 = t0 / 2, r0 / 4
    t1[:7] = np.nan
    r0[7:10] = np.nan
    est, lo, hi, n, excluded = _relative_fall_contrast((t0, t1), (r0, r1))
    ok = slice(10, None)
    expect = np.log(np.median(t1[ok]) / np.median(t0[ok])) - np.log(np.median(r1[ok]) / np.median(r0[ok]))
    assert (n, excluded) == (390, 10)
    assert est == pytest.approx(expect) and est == pytest.approx(np.log(2.0))
    assert lo <= est <= hi
    again = _relative_fall_contrast((3.0 * t0, 3.0 * t1), (0.5 * r0, 0.5 * r1))
    assert again[0] == pytest.approx(est)
    assert np.isnan(_relative_fall_contrast((t0[:1], t1[:1]), (r0[:1], r1[:1]))[0])


def test_the_slide_claim_reads_the_tangential_and_ridge_distances_of_the_store(claims_store):
    """The store's slide-slower claim equals the contrast computed here from tangential_distance and the
    resolved ridge distances at the nearest observed steps, pairing trajectories by sample."""
    from ridgexr.analysis import resolved, tangential_distance
    from ridgexr.analysis._helpers import step_index

    ds = ridgexr.open_dataset(claims_store)
    claims = [c for c in store_claims(ds) if c.statement.startswith("slide")]
    assert claims
    steps = [step_index(ds, t=1.0), step_index(ds, t=0.05)]
    for c in claims:
        cell = ds.sel(c.labels)
        tang = tangential_distance(cell.isel(step=steps))["tangential_distance"].transpose("step", "sample").values
        ridge = np.stack([resolved(cell.isel(step=s), "ridge_distance").values for s in steps])
        ok = np.isfinite(tang).all(0) & np.isfinite(ridge).all(0)
        assert c.n == ok.sum() and c.excluded == ok.size - ok.sum()
        if c.n >= 2:
            med_t, med_r = np.median(tang[:, ok], axis=1), np.median(ridge[:, ok], axis=1)
            assert c.estimate == pytest.approx(np.log(med_t[1] / med_t[0]) - np.log(med_r[1] / med_r[0]))
