"""The registry of claim kinds (ridgexr.claims): every kind ships a control that must read "disagrees" and one that
must read "agrees"; the store-level controls of reach and slide on a set where they are not true by construction;
the one memorization threshold; the generated table of kinds; and a kind registered in a test is evaluated and
listed with no other edit."""

import dataclasses
import inspect
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

import ridgexr
from ridgexr import defaults
from ridgexr.catalog import ClaimSpec
from ridgexr.claims import KINDS, ClaimKind, Control, kinds_markdown, register, store_claims, unregister
from ridgexr.verdicts import Criterion, median_ci

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_states_its_contrast_and_its_controls_read_as_built(name):
    kind = KINDS[name]
    for field in ("statement", "measure", "reference", "null", "margin", "applies", "written"):
        assert getattr(kind, field), (name, field)
    controls = kind.controls()
    expects = [c.expect for c in controls]
    assert "disagrees" in expects and "agrees" in expects, (name, expects)
    for control in controls:
        claims = control.build()
        assert claims and all(c.verdict == control.expect for c in claims), (name, control.name,
                                                                              [c.verdict for c in claims])
        assert all(c.kind == name for c in claims)


def test_the_controls_that_todays_criteria_could_not_fail():
    """The old criteria read "agrees" on the negative controls: reach's "interval of the fall below 0" on a
    sampler 3 tube radii off the ridge (its distance still falls), align's "above 1" on an isotropic error at
    d* = 25, d = 32 (its median ratio is sqrt(median F(25, 7)) = 1.036)."""
    from ridgexr.claims.align_tangent import isotropic_median
    from ridgexr.claims.evidence import observe_forward
    from ridgexr.claims.reach_falls import THREE_POINTS

    early = observe_forward(THREE_POINTS, 1.0, 1, 500, seed=2)["ridge_distance"]
    late = 3 * observe_forward(THREE_POINTS, 0.05, 1, 500, seed=1)["ridge_distance"]
    _, lo, hi, _ = median_ci(late - early)
    assert np.nanmedian(late) < np.nanmedian(early)  # its distance falls: "reach-falls: agrees" before
    reach = dict((c.name, c) for c in KINDS["reach-falls"].controls())
    assert reach["a sampler ending 3 tube radii off the ridge"].build()[0].verdict == "disagrees"
    align = KINDS["align-tangent"].controls()[0].build()[0]
    assert align.n == 10_000 and isotropic_median(25, 32) == pytest.approx(1.036, abs=5e-4)
    assert align.estimate * isotropic_median(25, 32) > 1.02  # the old measure: above 1 ...
    assert align.verdict != "agrees"  # ... the new contrast: not "agrees"



@pytest.mark.parametrize("gap_floor", [None, 0.9])
def test_a_forward_reference_counts_its_resolved_draws_in_its_words(gap_floor):
    """The words a table prints under a null name the draws that made it: where frames are degenerate (a gap floor
    of 0.9 masks some of 60 draws on three points), the count of resolved ones, equal to the finite distances."""
    from ridgexr.catalog.sections import RidgeSpec
    from ridgexr.claims.evidence import observe_forward
    from ridgexr.claims.reach_falls import THREE_POINTS

    ref = observe_forward(THREE_POINTS, 0.5, 1, 60, 0, RidgeSpec(gap_floor=gap_floor), tangential=False)
    resolved = int(np.isfinite(ref["ridge_distance"]).sum())
    assert ref["how"].startswith("60 draws of the forward process from the 3 training points at t = 0.5")
    if gap_floor is None:
        assert resolved == 60 and "resolved" not in ref["how"]
    else:
        assert 0 < resolved < 60
        assert f"{resolved} of them resolved, {60 - resolved} on degenerate frames masked" in ref["how"]

THREE = """
experiments:
  three:
    dataset: {points: three-points}
    process: {T: 3.0, t_min: 0.01, n_steps: 80}
    model: {widths: [8], n_frequencies: 3, include_exact: true}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1"]
    sampler: {kind: sde, block_steps: 8, record_every: 4}
    n_samples: 1000
    d_star: 1
    store: three.zarr
    claims:
      - {kind: reach-falls, t: [1.0, 0.05], models: [exact]}
      - {kind: slide-slower, t: [0.5, 0.05], models: [exact]}
"""


