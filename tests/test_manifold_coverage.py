"""Coarse (stopped) exact scores, Tweedie's output, delta-coverage and slope fits (docs/manifold.md)."""

import json

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import ridgexr
from ridgexr import analysis, time_grid
from ridgexr.analysis import arrays
from ridgexr.catalog import load_catalog_file
from ridgexr.datasets import Manifold
from ridgexr.models.exact import ExactSpec
from ridgexr.models.exact.denoiser import ExactDenoiser
from ridgexr.sampling import probability_flow, reverse_sde

CATALOG = """
experiments:
  cov:
    dataset:
      manifold: {kind: circle, ambient_dim: 2, radius: 2.0, density: piecewise, n: 120, seed: 0}
      n_train: [30, 120]
    process: {T: 2.0, t_min: 0.001, n_steps: 16}
    models:
      - {kind: exact, name: memorize}
      - {kind: exact, name: coarse, sigma_stop: {c: 1.0, gamma: 0.5}}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 2}
    sampler: {record_every: 4, block_steps: 4}
    n_samples: 24
    d_star: 1
    store: cov.zarr
"""


def _posterior_mean(x, train, t):
    """E[x0 | x_t = x] of the empirical law, directly: softmax(-|x - a x_i|^2 / 2h) weights."""
    a, h = np.exp(-t), 1 - np.exp(-2 * t)
    logw = -((x[:, None, :] - a * train[None]) ** 2).sum(-1) / (2 * h)
    w = np.exp(logw - logw.max(1, keepdims=True))
    return (w / w.sum(1, keepdims=True)) @ train


@pytest.fixture(scope="module")
def cov_run(tmp_path_factory, run_entry):
    exp, res = run_entry(CATALOG, tmp_path_factory.mktemp("cov"), "cov")
    return exp, ridgexr.open_dataset(res.store)


def test_stopped_cells_store_tweedie_output_at_t_stop(cov_run):
    """denoise_t = (c N^-gamma)^2 / 2; denoised = E[x0 | x_t_stop] of the final (frozen) state, computed directly,
    and equal to Tweedie's (x + h score) / alpha; the state stops moving once t <= t_stop."""
    exp, ds = cov_run
    train = ds.train_data.values
    for n in (30, 120):
        cell = ds.sel(model="coarse", n_train=n)
        s = float(cell.denoise_t)
        assert s == pytest.approx((1.0 * n ** -0.5) ** 2 / 2, rel=1e-12)
        x = cell.trajectory.isel(step=-1).values
        np.testing.assert_allclose(cell.denoised.values, _posterior_mean(x, train[:n], s), atol=1e-10)
        score = ExactDenoiser(train[:n]).score(x, s)
        a, h = np.exp(-s), 1 - np.exp(-2 * s)
        np.testing.assert_allclose(cell.denoised.values, (x + h * np.asarray(score)) / a, atol=1e-9)
        frozen = cell.trajectory.where(cell.t <= s, drop=True)
        assert frozen.sizes["step"] >= 1
        np.testing.assert_array_equal(frozen.values, np.broadcast_to(x[:, None], frozen.shape))
    mem = ds.sel(model="memorize", n_train=30)
    assert float(mem.denoise_t) == pytest.approx(0.001)
    np.testing.assert_allclose(mem.denoised.values, _posterior_mean(mem.trajectory.isel(step=-1).values, train[:30],
                                                                    0.001), atol=1e-10)


