"""analyses/variance.py's verdicts come from the claims registry's kinds (C1 gap-mass-grows, C2 gap-mass-correlates,
C3 gap-mass-vanishes, P1 gaussian-reproduces, P2 excess-fills-gap): per-cell claims on Delta G with their margin
and minimum of draws, the rank correlations with a bootstrap interval over cells, and the overall rule, on
constructed tables."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyses"))
import variance  # noqa: E402  (analyses/variance.py)


def table(diffs, lows, highs, pP, dv=None, diverged=None, draws=32):
    n = len(diffs)
    dv = np.linspace(1, 2, n) if dv is None else dv
    return pd.DataFrame({"w": ["h2"] * n, "p": [16] * n, "n_noise": [1] * n, "p/P": pP, "diff": diffs,
                         "diff_low": lows, "diff_high": highs, "V_gap dsm": np.asarray(dv) + 1.0,
                         "V_gap ideal": np.ones(n), "n diverged": diverged or [0] * n, "n samples": [512] * n,
                         "draws": [draws] * n})


def test_per_cell_verdicts_follow_the_margin_and_too_few_draws_are_untestable():
    df = table([0.05, 0.02, 0.001, 0.004, 0.001], [0.03, 0.0, -0.01, -0.01, -0.005], [0.09, 0.04, 0.015, 0.03, 0.004],
               [0.5, 0.5, 0.5, 0.01, 0.01])
    claims, lines, overall = variance.ensemble_claims(df)
    c1 = [c.verdict for c in claims if c.statement.startswith("C1")]
    c3 = [c.verdict for c in claims if c.statement.startswith("C3")]
    # C1 (margin 0.02): [0.03, 0.09] agrees; [0.0, 0.04] crosses the margin; [-0.01, 0.015], a DSM fit within the
    # margin of the ideal one, disagrees (it was "inconclusive" against 0)
    assert c1 == ["agrees", "inconclusive", "disagrees"]
    assert c3 == ["inconclusive", "agrees"]  # [-0.01, 0.03] crosses the 0.02 margin
    assert lines[0].endswith("inconclusive")  # one of three cells agrees: less than half
    assert overall == "inconclusive"
    assert all(c.n == 32 for c in claims if not c.statement.startswith("C2"))
    assert all(c.null is None for c in claims)  # a table without null columns: no null is invented
    with_null = df.assign(null=[0.001] * 5, null_low=[-0.01] * 5, null_high=[0.012] * 5)
    nulls = [c.null for c in variance.ensemble_claims(with_null)[0] if not c.statement.startswith("C2")]
    assert [(z.value, z.low, z.high) for z in nulls] == [(0.001, -0.01, 0.012)] * 5
    assert all(z.how == variance.NULL_HOW for z in nulls)
    # eight draws: below the kinds' minimum, where the bootstrap's coverage is not kept
    few = variance.ensemble_claims(table([0.05], [0.03], [0.09], [0.5], draws=8))[0]
    assert few[0].verdict == "untestable: too few resolved draws (8 of 8)"


def test_the_rank_correlation_interval_is_a_bootstrap_over_cells():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0, 1, 40), rng.uniform(0, 1, 40)
    rho, lo, hi = variance._spearman_ci(x, y, n_boot=4000, seed=1)
    assert rho == stats.spearmanr(x, y).statistic
    idx = np.random.default_rng(1).integers(0, 40, size=(4000, 40))
    boot = [stats.spearmanr(x[i], y[i]).statistic for i in idx[:400]]  # brute force on part of the replicates
    assert abs(lo - np.quantile(boot, 0.025)) < 0.08 and abs(hi - np.quantile(boot, 0.975)) < 0.08
    assert np.isnan(variance._spearman_ci([1.0, 2.0], [1.0, 3.0])[0])


def test_the_overall_rule_agrees_only_when_every_criterion_agrees_and_disagrees_on_c1():
    pP = [0.5] * 6 + [0.01] * 2
    good = table(list(np.linspace(0.02, 0.12, 6)) + [0.001, 0.002], list(np.linspace(0.01, 0.1, 6)) + [-0.005] * 2,
                 list(np.linspace(0.03, 0.14, 6)) + [0.006] * 2, [0.5, 0.6, 0.8, 1.0, 2.0, 4.0, 0.01, 0.01],
                 dv=np.arange(8.0))
    good["p/P"] = [0.3, 0.5, 0.8, 1.0, 2.0, 4.0, 0.01, 0.02]
    good["diff"] = [0.04, 0.05, 0.06, 0.08, 0.1, 0.12, 0.001, 0.002]
    good["diff_low"] = [0.03, 0.03, 0.04, 0.05, 0.07, 0.09, -0.005, -0.005]
    claims, lines, overall = variance.ensemble_claims(good)
    assert [ln.rsplit(": ", 1)[1] for ln in lines][0] == "agrees"
    rho = [c for c in claims if c.statement.startswith("C2")]
    assert rho[0].estimate > 0.9
    assert all(c.unit == "cells" for c in rho)  # an inconclusive correlation asks for more cells, not draws
    assert all("cells would settle" in c.note or "more cells" in c.note for c in rho if c.verdict == "inconclusive")
    assert overall in ("agrees", "inconclusive")  # agrees only if both correlation intervals lie above 0.3
    assert overall == ("agrees" if all(c.verdict == "agrees" for c in rho) else "inconclusive")
    bad = table([-0.02] * 6, [-0.04] * 6, [-0.01] * 6, pP[:6])
    assert variance.ensemble_claims(bad)[2] == "disagrees"  # every C1 cell wholly below the margin


def _ensemble_run(tmp_path, *, widths, n_samples):
    """A small variance ensemble (two points, 3 draws, n_noise 1 and 4, w = h^2) run into ``tmp_path``:
    (its catalog file, its store opened)."""
    import ridgexr
    from ridgexr.catalog import load_catalog_file
    from ridgexr.run import run_experiment

    f = tmp_path / "cat.yaml"
    f.write_text(f"""
