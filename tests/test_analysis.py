import math

import dask.array as da
import holoviews as hv
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest
import pytest
import xarray as xr

from ridgexr import analysis as an
from ridgexr.analysis import arrays

K, S = 40, 50
TRAIN = np.array([[-3.0, 0.0], [3.0, 0.0]])


def synthetic_store(seed=0, chunks=True):
    """A store-shaped Dataset whose analyses are known by construction.

    Sample j of every cell sits at distance 2.0 from the ridge until step k_j, then 0.1;
    its projection moves along x by 0.05 per step from k_j on; at the last step, sample j
    is at the (scaled) training point j % 2 when j < 30, else at (0, 1).
    """
    rng = np.random.default_rng(seed)
    t = np.geomspace(2.0, 0.01, K)
    alpha = np.exp(-t)
    k = rng.integers(5, 30, size=S)
    steps = np.arange(K)
    dist = np.where(steps[None, :] < k[:, None], 2.0, 0.1)  # (S, K)
    px = np.where(steps[None, :] < k[:, None], 0.0, 0.05 * (steps[None, :] - k[:, None]))
    proj = np.stack([px, np.zeros_like(px)], -1)  # (S, K, 2)
    traj = proj + np.stack([np.zeros_like(dist), dist], -1)
    final = np.where((np.arange(S) < 30)[:, None], TRAIN[np.arange(S) % 2] * alpha[-1], [0.0, 1.0])
    traj[:, -1] = final
    res_t = np.zeros((S, K, 2))
    res_t[..., 0] = 1.0 + np.arange(S)[:, None]  # tangent residual grows with j
    cells = (2, 2)

    def bc(a):
        return np.broadcast_to(a, cells + a.shape).copy()

    ds = xr.Dataset(
        {
            "ridge_distance": (("schedule", "width", "sample", "step"), bc(dist)),
            "ridge_projection": (("schedule", "width", "sample", "step", "dim"), bc(proj)),
            "trajectory": (("schedule", "width", "sample", "step", "dim"), bc(traj)),
            "residual_normal": (("schedule", "width", "sample", "step", "dim"), bc(np.zeros((S, K, 2)))),
            "residual_tangent": (("schedule", "width", "sample", "step", "dim"), bc(res_t)),
            "train_data": (("train", "dim"), TRAIN),
        },
        coords={"schedule": ["1", "h"], "width": [8, 16], "t": ("step", t), "alpha": ("step", alpha),
                "step": steps, "sample": np.arange(S)},
    )
    if chunks:
        ds = ds.chunk({"sample": 25, "step": 20})
    return ds, k, t


def test_phase_times_known_answers():
    ds, k, t = synthetic_store()
    ph = an.phase_times(ds, r=0.5, align_factor=2.0)
    assert isinstance(ph.reach_time.data, da.Array)  # lazy
    ph = ph.compute()
    np.testing.assert_allclose(ph.reach_time.isel(schedule=0, width=0).values, t[k])
    # align: final distance 0.1 at the last step (distance array ends at 0.1) -> same steps
    np.testing.assert_allclose(ph.align_time.isel(schedule=1, width=1).values, t[k])
    expected_chord = 0.05 * (K - 1 - k)
    np.testing.assert_allclose(ph.slide_chord.isel(schedule=0, width=1).values, expected_chord, atol=1e-12)
    np.testing.assert_allclose(ph.slide_path.isel(schedule=0, width=1).values, expected_chord, atol=1e-12)
    assert ph.reach_time.attrs["units"] == "1" and "time" in ph.reach_time.attrs["long_name"]
    summ = an.phase_summary(ph)
    assert float(summ.reached.isel(schedule=0, width=0)) == 1.0
    np.testing.assert_allclose(summ.reach_time_median.values, np.median(t[k]))


