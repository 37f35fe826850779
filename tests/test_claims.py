"""The store's claims (ridgexr.claims: store_claims, claims_table, `ridgexr claims`, the report's table): every claim
of the entry per cell it applies to, its numbers read from the store and checked against brute force."""

import math
import shutil

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

import ridgexr
from ridgexr.catalog import ClaimSpec
from ridgexr.claims import check_claim_specs, store_claims
from ridgexr.cli import app
from ridgexr.analysis.arrays import median_interval


def test_claim_specs_are_checked_against_the_registry():
    check_claim_specs([ClaimSpec(kind="reach-falls", t=[1.0, 0.1])])
    for bad, msg in [(dict(kind="reach-falls", t=[1.0]), "2 diffusion time"), (dict(kind="memorizes", t=[1.0]),
                     "compares no times"), (dict(kind="align-tangent"), "one or more"),
                     (dict(kind="memorises"), "not a kind an entry can claim"),
                     (dict(kind="coverage-faster"), "not a kind an entry can claim")]:  # a table kind
        with pytest.raises(ValueError, match=msg):
            check_claim_specs([ClaimSpec(**bad)])
    with pytest.raises(ValueError, match="finite diffusion times"):
        ClaimSpec(kind="reach-as-exact", t=[-1.0])


def test_a_run_refuses_an_unknown_claim_kind_before_any_cell(tmp_path, catalog_text, run_entry):
    with pytest.raises(ValueError, match="memorises"):
        run_entry(catalog_text(steps=5, samples=4) + "    claims:\n      - {kind: memorises}\n", tmp_path)
    assert not (tmp_path / "data").exists()


CLAIMS = """    claims:
      - {kind: memorizes, written: test}
      - {kind: does-not-memorize}
      - {kind: reach-falls, t: [1.0, 0.05]}
      - {kind: align-tangent, t: [0.5]}
      - {kind: slide-slower, t: [1.0, 0.05]}
"""


@pytest.fixture(scope="module")
def claims_store(tmp_path_factory, catalog_text, run_entry):
    return run_entry(catalog_text(steps=12, samples=16) + CLAIMS, tmp_path_factory.mktemp("claims"))[1].store


def test_the_store_claims_follow_the_entry(claims_store):
    ds = ridgexr.open_dataset(claims_store)
    claims = store_claims(ds)
    run = (ds["cell_applies"] & ds["cell_complete"]).compute()
    exact = int(run.sel(schedule="exact").sum())  # a one-model store: include_exact adds the schedule 'exact'
    others = int(run.sum()) - exact
    # memorizes: the exact cells; does-not-memorize, reach-falls, align-tangent (one time), slide-slower: the others
    assert len(claims) == exact + 4 * others and exact >= 1 and others >= 2
    assert sum(c.labels["schedule"] == "exact" for c in claims) == exact
    assert {c.kind for c in claims} == {"memorizes", "does-not-memorize", "reach-falls", "align-tangent",
                                        "slide-slower"}
    # two points: the law is its training set (no fresh draws: no null), and every model predicts the normal
    # coordinate exactly, so reach and align cannot be tested
    for c in claims:
        if c.kind in ("memorizes", "does-not-memorize"):
            assert c.verdict.startswith("untestable: no fresh draws of the law")
        if c.kind in ("reach-falls", "align-tangent"):
            assert c.verdict.startswith("untestable: the model's normal error is zero"), c.verdict


def _brute_memorized(x, train):
    d = np.sort(np.linalg.norm(x[:, None, :] - train[None], axis=-1), axis=1)
    ok = np.isfinite(d[:, 0])
    return int((d[ok, 0] / d[ok, 1] < ridgexr.defaults.MEMORIZED_RATIO).sum()), int(ok.sum())


CIRCLE = """
experiments:
  circle:
    dataset:
      manifold: {kind: circle, ambient_dim: 2, radius: 2.0, density: piecewise, n: 20, seed: 0, n_population: 600}
    process: {T: 2.0, t_min: 0.0001, n_steps: 40}
    model: {widths: [8], n_frequencies: 3, include_exact: true}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: 64
    d_star: 1
    store: circle.zarr
    claims:
      - {kind: memorizes}
      - {kind: does-not-memorize, models: [exact]}
"""


