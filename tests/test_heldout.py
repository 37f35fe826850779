"""Held-out diagnostics sized by the model block's ``diagnostics: {n_time, n_noise}``, with a progress callback."""

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgexr.catalog import CatalogError, load_catalog_file
from ridgexr.datasets import load_training_set
from ridgexr.models import FitContext
from ridgexr.models.model_spec import DiagnosticsSpec
from ridgexr.process import OU
from ridgexr.run import run_experiment
from ridgexr.run.plan import estimate_stage_seconds
from ridgexr.training import draw_training_sample, evaluate_denoiser
from ridgexr.training.heldout import heldout_sample

ENTRY = """
experiments:
  held:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 6}
    model: {kind: exact%(diag)s}
    training: {quadrature: %(rule)s, n_time: %(n_time)d, n_noise: %(n_noise)d}
    sampler: {kind: sde, block_steps: 8}
    n_samples: 4
    d_star: 1
    store: held.zarr
"""


def entry(tmp_path, diag="", rule="gauss-legendre-log-t", n_time=9, n_noise=6):
    f = tmp_path / "cat.yaml"
    f.write_text(ENTRY % dict(diag=diag, rule=rule, n_time=n_time, n_noise=n_noise))
    return load_catalog_file(f)["held"]


def brute_optimal_loss(train, t_nodes_rule, n_time, n_noise, seed, t_min, T, points=None):
    """L* = sum_s c_s lambda_s |alpha (m*(x_t) - x0)|^2 on the rows of a freshly drawn sample, schedule '1',
    with the two-point posterior mean in closed form (a logistic weight between the two points)."""
    proc = OU()
    s = draw_training_sample(train, t_min=t_min, T=T, n_time=n_time, n_noise=n_noise, seed=seed,
                             quadrature=t_nodes_rule, points=points)
    a, h = proc.alpha(s.t), proc.h(s.t)
    logits = -((s.xt[:, None, :] - a[:, None, None] * train[None]) ** 2).sum(-1) / (2 * h[:, None])
    w = np.exp(logits - logits.max(1, keepdims=True))
    m = (w / w.sum(1, keepdims=True)) @ train
    lam = 1.0 / h**2  # w(t) = 1 on the posterior_mean loss
    return float((s.weight * lam * ((a[:, None] * (m - s.x0)) ** 2).sum(1)).sum()), s.size


def test_spec_sizes_are_capped_by_the_training_sample_and_validated_against_the_rule(tmp_path):
    assert DiagnosticsSpec().sizes(2001, 2000) == (2001, 2000)
    assert DiagnosticsSpec(n_time=65, n_noise=64).sizes(2001, 2000) == (65, 64)
    assert DiagnosticsSpec(n_time=65, n_noise=64).sizes(16, 4) == (16, 4)
    exp = entry(tmp_path)  # kinds not fitted in closed form default to at most 65 x 64
    assert exp.model.diagnostics == DiagnosticsSpec(n_time=65, n_noise=64)
    with pytest.raises(CatalogError, match="diagnostics.n_time must be odd"):
        entry(tmp_path, diag=", diagnostics: {n_time: 4}", rule="simpson-t", n_time=9)
    with pytest.raises(CatalogError, match="n_noise"):
        entry(tmp_path, diag=", diagnostics: {n_noise: 0}")


