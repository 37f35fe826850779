"""The marginal sampler of the exact score, runs that do not observe their states, and the streamed coverage."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import ridgexr
from ridgexr import analysis, time_grid
from ridgexr.analysis import arrays
from ridgexr.catalog import load_catalog_file
from ridgexr.models.exact.denoiser import ExactDenoiser
from ridgexr.run import run_experiment
from ridgexr.sampling import marginal

CATALOG = """
experiments:
  marg:
    dataset:
      manifold: {kind: circle, ambient_dim: 2, radius: 2.0, density: piecewise, n: 60, seed: 0, n_population: 600}
      n_train: [20, 60]
    process: {T: 2.0, t_min: 0.001, n_steps: 16}
    models:
      - {kind: exact, name: memorize}
      - {kind: exact, name: coarse, sigma_stop: {c: 0.5, gamma: 0.25}}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 2}
    sampler: {kind: marginal, record_every: 4, block_steps: 2}
    ridge: {observe: false}
    n_samples: 400
    d_star: 1
    store: marg.zarr
"""


def test_marginal_states_have_the_law_p_t():
    """Two far-apart points: every state is alpha_t x_I + sqrt(h_t) xi, so the residual from the nearest alpha_t x_i
    is N(0, h_t I) (Kolmogorov-Smirnov per coordinate), each point is drawn half the time (binomial test), and a
    stopped score's states sit at t_stop from the step that crosses it on."""
    train = np.array([[-30.0, 0.0], [30.0, 0.0]])
    grid = time_grid(12, 2.0, 0.01)
    t_stop = 0.5 * (grid[6] + grid[7])
    blocks = list(marginal(train, 4000, grid, seed=5, block_steps=3, t_stop=t_stop))
    assert [b.x.shape[0] for b in blocks] == [3, 3, 3, 3, 1]
    x = torch.cat([b.x for b in blocks]).numpy()
    steps = np.concatenate([b.step for b in blocks])
    np.testing.assert_array_equal(steps, np.arange(13))
    np.testing.assert_array_equal(np.concatenate([b.t for b in blocks]), grid)
    assert all(bool(torch.isnan(b.score).all()) for b in blocks)
    for k in (0, 3, 6, 12):
        s = max(grid[k], t_stop)
        a, h = np.exp(-s), 1 - np.exp(-2 * s)
        side = np.where(x[k, :, 0] > 0, 1, 0)  # which point (exact for these sizes: 30 a >> sqrt(h))
        z = (x[k] - a * train[side]) / np.sqrt(h)
        for j in range(2):
            assert stats.kstest(z[:, j], "norm").pvalue > 1e-3
        assert stats.binomtest(int(side.sum()), side.size, 0.5).pvalue > 1e-3
    np.testing.assert_array_equal(x[7:], np.broadcast_to(x[7], x[7:].shape))  # frozen below t_stop
    same = torch.cat([b.x for b in marginal(train, 4000, grid, seed=5, block_steps=3, t_stop=t_stop)]).numpy()
    np.testing.assert_array_equal(same, x)
    with pytest.raises(ValueError, match="train"):
        list(marginal(np.full((3, 2), np.nan), 4, grid, seed=0))
    with pytest.raises(ValueError, match="t_stop"):
        list(marginal(train, 4, grid, seed=0, t_stop=0.0))


def test_marginal_sampler_is_for_exact_blocks_only(tmp_path):
    """A catalog entry with kind marginal and a trained block, or with a score scale, is refused by name."""
    bad = CATALOG.replace("      - {kind: exact, name: memorize}\n", "      - {kind: mlp, name: net, widths: [8]}\n")
    f = tmp_path / "bad.yaml"
    f.write_text(bad.replace("training: {", "schedules: ['h']\n    training: {"))
    with pytest.raises(Exception, match="marginal"):
        load_catalog_file(f)
    f.write_text(CATALOG.replace("kind: marginal,", "kind: marginal, score_scale: inverse_sigma,"))
    with pytest.raises(Exception, match="score_scale"):
        load_catalog_file(f)