@pytest.mark.parametrize("sampler", [reverse_sde, probability_flow])
def test_stopped_sampler_is_the_sampler_on_the_grid_cut_at_t_stop(sampler):
    """Stopping at t_stop = running the same sampler on the grid's times > t_stop followed by t_stop; the
    recorded score of a frozen state is the exact score at (x, t_stop), checked against its formula."""
    train = np.array([[-3.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    ex = ExactDenoiser(train)
    grid = time_grid(20, 2.0, 0.001)
    t_stop = 0.5 * (grid[12] + grid[13])
    stopped = list(sampler(ex.score, 7, 2, grid, seed=3, block_steps=50, t_stop=t_stop))[0]
    cut = np.r_[grid[grid > t_stop], t_stop]
    direct = list(sampler(ex.score, 7, 2, cut, seed=3, block_steps=50))[0]
    np.testing.assert_allclose(stopped.x[13].numpy(), direct.x[-1].numpy(), atol=1e-12)
    np.testing.assert_array_equal(stopped.x[13:].numpy(), np.broadcast_to(stopped.x[13].numpy(), stopped.x[13:].shape))
    x = stopped.x[15].numpy()
    a, h = np.exp(-t_stop), 1 - np.exp(-2 * t_stop)
    formula = (a * _posterior_mean(x, train, t_stop) - x) / h  # grad log p_t of the empirical law
    np.testing.assert_allclose(stopped.score[15].numpy(), formula, atol=1e-9)
    with pytest.raises(ValueError, match="t_stop"):
        list(sampler(ex.score, 2, 2, grid, seed=0, t_stop=-1.0))


def test_sigma_stop_rule_and_exclusive_fields():
    spec = ExactSpec(sigma_stop={"c": 0.8, "gamma": 0.25})
    assert spec.stop_time(10_000) == pytest.approx((0.8 * 10_000 ** -0.25) ** 2 / 2)
    assert ExactSpec(t_stop=0.01).stop_time(5) == 0.01 and ExactSpec().stop_time(5) is None
    with pytest.raises(ValueError, match="not both"):
        ExactSpec(t_stop=0.01, sigma_stop={"c": 1.0, "gamma": 0.0})


def _fake_store(samples, *, density="uniform", radius=2.0):
    cfg = {"dataset": {"manifold": {"kind": "circle", "ambient_dim": 2, "radius": radius, "minor_radius": 0.3,
                                    "rotation_seed": 0, "density": density, "kappa": 1.0}}}
    ds = xr.Dataset({"denoised": (("cell", "sample", "dim"), samples[None])}, attrs={"config": json.dumps(cfg)})
    return ds


def test_coverage_radius_of_a_sample_missing_an_arc_is_known():
    """Samples dense on the circle but for an arc of length L: the ball at the gap's centre needs radius
    r = L C / (2 (C - c (C - L))) (C = 2 pi R) to hold c x its population mass; c -> 0 gives L / 2."""
    R, L = 2.0, 1.2
    m = Manifold("circle", ambient_dim=2, radius=R)
    theta = np.linspace(-np.pi, np.pi, 6000, endpoint=False)
    keep = np.abs(theta - 1.0) >= L / (2 * R)  # the arc of length L centred at angle 1
    x = m.embed(R * np.c_[np.cos(theta[keep]), np.sin(theta[keep])])
    C = 2 * np.pi * R
    radii = np.linspace(0.01, 3.0, 300)
    for c in (0.02, 0.5):
        got = analysis.coverage(_fake_store(x), c=c, n_centers=720, radii=radii)
        want = L * C / (2 * (C - c * (C - L)))
        assert float(got.coverage_delta.squeeze()) == pytest.approx(want, abs=radii[1] - radii[0] + 4e-3)
        assert float(got.mass_ratio_min.squeeze()) >= c


def test_coverage_of_the_population_itself_has_ratio_one(rng):
    """Samples = the population (ball masses from the same points): every ratio is 1, delta the first radius."""
    dist = rng.uniform(0, 3, size=(40, 500))
    radii = np.linspace(0.1, 3.0, 30)
    pop = arrays.ball_mass(dist, radii)
    np.testing.assert_allclose(pop, (dist[:, :, None] <= radii).mean(1))  # against brute force
    out = arrays.coverage_radius(pop, pop, radii, c=1.0)
    np.testing.assert_allclose(out, [radii[0], 1.0, 1.0])
    # the closed-form piecewise arc mass against a dense sample of the law
    m = Manifold("circle", ambient_dim=2, radius=2.0)
    x, _ = m.sample(60_000, density="piecewise", seed=1)
    got = analysis.coverage(_fake_store(x, density="piecewise"), c=0.9, n_centers=64,
                            radii=np.array([0.5, 1.0, 2.0, 4.0]))
    assert 0.9 <= float(got.mass_ratio_min.squeeze()) <= 1.0 <= float(got.mass_ratio_max.squeeze()) <= 1.1
    wrong = analysis.coverage(_fake_store(x, density="uniform"), c=0.9, n_centers=64,
                              radii=np.array([0.5, 1.0, 2.0, 4.0]))  # the wrong law: ratios down to 2/3
    assert np.isnan(float(wrong.coverage_delta.squeeze()))  # no radius below pi r passes at c = 0.9


@pytest.mark.parametrize("rate", [0.25, 1.0])
def test_slope_fit_recovers_a_planted_rate(rate):
    """metric = 3 N^-rate x lognormal noise, 4 draws at each of 5 N pooled, 40 replicates: the mean slope is
    -rate and the 95 % pairs-bootstrap intervals hold it in most replicates (a rate off by 0.1 in almost none)."""
    rng = np.random.default_rng(int(rate * 8))
    n = np.repeat(np.geomspace(100, 10_000, 5), 4)
    fits = []
    for rep in range(40):
        metric = 3.0 * n ** -rate * np.exp(0.05 * rng.standard_normal(n.size))
        da = xr.DataArray(metric, dims=("n_train",), coords={"n_train": n})
        fit = analysis.rate_fit(da, n_boot=400, seed=rep).compute()
        fits.append([float(fit.slope), float(fit.slope_low), float(fit.slope_high)])
    fits = np.array(fits)
    assert np.mean(fits[:, 0]) == pytest.approx(-rate, abs=0.01)
    assert np.mean((fits[:, 1] <= -rate) & (-rate <= fits[:, 2])) >= 0.8
    assert np.mean((fits[:, 1] <= -rate - 0.1) & (-rate - 0.1 <= fits[:, 2])) <= 0.05


def test_smoothed_target_distance_is_small_for_the_target_itself(cov_run):
    """The target sample against itself (a second z draw) is close; the unstopped memorizer at N = 30 is farther."""
    _, ds = cov_run
    d = ds.ridge.smoothed_target_distance().compute()
    assert d.dims == ("model", "n_train") and np.isfinite(d.values).all()
    m = Manifold("circle", ambient_dim=2, radius=2.0)
    pop = ds.population_data.values
    s = float(ds.denoise_t.sel(model="coarse", n_train=120))
    sigma = np.sqrt(1 - np.exp(-2 * s)) / np.exp(-s)
    z = np.random.default_rng(5).standard_normal(pop.shape)
    own = arrays.sliced_wasserstein(m.project(pop + sigma * z), m.project(pop), seed=0)
    assert own < float(d.sel(model="memorize", n_train=30))


# ---------------------------------------------------------------------------------------------------------
# Independent training sets (dataset.manifold.draws), slopes with intervals over them, coverage on the sphere.

DRAWS_CATALOG = """
experiments:
  draws:
    dataset:
      manifold: {kind: sphere, ambient_dim: 3, radius: 2.0, density: piecewise, n: 40, seed: 5, draws: 3}
      n_train: [10, 40]
    process: {T: 2.0, t_min: 0.001, n_steps: 8}
    models:
      - {kind: exact, name: memorize}
      - {kind: exact, name: coarse, sigma_stop: {c: 1.0, gamma: 0.5}}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 1}
    sampler: {record_every: 8, block_steps: 8}
    ridge: {max_iter: 2}
    n_samples: 16
    d_star: 2
    store: draws.zarr
"""


def test_manifold_draws_are_independent_training_sets():
    """draws = 3 stacks three sets of n points: draw 0 is the single-draw set (same seed, same points), the
    others come from other seeds (no shared point), each the law's sample of its own seed; rows() slices them."""
    from ridgexr.catalog.data import DatasetSpec
    from ridgexr.datasets import load_training_set
    from ridgexr.datasets.training_set import manifold_draw_seeds

    block = {"kind": "sphere", "ambient_dim": 3, "radius": 2.0, "density": "piecewise", "n": 50, "seed": 7}
    one = DatasetSpec(manifold=block)
    three = DatasetSpec(manifold=block | {"draws": 3}, n_train=[20, 50])
    x1, x3 = load_training_set(one), load_training_set(three)
    assert x3.shape == (150, 3)
    np.testing.assert_array_equal(x3[:50], x1)
    np.testing.assert_array_equal(x3, load_training_set(DatasetSpec(manifold=block | {"draws": 3})))  # same seed
    m = Manifold("sphere", ambient_dim=3, radius=2.0)
    for j, seed in enumerate(manifold_draw_seeds(7, 3)):
        np.testing.assert_array_equal(x3[50 * j:50 * (j + 1)], m.sample(50, density="piecewise", seed=seed)[0])
    assert 8 not in manifold_draw_seeds(7, 3)  # seed + 1 draws the population
    gaps = np.linalg.norm(x3[:, None] - x3[None], axis=-1)[~np.eye(150, dtype=bool)]
    assert gaps.min() > 1e-6  # no point repeated across draws
    assert three.sweeps() == (("data_draw", (0, 1, 2)), ("n_train", (20, 50)))
    assert three.rows({"data_draw": 2, "n_train": 20}) == slice(100, 120)
    assert one.rows({}) == slice(None, None) and one.sweeps() == ()
    with pytest.raises(ValueError, match="n_train"):
        DatasetSpec(manifold=block | {"draws": 2}, n_train=[60])


def test_runs_with_data_draws_train_each_cell_on_its_own_set(tmp_path, run_entry):
    """Cell (data_draw j, n_train N) is the exact score of rows j n .. j n + N: its Tweedie output is the
    posterior mean of those rows, computed directly; the hash of an entry without draws is unchanged."""
    exp, res = run_entry(DRAWS_CATALOG, tmp_path, "draws")
    ds = ridgexr.open_dataset(res.store)
    assert ds.sizes["data_draw"] == 3 and ds.train_data.shape == (120, 3)
    train = ds.train_data.values
    for j in range(3):
        for n in (10, 40):
            cell = ds.sel(model="coarse", data_draw=j, n_train=n)
            s = float(cell.denoise_t)
            x = cell.trajectory.isel(step=-1).values
            np.testing.assert_allclose(cell.denoised.values, _posterior_mean(x, train[40 * j:40 * j + n], s),
                                       atol=1e-10)
    nov = ds.ridge.novelty().sel(model="memorize", n_train=10).compute()  # the cell's own training set
    x = ds.trajectory.isel(step=-1).sel(model="memorize", n_train=10).values / float(ds.alpha.isel(step=-1))
    for j in range(3):
        np.testing.assert_allclose(nov.sel(data_draw=j).values, arrays.novelty(x[j], train[40 * j:40 * j + 10]))
    split = ds.assign(train_data=ds.train_data.chunk({"train": 7}))  # a large training set is stored in chunks
    np.testing.assert_array_equal(split.ridge.novelty().sel(model="memorize", n_train=10).values, nov.values)
    plain = load_catalog_file(tmp_path / "cat.yaml")["draws"].model_copy(deep=True)
    cfg = json.loads(exp.model_dump_json())
    cfg["dataset"]["manifold"]["draws"] = 1
    from ridgexr.catalog import Experiment

    one = Experiment.model_validate(cfg)
    del cfg["dataset"]["manifold"]["draws"]
    assert one.config_hash(train[:40]) == Experiment.model_validate(cfg).config_hash(train[:40])
    assert plain.config_hash(train) != one.config_hash(train)


@pytest.mark.parametrize("rate", [0.25, 0.5])
def test_draw_slope_fit_recovers_a_planted_rate_with_t_intervals(rate):
    """metric_j(N) = c_j N^-rate x lognormal noise on M = 4 independent draws (each its own constant), 200
    replicates: the mean slope is -rate, the 95 % Student-t intervals over draws hold it in ~95 % of
    replicates and a rate off by 0.1 in few; the labelled form agrees with the array kernel."""
    rng = np.random.default_rng(int(rate * 8))
    n = np.geomspace(100, 10_000, 5)
    fits = []
    for _ in range(200):
        c = np.exp(0.3 * rng.standard_normal((4, 1)))
        metric = c * n ** -rate * np.exp(0.1 * rng.standard_normal((4, n.size)))
        fits.append(arrays.draw_rate_fit(n, metric))
    fits = np.array(fits)
    assert np.all(fits[:, 3] == 4)
    assert np.mean(fits[:, 0]) == pytest.approx(-rate, abs=0.01)
    assert 0.9 <= np.mean((fits[:, 1] <= -rate) & (-rate <= fits[:, 2])) <= 0.99
    assert np.mean((fits[:, 1] <= -rate - 0.1) & (-rate - 0.1 <= fits[:, 2])) <= 0.1
    # the per-draw slopes by brute force (np.polyfit) and the t quantile
    per = np.array([np.polyfit(np.log(n), np.log(row), 1)[0] for row in metric])
    half = 3.182446305284263 * per.std(ddof=1) / 2  # t_{3, 0.975}
    np.testing.assert_allclose(fits[-1, :3], [per.mean(), per.mean() - half, per.mean() + half], rtol=1e-10)
    da = xr.DataArray(metric, dims=("data_draw", "n_train"), coords={"n_train": n})
    lab = analysis.rate_fit(da.expand_dims(model=["a"]), draw_dim="data_draw").compute()
    np.testing.assert_allclose([float(lab[v].squeeze()) for v in ("slope", "slope_low", "slope_high", "n_draws")],
                               fits[-1], rtol=1e-12)
    with pytest.raises(ValueError, match="draw_dim"):
        analysis.rate_fit(da, draw_dim="n_train")


def _sphere_store(samples, *, density="uniform", radius=2.0):
    cfg = {"dataset": {"manifold": {"kind": "sphere", "ambient_dim": 3, "radius": radius, "minor_radius": 0.3,
                                    "rotation_seed": 0, "density": density, "kappa": 1.0}}}
    return xr.Dataset({"denoised": (("cell", "sample", "dim"), samples[None])}, attrs={"config": json.dumps(cfg)})


def _fibonacci(n):
    i = np.arange(n) + 0.5
    z, ang = 1 - 2 * i / n, np.pi * (1 + 5**0.5) * i
    s = np.sqrt(1 - z * z)
    return np.c_[s * np.cos(ang), s * np.sin(ang), z]


def test_sphere_cap_mass_of_the_piecewise_law_against_a_dense_sample():
    """The closed-form cap masses (uniform: (1 - cos a) / 2; piecewise: quadrature of the half-circle share)
    against the share of 400 000 points of the law in each cap (Monte Carlo sd <= 8e-4)."""
    from ridgexr.analysis.manifold import _sphere_cap_mass

    m = Manifold("sphere", ambient_dim=3, radius=1.0)
    y = m.local(m.sample(400_000, density="piecewise", seed=3)[0])
    c = np.r_[[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, -1.0, 0.0]], _fibonacci(5)]
    a = np.array([0.05, 0.3, 1.0, 2.0, 3.1, np.pi])
    mc = (np.arccos(np.clip(y @ c.T, -1, 1))[:, :, None] <= a).mean(0)
    np.testing.assert_allclose(_sphere_cap_mass(c, a, "piecewise"), mc, atol=4e-3)
    np.testing.assert_allclose(_sphere_cap_mass(c, a, "uniform"), np.broadcast_to((1 - np.cos(a)) / 2, mc.shape))
    assert np.abs(_sphere_cap_mass(c, a, "uniform") - mc).max() > 0.05  # the law is not uniform


def test_sphere_coverage_of_the_law_itself_and_of_a_missing_cap():
    """On the sphere (k = 2): a dense sample of the piecewise law has ball-mass ratios ~1 (and the uniform law's
    masses are wrong by 2/3 .. 4/3: no radius passes at c = 0.9); uniform samples missing a cap of geodesic
    radius rho around a ball centre give delta with cap(delta) = cap(rho) / (1 - c (1 - cap(rho))), rho as c -> 0."""
    R = 2.0
    m = Manifold("sphere", ambient_dim=3, radius=R)
    x, _ = m.sample(40_000, density="piecewise", seed=1)
    radii = np.array([1.0, 2.0, 4.0])
    got = analysis.coverage(_sphere_store(x, density="piecewise"), c=0.9, n_centers=64, radii=radii)
    assert 0.9 <= float(got.mass_ratio_min.squeeze()) <= 1.0 <= float(got.mass_ratio_max.squeeze()) <= 1.1
    wrong = analysis.coverage(_sphere_store(x, density="uniform"), c=0.9, n_centers=64, radii=radii)
    assert np.isnan(float(wrong.coverage_delta.squeeze()))
    n_centers, rho = 100, 1.0
    centre = _fibonacci(n_centers)[17]  # a ball centre of coverage's lattice
    u = _fibonacci(40_000)  # a near-uniform, noise-free sample of the sphere
    keep = np.arccos(np.clip(u @ centre, -1, 1)) * R > rho
    radii = np.linspace(0.02, 3.0, 150)
    cap = lambda r: (1 - np.cos(r / R)) / 2  # noqa: E731
    for c in (0.02, 0.5):
        out = analysis.coverage(_sphere_store(m.embed(R * u[keep])), c=c, n_centers=n_centers, radii=radii)
        want = R * np.arccos(1 - 2 * cap(rho) / (1 - c * (1 - cap(rho))))
        assert float(out.coverage_delta.squeeze()) == pytest.approx(want, abs=radii[1] - radii[0] + 5e-3)
        assert float(out.mass_ratio_min.squeeze()) >= c


def test_store_estimate_counts_denoised_as_written(cov_run):
    """estimate_resources counts denoised + denoise_t at their nbytes in the store (every cell runs here), adds
    at least that much to the store-size bound against the same entry unstopped, and bounds the disk use."""
    import os
    from pathlib import Path

    from ridgexr.run.plan import estimate_resources

    exp, ds = cov_run
    est = estimate_resources(exp, ds.train_data.values)
    assert est["store_variables"] == {"denoised": ds.denoised.nbytes + ds.denoise_t.nbytes, "v_kernel": 0}
    plain = exp.model_copy(update={"models": [b.model_copy(update={"sigma_stop": None}) for b in exp.models]})
    assert not any(b.stopped for b in plain.blocks)
    grew = est["store_size"] - estimate_resources(plain, ds.train_data.values)["store_size"]
    assert ds.denoised.nbytes + ds.denoise_t.nbytes <= grew
    root = Path(ds.encoding["source"])
    used = sum(os.lstat(p).st_blocks * 512 for p in [root, *root.rglob("*")])
    assert 0 < used <= est["store_size"]


def test_refined_centres_find_a_gap_between_the_first_centres():
    """A gap narrower than the first centres' spacing, placed between two of them: without refinement no centre
    sees it (delta stays at the dense sample's own level); refined until the spacing is at most delta, the ball
    at the gap's centre needs the known radius L C / (2 (C - c (C - L))), as with centres placed on it."""
    R, L, n0 = 2.0, 0.01, 256
    m = Manifold("circle", ambient_dim=2, radius=R)
    theta = np.linspace(-np.pi, np.pi, 400_000, endpoint=False)
    gap_at = -np.pi + (17 + 0.5) * 2 * np.pi / n0  # half-way between centres 17 and 18
    keep = np.abs(theta - gap_at) >= L / (2 * R)
    x = m.embed(R * np.c_[np.cos(theta[keep]), np.sin(theta[keep])])
    C = 2 * np.pi * R
    radii = np.geomspace(1e-4, 3.0, 400)
    want = L * C / (2 * (C - 0.5 * (C - L)))
    plain = analysis.coverage(_fake_store(x), c=0.5, n_centers=n0, radii=radii, refine=False)
    assert float(plain.coverage_delta.squeeze()) < want / 4 and int(plain.coverage_centres.squeeze()) == n0
    got = analysis.coverage(_fake_store(x), c=0.5, n_centers=n0, radii=radii)
    step = radii[np.searchsorted(radii, want)] - radii[np.searchsorted(radii, want) - 1]
    assert float(got.coverage_delta.squeeze()) == pytest.approx(want, abs=2 * step)
    n = int(got.coverage_centres.squeeze())
    assert n % n0 == 0 and 2 * np.pi * R / n <= float(got.coverage_delta.squeeze())


@pytest.mark.slow
def test_refined_sphere_centres_find_a_small_missing_cap():
    """On the sphere: a near-uniform sample missing a cap of geodesic radius 0.05 away from the first 256
    centres (spacing ~0.44): refined, delta reads the cap's formula, cap(delta) = cap(rho) / (1 - c (1 - cap(rho)))."""
    R, rho, n0 = 2.0, 0.05, 256
    m = Manifold("sphere", ambient_dim=3, radius=R)
    first = _fibonacci(n0)
    u = _fibonacci(1_000_000)
    candidates = u[::150]
    centre = candidates[np.argmin((candidates @ first.T).max(1))]  # the point farthest from every first centre
    assert (np.arccos(np.clip(first @ centre, -1, 1)) * R).min() > 4 * rho
    keep = np.arccos(np.clip(u @ centre, -1, 1)) * R > rho
    radii = np.geomspace(1e-2, 3.0, 120)
    cap = lambda r: (1 - np.cos(r / R)) / 2  # noqa: E731
    want = R * np.arccos(1 - 2 * cap(rho) / (1 - 0.5 * (1 - cap(rho))))
    plain = analysis.coverage(_sphere_store(m.embed(R * u[keep])), c=0.5, n_centers=n0, radii=radii, refine=False)
    assert float(plain.coverage_delta.squeeze()) < want / 2
    got = analysis.coverage(_sphere_store(m.embed(R * u[keep])), c=0.5, n_centers=n0, radii=radii)
    j = np.searchsorted(radii, want)
    assert float(got.coverage_delta.squeeze()) == pytest.approx(want, abs=2 * (radii[j] - radii[j - 1]) + 2e-3)
    assert int(got.coverage_centres.squeeze()) > n0


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["circle", "sphere"]), seed=st.integers(0, 2**16), n=st.integers(1, 300))
def test_refinement_counts_equal_distance_counts(kind, seed, n):
    """The refinement's counts (sorted angles on the circle, a k-d tree of unit vectors on the sphere) equal the
    number of points within each geodesic radius by closed-form distances."""
    import json

    from ridgexr.analysis.manifold import _Centres

    m = Manifold(kind, ambient_dim=2 if kind == "circle" else 3, radius=2.0)
    x, _ = m.sample(n, density="piecewise", seed=seed)
    cfg = {"kind": kind, "density": "piecewise", "kappa": 1.0}
    radii = np.array([0.01, 0.3, 1.0, 2.5, 7.0])
    ctr = _Centres(m, cfg, radii, xr.Dataset(attrs={"config": json.dumps({})}))
    grid = ctr._grid(37)
    pts = m.embed(2.0 * (np.c_[np.cos(grid), np.sin(grid)] if kind == "circle" else grid))
    points = ctr._local_angles(x) if kind == "circle" else ctr._unit(x)
    got = ctr._counts(points, grid, radii / 2.0)
    want = (m.geodesic_distance(pts, x)[:, :, None] <= radii * (1 + 1e-12)).sum(1)
    near = np.abs(m.geodesic_distance(pts, x)[:, :, None] - radii).min(1) < 1e-9  # rounding at a boundary
    np.testing.assert_array_equal(np.where(near, want, got), want)