@settings(max_examples=6, deadline=None)
@given(n_time=st.integers(2, 7), n_noise=st.integers(2, 5))
def test_heldout_sample_has_the_blocks_size_and_its_optimal_loss_is_the_brute_force_one(tmp_path_factory, n_time,
                                                                                         n_noise):
    exp = entry(tmp_path_factory.mktemp("h"), diag=f", diagnostics: {{n_time: {n_time}, n_noise: {n_noise}}}",
                n_time=9, n_noise=6)
    train = load_training_set(exp.dataset)
    ctx = FitContext(exp, train, lambda msg: None)
    hold = heldout_sample(ctx, None, exp.model.diagnostics)
    assert (hold.n_time, hold.n_noise, hold.seed) == (n_time, n_noise, exp.seeds.training + 1)
    assert heldout_sample(ctx, None, exp.model.diagnostics) is hold  # cached per size
    calls = []
    ev = evaluate_denoiser(lambda x, t: torch.zeros_like(x), hold, d_star=1, progress=lambda j, n: calls.append((j, n)))
    assert calls[-1] == (n_time, n_time) and all(n == n_time for _, n in calls)
    assert [j for j, _ in calls] == sorted({j for j, _ in calls})
    want, rows = brute_optimal_loss(train, "gauss-legendre-log-t", n_time, n_noise, exp.seeds.training + 1,
                                    exp.loss_t_min, exp.process.T)
    assert rows == 2 * n_time * n_noise
    assert ev["optimal_loss"] == pytest.approx(want, rel=1e-10)


def test_a_heldout_point_subset_has_its_size_and_the_brute_force_optimal_loss(tmp_path):
    exp = entry(tmp_path, diag=", diagnostics: {n_time: 5, n_noise: 3, n_points: 1}", n_time=9, n_noise=6)
    train = load_training_set(exp.dataset)
    ctx = FitContext(exp, train, lambda msg: None)
    hold = heldout_sample(ctx, None, exp.model.diagnostics)
    seed = exp.seeds.training + 1
    pts = exp.model.diagnostics.point_subset(2, seed)
    assert hold.n_points == 1 and hold.size == 5 * 3 and np.array_equal(hold.points, pts)
    ev = evaluate_denoiser(lambda x, t: torch.zeros_like(x), hold, d_star=1)
    want, rows = brute_optimal_loss(train, "gauss-legendre-log-t", 5, 3, seed, exp.loss_t_min, exp.process.T,
                                    points=pts)
    assert rows == 5 * 3 and ev["optimal_loss"] == pytest.approx(want, rel=1e-10)
    other, _ = brute_optimal_loss(train, "gauss-legendre-log-t", 5, 3, seed, exp.loss_t_min, exp.process.T,
                                  points=1 - pts)
    assert ev["optimal_loss"] != pytest.approx(other, rel=1e-6)  # the subset, not the other point


def test_a_run_stores_the_diagnostics_of_the_sized_heldout_sample(tmp_path):
    exp = entry(tmp_path, diag=", diagnostics: {n_time: 5, n_noise: 3}")
    res = run_experiment(exp, data_dir=tmp_path / "data")
    import ridgexr

    ds = ridgexr.open_dataset(res.store)
    train = load_training_set(exp.dataset)
    want, _ = brute_optimal_loss(train, "gauss-legendre-log-t", 5, 3, exp.seeds.training + 1, exp.loss_t_min,
                                 exp.process.T)
    assert float(ds["optimal_loss"].squeeze()) == pytest.approx(want, rel=1e-10)
    assert float(ds["excess_loss"].squeeze()) == pytest.approx(0.0, abs=1e-12)  # the exact denoiser's own loss
    # a different size is a different configuration
    other = entry(tmp_path, diag=", diagnostics: {n_time: 7, n_noise: 3}")
    assert other.config_hash(train) != exp.config_hash(train)


def test_the_diagnostics_estimate_scales_with_the_heldout_rows(tmp_path):
    """The plan's diagnostics estimate of an exact block is affine in n_train x n_time x n_noise rows
    (plus a cost per node): three sizes pin it, a fourth is predicted."""
    train = load_training_set(entry(tmp_path).dataset)

    def diag(n_time, n_noise):
        exp = entry(tmp_path, diag=f", diagnostics: {{n_time: {n_time}, n_noise: {n_noise}}}", n_time=99, n_noise=99)
        return estimate_stage_seconds(exp, train)["diagnostics"]

    per_row = (diag(5, 8) - diag(5, 4)) / (2 * 5 * 4)
    per_node = (diag(9, 4) - diag(5, 4) - per_row * 2 * 4 * 4) / 4
    assert per_row > 0 and per_node > 0
    assert diag(33, 64) == pytest.approx(diag(5, 4) + per_row * 2 * (33 * 64 - 5 * 4) + per_node * 28, rel=1e-12)
    assert math.isfinite(sum(estimate_stage_seconds(entry(tmp_path), train).values()))