@given(st.lists(st.booleans(), min_size=3, max_size=30))
def test_enter_and_stay_matches_brute_force(inside):
    inside = np.array(inside)
    t = np.linspace(1.0, 0.1, inside.size)
    got = arrays.enter_and_stay_time(inside, t)
    # brute force: smallest k with inside[k:] all True
    ks = [k for k in range(inside.size) if inside[k:].all()]
    expected = t[ks[0]] if ks else np.nan
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == expected


def test_distance_curves_match_numpy():
    ds, k, t = synthetic_store()
    cur = an.distance_curves(ds, quantiles=(0.25, 0.75)).compute()
    d = ds.ridge_distance.values
    np.testing.assert_allclose(cur["distance_mean"].values, d.mean(2))
    np.testing.assert_allclose(cur["distance_median"].values, np.median(d, 2))
    np.testing.assert_allclose(cur["distance_quantile"].sel(quantile=0.75).values, np.quantile(d, 0.75, axis=2))


def test_mode_counts_and_memorization():
    ds, k, t = synthetic_store()
    mc = an.mode_counts(ds, r=0.5).compute()
    np.testing.assert_allclose(mc.share_any.values, 30 / 50)
    np.testing.assert_allclose(mc.share.isel(schedule=0, width=0).values, [15 / 50, 15 / 50])
    memo = an.memorization_fraction(ds)
    assert isinstance(memo.memorized.data, da.Array)
    memo = memo.compute()
    np.testing.assert_allclose(memo.memorized.values, 30 / 50)
    lo, hi = binomtest(30, 50).proportion_ci(0.95, method="wilson")  # independent: scipy
    np.testing.assert_allclose(memo.memorized_low.values, lo, rtol=1e-12)
    np.testing.assert_allclose(memo.memorized_high.values, hi, rtol=1e-12)
    cp = an.memorization_fraction(ds, ci=0.9, ci_method="clopper-pearson").compute()
    lo, hi = binomtest(30, 50).proportion_ci(0.9, method="exact")
    np.testing.assert_allclose([float(cp.memorized_low.max()), float(cp.memorized_high.max())], [lo, hi], rtol=1e-9)


@given(n=st.integers(1, 400), frac=st.floats(0, 1), ci=st.sampled_from([0.8, 0.9, 0.95, 0.99]),
       method=st.sampled_from(["wilson", "clopper-pearson"]))
def test_proportion_ci_matches_scipy_including_all_and_none(n, frac, ci, method):
    k = int(round(frac * n))
    lo, hi = arrays.proportion_ci(np.array([k]), np.array([n]), ci, method)
    ref = binomtest(k, n).proportion_ci(ci, method="exact" if method == "clopper-pearson" else method)
    np.testing.assert_allclose([lo[0], hi[0]], [ref.low, ref.high], atol=1e-10)
    if k == n:
        assert lo[0] < 1.0 and hi[0] == 1.0  # never the degenerate [1, 1] of a percentile bootstrap
    if k == 0:
        assert lo[0] == 0.0 and hi[0] > 0.0  # exactly 0, not Wilson's rounding residue (~1e-19 printed in tables)


def test_bootstrap_ci_covers_binomial_truth():
    rng = np.random.default_rng(0)
    hits = 0
    for rep in range(40):  # coverage of a 90% interval for a Bernoulli(0.3) mean, n = 200
        v = (rng.random(200) < 0.3).astype(float)
        m, lo, hi = arrays.bootstrap_mean_ci(v, n_boot=400, ci=0.9, seed=rep)
        hits += lo <= 0.3 <= hi
        assert m == v.mean()
    assert hits >= 30