@pytest.fixture(scope="module")
def three_store(tmp_path_factory, run_entry):
    """Three points (0,0), (5,0), (0,5): the ridge is no straight line through them, and the exact denoiser's
    1 000 trajectories (80 steps) are the reach control that must agree and the slide control (the memorizer) that
    must disagree."""
    return run_entry(THREE, tmp_path_factory.mktemp("three"))[1].store


@pytest.mark.slow
def test_reach_agrees_for_the_exact_denoiser_and_disagrees_three_tube_radii_off(three_store, tmp_path):
    ds = ridgexr.open_dataset(three_store)
    reach = [c for c in store_claims(ds) if c.kind == "reach-falls"]
    assert len(reach) == 1 and reach[0].verdict == "agrees" and reach[0].why_untestable == ""
    assert reach[0].null.value > 0 and "forward process" in reach[0].null.how
    # the same sampler with its states at t_late pushed to 3 x their ridge distance: it still falls from t = 1
    copy = tmp_path / "copy.zarr"
    shutil.copytree(three_store, copy)
    from ridgexr.analysis.selection import step_index

    late, early = step_index(ds, t=0.05), step_index(ds, t=1.0)
    arr = zarr.open_group(str(copy), mode="r+")["ridge_distance"]
    dims = ds["ridge_distance"].dims
    at = {"schedule": int(np.flatnonzero(ds["schedule"].values == "exact")[0]), "width": 0, "step": late}
    sel = tuple(at.get(d, slice(None)) for d in dims)
    arr[sel] = 3 * arr[sel]
    off = ridgexr.open_dataset(copy)
    d = off["ridge_distance"].sel(schedule="exact", width=8).compute()
    assert float(d.isel(step=late).median()) < float(d.isel(step=early).median())  # "falls": the old agrees
    pushed = [c for c in store_claims(off) if c.kind == "reach-falls"][0]
    assert pushed.verdict == "disagrees" and pushed.estimate == pytest.approx(3 * reach[0].estimate, rel=1e-9)


@pytest.mark.slow
def test_slide_disagrees_for_the_memorizer(three_store):
    ds = ridgexr.open_dataset(three_store)
    slide = [c for c in store_claims(ds) if c.kind == "slide-slower"]
    assert len(slide) == 1 and slide[0].verdict == "disagrees", slide[0].row()
    assert slide[0].low < 0 < slide[0].high  # the memorizer's contrast with itself: 0


def test_reach_on_two_points_is_untestable_by_construction(tmp_path, catalog_text, run_entry):
    """On two points every random-feature model predicts the normal coordinate exactly: its ridge distance is the
    exact denoiser's, so reach (and reach-as-exact) read "untestable", not "agrees"."""
    ds = ridgexr.open_dataset(run_entry(catalog_text(steps=12, samples=16), tmp_path)[1].store)
    claims = store_claims(ds, [ClaimSpec(kind="reach-falls", t=[1.0, 0.05]), ClaimSpec(kind="reach-as-exact",
                                                                                        t=[0.5])])
    assert claims and all(c.verdict.startswith("untestable: the model's normal error is zero here") for c in claims)
    assert all(c.labels["schedule"] != "exact" for c in claims)


def test_one_memorization_threshold_for_the_claims_and_tau_mem():
    """f_mem = 62 / 256 (0.242 [0.194, 0.298]): tau_mem's rule (its interval above MEMORIZED_SHARE) and the claims
    (the excess over fresh draws' 0 of 1 000 above MEMORIZED_SHARE) both say "has memorized"; the two rules once
    said "does not memorize" (upper bound < 0.35) and "has memorized" (lower bound > 0.1) of it."""
    from ridgexr.analysis import training_timescales
    from ridgexr.claims.does_not_memorize import memorized_excess

    assert inspect.signature(training_timescales).parameters["level"].default == defaults.MEMORIZED_SHARE
    m = defaults.MEMORIZED_SHARE
    assert KINDS["does-not-memorize"].criterion().agrees == (-math.inf, m)
    assert KINDS["memorizes"].criterion().agrees == (m, math.inf)
    for kind, verdict in (("does-not-memorize", "disagrees"), ("memorizes", "agrees")):
        c = memorized_excess(62, 256, 0, 1000, KINDS[kind], statement="x", null_how="fresh")
        assert c.verdict == verdict and c.low > m
    from ridgexr.analysis import arrays

    _, low, _, _ = arrays.memorized_share_ci(np.r_[np.zeros(62), np.ones(194)], n_boot=2000)
    assert low > m  # tau_mem reached: the same side of the same threshold
    sources = [p.read_text() for p in (Path(ridgexr.__file__).parent / "claims").glob("*.py")]
    sources.append((Path(ridgexr.__file__).parent / "analysis" / "timescales.py").read_text())
    assert not any("0.35" in s or "TIMESCALE_MEM_LEVEL" in s for s in sources)