@settings(max_examples=5, deadline=None)
@given(n_time=st.integers(2, 9), n_noise=st.integers(1, 4), batch=st.integers(1, 40))
def test_merged_blocks_give_the_per_node_sums(n_time, n_noise, batch):
    """evaluate_denoiser merges small nodes into one block and calls the denoiser once per node with that
    node's time: every statistic equals the per-node sums computed here, row by row, for a denoiser
    whose output depends on t (a wrong time per row would change it)."""
    train = np.array([[-1.0, 0.5], [2.0, -0.3], [0.2, 1.5]])
    s = draw_training_sample(train, t_min=0.05, T=2.0, n_time=n_time, n_noise=n_noise, seed=4,
                             quadrature="gauss-legendre-log-t")
    den = lambda x, t: x * torch.exp(-t) + torch.sin(t)  # noqa: E731
    ev = evaluate_denoiser(den, s, schedule="h", d_star=1, batch_size=batch)
    proc = OU()
    from ridgexr.training import loss_weight
    from ridgexr.training.sample import block_posterior_mean

    whole = s.blocks(10**9, by_node=False).__next__()
    m = np.concatenate([den(torch.as_tensor(whole.xt[whole.t == t]), torch.tensor(t)).numpy()
                        for t in s.t_nodes])  # rows are node-major
    a = proc.alpha(whole.t)[:, None]
    lam = loss_weight("h", whole.t, "posterior_mean", proc)
    y = a * whole.x0
    f, f_star = a * m, a * block_posterior_mean(s, whole)
    c = whole.weight * lam
    assert ev["loss"] == pytest.approx(float(c @ ((f - y) ** 2).sum(1)), rel=1e-12)
    assert ev["optimal_loss"] == pytest.approx(float(c @ ((f_star - y) ** 2).sum(1)), rel=1e-12)
    assert ev["excess_tangent"] + ev["excess_normal"] == pytest.approx(float(c @ ((f - f_star) ** 2).sum(1)),
                                                                     rel=1e-12)


@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 24), d=st.integers(2, 4), seed=st.integers(0, 10**6))
def test_one_moments_pass_gives_the_mean_and_the_frames_of_two(n, d, seed):
    """block_mean_and_tangent (one covariance pass) against block_posterior_mean and block_tangent_frames
    (two passes, the code it replaced in evaluate_fits / evaluate_denoiser): bit for bit."""
    from ridgexr.training.sample import block_mean_and_tangent, block_posterior_mean, block_tangent_frames

    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)) * rng.uniform(0.5, 3)
    s = draw_training_sample(train, t_min=1e-3, T=2.0, n_time=5, n_noise=3, seed=seed % 97,
                             quadrature="gauss-legendre-log-t")
    for block in s.blocks(10**6, by_node=False):
        mean, tang = block_mean_and_tangent(s, block, 1)
        np.testing.assert_array_equal(mean, block_posterior_mean(s, block))
        ref = block_tangent_frames(s, block, 1)
        np.testing.assert_array_equal(tang @ np.swapaxes(tang, 1, 2), ref @ np.swapaxes(ref, 1, 2))
        assert block_mean_and_tangent(s, block, None)[1] is None