def test_spread_and_position():
    ds, k, t = synthetic_store()
    sp = an.spread_curves(ds).compute()
    # projection at (x, 0): distance to nearest alpha*(+-3, 0)
    proj = ds.ridge_projection.isel(schedule=0, width=0).values
    pts = TRAIN[None, None] * ds.alpha.values[None, :, None, None]
    near = np.linalg.norm(proj[:, :, None, :] - np.moveaxis(pts, 1, 1), axis=-1).min(-1)
    np.testing.assert_allclose(sp.spread_mean.isel(schedule=0, width=0).values, near.mean(0), rtol=1e-10)
    pos = an.ridge_position(ds).compute()
    np.testing.assert_allclose(np.abs(pos.values), np.abs(ds.ridge_projection.values[..., 0]), atol=1e-12)
    hist = an.position_histogram(ds, bins=10).compute()
    widths = np.diff(hist.bin.values)[0]
    np.testing.assert_allclose((hist.density * widths).sum("bin").values, 1.0)


def test_phase_transition_crossing():
    widths = np.array([8, 16, 32, 64, 128, 256])
    crit = 40.0
    memo = 1 / (1 + (crit / widths) ** 2)  # logistic in log width, 0.5 at 40
    da_ = xr.DataArray(np.stack([memo, np.full_like(memo, 0.2)]), dims=("schedule", "width"),
                       coords={"schedule": ["a", "b"], "width": widths})
    out = an.phase_transition(da_, dim="width", level=0.5)
    c = out.critical.values
    assert abs(c[0] - crit) / crit < 0.1  # log-linear interpolation of a logistic
    assert np.isnan(c[1])  # never crosses
    assert arrays.crossing([1, 2, 4], [0.0, 1.0, 1.0], 0.5) == pytest.approx(math.sqrt(2))
    # a share with its interval (near_mode_fraction's names): the bound curves bracket the crossing
    share = xr.Dataset({"near_mode": da_, "near_mode_low": da_ * 0.8, "near_mode_high": np.minimum(da_ * 1.2, 1)})
    out = an.phase_transition(share, dim="width", level=0.5)
    assert out.critical_low.values[0] < out.critical.values[0] < out.critical_high.values[0]
    with pytest.raises(ValueError, match="one share"):
        an.phase_transition(share.assign(other=da_, other_low=da_, other_high=da_), dim="width")


def test_theory_check_integrals_and_correlation():
    ds, k, t = synthetic_store()
    tc = an.theory_check(ds).compute()
    dt = t[:-1] - t[1:]
    coef = 2 * dt * np.exp(-t[:-1]) / -np.expm1(-2 * t[:-1])
    expected = (1.0 + np.arange(S)) * coef.sum()
    np.testing.assert_allclose(tc.integrated_tangent.isel(schedule=0, width=0).values, expected)
    np.testing.assert_allclose(tc.integrated_normal.values, 0.0)
    # the correlations are Pearson's r over samples, per cell (independent: numpy's corrcoef)
    for i in range(tc.sizes["schedule"]):
        for j in range(tc.sizes["width"]):
            c = tc.isel(schedule=i, width=j)
            expected_r = np.corrcoef(c.slide_chord.values, c.integrated_tangent.values)[0, 1]
            np.testing.assert_allclose(float(c.corr_tangent), expected_r, rtol=1e-10)
    assert np.isfinite(tc.corr_tangent.values).all()


def test_accessor_and_bad_input():
    ds, k, t = synthetic_store()
    np.testing.assert_allclose(ds.ridge.phase_times().reach_time.values, an.phase_times(ds).reach_time.values)
    with pytest.raises(ValueError, match="`r` must be > 0"):
        an.phase_times(ds, r=0)
    with pytest.raises(ValueError, match="ratio"):
        an.memorization_fraction(ds, ratio=2)
    with pytest.raises(ValueError, match="step"):
        an.mode_counts(ds, step=K + 5)
    with pytest.raises(ValueError, match="lacks"):
        an.phase_times(ds.drop_vars("ridge_projection"))
    with pytest.raises(ValueError, match="`dim` must be a dimension"):
        an.phase_transition(ds.ridge_distance, dim="tau")
    with pytest.raises(ValueError, match="`dim` must be a dimension"):
        an.distance_curves(ds, dim="samples")  # validated before any graph is built
    with pytest.raises(ValueError, match="`ci_method` must be one of"):
        an.memorization_fraction(ds, ci_method="bootstrap")


