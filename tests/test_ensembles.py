"""Ensembles over training-noise draws: the draw dimension, the stored V-kernel, pooling and the gap mass."""

import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import ridgexr
from ridgexr import analysis
from ridgexr.analysis import arrays
from ridgexr.catalog import load_catalog_file
from ridgexr.catalog.experiment import hashed_config
from ridgexr.datasets import load_training_set
from ridgexr.run import run_experiment
from ridgexr.run.ensemble import ensemble_variance, v_kernel_grid
from ridgexr.training import draw_seed

CATALOG = """
experiments:
  ens:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 12}
    model: {widths: [8], n_frequencies: 3, include_exact: false}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 2, target: [dsm, ideal], draws: 3}
    schedules: ["h2"]
    sampler: {kind: ode, block_steps: 8}
    n_samples: 16
    d_star: 1
    store: ens.zarr
"""


@pytest.fixture(scope="module")
def ens_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ens")
    f = root / "cat.yaml"
    f.write_text(CATALOG)
    exp = load_catalog_file(f)["ens"]
    res = run_experiment(exp, data_dir=root / "data")
    return exp, ridgexr.open_dataset(res.store)


def test_draw_is_a_cell_dim_and_only_training_noise_changes(ens_run):
    exp, ds = ens_run
    assert ds["trajectory"].dims == ("schedule", "width", "target", "draw", "sample", "step", "dim")
    assert list(ds.draw.values) == [0, 1, 2] and bool(ds.cell_complete.all())
    t0 = ds.trajectory.isel(draw=0, step=-1).values
    assert not np.array_equal(t0, ds.trajectory.isel(draw=1, step=-1).values)
    # draws = 1 is hash-neutral: the entry without the field has the same config hash
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    one = exp.model_copy(update={"training": exp.training.model_copy(update={"draws": 1})})
    assert "draws" not in hashed_config(one.model_dump())["training"]
    assert hashed_config(exp.model_dump())["training"]["draws"] == 3
    assert exp.config_hash(train) != one.config_hash(train)


def test_stored_v_kernel_is_the_variance_of_independently_fitted_scores(ens_run):
    """v_kernel equals the ddof=1 variance over draws of fit_sweep(seed=draw_seed(0, m)) scores on the grid."""
    exp, ds = ens_run
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    grid = ds.v_kernel_x.values
    np.testing.assert_allclose(grid[[0, -1]], [[-6.0, 0.0], [6.0, 0.0]])
    for target in ("dsm", "ideal"):
        scores = []
        for m in range(3):
            fit = ridgexr.fit_sweep(train, widths=[8], schedules=["h2"], taus=[math.inf],
                                    model_kwargs=dict(n_frequencies=3, feature_period=2.0, seed=0), t_min=0.01,
                                    T=2.0, quadrature="gauss-legendre-log-t", n_time=4, n_noise=2,
                                    seed=draw_seed(0, m), target=target)[("h2", 8)].denoiser(math.inf)
            scores.append([np.asarray(fit.score(grid, float(t))) for t in ds.v_kernel_t.values])
        s = np.array(scores)  # (draw, v_time, v_point, dim)
        want = ((s - s.mean(0)) ** 2).sum(0) / 2
        np.testing.assert_allclose(ds.v_kernel.sel(schedule="h2", width=8, target=target).values, want,
                                   rtol=1e-8, atol=1e-12)
    assert float(ds.v_kernel.sel(target="dsm").max()) > 0


def test_pool_draws_and_gap_mass_equal_a_direct_loop_over_draws(ens_run):
    exp, ds = ens_run
    pooled = ds.ridge.pool_draws()
    assert pooled.trajectory.dims == ("schedule", "width", "target", "sample", "step", "dim")
    x = ds.trajectory.isel(step=-1).values  # (1, 1, target, draw, sample, dim)
    loop = np.concatenate([x[:, :, :, m] for m in range(3)], axis=3)
    np.testing.assert_array_equal(pooled.trajectory.isel(step=-1).values, loop)
    g = ds.ridge.gap_mass(lower=-2.5, upper=2.5, n_boot=300).compute()
    a = float(ds.alpha.isel(step=-1))
    counts = {}
    for ti, target in enumerate(("dsm", "ideal")):
        k = n = 0
        per_draw = []
        for m in range(3):
            x1 = x[0, 0, ti, m, :, 0]
            ok = np.isfinite(x1)
            km = int(np.sum(ok & (np.abs(x1) < 2.5 * a)))
            per_draw.append(km / ok.sum())
            k, n = k + km, n + int(ok.sum())
        counts[target] = k / n
        assert float(g.gap_mass.sel(target=target).squeeze()) == pytest.approx(k / n, abs=1e-12)
        np.testing.assert_allclose(g.gap_mass_draw.sel(target=target).values.ravel(), per_draw, atol=1e-12)
        assert float(g.gap_mass_low.sel(target=target).squeeze()) <= k / n <= float(g.gap_mass_high.sel(target=target).squeeze())
    assert float(g.gap_mass_diff.squeeze()) == pytest.approx(counts["dsm"] - counts["ideal"], abs=1e-12)