def test_stacked_readouts_give_every_fits_outputs():
    """evaluate_fits computes every (schedule, width, tau) output by one product with the stacked,
    zero-padded readouts; the losses equal those of each fit's own denoiser evaluated row by row here."""
    from ridgexr.training import fit_sweep, loss_weight
    from ridgexr.training.fit import evaluate_fits
    from ridgexr.training.sample import block_posterior_mean

    train = np.array([[-3.0, 0.0], [3.0, 0.0], [0.5, 2.0]])
    fits = fit_sweep(train, widths=[6, 16], schedules=["1", "h2"], taus=[0.5, math.inf],
                     model_kwargs=dict(n_frequencies=2, feature_period=2.0), t_min=0.01, T=2.0, n_time=5, n_noise=4,
                     quadrature="gauss-legendre-log-t")
    hold = next(iter(fits.values())).heldout_sample()
    stats = evaluate_fits(fits, hold, None)
    proc = OU()
    whole = next(hold.blocks(10**9, by_node=False))
    a = proc.alpha(whole.t)[:, None]
    f_star = a * block_posterior_mean(hold, whole)
    for (sched, w), fit in fits.items():
        lam = loss_weight(sched, whole.t, "posterior_mean", proc)
        y = a * whole.x0
        for i, tau in enumerate(fit.taus):
            den = fit.denoiser(tau)
            f = np.concatenate([den(torch.as_tensor(whole.xt[whole.t == t]), torch.tensor(t)).detach().numpy()
                                for t in hold.t_nodes])  # the network's own forward, node by node
            c = whole.weight * lam
            assert stats[(sched, w)]["loss"][i] == pytest.approx(float(c @ ((f - y) ** 2).sum(1)), rel=1e-12)
            excess = float(whole.weight @ (lam * (((f - y) ** 2).sum(1) - ((f_star - y) ** 2).sum(1))))
            assert stats[(sched, w)]["excess_loss"][i] == pytest.approx(excess, rel=1e-10, abs=1e-13)


def test_the_cli_prints_each_stages_estimate_before_the_run(tmp_path):
    from typer.testing import CliRunner

    from ridgexr.cli import app

    f = tmp_path / "cat.yaml"
    f.write_text(ENTRY % dict(diag="", rule="gauss-legendre-log-t", n_time=9, n_noise=6))
    out = CliRunner().invoke(app, ["run", str(f), "--data-dir", str(tmp_path / "data")], terminal_width=250)
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if ln.startswith("estimated time"))
    exp = load_catalog_file(f)["held"]
    est = estimate_stage_seconds(exp, load_training_set(exp.dataset))
    shares = [int(x) for x in re.findall(r"\((\d+)%\)", line)]
    assert [name in line for name in est] == [True] * 3 and len(shares) == 3
    total = sum(est.values())
    assert shares == [round(100 * v / total) for v in est.values()]


def test_diagnostics_that_cut_nothing_leave_the_hash_as_before_the_field(tmp_path):
    """The config hash of an entry whose held-out sample is the training sample's size (the diagnostics
    cut nothing) equals the hash of the same entry without the field, computed here from the dump."""
    import hashlib
    import json

    from ridgexr.catalog import NOT_HASHED

    def without_field(exp, train):
        cfg = exp.model_dump(exclude=set(NOT_HASHED))
        for key in ("stop_degenerate", "d_star_alt", "accelerate", "logits", "observe"):
            del cfg["ridge"][key]
        del cfg["dataset"]["n_train"], cfg["dataset"]["images"], cfg["model"]["name"], cfg["model"]["diagnostics"]
        del cfg["sampler"]["scheduler_class"], cfg["sampler"]["eta"], cfg["training"]["draws"]
        del cfg["training"]["redraw"]
        cfg["model"].pop("penalty", None)  # a hash-neutral field of the random-feature kind
        for key in ("t_stop", "sigma_stop"):  # hash-neutral fields of the exact kind
            cfg["model"].pop(key, None)
        h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
        h.update(np.ascontiguousarray(train, dtype=np.float64).tobytes())
        return h.hexdigest()

    small = entry(tmp_path, n_time=9, n_noise=6)  # default 65 x 64 cuts nothing from 9 x 6
    train = load_training_set(small.dataset)
    assert small.config_hash(train) == without_field(small, train)
    same = entry(tmp_path, diag=", diagnostics: {n_time: 9, n_noise: 100}", n_time=9, n_noise=6)
    assert same.config_hash(train) == small.config_hash(train)
    big = entry(tmp_path, n_time=99, n_noise=6)  # 65 of 99 nodes: other numbers, another hash
    assert big.config_hash(train) != without_field(big, train)
    cut = entry(tmp_path, diag=", diagnostics: {n_noise: 5}", n_time=9, n_noise=6)
    assert cut.config_hash(train) != small.config_hash(train)
    # n_points: null hashes as before the field; a subset is another held-out sample, another hash
    cut_null = entry(tmp_path, diag=", diagnostics: {n_noise: 5, n_points: null}", n_time=9, n_noise=6)
    assert cut_null.config_hash(train) == cut.config_hash(train)
    some = entry(tmp_path, diag=", diagnostics: {n_points: 1}", n_time=9, n_noise=6)
    assert some.config_hash(train) not in (small.config_hash(train), cut.config_hash(train))