experiments:
  ens:
    dataset: {{points: two-points}}
    process: {{T: 2.0, t_min: 0.01, n_steps: 12}}
    model: {{widths: {list(widths)}, n_frequencies: 3, include_exact: false}}
    training: {{quadrature: gauss-legendre-log-t, n_time: 4, n_noise: [1, 4], target: [dsm, ideal], draws: 3}}
    schedules: ["h2"]
    sampler: {{kind: ode, block_steps: 8}}
    n_samples: {n_samples}
    d_star: 1
    store: ens.zarr
""")
    return f, ridgexr.open_dataset(run_experiment(load_catalog_file(f)["ens"], data_dir=tmp_path / "data").store)


def test_step_refinement_reproduces_the_store_and_refines_the_step(tmp_path):
    """step_refinement refits a run's cells, reproduces its stored final states at the run's step count (it
    asserts so) and samples at factor x the steps; the shares it reports are counted from those states."""
    import ridgexr
    from ridgexr.catalog import load_catalog_file

    f, ds = _ensemble_run(tmp_path, widths=[32], n_samples=16)
    df = variance.step_refinement(ds, n_cells=1, draws=2, factor=3)
    assert len(df) == 2 and set(df.target) == {"dsm", "ideal"} and (df.draws == 2).all()
    cell = df.iloc[0]
    a = float(ds.alpha.isel(step=-1))
    x = ds.trajectory.sel(schedule="h2", width=int(cell.width), n_noise=int(cell.n_noise), target="dsm").isel(
        step=-1, draw=slice(0, 2)).values
    ok = np.isfinite(x).all(-1)
    assert cell["gap"] == ((np.abs(np.where(ok, x[..., 0], np.inf)) < 2 * a) & ok).mean()
    assert cell["diverged"] == (~ok).mean()
    for _, row in df.iterrows():  # no distance where no sample is finite at the run's step count
        assert np.isnan(row["median |x - x_fine|"]) if row["diverged"] == 1 else row["median |x - x_fine|"] >= 0
    sel = ds.diverged.sel(target="dsm").mean(["draw", "sample"]).compute()
    # the score noise's correlation across times, against fits made here by fit_sweep with the run's draw seeds
    import math

    from ridgexr.datasets import load_training_set
    from ridgexr.training import draw_seed

    times = (0.01, 0.1, 1.0)
    corr = variance.score_noise_correlation(ds, cells=({"schedule": "h2", "width": 32, "n_noise": 4},), times=times,
                                            point=(0.5, 0.0))
    train = load_training_set(load_catalog_file(f)["ens"].dataset)
    s = np.array([[np.asarray(ridgexr.fit_sweep(
        train, widths=[32], schedules=["h2"], taus=[math.inf], model_kwargs=dict(n_frequencies=3, feature_period=2.0,
                                                                                 seed=0),
        t_min=0.01, T=2.0, quadrature="gauss-legendre-log-t", n_time=4, n_noise=4, seed=draw_seed(0, m),
        target="dsm")[("h2", 32)].denoiser(math.inf).score(np.array([[0.5, 0.0]]), t))[0, 0] for t in times]
        for m in range(3)])
    np.testing.assert_allclose(corr[[f"t = {t:g}" for t in times]].values[0], np.corrcoef(s.T)[0], rtol=1e-8)
    assert corr.draws.iloc[0] == 3
    worst = sel.where(sel == sel.max(), drop=True)  # the most divergent cell (the first of ties)
    assert (int(cell.width), int(cell.n_noise)) in {(int(w), int(n)) for w in worst.width.values
                                                    for n in worst.n_noise.values}


def test_gaussian_prediction_measures_the_run_and_predicts_from_the_draws(tmp_path):
    """The prediction's measured ensembles are the run's (pooled gap masses and Delta G, with its interval, equal
    analysis.gap_mass on the store); its cells are C1's and C3's; its contrasts are the differences of its gap
    masses."""
    from ridgexr import analysis
    from ridgexr.catalog import load_catalog_file

    f, ds = _ensemble_run(tmp_path, widths=[8, 32], n_samples=64)
    exp = load_catalog_file(f)["ens"]
    cells = variance.prediction_cells(exp)  # P = 2 x 4 x n_noise = 8, 32: p/P = 1, 1/4 (p = 8); 4, 1 (p = 32)
    assert [(c["width"], c["n_noise"]) for c in cells] == [(8, 1), (8, 4), (32, 1), (32, 4)]
    df = variance.gaussian_prediction(exp, cells=cells[1:3], n_boot=200)
    g = analysis.gap_mass(ds, n_boot=200).compute()
    for r in df.to_dict("records"):
        sel = dict(schedule="h2", width=r["p"], n_noise=r["n_noise"])
        for target in ("dsm", "ideal"):
            assert r[f"G {target}"] == pytest.approx(float(g.gap_mass.sel(**sel, target=target)), abs=1e-12)
        assert r["measured"] == pytest.approx(float(g.gap_mass_diff.sel(**sel)), abs=1e-12)
        assert r["measured_low"] == pytest.approx(float(g.gap_mass_diff_low.sel(**sel)), abs=1e-12)
        assert r["predicted"] == pytest.approx(r["G gauss dsm"] - r["G gauss ideal"], abs=1e-12)
        assert r["error"] == pytest.approx(r["measured"] - r["predicted"], abs=1e-12)
        assert r["error_low"] <= r["error"] <= r["error_high"]
        assert r["n samples"] == 3 * 64 and r["P"] == 2 * 4 * r["n_noise"]
    claims, lines, overall = variance.prediction_claims(df)
    assert len(claims) == 2 + 2  # P1 per cell, P2 per cell with p/P >= 1/4 (both here)


def test_prediction_claims_follow_their_rules():
    def table(err, err_lo, err_hi, exc, exc_lo, exc_hi, pP):
        n = len(err)
        return pd.DataFrame({"w": ["h"] * n, "p": [64] * n, "n_noise": [1] * n, "p/P": pP, "error": err,
                             "error_low": err_lo, "error_high": err_hi, "excess": exc, "excess_low": exc_lo,
                             "excess_high": exc_hi, "draws": [32] * n, "diverged dsm / gauss dsm": ["0 / 0"] * n})

    good = table([0.0, 0.001], [-0.01, -0.005], [0.01, 0.006], [0.04, 0.05], [0.03, 0.04], [0.05, 0.06], [2, 0.5])
    claims, lines, overall = variance.prediction_claims(good)
    assert [c.verdict for c in claims] == ["agrees"] * 4 and overall == "agrees"
    # one P1 cell wholly outside the margin: P1 and the whole disagree
    bad = table([0.0, 0.05], [-0.01, 0.03], [0.01, 0.07], [0.04, 0.05], [0.03, 0.04], [0.05, 0.06], [2, 0.5])
    assert variance.prediction_claims(bad)[2] == "disagrees"
    # P1 across the margin in one cell; P2 across the margin in one of two (half agree): inconclusive overall
    mixed = table([0.0, 0.015], [-0.01, -0.005], [0.01, 0.03], [0.04, 0.02], [0.03, 0.01], [0.05, 0.03], [2, 0.5])
    claims, lines, overall = variance.prediction_claims(mixed)
    assert overall == "inconclusive" and "P1" in lines[0] and lines[0].endswith("inconclusive")
    assert lines[1].endswith("agrees")
    # a C3 cell (P/p >= 16) carries P1 only
    assert len(variance.prediction_claims(table([0.0], [-0.01], [0.01], [0.0], [-0.1], [0.1], [1 / 32]))[0]) == 1