@pytest.fixture(scope="module")
def marg_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("marg")
    f = root / "cat.yaml"
    f.write_text(CATALOG)
    exp = load_catalog_file(f)["marg"]
    store = run_experiment(exp, data_dir=root / "data").store
    return exp, ridgexr.open_dataset(store), store


def test_a_marginal_run_stores_states_of_p_t_and_tweedie_output_unobserved(marg_run):
    """The stored final state of every sample is alpha_s x_i + sqrt(h_s) xi for a point x_i of its cell's training
    set (s = t_stop or t_min); denoised is the exact denoiser of that state at s; nothing is observed (the ridge
    and nearest variables hold their fill), and no sample diverges."""
    exp, ds, _ = marg_run
    train = ds.train_data.values
    for model in ("memorize", "coarse"):
        for n in (20, 60):
            cell = ds.sel(model=model, n_train=n)
            s = float(cell.denoise_t)
            x = cell.trajectory.isel(step=-1).values
            a, h = np.exp(-s), 1 - np.exp(-2 * s)
            np.testing.assert_allclose(cell.denoised.values, np.asarray(ExactDenoiser(train[:n]).denoise(x, s)),
                                       atol=1e-10)
            if model == "memorize":  # h = 2e-3: each state is within 5 sqrt(h) of its own alpha x_i
                d = np.linalg.norm(x[:, None] - a * train[None, :n], axis=-1).min(1)
                assert d.max() < 5 * np.sqrt(h) * 2 and np.median(d) < 2 * np.sqrt(h)
            assert not bool(cell.diverged.any())
            assert bool(cell.ridge_distance.isnull().all()) and bool(cell.nearest_distance.isnull().all())


def test_the_run_summary_of_an_unobserved_store_says_nan_not_zero(marg_run):
    """The summary's SCMS-converged share is NaN where nothing was projected (it read 0 %), its ridge distance NaN."""
    from ridgexr.reader import summarize

    _, ds, store = marg_run
    rows = summarize(store, ds)
    assert len(rows) == 4 and all(np.isnan(r["converged"]) and np.isnan(r["ridge_distance"]) for r in rows)


def test_observe_false_and_marginal_leave_other_hashes_alone(marg_run):
    """ridge.observe is hash-neutral at true and hashed at false; the sampler kind is hashed."""
    from ridgexr.catalog import Experiment

    exp, _, _ = marg_run
    train = np.zeros((3, 2))
    cfg = exp.model_dump()
    observed = Experiment.model_validate(cfg | {"ridge": cfg["ridge"] | {"observe": True}})
    bare = cfg["ridge"] | {"observe": True}
    bare.pop("observe")
    default = Experiment.model_validate(cfg | {"ridge": bare})
    assert observed.config_hash(train) == default.config_hash(train) != exp.config_hash(train)
    sde = Experiment.model_validate(cfg | {"sampler": cfg["sampler"] | {"kind": "sde"}})
    assert sde.config_hash(train) != observed.config_hash(train) != exp.config_hash(train)