def test_refinement_on_a_von_mises_fisher_sphere_reads_population_masses_from_its_sample():
    """The sphere with a von Mises-Fisher density has no closed-form cap masses: the refinement reads them from the
    stored population sample (its k-d tree). Samples: every other point of the population; refined, delta is at
    least the unrefined one, the centres' spacing is at most delta, and every ball at delta holds half its mass."""
    R = 2.0
    m = Manifold("sphere", ambient_dim=3, radius=R)
    pop = m.embed(R * _fibonacci(20_000))
    cfg = {"dataset": {"manifold": {"kind": "sphere", "ambient_dim": 3, "radius": R, "minor_radius": 0.3,
                                    "rotation_seed": 0, "density": "von_mises", "kappa": 1.0}}}
    ds = xr.Dataset({"denoised": (("cell", "sample", "dim"), pop[None, ::2]), "population_data": (("pop", "dim"), pop)},
                    attrs={"config": json.dumps(cfg)})
    radii = np.geomspace(0.05, 3.0, 60)  # from the population's own spacing up
    got = analysis.coverage(ds, c=0.5, n_centers=64, radii=radii)
    plain = analysis.coverage(ds, c=0.5, n_centers=64, radii=radii, refine=False)
    delta, n = float(got.coverage_delta.squeeze()), int(got.coverage_centres.squeeze())
    assert 64 < n < 2**20 and np.sqrt(4 * np.pi / n) * R <= delta and delta >= float(plain.coverage_delta.squeeze())
    assert float(got.mass_ratio_min.squeeze()) >= 0.5


