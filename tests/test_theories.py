"""Generalization through variance: the target and n_noise cell dimensions, and target_effect."""

import math

import dask.array as da
import numpy as np
import pytest
import torch
import xarray as xr

import ridgexr
from ridgexr import analysis, time_grid
from ridgexr.catalog import CatalogError, load_catalog_file
from ridgexr.datasets import load_training_set
from ridgexr.run import run_experiment
from ridgexr.sampling import reverse_sde

CATALOG = """
experiments:
  var:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 12}
    model: {widths: [8], n_frequencies: 3, include_exact: false}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: [8, 2], target: [dsm, ideal]}
    schedules: ["1", "h2"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: 6
    d_star: 1
    store: var.zarr
"""


@pytest.fixture(scope="module")
def var_run(tmp_path_factory, run_entry):
    return run_entry(CATALOG, tmp_path_factory.mktemp("var"), "var")


def test_target_and_n_noise_are_cell_dims_with_labelled_coords(var_run):
    exp, res = var_run
    ds = ridgexr.open_dataset(res.store)
    assert ds["trajectory"].dims == ("schedule", "width", "target", "n_noise", "sample", "step", "dim")
    assert list(ds.target.values) == ["dsm", "ideal"] and list(ds.n_noise.values) == [2, 8]  # sorted
    assert ds.target.attrs["long_name"].startswith("fitted target") and "units" not in ds.n_noise.attrs
    assert bool(ds.cell_complete.all()) and res.cells_run == 2 * 1 * 2 * 2
    assert ds.attrs["target"] == "dsm, ideal"


@pytest.mark.parametrize("target, n_noise", [("ideal", 8), ("dsm", 2)])
def test_each_target_cell_is_the_fit_with_that_target_and_sample(var_run, target, n_noise):
    """The trajectories of a (target, n_noise) cell equal sampling an independently fitted model."""
    exp, res = var_run
    ds = ridgexr.open_dataset(res.store)
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    fits = ridgexr.fit_sweep(train, widths=[8], schedules=["h2"], taus=[math.inf],
                             model_kwargs=dict(n_frequencies=3, feature_period=2.0, seed=0), t_min=0.01, T=2.0,
                             quadrature="gauss-legendre-log-t", n_time=4, n_noise=n_noise, seed=0, target=target)
    model = fits[("h2", 8)].denoiser(math.inf)
    blocks = list(reverse_sde(lambda x, t: model.score(x, t), 6, 2, time_grid(12, 2.0, 0.01), seed=0, block_steps=8))
    traj = torch.cat([b.x for b in blocks]).numpy()
    cell = ds.sel(schedule="h2", width=8, target=target, n_noise=n_noise)
    np.testing.assert_array_equal(cell.trajectory.values, np.swapaxes(traj, 0, 1))
    other = ds.sel(schedule="h2", width=8, target="dsm" if target == "ideal" else "ideal", n_noise=n_noise)
    assert not np.array_equal(other.trajectory.values, cell.trajectory.values)


def test_target_effect_on_a_run_is_lazy_and_labelled(var_run):
    exp, res = var_run
    ds = ridgexr.open_dataset(res.store)
    eff = ds.ridge.target_effect(n_boot=50)
    assert isinstance(eff.near_mode_diff.data, da.Array)
    eff = eff.compute()
    assert eff.near_mode_diff.dims == ("schedule", "width", "n_noise")
    near = analysis.near_mode_fraction(ds).near_mode
    np.testing.assert_allclose(eff.near_mode_diff.values,
                               (near.sel(target="dsm") - near.sel(target="ideal")).values, atol=1e-12)