@settings(max_examples=30, deadline=None)
@given(n_c=st.integers(1, 5), n_p=st.integers(1, 40), seed=st.integers(0, 2**16), weighted=st.booleans())
def test_ball_weight_and_mass_match_brute_force(n_c, n_p, seed, weighted):
    """Weights within each radius against a direct (dist <= r) sum, NaN distances left out; chunks of points add."""
    rng = np.random.default_rng(seed)
    dist = rng.uniform(0, 3, size=(n_c, n_p)).round(1)  # ties with the radii on purpose
    dist[rng.uniform(size=dist.shape) < 0.2] = np.nan
    radii = np.array([0.5, 1.0, 1.5, 2.9])
    w = rng.uniform(0.1, 2, n_p) if weighted else None
    ww = np.ones(n_p) if w is None else w
    within, total = arrays.ball_weight(dist, radii, w)
    ok = np.isfinite(dist)
    brute = ((np.where(ok, dist, np.inf)[:, :, None] <= radii) * ww[None, :, None]).sum(1)
    np.testing.assert_allclose(within, brute, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(total, (ok * ww).sum(1), rtol=1e-12)
    cut = n_p // 2
    a, ta = arrays.ball_weight(dist[:, :cut], radii, None if w is None else w[:cut])
    b, tb = arrays.ball_weight(dist[:, cut:], radii, None if w is None else w[cut:])
    np.testing.assert_allclose(a + b, within, atol=1e-12)
    mass = arrays.ball_mass(dist, radii, w)
    with np.errstate(invalid="ignore", divide="ignore"):
        np.testing.assert_allclose(mass, np.where(total[:, None] > 0, brute / total[:, None], np.nan), atol=1e-12)


def test_streamed_coverage_equals_one_pass(marg_run, monkeypatch):
    """coverage in chunks of 7 samples gives the same delta and ratios as in one chunk."""
    from ridgexr.analysis import manifold

    _, ds, _ = marg_run
    whole = analysis.coverage(ds, c=0.5)
    monkeypatch.setattr(manifold, "COVERAGE_CHUNK", 7)
    parts = analysis.coverage(ds, c=0.5)
    for name in ("coverage_delta", "mass_ratio_min", "mass_ratio_max"):
        np.testing.assert_allclose(parts[name].values, whole[name].values, rtol=1e-12)
    assert np.isfinite(whole.coverage_delta.values).all()


def test_the_plan_prices_a_marginal_unobserved_run(marg_run):
    """The store-size bound still bounds the store's disk use, and counts the unobserved variables' fill chunks as
    such (well below the observed bound); the time estimate drops the steps and the observation; sample chunks."""
    from pathlib import Path

    from ridgexr.run.plan import estimate_resources, estimate_stage_seconds, sample_chunk

    exp, ds, store = marg_run
    train = ds.train_data.values
    used = sum(f.stat().st_size for f in Path(store).rglob("*") if f.is_file())
    est = estimate_resources(exp, train)["store_size"]
    observed = exp.model_copy(update={"ridge": exp.ridge.model_copy(update={"observe": True})})
    assert used <= est < estimate_resources(observed, train)["store_size"]
    sde = observed.model_copy(update={"sampler": exp.sampler.model_copy(update={"kind": "sde"})})
    t_marg = estimate_stage_seconds(exp, train)["sampling and observation"]
    t_obs = estimate_stage_seconds(observed, train)["sampling and observation"]
    t_sde = estimate_stage_seconds(sde, train)["sampling and observation"]
    assert 0 < t_marg < t_obs < t_sde
    assert [sample_chunk(n) for n in (1, 512, 513, 16384, 16385, 300000)] == [1, 512, 256, 256, 257, 4688]
    assert ds.trajectory.encoding["chunks"][ds.trajectory.dims.index("sample")] == 400  # all of its 400 samples


def test_claims_and_quality_read_the_same_final_samples(marg_run):
    """The memorization claims read a stopped cell's Tweedie output (denoised), as its quality does, not its last
    state over alpha."""
    from ridgexr.claims import StoreEvidence
    from ridgexr.quality import stored_final_samples

    _, ds, _ = marg_run
    label = {"model": "coarse", "n_train": 60}
    cell = ds.sel(label)
    final = StoreEvidence(ds).final_samples(label)
    np.testing.assert_array_equal(final, cell.denoised.transpose("sample", "dim").values)
    np.testing.assert_array_equal(stored_final_samples(ds).sel(model="coarse", n_train=60).values, cell.denoised.values)
    last = cell.trajectory.isel(step=-1).values / float(cell.alpha.isel(step=-1))
    assert not np.allclose(final, last)