def test_a_ball_without_population_mass_does_not_pass():
    """A population sample as the law: below its spacing balls hold no population point, and 0 >= c x 0 would
    pass them all.  Such a ball fails, so delta is at least the radius at which every ball holds population mass."""
    radii = np.array([0.5, 1.0, 2.0, 3.0])
    pop = np.array([[0.0, 0.0, 0.4, 1.0]])  # no population mass below radius 2
    samp = np.zeros((1, 4))
    out = arrays.coverage_radius(samp, pop, radii, c=0.5)
    assert np.isnan(out[0])  # the sample never holds mass: no radius passes (the old rule gave 0.5)
    out = arrays.coverage_radius(np.array([[0.0, 0.0, 0.3, 1.0]]), pop, radii, c=0.5)
    assert out[0] == 2.0  # the first radius with population mass, where 0.3 >= 0.5 x 0.4
    # end to end: the von Mises-Fisher sphere's population sample as the law and as the samples, from radii far
    # below its spacing (~0.05): delta is where every centre's ball first holds a population point, not 1e-4
    R = 2.0
    m = Manifold("sphere", ambient_dim=3, radius=R)
    pop = m.embed(R * _fibonacci(20_000))
    cfg = {"dataset": {"manifold": {"kind": "sphere", "ambient_dim": 3, "radius": R, "minor_radius": 0.3,
                                    "rotation_seed": 0, "density": "von_mises", "kappa": 1.0}}}
    ds = xr.Dataset({"denoised": (("cell", "sample", "dim"), pop[None]), "population_data": (("pop", "dim"), pop)},
                    attrs={"config": json.dumps(cfg)})
    radii = np.geomspace(1e-4, 1.0, 200)
    got = analysis.coverage(ds, c=0.5, n_centers=64, radii=radii, refine=False)
    nearest = np.sort(m.geodesic_distance(pop[::40], pop), 1)[:, 1]  # the population's own spacing (500 of its points)
    assert float(got.coverage_delta.squeeze()) > 0.1 * np.median(nearest) > 1e-3
    assert float(got.mass_ratio_min.squeeze()) == pytest.approx(1.0)  # the samples are the population
