"""The analytic V-kernel prediction of analyses/variance.py: the rows-fixed ensemble design of a run, and a
prediction that reads no measured draw."""

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ridgexr
from ridgexr.catalog import load_catalog_file
from ridgexr.catalog.experiment import hashed_config
from ridgexr.datasets import load_training_set
from ridgexr.run import run_experiment
from ridgexr.training import draw_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyses"))
import variance  # noqa: E402  (analyses/variance.py)

CATALOG = """
experiments:
  targets:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 12}
    model: {widths: [8], n_frequencies: 3, include_exact: false, penalty: 0.001}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 2, target: dsm, draws: 4, redraw: targets}
    schedules: ["h2"]
    sampler: {kind: ode, block_steps: 8, record_every: 12}
    n_samples: 32
    d_star: 1
    store: targets.zarr
"""


@pytest.fixture(scope="module")
def targets_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    f = root / "cat.yaml"
    f.write_text(CATALOG)
    exp = load_catalog_file(f)["targets"]
    res = run_experiment(exp, data_dir=root / "data")
    return exp, ridgexr.open_dataset(res.store), root


def test_a_rows_fixed_run_redraws_only_the_targets(targets_run):
    """Draw m of ``redraw: targets`` is the fit on seeds.training's rows with target seed draw_seed(seed, m) and
    the penalty: the stored V-kernel is the variance over those fits' scores; the two new fields are
    hash-neutral at their defaults."""
    exp, ds, _ = targets_run
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    grid = ds.v_kernel_x.values
    scores = []
    for m in range(4):
        fit = ridgexr.fit_sweep(train, widths=[8], schedules=["h2"], taus=[math.inf],
                                model_kwargs=dict(n_frequencies=3, feature_period=2.0, seed=0), t_min=0.01, T=2.0,
                                quadrature="gauss-legendre-log-t", n_time=4, n_noise=2, seed=0,
                                target_seed=draw_seed(0, m), penalty=0.001)[("h2", 8)]
        assert fit.quadratic.sample.target_seed == draw_seed(0, m)
        scores.append([np.asarray(fit.denoiser(math.inf).score(grid, float(t))) for t in ds.v_kernel_t.values])
    s = np.array(scores)
    np.testing.assert_allclose(ds.v_kernel.sel(schedule="h2", width=8).values, s.var(0, ddof=1), rtol=1e-8,
                               atol=1e-12)
    plain = exp.model_copy(update={"training": exp.training.model_copy(update={"redraw": "noise"}),
                                   "model": exp.model.model_copy(update={"penalty": 0.0})})
    cfg = hashed_config(plain.model_dump())
    assert "redraw" not in cfg["training"] and "penalty" not in cfg["model"]
    assert hashed_config(exp.model_dump())["training"]["redraw"] == "targets"


def test_the_analytic_prediction_does_not_read_the_measured_draws(targets_run):
    """The prediction is built from the analytic kernel: replacing the measured draws by other draws (other
    target seeds) changes the measured columns and leaves every predicted column as it was; recomputed (no
    cache) it is the same numbers."""
    exp, ds, root = targets_run
    pred = variance.analytic_prediction(exp, members=6, seed=3, cache=root / "cache")
    again = variance.analytic_prediction(exp, members=6, seed=3)
    np.testing.assert_array_equal(pred[("h2", 8)]["k_gauss"], again[("h2", 8)]["k_gauss"])
    first = variance.analytic_table(exp, ds.isel(draw=[0, 1]), pred, n_boot=200)
    other = variance.analytic_table(exp, ds.isel(draw=[2, 3]), pred, n_boot=200)
    a, b = ds.trajectory.isel(draw=[0, 1], step=-1).values, ds.trajectory.isel(draw=[2, 3], step=-1).values
    assert not np.array_equal(a, b)  # the measured draws differ
    for col in ("G gauss", "G ideal", "predicted", "predicted_low", "predicted_high", "V_gap analytic"):
        assert first[col].tolist() == other[col].tolist(), col
    # the measured columns come from the store's draws: a direct count of the first two
    alpha = float(np.exp(-exp.process.t_min))
    x1 = a[..., 0]
    share = float((np.isfinite(x1) & (np.abs(np.nan_to_num(x1, nan=np.inf)) < 2 * alpha)).mean())
    assert first["G dsm"].iloc[0] == pytest.approx(share)
    assert first["measured"].iloc[0] == pytest.approx(share - first["G ideal"].iloc[0])