@pytest.mark.slow
def test_same_results_on_a_local_cluster_with_two_processes():
    from dask.distributed import Client, LocalCluster

    ds, k, t = synthetic_store()
    local = an.summary_table(ds).compute(scheduler="synchronous")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        dist = an.summary_table(ds).compute()
    xr.testing.assert_allclose(local, dist)


def test_plots_are_holoviews_objects():
    ds, k, t = synthetic_store(chunks=False)
    from ridgexr import plot

    lay = plot.distance_curves_plot(ds, collapse=False)
    assert isinstance(lay, hv.NdLayout) and len(lay) == ds.sizes["schedule"] * ds.sizes["width"]
    mean = an.distance_curves(ds).distance_mean.compute()
    for key, panel in lay.items():  # the values drawn are the analysis' values, cell by cell
        cell = dict(zip(("schedule", "width"), key))
        curve = panel.Curve.I
        np.testing.assert_allclose(curve.dimension_values(1), mean.sel(cell).values)
        np.testing.assert_allclose(curve.dimension_values(0), ds.t.values)
    # this store's cells are identical by construction: one panel for all of them, holding their values
    one = plot.distance_curves_plot(ds)
    assert len(one) == 1
    np.testing.assert_allclose(next(iter(one.values())).Curve.I.dimension_values(1), mean.isel(schedule=0, width=0))
    hm = plot.samples_over_time(ds, schedule="1", width=8, n_frames=5)
    assert isinstance(hm, hv.HoloMap)
    # on bokeh the data area keeps its own 380 px beside the legend (the built tutorial squeezed it to ~60 px)
    fig = hv.render(hm.last, backend="bokeh")
    assert (fig.frame_width, fig.frame_height) == (380, 380) and fig.legend[0].location is not None
    assert isinstance(plot.phase_diagram(ds), hv.Overlay)
    assert isinstance(plot.mode_count_bars(ds), hv.Overlay) and isinstance(plot.mode_count_bars(ds).Bars.I, hv.Bars)
    assert isinstance(plot.phase_time_hist(ds), hv.NdLayout)
    assert isinstance(plot.theory_scatter(ds), hv.NdLayout)
    # the ridge drawn under the samples: two points on the x-axis -> a segment of the axis
    pts = plot.ridge_points(TRAIN, 0.5, lim=6.0, n_grid=15)
    assert len(pts) > 50
    np.testing.assert_allclose(pts[:, 1], 0.0, atol=1e-9)


@given(seed=st.integers(0, 10_000), r=st.floats(0.05, 3.0), n=st.integers(1, 60),
       ci_method=st.sampled_from(["wilson", "clopper-pearson"]))