@pytest.fixture(scope="module")
def circle_store(tmp_path_factory, run_entry):
    return run_entry(CIRCLE, tmp_path_factory.mktemp("circle"))[1].store


def test_memorization_is_the_excess_over_fresh_draws_counted_by_brute_force(circle_store):
    """The exact denoiser (the memorizer, run to t = 1e-4) on a circle's 20 points: its share with d1/d2 < 1/3 less that of the
    store's fresh draws of the law, both counted here by brute force; it memorizes, so it does not "not memorize"."""
    from ridgexr.verdicts import share_difference_ci

    ds = ridgexr.open_dataset(circle_store)
    claims = {c.kind: c for c in store_claims(ds)}
    train = ds["train_data"].values
    cell = ds.sel(schedule="exact", width=8).isel(step=-1)
    x = cell["trajectory"].transpose("sample", "dim").values / float(cell["alpha"])
    k, n = _brute_memorized(x, train)
    k0, n0 = _brute_memorized(ds["population_data"].values, train)
    for kind in ("memorizes", "does-not-memorize"):
        c = claims[kind]
        assert (c.n, c.estimate) == (n, k / n - k0 / n0)
        assert (c.low, c.high) == share_difference_ci(k, n, k0, n0)[1:]
        assert c.null.value == k0 / n0 and str(n0) in c.null.how
    assert claims["memorizes"].verdict == "agrees" and claims["does-not-memorize"].verdict == "disagrees"


def test_changing_a_stored_number_changes_the_table_and_dropped_samples_are_counted(circle_store, tmp_path):
    copy = tmp_path / "copy.zarr"
    shutil.copytree(circle_store, copy)
    before = {c.kind: c for c in store_claims(ridgexr.open_dataset(copy))}
    ds = ridgexr.open_dataset(copy)
    arr = zarr.open_group(str(copy), mode="r+")["trajectory"]
    dims = ds["trajectory"].dims
    index = {"schedule": int(np.flatnonzero(ds["schedule"].values == "exact")[0]), "width": 0}
    sel = tuple(index.get(d, slice(None)) for d in dims)
    values = arr[sel]
    rest = [d for d in dims if d not in index]
    values = np.moveaxis(values, (rest.index("sample"), rest.index("step")), (0, 1))
    values[:5, -1] = np.nan  # five samples dropped at the last step
    values[5:, -1] = 0.0  # the others at the circle's centre: equidistant from the training points, not memorized
    arr[sel] = np.moveaxis(values, (0, 1), (rest.index("sample"), rest.index("step")))
    after = {c.kind: c for c in store_claims(ridgexr.open_dataset(copy))}
    c = after["memorizes"]
    assert (c.n, c.excluded) == (before["memorizes"].n - 5, 5)
    assert c.estimate < 0 and c.verdict == "disagrees" and before["memorizes"].verdict == "agrees"