def test_target_effect_paired_differences_are_known_by_construction():
    """DSM cells put the first half of the samples on a mode and the rest at the midpoint; ideal
    cells put every sample on a mode: near_mode_diff = -1/2, spread_diff = 3 alpha / 2."""
    train = np.array([[-3.0, 0.0], [3.0, 0.0]])
    t = np.array([1.0, 0.01])
    a = np.exp(-t)
    S = 40
    on = np.where((np.arange(S) % 2)[:, None] == 0, train[0], train[1]) * a[-1]
    dsm = np.where((np.arange(S) < S // 2)[:, None], on, 0.0)
    x = np.zeros((1, 2, S, 2, 2))
    x[0, 0, :, -1] = dsm
    x[0, 1, :, -1] = on
    ds = xr.Dataset({"trajectory": (("width", "target", "sample", "step", "dim"), x),
                     "ridge_projection": (("width", "target", "sample", "step", "dim"), x),
                     "train_data": (("train", "dim"), train)},
                    coords={"width": [8], "target": ["dsm", "ideal"], "t": ("step", t), "alpha": ("step", a)})
    eff = analysis.target_effect(ds.chunk({"sample": 9}), n_boot=400).compute().squeeze()
    assert float(eff.near_mode_diff) == pytest.approx(-0.5)
    assert float(eff.spread_diff) == pytest.approx(3 * a[-1] / 2)
    assert float(eff.near_mode_diff_low) < -0.5 < float(eff.near_mode_diff_high)
    assert float(eff.near_mode_dsm) == pytest.approx(0.5) and float(eff.near_mode_ideal) == 1.0
    with pytest.raises(ValueError, match="target"):
        analysis.target_effect(ds.isel(target=[0]))


def test_swept_lists_are_validated(tmp_path):
    f = tmp_path / "c.yaml"
    for bad, msg in (("n_noise: [8, 8]", "distinct"), ("n_noise: []", "non-empty"), ("target: [dsm, exact]", "target"),
                     ("n_noise: [0, 2]", "n_noise")):
        f.write_text(CATALOG.replace("n_noise: [8, 2], target: [dsm, ideal]", bad))
        with pytest.raises(CatalogError, match=msg):
            load_catalog_file(f)


MANIFOLD_CATALOG = """
experiments:
  circ:
    dataset:
      manifold: {kind: circle, ambient_dim: 3, radius: 2.0, density: von_mises, kappa: 1.0, rotation_seed: 4,
                 n: 12, seed: 3, n_population: 50}
      n_train: [12, 4]
    process: {T: 2.0, t_min: 0.01, n_steps: 10}
    model: {widths: [8], n_frequencies: 3, include_exact: true}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 3}
    schedules: ["h2"]
    sampler: {kind: sde, block_steps: 6}
    n_samples: 5
    d_star: 1
    store: circ.zarr
"""


@pytest.fixture(scope="module")
def circle_run(tmp_path_factory, run_entry):
    return run_entry(MANIFOLD_CATALOG, tmp_path_factory.mktemp("circ"), "circ")


def test_manifold_dataset_and_nested_n_train_cells(circle_run):
    exp, res = circle_run
    ds = ridgexr.open_dataset(res.store)
    m = ridgexr.datasets.manifold_of(exp.dataset.manifold)
    train = ds.train_data.values
    assert train.shape == (12, 3) and np.allclose(m.distance(train), 0, atol=1e-12)
    assert ds.population_data.shape == (50, 3) and np.allclose(m.distance(ds.population_data.values), 0, atol=1e-12)
    assert not np.isin(ds.population_data.values, train).any()  # a fresh draw, not the training points
    np.testing.assert_allclose(ds.manifold_rotation.values, m.rotation)
    assert list(ds.n_train.values) == [4, 12] and ds.trajectory.dims[:3] == ("schedule", "width", "n_train")
    # the n_train = 4 cell is the model fitted on the first 4 points (independent fit and sampler)
    fits = ridgexr.fit_sweep(train[:4], widths=[8], schedules=["h2"], taus=[math.inf],
                             model_kwargs=dict(n_frequencies=3, feature_period=2.0, seed=0), t_min=0.01, T=2.0,
                             quadrature="gauss-legendre-log-t", n_time=4, n_noise=3, seed=0)
    model = fits[("h2", 8)].denoiser(math.inf)
    blocks = list(reverse_sde(lambda x, t: model.score(x, t), 5, 3, time_grid(10, 2.0, 0.01), seed=0, block_steps=6))
    traj = torch.cat([b.x for b in blocks]).numpy()
    np.testing.assert_array_equal(ds.trajectory.sel(schedule="h2", width=8, n_train=4).values, np.swapaxes(traj, 0, 1))


def test_analyses_use_each_cells_own_training_subset(circle_run):
    """near_mode_fraction / memorization_fraction against a direct count with train[:n_train]."""
    exp, res = circle_run
    ds = ridgexr.open_dataset(res.store)
    near = analysis.near_mode_fraction(ds, r=1.0).near_mode.compute()
    memo = analysis.memorization_fraction(ds).memorized.compute()
    last = ds.isel(step=-1)
    a = float(last.alpha)
    for s in ds.schedule.values:
        for n in ds.n_train.values:
            x = last.trajectory.sel(schedule=s, width=8, n_train=n).values
            pts = ds.train_data.values[:n] * a
            d = np.linalg.norm(x[:, None] - pts[None], axis=-1)
            assert float(near.sel(schedule=s, width=8, n_train=n)) == pytest.approx(np.mean(d.min(1) <= 1.0))
            two = np.sort(d, axis=1)[:, :2]
            assert float(memo.sel(schedule=s, width=8, n_train=n)) == pytest.approx(np.mean(two[:, 0] / two[:, 1] < ridgexr.defaults.MEMORIZED_RATIO))
    spread = analysis.spread_curves(ds).spread_mean.isel(step=-1).compute()
    x = last.ridge_projection.sel(schedule="h2", width=8, n_train=4).values
    d = np.linalg.norm(x[:, None] - ds.train_data.values[None, :4] * a, axis=-1).min(1)
    assert float(spread.sel(schedule="h2", width=8, n_train=4)) == pytest.approx(d.mean())


def test_manifold_distance_and_novelty_against_brute_force(circle_run):
    from ridgexr.analysis import manifold as man

    exp, res = circle_run
    ds = ridgexr.open_dataset(res.store)
    m = man.store_manifold(ds)
    d = man.manifold_distance(ds)
    assert isinstance(d.data, da.Array) and d.attrs["units"] == "data_unit"
    cell = dict(schedule="h2", width=8, n_train=12)
    k = 4
    a = float(ds.alpha[k])
    x = ds.trajectory.sel(cell).isel(step=k).values
    dense, _ = m.sample(200_000, seed=1)  # brute force: distance to a dense sample of alpha_t M
    brute = np.sqrt(((x[:, None, :] - a * dense[None]) ** 2).sum(-1)).min(1)
    got = d.sel(cell).isel(step=k).values
    assert np.all(got <= brute + 1e-9) and np.allclose(got, brute, atol=2e-3 * a * m.radius)
    nov = man.novelty(ds).sel(cell).values
    train = ds.train_data.values
    nn = np.sort(np.linalg.norm(train[:, None] - train[None], axis=-1), axis=1)[:, 1]
    last = ds.trajectory.sel(cell).isel(step=-1).values / float(ds.alpha[-1])
    direct = np.linalg.norm(last[:, None] - train[None], axis=-1).min(1) / np.median(nn)
    np.testing.assert_allclose(nov, direct, rtol=1e-10)


def test_manifold_density_and_distribution_distance_on_known_samples(circle_run):
    from ridgexr.analysis import manifold as man

    exp, res = circle_run
    ds = ridgexr.open_dataset(res.store).load()
    pop = ds.population_data.values
    m = man.store_manifold(ds)
    same = ds.isel(sample=[0]).copy()
    # a store whose final samples are the population itself (/alpha scaled back) vs one shifted off M
    a = float(ds.alpha[-1])
    traj = np.broadcast_to((pop * a)[:, None, :], (1, 1, 2, len(pop), 1, 3)).copy()
    fake = xr.Dataset({"trajectory": (("schedule", "width", "n_train", "sample", "step", "dim"), traj),
                       "population_data": ds.population_data, "train_data": ds.train_data},
                      coords={"schedule": ["h2"], "width": [8], "n_train": [4, 12], "alpha": ("step", [a]),
                              "t": ("step", [float(ds.t[-1])])}, attrs=same.attrs)
    dens = man.manifold_density(fake, bins=8).compute()
    np.testing.assert_allclose(dens.ratio_max.values, 1.0) and np.testing.assert_allclose(dens.ratio_min.values, 1.0)
    np.testing.assert_allclose(dens.in_tube.values, 1.0)
    dd = man.distribution_distance(fake, n_boot=20).compute()
    assert np.all(dd.sliced_w2.values < 1e-12)  # the same points: every 1-D quantile function agrees
    assert np.all(np.abs(dd.mmd2.values) < 0.05)  # unbiased: O(1/n) around 0 for one law (here slightly < 0)
    shifted = fake.copy()
    shifted["trajectory"] = fake.trajectory + 2.0 * float(ds.alpha[-1])
    far = man.distribution_distance(shifted, n_boot=20).compute()
    assert np.all(far.sliced_w2.values > 0.2) and np.all(far.mmd2_low.values > 10 * np.abs(dd.mmd2.values))
    rv = man.ridge_vs_manifold(fake.rename(trajectory="ridge_projection"), n_dense=500).compute()
    assert np.all(rv.to_manifold.values < 1e-9) and np.all(rv.hausdorff.values == rv.from_manifold.values)
    assert m.k == 1


def test_rate_fit_recovers_a_known_slope_per_cell():
    from ridgexr.analysis import manifold as man

    n = np.array([8, 32, 128, 512, 2048])
    rng = np.random.default_rng(0)
    metric = xr.DataArray(np.stack([3 * n**-0.5, 2 * n**-1.0]) * np.exp(rng.normal(0, 0.02, (2, 5))),
                          dims=("schedule", "n_train"), coords={"schedule": ["a", "b"], "n_train": n})
    out = man.rate_fit(metric.chunk({"n_train": 2}), n_boot=500).compute()
    np.testing.assert_allclose(out.slope.values, [-0.5, -1.0], atol=0.02)
    assert np.all(out.slope_low.values <= out.slope.values) and np.all(out.slope.values <= out.slope_high.values)
    with pytest.raises(ValueError, match="dim"):
        man.rate_fit(metric, dim="width")


def test_distribution_distance_is_small_for_one_law_and_grows_with_a_shift(circle_run):
    """Two independent samples of one law vs the same sample shifted by 0, 0.5, 1, 2 (data units)."""
    from ridgexr.analysis import manifold as man

    exp, res = circle_run
    ds = ridgexr.open_dataset(res.store).load()
    m = man.store_manifold(ds)
    spec = exp.dataset.manifold
    fresh, _ = m.sample(400, density=spec.density, kappa=spec.kappa, seed=99)  # same law, new draw
    pop, _ = m.sample(400, density=spec.density, kappa=spec.kappa, seed=98)
    a = float(ds.alpha[-1])
    w2, mmd = [], []
    for shift in (0.0, 0.5, 1.0, 2.0):
        traj = ((fresh + shift) * a)[None, None, :, None, :]
        fake = xr.Dataset({"trajectory": (("schedule", "width", "sample", "step", "dim"), traj),
                           "population_data": (("population", "dim"), pop)},
                          coords={"schedule": ["h2"], "width": [8], "alpha": ("step", [a]), "t": ("step", [0.01])},
                          attrs=ds.attrs)
        out = man.distribution_distance(fake, n_boot=0).compute().squeeze()
        w2.append(float(out.sliced_w2)), mmd.append(float(out.mmd2))
    assert w2[0] < 0.15 and abs(mmd[0]) < 0.01  # sampling noise only, at n = 400
    assert np.all(np.diff(w2) > 0) and np.all(np.diff(mmd) > 0)


def test_manifold_analyses_are_lazy(circle_run):
    from ridgexr.analysis import manifold as man

    exp, res = circle_run
    ds = ridgexr.open_dataset(res.store)
    outs = [man.manifold_distance(ds), man.novelty(ds), man.manifold_density(ds).density,
            man.distribution_distance(ds, n_boot=5).sliced_w2, man.ridge_vs_manifold(ds).hausdorff,
            ds.ridge.novelty()]
    assert all(isinstance(o.data, da.Array) for o in outs)
    with pytest.raises(ValueError, match="manifold"):
        man.manifold_distance(ds.assign_attrs(config="{}"))


@pytest.mark.slow
def test_swept_cells_run_on_a_local_cluster_to_the_same_store(circle_run, tmp_path):
    """The n_train (and manifold) cells of a run on a LocalCluster of processes equal the in-process run."""
    exp, res = circle_run
    dist = run_experiment(exp, data_dir=tmp_path, scheduler="local", n_workers=2)
    a, b = ridgexr.open_dataset(res.store), ridgexr.open_dataset(dist.store)
    for name in ("trajectory", "ridge_projection", "residual_tangent", "excess_loss", "population_data",
                 "cell_complete"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