@settings(max_examples=4, deadline=None)
@given(n=st.integers(20, 60), d=st.integers(2, 3), seed=st.integers(0, 10**6))
def test_row_chunked_moments_equal_one_call(n, d, seed):
    """block_posterior_mean / block_mean_and_tangent compute the moments in chunks of rows
    (MOMENT_PAIRS // N rows, here forced to 64 so that a block spans several chunks): each row's
    numbers equal those of one call over the whole block up to float64 rounding (BLAS picks its
    kernels by the number of rows; on manifold-circle's N = 1024 blocks they are bit for bit)."""
    import ridgexr.training.sample as sample_mod
    from ridgexr.empirical import SmoothedEmpirical
    from ridgexr.ridge import ridge_frame

    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)) * rng.uniform(0.5, 3)
    s = draw_training_sample(train, t_min=1e-3, T=2.0, n_time=3, n_noise=5, seed=seed % 97,
                             quadrature="gauss-legendre-log-t")
    block = next(s.blocks(10**6, by_node=False))
    assert block.size > 2 * 64
    dens = SmoothedEmpirical(train, block.t)
    ref_mean = dens.posterior_mean(block.xt)
    ref_tan = ridge_frame(dens, block.xt, 1).tangent
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sample_mod, "MOMENT_PAIRS", 64 * n)
        assert len(sample_mod._row_chunks(block.size, n)) >= 3
        np.testing.assert_allclose(sample_mod.block_posterior_mean(s, block), ref_mean, rtol=1e-12, atol=1e-12)
        mean, tan = sample_mod.block_mean_and_tangent(s, block, 1)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tan @ np.swapaxes(tan, 1, 2), ref_tan @ np.swapaxes(ref_tan, 1, 2), atol=1e-9)