def test_gap_mass_counts_diverged_samples_outside_the_gap_or_drops_them(ens_run):
    """A diverged (NaN) sample is one of the model's samples outside the gap by default; "drop" leaves it out of
    numerator and denominator; the null is the ideal target's even draws minus its odd draws (direct loop)."""
    _, ds = ens_run
    ds = ds.load().copy(deep=True)
    a = float(ds.alpha.isel(step=-1))
    x = ds.trajectory.values  # (schedule, width, target, draw, sample, step, dim)
    x[0, 0, 0, 1, :5, -1, :] = np.nan  # five samples of dsm, draw 1, diverged at the last step
    x[0, 0, 0, 2, 0, -1, :] = 0.0  # and one placed in the gap, so the share is not trivially 0
    ds["trajectory"] = (ds.trajectory.dims, x)
    last = x[0, 0, :, :, :, -1, 0]  # (target, draw, sample)
    inside = np.isfinite(last) & (np.abs(np.nan_to_num(last, nan=1e9)) < 2.5 * a)
    out = analysis.gap_mass(ds, lower=-2.5, upper=2.5, n_boot=200).squeeze()
    drop = analysis.gap_mass(ds, lower=-2.5, upper=2.5, n_boot=200, diverged="drop").squeeze()
    n_sample = last.shape[-1]
    assert float(out.gap_mass.sel(target="dsm")) == pytest.approx(inside[0].sum() / (3 * n_sample), abs=1e-12)
    assert float(drop.gap_mass.sel(target="dsm")) == pytest.approx(inside[0].sum() / (3 * n_sample - 5), abs=1e-12)
    assert float(drop.gap_mass.sel(target="dsm")) > float(out.gap_mass.sel(target="dsm"))
    assert out.diverged_count.sel(target="dsm").values.tolist() == [0, 5, 0]
    assert out.attrs["diverged"] == "outside" and drop.attrs["diverged"] == "drop"
    # the null: draws 0 and 1 form the one pair (draw 2 is left over), ideal target
    want = inside[1, 0].mean() - inside[1, 1].mean()
    assert float(out.gap_mass_null) == pytest.approx(want, abs=1e-12)
    assert float(out.gap_mass_null_low) == pytest.approx(want) == float(out.gap_mass_null_high)  # one pair
    with pytest.raises(ValueError, match="diverged"):
        analysis.gap_mass(ds, diverged="nan")