def test_near_mode_fraction_is_a_direct_count_with_its_binomial_ci(seed, r, n, ci_method):
    """The paper's count: share of final samples within r of some alpha_t x_i, per cell, against
    a brute-force double loop and scipy's binomial interval."""
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(3, 2)) * 2
    t = np.array([1.0, 0.01])
    alpha = np.exp(-t)
    x = rng.normal(size=(2, 1, n, 2, 2)) * 2  # (schedule, width, sample, step, dim)
    x[0, 0, : n // 3, -1] = train[0] * alpha[-1] + 0.01  # some samples on a mode
    x[1, 0, 0, -1] = np.nan  # a diverged sample is left out, not counted
    ds = xr.Dataset({"trajectory": (("schedule", "width", "sample", "step", "dim"), x),
                     "train_data": (("train", "dim"), train)},
                    coords={"schedule": ["a", "b"], "width": [8], "t": ("step", t), "alpha": ("step", alpha)})
    out = an.near_mode_fraction(ds.chunk({"sample": 7, "train": 2}), r=r, ci_method=ci_method)  # stores chunk `train`
    assert isinstance(out.near_mode.data, da.Array)
    out = out.compute()
    for i in range(2):
        pts = [x[i, 0, j, -1] for j in range(n) if np.all(np.isfinite(x[i, 0, j, -1]))]
        k = sum(any(np.hypot(*(p - alpha[-1] * q)) <= r for q in train) for p in pts)
        assert out.near_mode.values[i, 0] == pytest.approx(k / len(pts)) if pts else np.isnan(out.near_mode[i, 0])
        if pts:
            ref = binomtest(k, len(pts)).proportion_ci(0.95, method="exact" if ci_method == "clopper-pearson"
                                                       else "wilson")
            assert [out.near_mode_low.values[i, 0], out.near_mode_high.values[i, 0]] == pytest.approx(
                [ref.low, ref.high], abs=1e-9)


def test_position_density_is_a_normalised_kde_peaking_where_the_samples_are():
    ds, k, t = synthetic_store()
    ds["ridge_projection"] = ds["trajectory"] * 0 + xr.DataArray([1.0, 0.0], dims="dim") * ds["alpha"] \
        * xr.DataArray(np.where(np.arange(S) % 2, 3.0, -3.0), dims="sample")
    dens = an.position_density(ds, n_points=801)
    assert isinstance(dens.density.data, da.Array)
    dens = dens.density.compute()
    grid = dens.position.values
    pos = np.where(np.arange(S) % 2, 3.0, -3.0) * math.exp(-t[-1])
    bw = S ** (-1 / 5) * pos.std(ddof=1)  # Scott's rule, by hand: a Gaussian mixture on the samples
    by_hand = np.exp(-0.5 * ((grid[:, None] - pos) / bw) ** 2).mean(1) / (bw * math.sqrt(2 * math.pi))
    np.testing.assert_allclose(dens.isel(schedule=1, width=0).values, by_hand, rtol=1e-10, atol=1e-14)
    peaks = grid[np.argsort(dens.isel(schedule=0, width=0).values)[-1]]
    assert abs(abs(peaks) - 3.0 * math.exp(-t[-1])) < 0.1
    with pytest.raises(ValueError, match="n_points"):
        an.position_density(ds, n_points=1)


def test_degenerate_states_are_masked_not_averaged_and_their_share_reported():
    ds, k, t = synthetic_store()
    flag = np.zeros((2, 2, S, K), dtype=bool)
    flag[:, :, :10, -1] = True  # ten samples' last projections are undetermined
    ds = ds.assign(ridge_degenerate=(("schedule", "width", "sample", "step"), flag),
                   frame_degenerate=(("schedule", "width", "sample", "step"), flag))
    dist = ds["ridge_distance"].values
    out = an.distance_curves(ds).compute()
    np.testing.assert_allclose(out["distance_mean"].values[..., -1], dist[:, :, 10:, -1].mean(-1))
    np.testing.assert_allclose(out["degenerate_share"].values[..., -1], 10 / S)
    assert float(out["degenerate_share"].isel(step=0).max()) == 0.0
    th = an.theory_check(ds).compute()
    assert np.isnan(th["final_distance"].values[..., :10]).all() and np.isfinite(th["final_distance"].values[..., 10:]).all()


def test_ridge_dimension_and_ridge_motion_against_numpy():
    ds, k, t = synthetic_store()
    rng = np.random.default_rng(3)
    rank = rng.integers(-1, 3, size=(2, 2, S, K)).astype(np.int16)
    ds = ds.assign(resolved_rank=(("schedule", "width", "sample", "step"), rank))
    got = an.ridge_dimension(ds, quantiles=[0.25]).compute()
    r = np.where(rank >= 0, rank, np.nan)
    np.testing.assert_allclose(got["d_star_median"].values, np.nanmedian(r, axis=2))
    np.testing.assert_allclose(got["d_star_quantile"].sel(quantile=0.25).values, np.nanquantile(r, 0.25, axis=2))
    mo = an.ridge_motion(ds).compute()
    p = ds["ridge_projection"].values / ds["alpha"].values[:, None]
    step = np.linalg.norm(np.diff(p, axis=3), axis=-1)  # (cells, sample, K - 1)
    np.testing.assert_allclose(mo["ridge_step"].values[..., 1:], step)
    assert np.isnan(mo["ridge_step"].values[..., 0]).all()
    np.testing.assert_allclose(mo["ridge_path_mean"].values[..., -1], step.mean(2).sum(-1))


def test_degenerate_share_is_drawn_beside_the_distance_curves():
    from ridgexr import plot

    ds, k, t = synthetic_store()
    flag = np.zeros((2, 2, S, K), dtype=bool)
    flag[:, :, :10, -5:] = True  # 20 % of the samples over the last five steps
    ds = ds.assign(ridge_degenerate=(("schedule", "width", "sample", "step"), flag))
    over = plot.degenerate_share_plot(ds)
    for key, curve in over.items():
        np.testing.assert_allclose(curve.dimension_values(1), np.r_[np.zeros(K - 5), np.full(5, 0.2)])
    layout = plot.distance_curves_plot(ds)
    labels = {el.label for panel in layout.values() for el in panel if type(el) is hv.Curve}
    assert labels == {f"mean (degenerate frames masked: up to 20%, at t = {t[-5]:.3g})"}
    ds0, _, _ = synthetic_store()
    with pytest.raises(ValueError, match="ridge_degenerate"):
        plot.degenerate_share_plot(ds0)


def _brute_tangential(p, t, train, d_star, frame="autograd"):
    """|T T^T (q - p)| and |(I - T T^T)(q - p)| by brute force: q the nearest alpha_t x_i by a loop over
    the training points, T the top-d* eigenvectors of the Hessian of log p_t at p -- from torch.autograd
    (``frame="autograd"``), or of the two-pass centred posterior covariance (``"covariance"``: the Hessian is
    (alpha^2 C - h I) / h^2, and autograd's Hessian loses the small spread of C in float64 at d = 140)."""
    import torch

    a, h = math.exp(-t), -math.expm1(-2 * t)
    best = min(range(len(train)), key=lambda i: float(np.sum((p - a * train[i]) ** 2)))
    q = a * train[best]
    if frame == "autograd":
        tr = torch.tensor(train)

        def log_p(x):
            return torch.logsumexp(-((x - a * tr) ** 2).sum(1) / (2 * h), 0)

        mat = torch.autograd.functional.hessian(log_p, torch.tensor(p)).numpy()
    else:
        logw = -((p - a * train) ** 2).sum(1) / (2 * h)
        w = np.exp(logw - logw.max())
        w /= w.sum()
        centred = train - w @ train
        mat = (w[:, None] * centred).T @ centred
    vals, vecs = np.linalg.eigh(mat)  # ascending: the tangent space is the top d*
    tangent = vecs[:, -d_star:]
    v = q - p
    along = tangent @ (tangent.T @ v)
    return np.linalg.norm(along), np.linalg.norm(v - along)


@pytest.mark.parametrize("seed, d, n, d_star, frame", [(0, 4, 9, 2, "autograd"), (1, 4, 9, 2, "autograd"),
                                                       (2, 4, 9, 2, "covariance"),
                                                       (0, 140, 20, 3, "covariance")])  # d > 128: the low-rank frame
def test_tangential_distance_against_an_autograd_hessian_and_a_brute_force_nearest_point(seed, d, n, d_star, frame):
    rtol = 1e-7
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d))
    t = rng.uniform(0.05, 0.8, size=6)
    p = rng.normal(size=(6, d)) * 0.8
    got = arrays.tangential_distance(p, t, train, d_star)
    ok = got[:, 2] == 0
    assert ok.sum() >= 4  # most frames resolved; a degenerate one is NaN, not compared
    assert np.isnan(got[~ok, :2]).all()
    want = np.array([_brute_tangential(p[i], t[i], train, d_star, frame) for i in range(6)])
    np.testing.assert_allclose(got[ok, :2], want[ok], rtol=rtol, atol=1e-10)
    # a NaN row of the training set (an n_train subset) is left out; a NaN projection gives NaN
    padded = np.vstack([train, np.full((2, d), np.nan)])
    p2 = np.vstack([p, np.full((1, d), np.nan)])
    got2 = arrays.tangential_distance(p2, np.r_[t, 0.3], padded, d_star)
    np.testing.assert_allclose(got2[:6], got, rtol=rtol)
    assert np.isnan(got2[6]).all()
    with pytest.raises(ValueError, match="d_star"):
        arrays.tangential_distance(p, t, train, d)