def test_heldout_frames_above_d128_take_the_lowrank_path_and_equal_the_dense_frames():
    """At d > 128 the held-out tangent frames come from the low-rank path (no (B, d, d) covariance):
    their projectors equal those of the dense eigh wherever the dense frame is resolved, and the mean
    equals the one-call posterior mean."""
    import ridgexr.training.sample as sample_mod
    from ridgexr.empirical import SmoothedEmpirical
    from ridgexr.scms import frame_flat, use_lowrank

    rng = np.random.default_rng(3)
    d, n, d_star = 140, 40, 3
    train = rng.normal(size=(n, d)) * np.linspace(2.0, 0.2, d)
    s = draw_training_sample(train, t_min=1e-2, T=1.0, n_time=3, n_noise=2, seed=5, quadrature="gauss-legendre-log-t")
    block = next(s.blocks(10**6, by_node=False))
    assert use_lowrank("auto", "log", d, d_star)
    covs = []  # every moments pass's cov flag: the low-rank path never forms a (B, d, d) covariance
    real = SmoothedEmpirical.moments_flat
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SmoothedEmpirical, "moments_flat", lambda self, *a, **k: covs.append(k.get("cov")) or real(self, *a, **k))
        mean, tan = sample_mod.block_mean_and_tangent(s, block, d_star)
    assert covs and not any(covs)
    assert tan.shape == (block.size, d, d_star)
    dens = SmoothedEmpirical(train, block.t)
    xt = torch.as_tensor(block.xt)
    dense = frame_flat(dens, xt, torch.as_tensor(block.t), d_star, "log", top_k=None, frame="dense")
    ok = ~dense.degenerate.numpy()
    assert ok.sum() >= block.size // 4  # resolved rows to compare (76 of 240 here)
    ref = dense.tangent.numpy()
    proj = lambda b: b @ np.swapaxes(b, 1, 2)  # noqa: E731
    np.testing.assert_allclose(proj(tan)[ok], proj(ref)[ok], atol=1e-8)
    np.testing.assert_allclose(mean, dens.posterior_mean(block.xt), rtol=1e-12, atol=1e-12)


def test_a_point_subset_draws_x0_from_its_points_and_keeps_the_whole_density():
    """diagnostics.n_points: the held-out x0 come from a seeded subset of the training points (each
    n_time x n_noise times), the weights integrate as the full sample's, and the posterior mean is
    the whole training set's (brute force)."""
    from ridgexr.empirical import SmoothedEmpirical

    rng = np.random.default_rng(0)
    train = rng.normal(size=(40, 3)) * 2
    spec = DiagnosticsSpec(n_time=3, n_noise=2, n_points=7)
    pts = spec.point_subset(40, seed=11)
    assert pts.shape == (7,) and np.unique(pts).size == 7 and np.all(np.diff(pts) > 0)
    np.testing.assert_array_equal(pts, spec.point_subset(40, 11))
    assert not np.array_equal(pts, spec.point_subset(40, 12))
    assert DiagnosticsSpec(n_points=40).point_subset(40, 11) is None
    kw = dict(t_min=1e-2, T=2.0, n_time=3, n_noise=2, seed=11, quadrature="gauss-legendre-log-t")
    s = draw_training_sample(train, points=pts, **kw)
    full = draw_training_sample(train, **kw)
    assert s.size == 7 * 3 * 2 and full.size == 40 * 3 * 2
    hits = (s.x0[:, None, :] == train[None]).all(-1)  # (rows, N): which training point each x0 is
    assert np.all(hits.sum(1) == 1)
    counts = np.bincount(hits.argmax(1), minlength=40)
    np.testing.assert_array_equal(np.flatnonzero(counts), pts)
    assert np.all(counts[pts] == 3 * 2)
    np.testing.assert_allclose(s.weight.sum(), full.weight.sum(), rtol=1e-14)
    proc = OU()
    a, h = proc.alpha(s.t), proc.h(s.t)
    logits = -((s.xt[:, None, :] - a[:, None, None] * train[None]) ** 2).sum(-1) / (2 * h[:, None])
    w = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(s.posterior_mean(), (w / w.sum(1, keepdims=True)) @ train, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s.posterior_mean(), SmoothedEmpirical(train, s.t).posterior_mean(s.xt), atol=1e-12)
    with pytest.raises(ValueError, match="points"):
        draw_training_sample(train, points=[1, 1], **kw)
    with pytest.raises(ValueError, match="points"):
        draw_training_sample(train, points=[40], **kw)


@settings(max_examples=5, deadline=None)
@given(n=st.integers(2, 12), d_star=st.sampled_from([None, 1, 2]), batch=st.integers(1, 40),
       seed=st.integers(0, 10**6))