def test_analytic_claims_follow_the_regions():
    df = pd.DataFrame({"w": ["h2"] * 3, "p": [16, 64, 256], "n_noise": [1, 1, 4], "p/P": [0.5, 2.0, 2.0],
                       "draws": [256] * 3, "members": [256] * 3,
                       "error": [0.001, 0.05, 0.01], "error_low": [-0.01, 0.03, -0.01],
                       "error_high": [0.012, 0.07, 0.03],
                       "predicted": [0.02, 0.0, 0.01], "predicted_low": [0.01, -0.01, 0.0],
                       "predicted_high": [0.03, 0.01, 0.02],
                       "measured": [0.02, 0.05, 0.02], "measured_low": [0.01, 0.03, 0.0],
                       "measured_high": [0.03, 0.07, 0.04], "null": [0.0] * 3, "null_low": [-0.01] * 3,
                       "null_high": [0.01] * 3, "diverged dsm / gauss / ideal": ["0 / 0 / 0"] * 3})
    claims, lines, overall = variance.analytic_claims(df)
    p1 = [c.verdict for c in claims if c.statement.startswith("P1")]
    p2 = [c.verdict for c in claims if c.statement.startswith("P2")]
    assert p1 == ["agrees", "disagrees", "inconclusive"]
    assert p2 == ["agrees", "inconclusive", "inconclusive"]  # [0, 0.02]: not above 0
    assert lines[0].endswith("disagrees") and overall == "disagrees"
    assert all(c.criterion.written == variance.ANALYTIC_WRITTEN for c in claims)
    assert [c.kind for c in claims[:3]] == ["vkernel-predicts", "vkernel-fills-gap", "targets-gap-grows"]


def test_the_analytic_criteria_are_registered_with_the_regions_committed_before_the_runs():
    """P1, P2 and C1 of the rows-fixed design are claim kinds of the registry, with the regions written before the
    pilot and the runs: P1 inside [-0.02, 0.02] (wholly outside disagrees), P2 and C1 above 0 without a margin
    (wholly at or below 0 disagrees), resting on at least the coverage-checked 32 draws."""
    from ridgexr.claims import KINDS
    from ridgexr.claims.gap_mass_grows import VARIANCE_DRAWS

    p1, p2, c1 = (KINDS[name] for name in ("vkernel-predicts", "vkernel-fills-gap", "targets-gap-grows"))
    assert p1.criterion().agrees == (-0.02, 0.02)
    assert p1.criterion().disagrees == ((-np.inf, -0.02), (0.02, np.inf))
    for kind in (p2, c1):
        lo, hi = kind.criterion().agrees
        assert 0 < lo <= 1e-12 and hi == np.inf
        assert kind.criterion().disagrees == ((-np.inf, lo),)
        assert kind.claim(0.01, 0.0, 0.02, 256).verdict == "inconclusive"  # an interval from exactly 0: not above it
        assert kind.claim(-0.01, -0.02, 0.0, 256).verdict == "disagrees"
    assert all(k.min_draws == VARIANCE_DRAWS and k.written == variance.ANALYTIC_WRITTEN for k in (p1, p2, c1))
    assert all(not k.criterion().post_hoc for k in (p1, p2, c1))
    assert p1.claim(0.0, -0.01, 0.01, 16).verdict.startswith("untestable")


def test_analytic_main_writes_the_table_of_the_entries_it_evaluated(targets_run, capsys):
    """The script's --analytic path on a small entry: the generated table names the entries in its header, its
    folder is created beside --figures, its rows are analytic_table's of the store and the cached prediction, and
    its claims carry the registry's kinds."""
    exp, ds, root = targets_run
    figures = root / "out" / "figures"
    variance.analytic_main(str(root / "data"), figures, str(root / "cat.yaml"), entries=["targets"])
    text = (root / "out" / "claims_tables" / "variance-targets.md").read_text()
    assert text.startswith("<!-- generated by analyses/variance.py --analytic --entries targets from")
    assert (figures / "variance_targets_prediction.png").stat().st_size > 0
    pred = variance.analytic_prediction(exp, cache=root / "data" / "variance-prediction")
    row = variance.analytic_table(exp, ds, pred).iloc[0]
    line = next(ln for ln in text.splitlines() if ln.startswith("| h2 | 8 |"))
    assert f"| {row['G dsm']:.3g} | {row['G gauss']:.3g} | {row['G ideal']:.3g} |" in line
    assert "P1: the analytic V-kernel predicts Delta G" in text
    assert "verdict by the claims rule" in capsys.readouterr().out