def test_tangential_distance_on_two_points_is_the_distance_to_the_nearer_point_along_the_segment():
    ds, k, t = synthetic_store()
    flag = np.zeros((2, 2, S, K), dtype=bool)
    flag[:, :, :10, -5:] = True  # 10 of 50 samples masked over the last five steps
    ds = ds.assign(ridge_degenerate=(("schedule", "width", "sample", "step"), flag))
    out = ds.ridge.tangential_distance(d_star=1).compute()
    xr.testing.assert_identical(out, an.tangential_distance(ds, d_star=1).compute())
    px = ds["ridge_projection"].values[..., 0]  # on the segment between -3 alpha_t and 3 alpha_t
    alpha = np.exp(-t)
    want = np.abs(3 * alpha - np.abs(px))  # the tangent is the segment: along = the 1-d distance
    got = out["tangential_distance"].transpose("schedule", "width", "sample", "step").values
    np.testing.assert_allclose(got[~flag], want[~flag], rtol=1e-9)
    assert np.isnan(got[flag]).all()
    across = out["normal_offset"].transpose("schedule", "width", "sample", "step").values
    np.testing.assert_allclose(across[~flag], 0.0, atol=1e-12)
    np.testing.assert_allclose(out["masked_share"].values[..., -5:], 10 / S)
    np.testing.assert_allclose(out["masked_share"].values[..., :-5], 0.0)
    np.testing.assert_allclose(out["tangential_distance_mean"].values[..., -1], want[..., 10:, -1].mean(-1))
    with pytest.raises(ValueError, match="d_star"):
        an.tangential_distance(ds)  # a store without an integer d_star in its config