def test_the_docs_table_of_kinds_is_the_registrys():
    page = (DOCS / "claims.md").read_text()
    assert "claims_tables/kinds.md" in page
    assert (DOCS / "claims_tables" / "kinds.md").read_text() == kinds_markdown(), (
        "regenerate docs/claims_tables/kinds.md: python -c 'from ridgexr.claims import kinds_markdown; "
        "print(kinds_markdown(), end=\"\")' > docs/claims_tables/kinds.md")
    assert all(f"`{name}`" in kinds_markdown() for name in KINDS)


class FinalSpreadLess(ClaimKind):
    """A kind written in a test: the model's final samples spread less than fresh draws of the forward process at
    the last step do (median distance to the nearest training point, ratio, margin 0.5)."""

    name = "test-final-spread"
    statement = "the {model}'s final samples lie nearer the training points than the forward process's"
    measure = "median nearest-training distance of the final states over the forward process's at t_min"
    reference = "the forward process's own states at t_min"
    null = "the exact denoiser: 1"
    margin = "0.5"
    applies = "every cell"
    written = "tests/test_claim_kinds.py"

    def applies_to(self, label, is_exact):
        return True

    def criterion(self, **context):
        return Criterion.below(0.5, text="ratio: interval below 0.5 agrees; above 0.5 disagrees")

    def evaluate(self, evidence, spec, label):
        from ridgexr.analysis import arrays
        from ridgexr.verdicts import log_median_contrast

        step = evidence.ds.sizes["step"] - 1
        train = evidence.train(label)
        x = evidence.cell(label).isel(step=step)["trajectory"].transpose("sample", "dim").values
        ref = evidence.forward(label, step)["ridge_projection"]  # any states of the forward process will do
        d, d0 = arrays.nearest_two(x, train)[0], arrays.nearest_two(ref[np.isfinite(ref).all(1)], train)[0]
        est, lo, hi = log_median_contrast([(d, 1.0), (d0, -1.0)])
        return [self.claim(math.exp(est), math.exp(lo), math.exp(hi), int(np.isfinite(d).sum()), labels=label,
                           statement=self.statement.format(model=evidence.display_name(label)))]

    def controls(self):
        return [Control("a sampler as spread as the forward process", "disagrees",
                        lambda: [self.claim(1.0, 0.9, 1.1, 100)]),
                Control("a collapsed sampler", "agrees", lambda: [self.claim(0.1, 0.05, 0.2, 100)])]


def test_a_kind_registered_in_a_test_is_evaluated_checked_and_listed(tmp_path, catalog_text, run_entry):
    """One class and one register line: a catalog entry may claim it (checked before the run), ridgexr claims
    evaluates it on the store, and the generated table of kinds lists it."""
    kind = register(FinalSpreadLess())
    try:
        with pytest.raises(ValueError, match="already registered"):
            register(FinalSpreadLess())
        store = run_entry(catalog_text(steps=8, samples=16) + "    claims:\n      - {kind: test-final-spread}\n",
                          tmp_path)[1].store
        claims = store_claims(ridgexr.open_dataset(store))
        run = ridgexr.open_dataset(store)
        assert len(claims) == int((run["cell_applies"] & run["cell_complete"]).sum())  # every cell
        assert {c.kind for c in claims} == {"test-final-spread"}
        assert all(c.verdict in ("agrees", "disagrees", "inconclusive") for c in claims)
        assert "| `test-final-spread` | cell |" in kinds_markdown()
        assert [c.build()[0].verdict for c in kind.controls()] == ["disagrees", "agrees"]
    finally:
        unregister("test-final-spread")
    assert "test-final-spread" not in kinds_markdown()
    with pytest.raises(TypeError, match="ClaimKind"):
        register(object())