def test_cli_claims_prints_the_table_and_markdown(circle_store):
    out = CliRunner().invoke(app, ["claims", str(circle_store)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "memorizes" in out.output and "agrees" in out.output and "excess memorized share" in out.output
    # one table per claim: its statement said once, above its rows (not once per row, folded into a column)
    flat = " ".join(out.output.split())
    claims = store_claims(ridgexr.open_dataset(circle_store))
    for statement in {c.statement for c in claims}:
        assert flat.count(statement) == 1, statement
    md = CliRunner().invoke(app, ["claims", str(circle_store), "--markdown"])
    assert md.exit_code == 0 and "| schedule | width |" in md.output and "criteria recorded in the store" in md.output
    assert "| criterion |" in md.output and "criterion (before the run)" not in md.output


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
    assert table.find_parent("details") is not None  # in full, one click away
    # at a glance, before the figures: one row per cell, one column per declared claim, each entry its verdict and,
    # where it was measured, the contrast with its interval
    glance = soup.find("table", id="claims-glance")
    assert glance is not None and glance.find_next("figure") is not None and table.find_previous("table") is glance
    head = [th.get_text() for th in glance.find("thead").find_all("th")]
    assert head == ["schedule", "width", "memorizes", "does-not-memorize", "reach-falls, t 1 -> 0.05",
                    "align-tangent, t 0.5", "slide-slower, t 1 -> 0.05"]
    entries = {tuple(td.get_text() for td in tr.find_all("td")[:2]): [td for td in tr.find_all("td")[2:]]
               for tr in glance.find("tbody").find_all("tr")}
    assert len(entries) == len({(c.labels["schedule"], c.labels["width"]) for c in claims})
    for c in claims:
        column = next(i for i, h in enumerate(head[2:]) if h.split(",")[0] == c.kind)
        td = entries[(str(c.labels["schedule"]), str(c.labels["width"]))][column]
        word = c.verdict.split(":")[0]
        assert td.get_text().startswith(word) and word.split(" ")[0] in td["class"], (td, c.verdict)
        if not word.startswith("untestable"):
            assert c.row()["measured [95 %]"] in td.get_text()


def test_the_slide_claim_reads_the_tangential_and_ridge_distances_of_the_store(claims_store):
    """The store's slide-slower claim: the model's S, computed here from tangential_distance and the resolved ridge
    distances at the nearest observed steps (trajectories paired), less the forward reference's S (the claim's
    null)."""
    from ridgexr.analysis import resolved, tangential_distance
    from ridgexr.analysis.selection import step_index

    ds = ridgexr.open_dataset(claims_store)
    claims = [c for c in store_claims(ds) if c.kind == "slide-slower"]
    assert claims
    steps = [step_index(ds, t=1.0), step_index(ds, t=0.05)]
    for c in claims:
        cell = ds.sel(c.labels)
        tang = tangential_distance(cell.isel(step=steps))["tangential_distance"].transpose("step", "sample").values
        ridge = np.stack([resolved(cell.isel(step=s), "ridge_distance").values for s in steps])
        ok = np.isfinite(tang).all(0) & np.isfinite(ridge).all(0)
        assert c.n == ok.sum() and c.excluded == ok.size - ok.sum()
        med_t, med_r = np.median(tang[:, ok], axis=1), np.median(ridge[:, ok], axis=1)
        s_model = np.log(med_t[1] / med_t[0]) - np.log(med_r[1] / med_r[0])
        assert c.estimate == pytest.approx(s_model - c.null.value)
        assert math.isfinite(c.null.value) and "forward process" in c.null.how


def test_the_slide_contrast_is_the_log_fall_of_the_tangential_median_less_the_ridge_one():
    """slide-slower's kernel: T falling by 2 and R by 4 gives log 2, less the reference's; pairs with any NaN are
    excluded and counted; scaling T or R by a constant changes nothing; the interval holds the estimate."""
    from ridgexr.claims.slide_slower import slide_contrast

    rng = np.random.default_rng(3)
    t0, r0 = rng.uniform(1.0, 2.0, 400), rng.uniform(1.0, 2.0, 400)
    t1, r1 = t0 / 2, r0 / 4
    t1[:7] = np.nan
    r0[7:10] = np.nan
    ref = tuple(rng.uniform(1.0, 2.0, (4, 1000)) * np.array([[1.0], [0.5], [1.0], [0.5]]))  # S_ref = 0
    est, lo, hi, n, excluded, s_ref = slide_contrast((t0, t1, r0, r1), ref)
    ok = slice(10, None)
    expect = np.log(np.median(t1[ok]) / np.median(t0[ok])) - np.log(np.median(r1[ok]) / np.median(r0[ok]))
    assert (n, excluded) == (390, 10)
    assert est == pytest.approx(expect - s_ref) and expect == pytest.approx(np.log(2.0)) and abs(s_ref) < 0.05
    assert lo <= est <= hi
    again = slide_contrast((3.0 * t0, 3.0 * t1, 0.5 * r0, 0.5 * r1), ref)
    assert again[0] == pytest.approx(est)
    assert np.isnan(slide_contrast((t0[:1], t1[:1], r0[:1], r1[:1]), ref)[0])


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
    limit = arrays.intervals.RESAMPLE_LIMIT
    arrays.intervals.RESAMPLE_LIMIT = 100  # the order-statistic path at this size
    try:
        fast = arrays.bootstrap_medians(v, 4000, np.random.default_rng(1))
    finally:
        arrays.intervals.RESAMPLE_LIMIT = limit
    slow = np.median(v[np.random.default_rng(2).integers(0, n, size=(4000, n))], axis=1)
    assert stats.ks_2samp(fast, slow).pvalue > 1e-3
    assert not stats.ks_2samp(fast, slow + 0.02).pvalue > 1e-3  # the test sees a shift of a fifth of the spread
    big = np.random.default_rng(3).normal(size=arrays.RESAMPLE_LIMIT + 1)
    med, lo, hi, m = median_interval(big)
    half = 1.96 * np.sqrt(np.pi / 2 / big.size)  # the median's asymptotic standard error for N(0, 1)
    assert m == big.size and lo < med < hi and abs((hi - lo) / 2 - half) < 0.15 * half


def test_the_forward_reference_is_observed_once_per_time_and_its_tangential_part_only_when_read(claims_store,
                                                                                                  monkeypatch):
    """The forward process's reference is observed once per (training set, time) whatever the cells and claims
    that read it; its distance along the ridge (a frame at every projection) only for a claim that reads it
    (slide-slower), not for reach-falls.  The numbers are those of observe_forward with everything computed
    (the path before the split): the reach claims' ratios and nulls, and slide-slower's reference, equal."""
    import ridgexr.claims.evidence as evidence_module
    from ridgexr.claims import StoreEvidence, observe_forward
    from ridgexr.claims.reach_falls import tube_null, tube_ratio

    ds = ridgexr.open_dataset(claims_store)
    observed, along = [], []
    real_observe, real_along = evidence_module.observe_forward, evidence_module.forward_tangential
    monkeypatch.setattr(evidence_module, "observe_forward",
                        lambda *a, **k: observed.append(a[1]) or real_observe(*a, **k))
    monkeypatch.setattr(evidence_module, "forward_tangential",
                        lambda *a, **k: along.append(a[0]["t"]) or real_along(*a, **k))
    reach = [ClaimSpec(kind="reach-falls", t=[1.0, 0.05])]
    claims = store_claims(ds, reach)
    assert len(claims) >= 2 and len(observed) == 1 and along == []  # one time, read by every model cell
    slide = [ClaimSpec(kind="slide-slower", t=[1.0, 0.05])]
    store_claims(ds, reach + slide)
    assert len(observed) == 1 + 2 and len(along) == 2  # a new evidence: two times, each with its tangential part
    monkeypatch.undo()

    evidence = StoreEvidence(ds)
    step, t = evidence.step(0.05)
    label = next(c.labels for c in claims)
    full = observe_forward(evidence.train(label), t, evidence.d_star, evidence.n_reference(), 0, evidence.exp.ridge)
    assert set(full) == {"ridge_distance", "tangential_distance", "ridge_projection", "t", "how"}
    for c in claims:
        model = evidence.resolved_at(c.labels, step, "ridge_distance")
        est, lo, hi, n, excl = tube_ratio(model, full["ridge_distance"])
        null = tube_null(full["ridge_distance"], full["how"])
        np.testing.assert_array_equal([c.estimate, c.low, c.high, c.n, c.excluded], [est, lo, hi, n, excl])
        np.testing.assert_array_equal([c.null.value, c.null.low, c.null.high], [null.value, null.low, null.high])
        assert c.null.how == null.how and math.isfinite(est)
    lazy = evidence.forward(label, step)
    assert "tangential_distance" not in lazy
    np.testing.assert_array_equal(lazy["ridge_distance"], full["ridge_distance"])
    np.testing.assert_array_equal(evidence.forward(label, step, tangential=True)["tangential_distance"],
                                  full["tangential_distance"])
    assert np.isfinite(full["tangential_distance"]).any()