def test_a_training_set_stored_in_several_chunks_is_read_as_one():
    # a large training set is stored in several chunks along train; every analysis takes it as a core dim
    ds, k, t = synthetic_store()
    split = ds.assign(train_data=ds["train_data"].chunk({"train": 1}))
    assert len(split["train_data"].chunks[0]) == 2
    xr.testing.assert_allclose(an.spread_curves(split).compute(), an.spread_curves(ds).compute())
    np.testing.assert_array_equal(an.memorization_fraction(split)["memorized"].compute().values,
                                  an.memorization_fraction(ds)["memorized"].compute().values)
    xr.testing.assert_allclose(an.tangential_distance(split, d_star=1).compute(),
                               an.tangential_distance(ds, d_star=1).compute())


@pytest.mark.parametrize("d", [2, 7, 12])  # 2, 7: the k-d tree (d <= KD_TREE_MAX_DIM); 12: the matrix products
def test_nearest_two_is_exact_on_training_points_and_matches_brute_force(d):
    """The two winners' distances are computed directly: 0 on a training point of size 1e3 (the |x|^2 - 2 x.p
    + |p|^2 expansion alone leaves ~1e-5 there), and brute force elsewhere; a NaN query gets NaN."""
    from ridgexr.analysis.arrays import KD_TREE_MAX_DIM, nearest_two

    assert (d <= KD_TREE_MAX_DIM) == (d < 12)
    rng = np.random.default_rng(4)
    pts = rng.normal(scale=1e3, size=(50, d))
    q = np.concatenate([pts[:5], rng.normal(scale=1e3, size=(9, d))])
    d1, d2, idx = nearest_two(q, pts, chunk=4)
    brute = np.linalg.norm(q[:, None] - pts[None], axis=-1)
    order = np.sort(brute, axis=1)
    assert (d1[:5] == 0).all() and (idx[:5] == np.arange(5)).all()
    np.testing.assert_allclose(d1, order[:, 0], rtol=1e-14, atol=0)
    np.testing.assert_allclose(d2, order[:, 1], rtol=1e-14)
    np.testing.assert_array_equal(idx, brute.argmin(1))
    q[3, 0] = np.nan
    d1, d2, _ = nearest_two(q.reshape(7, 2, d), pts)
    assert d1.shape == (7, 2) and np.isnan(d1[1, 1]) and np.isnan(d2[1, 1]) and np.isfinite(np.delete(d1.ravel(), 3)).all()