def test_a_claims_post_hoc_flag_reaches_its_rows(tmp_path, catalog_text, run_entry):
    _, result = run_entry(catalog_text(steps=8, samples=16) + "    claims:\n      - {kind: reach-falls, t: [1.0, 0.05], "
                          "post_hoc: true}\n      - {kind: slide-slower, t: [1.0, 0.05]}\n", tmp_path)
    claims = store_claims(ridgexr.open_dataset(result.store))
    rows = {c.kind: c.row()["criterion"] for c in claims}
    assert rows["reach-falls"].startswith("post hoc: ") and not rows["slide-slower"].startswith("post hoc")
    assert dataclasses.is_dataclass(claims[0])


def test_the_align_null_an_isotropic_error_matches_the_f_distribution():
    """(|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)) of an isotropic Gaussian error is sqrt(F(d*, d - d*)) in law (a
    Kolmogorov-Smirnov test of its square against scipy's F), and align-tangent's null is that law's median."""
    from scipy import stats

    from ridgexr.claims.align_tangent import align_ratio, isotropic_median

    d, d_star, n = 12, 3, 40_000
    e = np.random.default_rng(0).normal(size=(n, d))
    tangent = np.concatenate([e[:, :d_star], np.zeros((n, d - d_star))], axis=1)
    normal = np.concatenate([np.zeros((n, d_star)), e[:, d_star:]], axis=1)
    ratio = align_ratio(tangent, normal, d_star)
    assert stats.kstest(ratio**2, stats.f(d_star, d - d_star).cdf).pvalue > 1e-3
    assert isotropic_median(d_star, d) == pytest.approx(np.median(ratio), rel=0.02)
    assert isotropic_median(1, 8) == pytest.approx(0.711, abs=5e-4)  # the values
    assert isotropic_median(10, 784) == pytest.approx(0.967, abs=5e-4)



# ----------------------------------------------------------------------------------------- the gate as a claim kind
from hypothesis import given, settings, strategies as st  # noqa: E402

_maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731


@settings(max_examples=150, deadline=None)
@given(share=_maybe(st.floats(0, 1)), ratio=_maybe(st.floats(0, 3)), recall=_maybe(st.floats(0.5, 1)),
       offclass=_maybe(st.floats(0, 0.3)), n=_maybe(st.integers(1, 400)), cov=_maybe(st.floats(0, 1)),
       cov0=st.floats(0.3, 1))
def test_the_generates_claim_reads_what_the_gate_reads(share, ratio, recall, offclass, n, cov, cov0):
    """The kind's verdict is the gate's by the verdict kernel's rule on the slack: "generates" -> "agrees",
    "does not generate" -> "disagrees", "not assessed" -> "untestable: ..."; the slack is 1 at a bound."""
    from ridgexr.quality import gate_verdict
    from ridgexr.quality.gate import gate_slack

    m = dict(class_share=share, nearest_ratio=ratio, class_share_heldout=recall, class_share_offclass=offclass,
             n_heldout=750, n_draws=n, coverage=cov, coverage_null=cov0)
    gate = gate_verdict(**m)
    claim = KINDS["generates"].make(m)
    assert claim.verdict.startswith({"generates": "agrees", "does not generate": "disagrees",
                                     "not assessed": "untestable"}[gate]), (gate, claim.verdict)
    slack = gate_slack(**m)
    if gate == "does not generate":
        assert slack < 1
    elif gate == "generates":
        assert slack >= 1
    assert claim.gate is None and claim.kind == "generates"


def test_the_gate_slack_is_one_at_each_bound():
    from ridgexr.quality import GATE, gate_design
    from ridgexr.quality.gate import gate_slack

    assert gate_slack(nearest_ratio=GATE["nearest_ratio_max"]) == 1.0
    assert gate_slack(coverage=0.7 * 0.9, coverage_null=0.9, n_draws=64) == pytest.approx(1.0, rel=1e-12)
    d = gate_design(0.865, 0.142, 750)
    assert gate_slack(d.share_min, 1.0, class_share_heldout=0.865, class_share_offclass=0.142, n_heldout=750,
                      n_draws=d.n) == 1.0
    assert math.isnan(gate_slack())