def test_pooled_share_interval_resamples_draws():
    """Against a direct bootstrap loop over draws (same index matrix), and the paired difference."""
    rng = np.random.default_rng(3)
    k, n = rng.integers(0, 20, (2, 5)).astype(float), np.full((2, 5), 20.0)
    kr = rng.integers(0, 20, (2, 5)).astype(float)
    got = arrays.pooled_share_ci(k, n, n_boot=400, ci=0.9, seed=11)
    diff = arrays.pooled_share_ci(k, n, k_ref=kr, n_ref=n, n_boot=400, ci=0.9, seed=11)
    idx = np.random.default_rng(11).integers(0, 5, size=(400, 5))
    for row in range(2):
        boot = [k[row, i].sum() / n[row, i].sum() for i in idx]
        bdiff = [k[row, i].sum() / n[row, i].sum() - kr[row, i].sum() / n[row, i].sum() for i in idx]
        np.testing.assert_allclose(got[row], [k[row].sum() / 100, *np.quantile(boot, [0.05, 0.95])], atol=1e-12)
        np.testing.assert_allclose(diff[row], [(k[row].sum() - kr[row].sum()) / 100, *np.quantile(bdiff, [0.05, 0.95])],
                                   atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(weights=st.lists(st.floats(-2, 2, allow_nan=False), min_size=1, max_size=4), m=st.integers(2, 7),
       seed=st.integers(0, 2**16))
def test_pooled_contrast_is_the_weighted_sum_of_pooled_shares_resampled_jointly(weights, m, seed):
    """Against a direct loop over the bootstrap's index rows: every ensemble resampled with the same draws."""
    rng = np.random.default_rng(seed)
    e = len(weights)
    n = rng.integers(1, 30, (3, e, m)).astype(float)
    k = np.floor(rng.uniform(0, 1, n.shape) * (n + 1))
    got = arrays.pooled_contrast_ci(k, n, weights, n_boot=200, ci=0.8, seed=seed)
    idx = np.random.default_rng(seed).integers(0, m, size=(200, m))
    for row in range(3):
        def contrast(i):
            return sum(w * k[row, j, i].sum() / n[row, j, i].sum() for j, w in enumerate(weights))
        boot = [contrast(i) for i in idx]
        np.testing.assert_allclose(got[row], [contrast(slice(None)), *np.quantile(boot, [0.1, 0.9])], atol=1e-12)


def test_pooled_contrast_validates_its_shapes():
    with pytest.raises(ValueError, match="weights"):
        arrays.pooled_contrast_ci(np.ones((2, 3)), np.ones((2, 3)), [1.0])
    with pytest.raises(ValueError, match="`k` and `n`"):
        arrays.pooled_contrast_ci(np.ones((2, 3)), np.ones((2, 4)), [1.0, -1.0])


def test_gaussian_ensemble_has_the_draws_mean_and_covariance():
    """With z whose columns are orthogonal with z^T z = n I, the n Gaussian draws' second moment about the mean is
    the ensemble's sample covariance exactly (closed form); with random z it is so on average (Monte Carlo)."""
    rng = np.random.default_rng(0)
    draws = rng.standard_normal((5, 2, 3)) * np.array([1.0, 3.0, 0.2])  # (M, d, p), an A-like ensemble
    flat = draws.reshape(5, -1)
    cov = np.cov(flat.T)  # ddof = 1
    q, _ = np.linalg.qr(rng.standard_normal((40, 5)))
    z = q * np.sqrt(40)  # z^T z = 40 I
    mean = rng.standard_normal((2, 3))
    g = arrays.gaussian_ensemble(draws, 40, mean=mean, z=z)
    assert g.shape == (40, 2, 3)
    dev = g.reshape(40, -1) - mean.ravel()
    np.testing.assert_allclose(dev.T @ dev / 40, cov, atol=1e-12)
    big = arrays.gaussian_ensemble(draws, 200_000, seed=1)  # centred on the draws' own mean
    np.testing.assert_allclose(big.mean(0), draws.mean(0), atol=0.02)
    np.testing.assert_allclose(np.cov(big.reshape(200_000, -1).T), cov, atol=0.05 * np.abs(cov).max())
    with pytest.raises(ValueError, match="draws"):
        arrays.gaussian_ensemble(draws[:1], 3)
    with pytest.raises(ValueError, match="mean"):
        arrays.gaussian_ensemble(draws, 3, mean=np.zeros(3))
    with pytest.raises(ValueError, match="`z`"):
        arrays.gaussian_ensemble(draws, 3, z=np.zeros((3, 4)))


def test_v_kernel_estimator_on_a_linear_model_matches_the_closed_form_variance():
    """Least squares y = Phi a + eps, eps ~ N(0, s^2): Var[phi*^T a_hat] = s^2 phi*^T (Phi^T Phi)^-1 phi*.

    The estimator (ensemble variance over M = 3 fits, averaged over 4000 ensembles) is unbiased;
    with ddof = 0 it would be 2/3 of the closed form."""
    rng = np.random.default_rng(0)
    phi = rng.standard_normal((12, 3))
    grid = rng.standard_normal((5, 3))
    s, a = 0.7, np.array([1.0, -2.0, 0.5])
    noise = s * rng.standard_normal((4000, 3, 12))  # (ensemble, draw, row)
    a_hat = np.linalg.lstsq(phi, (phi @ a + noise).reshape(-1, 12).T, rcond=None)[0].T.reshape(4000, 3, 3)
    pred = a_hat @ grid.T  # (ensemble, draw, point)
    est = ensemble_variance(pred, axis=1).mean(0)
    want = s**2 * np.einsum("pi,ij,pj->p", grid, np.linalg.inv(phi.T @ phi), grid)
    np.testing.assert_allclose(est, want, rtol=0.06)
    with pytest.raises(ValueError, match="values"):
        ensemble_variance(pred[:, :1], axis=1)


def test_v_kernel_grid_runs_through_the_first_two_points():
    g = v_kernel_grid(np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 9.0]]), n_points=5)
    np.testing.assert_allclose(g, [[-6, 0], [-3, 0], [0, 0], [3, 0], [6, 0]])


def test_gap_mass_refuses_a_store_without_draws(ens_run):
    _, ds = ens_run
    with pytest.raises(ValueError, match="draw_dim"):
        analysis.gap_mass(ds.isel(draw=0, drop=True))
    with pytest.raises(ValueError, match="lower"):
        analysis.gap_mass(ds, lower=2.0, upper=-2.0)
    with pytest.raises(ValueError, match="draw_dim"):
        analysis.pool_draws(xr.DataArray(np.zeros(3), dims=("sample",)))


def test_store_estimate_counts_the_v_kernel_as_written(ens_run):
    """estimate_resources counts the V-kernel variables at their nbytes in the store, and the store-size bound
    holds the store's disk use (what du counts)."""
    import os
    from pathlib import Path

    from ridgexr.run.plan import estimate_resources

    exp, ds = ens_run
    est = estimate_resources(exp, ds.train_data.values)
    assert est["store_variables"]["v_kernel"] == sum(ds[v].nbytes for v in ("v_kernel", "v_kernel_x", "v_kernel_t"))
    assert est["store_variables"]["denoised"] == 0 and "denoised" not in ds
    root = Path(ds.encoding["source"])
    used = sum(os.lstat(p).st_blocks * 512 for p in [root, *root.rglob("*")])
    assert 0 < used <= est["store_size"]