def test_models_on_one_sample_share_its_moments_and_score_as_on_their_own(n, d_star, batch, seed):
    """Two denoisers evaluated in turn on one held-out sample (the second reads the first's cached posterior
    means and frames) score exactly what each scores on its own fresh copy of the sample; the cache holds
    read-only arrays, one entry per block; with no room (MOMENT_CACHE_BYTES = 0) nothing is kept and the
    numbers are the same."""
    import ridgexr.training.sample as sample_module
    from ridgexr import ExactDenoiser

    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, 3)) * rng.uniform(0.5, 3)
    draw = dict(t_min=0.01, T=2.0, n_time=5, n_noise=2, seed=seed % 89, quadrature="gauss-legendre-log-t")
    dens = [lambda x, t: x * torch.exp(-t) + torch.cos(t), ExactDenoiser(train).denoise]
    shared = draw_training_sample(train, **draw)
    on_shared = [evaluate_denoiser(den, shared, schedule="h", d_star=d_star, batch_size=batch) for den in dens]
    alone = [evaluate_denoiser(den, draw_training_sample(train, **draw), schedule="h", d_star=d_star,
                               batch_size=batch) for den in dens]
    assert on_shared == alone
    kept = {k: v for k, v in shared.cache.items() if k[0] == "moments"}
    assert len(kept) == sum(1 for _ in shared.blocks(batch, by_node=False))
    assert all(not a.flags.writeable for mean, tang in kept.values() for a in (mean, tang) if a is not None)
    assert on_shared[1]["excess_loss"] == pytest.approx(0.0, abs=1e-10)  # the exact denoiser, from the cache
    old = sample_module.MOMENT_CACHE_BYTES
    sample_module.MOMENT_CACHE_BYTES = 0
    try:
        full = draw_training_sample(train, **draw)
        assert [evaluate_denoiser(den, full, schedule="h", d_star=d_star, batch_size=batch) for den in dens] == alone
        assert not any(k[0] == "moments" for k in full.cache)
    finally:
        sample_module.MOMENT_CACHE_BYTES = old


def test_the_plan_prices_a_shared_heldout_samples_moments_once(tmp_path):
    """Two blocks with the same held-out sample (an mlp and the exact denoiser) share its exact means and frames in
    the run (TrainingSample.block_moments), so the plan prices them once: the diagnostics of both blocks are the
    two blocks' own calls plus one sample's moments, i.e. the sum of each block alone less one moments term."""
    from ridgexr.models import model_kind

    def exp_with(models):
        f = tmp_path / "two.yaml"
        f.write_text(ENTRY.replace("    model: {kind: exact%(diag)s}\n", f"    models: [{models}]\n    schedules: [h]\n")
                     % dict(rule="gauss-legendre-log-t", n_time=9, n_noise=6))
        return load_catalog_file(f)["held"]

    diag = ", diagnostics: {n_time: 5, n_noise: 3}"
    mlp, exact = f"{{kind: mlp, widths: [16], epochs: 2{diag}}}", f"{{kind: exact{diag}}}"
    both = exp_with(f"{mlp}, {exact}")
    train = load_training_set(both.dataset)

    def seconds(exp):
        return estimate_stage_seconds(exp, train)["diagnostics"]

    block = exp_with(exact).blocks[0]
    key, moments, kept = model_kind("exact").cost_model().heldout_moments(exp_with(exact), block, {}, train.shape[1],
                                                                          [len(train)], 1)
    assert moments > 0
    assert seconds(both) == pytest.approx(seconds(exp_with(mlp)) + seconds(exp_with(exact)) - moments, rel=1e-12)
    # what the shared sample keeps: its means and 1-frames, 2 points x 5 nodes x 3 draws rows of d = 2
    from ridgexr.run.plan import _labelled_cells, heldout_samples

    samples = heldout_samples(both, _labelled_cells(both), train.shape[1], [len(train)], 1)
    assert list(samples.values()) == [(moments, kept)] and kept == 2 * 5 * 3 * 2 * (1 + 1) * 8