def test_the_generates_controls_hold_their_rates_at_the_decision_size():
    """Over 400 seeds of each control: fresh draws pass at least 95 % of the time, 20 % off-class draws pass at
    most 5 %, copies of the class mean never (the coverage fails them; their nearest ratio and class share pass)."""
    from ridgexr.claims.generates import CONTROL_CONFUSION, control_measures
    from ridgexr.quality import decision_size, gate_verdict

    n = decision_size(**CONTROL_CONFUSION)
    assert n == 96
    passes = {how: sum(gate_verdict(**control_measures(n, seed=s, **dict(how))) == "generates" for s in range(400))
              for how in ((), (("off_class_share", 0.2),), (("mean_copies", True),))}
    assert passes[()] >= 0.95 * 400
    assert passes[(("off_class_share", 0.2),)] <= 0.05 * 400
    assert passes[(("mean_copies", True),)] == 0
    copies = control_measures(256, mean_copies=True)
    assert copies["nearest_ratio"] <= 1.5 and copies["class_share"] >= 0.8 and copies["coverage"] < 0.05


def test_the_generates_claim_on_a_store_is_its_stored_gate(tmp_path, catalog_text, run_entry):
    _, res = run_entry(catalog_text(steps=12, samples=16), tmp_path)
    ds = ridgexr.open_dataset(res.store)
    from ridgexr.quality import sample_quality

    gate = sample_quality(ds)["gate"]
    claims = store_claims(ds, [ClaimSpec(kind="generates")])
    assert claims and all(c.labels["schedule"] != "exact" for c in claims)
    for c in claims:
        g = str(gate.sel(c.labels).item())
        assert c.verdict.startswith({"generates": "agrees", "does not generate": "disagrees",
                                     "not assessed": "untestable"}[g]), (g, c.row())


# ---------------------------------------------------------------- the criteria shared by kinds


def test_one_criterion_per_shape_the_variance_kinds_share_it():
    """Every table kind whose criterion is "interval above a level" or "within +- a margin" reads it from the one
    class of that shape (ridgexr.claims.claim_kind.IntervalAbove / IntervalWithin), with its level as data, not
    a copy of the criterion; the regions are the ones written: above the level (or strictly above 0) agrees,
    below it disagrees; inside +- the margin agrees, wholly outside disagrees."""
    from ridgexr.claims.claim_kind import ABOVE_ZERO, IntervalAbove, IntervalWithin
    from ridgexr.verdicts import interval_verdict

    above = {n for n, k in KINDS.items() if isinstance(k, IntervalAbove)}
    within = {n for n, k in KINDS.items() if isinstance(k, IntervalWithin)}
    assert above == {"gap-mass-grows", "gap-mass-correlates", "excess-fills-gap", "vkernel-fills-gap",
                     "targets-gap-grows"}
    assert within == {"gap-mass-vanishes", "gaussian-reproduces", "vkernel-predicts"}
    for name in above | within:
        assert "criterion" not in type(KINDS[name]).__dict__, name  # no copy of its own
    for name in above:
        level = KINDS[name].above
        c = KINDS[name].criterion()
        edge = ABOVE_ZERO if level == 0 else level
        assert c.agrees == (edge, math.inf) and c.disagrees == ((-math.inf, edge),), name
        assert [interval_verdict(lo, hi, c) for lo, hi in [(edge + 0.01, 1.0), (-1.0, edge - 1e-3), (-1.0, 1.0)]] \
            == ["agrees", "disagrees", "inconclusive"], name
    assert interval_verdict(0.0, 1.0, KINDS["vkernel-fills-gap"].criterion()) == "inconclusive"  # 0 is not above 0
    for name in within:
        m = KINDS[name].within
        c = KINDS[name].criterion()
        assert c.agrees == (-m, m) and c.disagrees == ((-math.inf, -m), (m, math.inf)), name
        assert [interval_verdict(lo, hi, c) for lo, hi in [(-m / 2, m / 2), (m * 1.1, 1.0), (0.0, 2 * m)]] \
            == ["agrees", "disagrees", "inconclusive"], name