def _nested_cells(rng, *, draws: int = 1, rows: int = 6, config: bool = True) -> xr.Dataset:
    """An in-memory store of n_train (3, 6) x data_draw cells on 2-D points, without a stored ``nearest_ratio``
    (so d1/d2 is computed from the training set): ``draws`` training sets of ``rows`` rows stacked in train_data."""
    import json

    x = rng.normal(size=(draws, 2, 40, 1, 2))
    ds = xr.Dataset(
        {"trajectory": (("data_draw", "n_train", "sample", "step", "dim"), x),
         "train_data": (("train", "dim"), rng.normal(size=(draws * rows, 2))),
         "alpha": (("step",), [0.5])},
        coords={"data_draw": np.arange(draws), "n_train": [3, rows], "t": ("step", [0.7]),
                "train": np.arange(draws * rows)})
    if config:
        ds.attrs["config"] = json.dumps({"dataset": {"manifold": {"n": rows, "draws": draws}}})
    return ds


def _brute_ratio(x, train):
    d = np.sort(np.linalg.norm(x[:, None, :] - train[None], axis=-1), axis=1)
    return d[:, 0] / d[:, 1]


@given(n=st.sampled_from([3, 6]), j=st.integers(0, 2))
def test_a_cell_selected_by_label_is_measured_against_its_own_training_subset(n, j):
    """d1/d2 and f_mem of a cell selected at one n_train and data_draw (scalar coordinates after ds.sel) are those
    of the full store at that cell, and brute force against the cell's rows (draw j's first n; the states over
    alpha): not against every row of train_data, which a selection used to reach."""
    ds = _nested_cells(np.random.default_rng(n + 10 * j), draws=3)
    cell = ds.sel(n_train=n, data_draw=j)
    got = an.nearest_ratio_at(cell).values
    np.testing.assert_allclose(got, an.nearest_ratio_at(ds).sel(n_train=n, data_draw=j).values, rtol=1e-12)
    train = ds.train_data.values[6 * j:6 * j + n]
    np.testing.assert_allclose(got, _brute_ratio(cell.trajectory.isel(step=-1).values / 0.5, train), rtol=1e-12)
    assert float(an.memorized_share(cell, n_boot=10)["f_mem"]) == float(
        an.memorized_share(ds, n_boot=10)["f_mem"].sel(n_train=n, data_draw=j))
    # the slide claim's measure: the frame and the nearest point are the cell's own
    ridged = ds.assign(ridge_projection=ds.trajectory)
    np.testing.assert_allclose(
        an.tangential_distance(ridged.sel(n_train=n, data_draw=j), d_star=1)["tangential_distance"].values,
        an.tangential_distance(ridged, d_star=1)["tangential_distance"].sel(n_train=n, data_draw=j).values,
        rtol=1e-12)


def test_a_draw_selected_without_a_configuration_names_what_is_missing():
    """Selected at one data_draw, an in-memory Dataset with no configuration cannot say which rows are the draw's:
    an error naming data_draw, not a measure against every row."""
    ds = _nested_cells(np.random.default_rng(0), draws=2, config=False)
    with pytest.raises(ValueError, match="data_draw"):
        an.nearest_ratio_at(ds.sel(data_draw=1))
