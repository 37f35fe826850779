"""The committed figures (docs/figures): every one shown by a page, drawn by analyses/figures.py from its committed
summary, readable (nothing overlapping or clipped, at least 150 dpi) and drawing the summary's numbers."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ridgexr
from ridgexr.catalog import experiment_from_file
from ridgexr.run import run_experiment
from ridgexr.verdicts import Null

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analyses"))
import figures  # noqa: E402  (analyses/figures.py)

PNGS = sorted(p.stem for p in (ROOT / "docs" / "figures").glob("*.png"))
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def _referenced() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for page in PAGES:
        for name in re.findall(r"figures/([A-Za-z0-9_.-]+)\.png", page.read_text()):
            out.setdefault(name, []).append(page.name)
    return out


def test_every_committed_figure_is_shown_by_a_page_and_every_shown_figure_exists():
    shown = _referenced()
    assert not [p for p in PNGS if p not in shown], "committed figures no page shows"
    assert not [n for n in shown if n not in PNGS], "pages show figures that are not committed"


#: the registry's figures drawn from a committed summary
DRAWN = sorted(name for name, fig in figures.REGISTRY.items() if fig.summary.exists())


def test_every_committed_figure_is_drawn_by_the_figures_script_from_a_committed_summary():
    """Every committed figure is in analyses/figures.py's registry with its summary committed beside it (so the
    suite redraws it below); the registry's figures are shown on the page it names."""
    assert sorted(figures.REGISTRY) == PNGS
    assert DRAWN == PNGS
    shown = _referenced()
    for name, fig in figures.REGISTRY.items():
        assert fig.page in shown[name], (name, fig.page, shown[name])


@pytest.mark.parametrize("name", DRAWN)
def test_a_committed_figure_is_readable_and_is_the_one_its_summary_draws(name, figure_layout_problems):
    """Drawn from its summary: nothing overlapping or clipped, texts >= 11 px, legends <= 40 % of the width
    (conftest.figure_layout_problems, the report figures' check), at least 150 dpi; the committed PNG has the drawn
    figure's size in pixels (it was drawn by the script, not left from an older one)."""
    from PIL import Image

    fig = figures.draw(figures.REGISTRY[name])
    problems = figure_layout_problems(fig)
    assert not problems, "\n".join(problems)
    assert fig.dpi >= 150
    width, height = (np.array(fig.get_size_inches()) * figures.DPI).round().astype(int)
    with Image.open(figures.REGISTRY[name].png) as png:
        assert abs(png.size[0] - width) <= 1 and abs(png.size[1] - height) <= 1, (png.size, (width, height))
        assert round(png.info["dpi"][0]) >= 150


def test_the_width_sweep_draws_its_summary_shares_and_intervals():
    fig = figures.draw(figures.REGISTRY["sweep_width_near_mode"])
    df = figures.read_summary(figures.REGISTRY["sweep_width_near_mode"])
    ax = fig.axes[0]
    schedules = list(dict.fromkeys(df.schedule))
    assert len(ax.containers) == len(schedules)  # one error-bar series per schedule
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [figures.schedule_label(s) for s in schedules]
    for bars, s in zip(ax.containers, schedules):
        sub = df[df.schedule == s].sort_values("width")
        np.testing.assert_allclose(np.asarray(bars.lines[0].get_ydata(), float), sub.near_mode.to_numpy())
        segments = np.array(bars.lines[2][0].get_segments())  # (width, 2 ends, x/y): the 95 % interval
        np.testing.assert_allclose(segments[:, :, 1], sub[["near_mode_low", "near_mode_high"]].to_numpy())
    assert ax.get_ylim()[0] <= 0 and ax.get_ylim()[1] >= 1 and ax.get_yscale() == "linear"  # a share: 0 to 1


def test_the_samples_gallery_names_its_rows_and_columns_and_counts_every_cell():
    fig = figures.draw(figures.REGISTRY["paper_two_points_paper_samples"])
    df = figures.read_summary(figures.REGISTRY["paper_two_points_paper_samples"])
    cells = df[df.schedule != "train"]
    rows, cols = list(dict.fromkeys(cells.schedule)), figures._tau_list(cells.tau)
    axes = np.array(fig.axes).reshape(len(rows), len(cols))
    assert [ax.get_ylabel() for ax in axes[:, 0]] == [figures.schedule_label(s) for s in rows]
    assert [ax.get_title() for ax in axes[0]] == [figures.tau_label(t) for t in cols]
    for i, s in enumerate(rows):
        for j, tau in enumerate(cols):
            sub = cells[(cells.schedule == s) & ((cells.tau == tau) | (np.isinf(cells.tau) & np.isinf(tau)))]
            text = axes[i, j].texts[0].get_text()
            assert text == f"{sub.near_mode_count.iloc[0]} / {sub.finite_count.iloc[0]} near"
            drawn = axes[i, j].collections[0].get_offsets()
            np.testing.assert_allclose(drawn, sub[["x1", "x2"]].to_numpy())


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory, write_catalog):
    tmp = tmp_path_factory.mktemp("figs")
    return run_experiment(experiment_from_file(write_catalog(tmp, steps=12, samples=16)), data_dir=tmp / "d").store


def test_summaries_are_the_stores_numbers(tiny_store):
    """The summaries against brute force on a tiny store: the near-mode share counts the final samples within 0.5
    of a scaled training point; a cell's final samples are the store's trajectory at its last step."""
    ds = ridgexr.open_dataset(tiny_store)
    sweep = figures.sweep_width_summary(ds)
    last = ds.isel(step=-1)
    pts = ds.train_data.values * float(last.alpha)
    for _, row in sweep.iterrows():
        x = last.trajectory.sel(schedule=row.schedule, width=row.width).values
        x = x[np.isfinite(x).all(1)]
        near = (np.linalg.norm(x[:, None] - pts[None], axis=-1) < 0.5).any(1).mean()
        assert row.near_mode == pytest.approx(near)
        assert row.near_mode_low <= near <= row.near_mode_high
    summary = figures.three_points_summary("h2", 16)(ds)
    x = last.trajectory.sel(schedule="h2", width=16).values
    np.testing.assert_allclose(summary[summary.kind == "sample"][["x1", "x2"]].to_numpy(), x, atol=5e-5)
    np.testing.assert_allclose(summary[summary.kind == "train"][["x1", "x2"]].to_numpy(), pts, atol=5e-5)
    assert isinstance(summary, pd.DataFrame)


def test_the_mnist_figures_draw_their_summaries_readably(figure_layout_problems):
    """The MNIST figures (their store is not committed) on a summary of the same shape: one row per model kind,
    one panel per schedule, one colour per epoch (MLP) or width (random features), the exact denoiser in black in
    every panel, drawn once per model (no epoch on random features, none of the three labels on the exact
    denoiser); galleries name their rows in the margin."""
    t = np.geomspace(3, 1e-3, 21)
    rows = [dict(model=m, schedule=s, width=512 if m == "mlp" else v, epoch=v if m == "mlp" else "", t=x,
                 distance_mean=(1 + k) * x ** 0.2, degenerate_share=float(x < 0.05))
            for m, levels in (("mlp", [30, 150, 600]), ("random_features", [256, 2048]))
            for s in ("1", "h", "h2") for k, v in enumerate(levels) for x in t]
    rows += [dict(model="exact", schedule="", width="", epoch="", t=x, distance_mean=0.5 * x ** 0.3,
                  degenerate_share=float(x < 0.08)) for x in t]
    import io

    df = pd.read_csv(io.StringIO(pd.DataFrame(rows).to_csv(index=False)))  # as read back from the CSV
    for draw, value in ((figures.mnist_distance_draw, "distance_mean"),
                        (figures.mnist_degenerate_draw, "degenerate_share")):
        fig = draw(df)
        assert not figure_layout_problems(fig)
        axes = np.array(fig.axes).reshape(2, 3)
        assert [ax.get_title() for ax in axes[0]] == ["w = 1", "w = h", "w = h²"]
        for i, (model, level, levels) in enumerate((("mlp", "epoch", [30, 150, 600]),
                                                    ("random_features", "width", [256, 2048]))):
            for j, s in enumerate(("1", "h", "h2")):
                lines = axes[i, j].get_lines()
                assert [ln.get_label() for ln in lines] == [f"{level} {v}" for v in levels] + ["exact denoiser"]
                for ln, v in zip(lines, levels):
                    want = df[(df.model == model) & (df.schedule == s) & (df[level] == v)].sort_values("t")[value]
                    np.testing.assert_allclose(ln.get_ydata(), want)
                assert lines[-1].get_color() == "black"
    images = np.random.default_rng(0).integers(0, 256, (3, 10, 28, 28)).astype(np.uint8)
    labels = np.array(["training images", "MLP, w = 1", "MLP, w = h"])
    fig = figures.mnist_samples_draw({"images": images, "labels": labels, "note": np.array(["decoded samples"])})
    assert not figure_layout_problems(fig)
    axes = np.array(fig.axes).reshape(3, 10)
    assert [ax.get_ylabel() for ax in axes[:, 0]] == list(labels)
    np.testing.assert_array_equal(axes[1, 4].images[0].get_array(), images[1, 4])
    fig = figures.mnist_trajectories_draw({"images": images[:, :8], "labels": labels, "t": t[::2][:8]})
    assert not figure_layout_problems(fig)
    assert [ax.get_title() for ax in fig.axes[:8]] == [f"t = {x:.2g}" for x in t[::2][:8]]


@pytest.fixture(scope="module")
def tiny_rf_store():
    """analyses/timescales_rf.py's curves for two seeds of a tiny design (d = 2, p = 64, n = 8, 16, 32)."""
    import xarray as xr

    from ridgexr.training.single_time import single_time_losses

    parts = []
    for seed in (1, 2):
        part = single_time_losses([8, 16, 32], d=2, p=64, t=0.01, taus=np.logspace(-1, 7, 33), rows=256, n_test=256,
                                  seed=seed, progress=lambda m: None)
        part.attrs.pop("seed")
        parts.append(part.expand_dims(seed=[seed]))
    return xr.concat(parts, "seed")


def test_the_random_feature_figure_draws_its_stores_curves_spectra_and_laws(tiny_rf_store, figure_layout_problems):
    """rf_summary against the store and separation_timescales; rf_draw draws exactly those numbers: the first
    seed's losses per n, tau_mem on its test loss, the eigenvalue counts per bin, every (n, seed)'s five times and
    the laws' slopes in the legend."""
    from ridgexr.analysis.timescales import separation_timescales

    ds = tiny_rf_store
    data = figures.rf_summary(ds)
    ts = separation_timescales(ds)
    s0 = ds.sel(seed=1)
    np.testing.assert_allclose(data["test_loss"], s0.test_loss.transpose("n_train", "tau").values, atol=1e-6)
    np.testing.assert_allclose(data["train_loss"], s0.train_loss.transpose("n_train", "tau").values, atol=1e-6)
    for k, n in enumerate(ds.n_train.values):
        lam = s0.eigenvalue.sel(n_train=n).values
        edges = np.logspace(-5, 3, 81)
        want = [((lam >= lo) & (lam < hi)).sum() for lo, hi in zip(edges[:-1], edges[1:])]
        want[-1] += int((lam == edges[-1]).sum())
        np.testing.assert_array_equal(data["hist"][k], want)
    for name, values in zip(data["names"], data["times"]):
        np.testing.assert_allclose(values, ts[str(name)].transpose("n_train", "seed").values)
    np.testing.assert_allclose(data["law_slope"], [float(ts[f"{n}_slope"]) for n in data["names"]])

    fig = figures.rf_draw(data)
    assert not figure_layout_problems(fig)
    loss, spectrum, times = fig.axes
    lines = [ln for ln in loss.get_lines() if ln.get_marker() in ("None", None, "")]
    for k in range(len(data["n"])):
        np.testing.assert_allclose(lines[2 * k].get_ydata(), data["test_loss"][k])
        np.testing.assert_allclose(lines[2 * k + 1].get_ydata(), data["train_loss"][k])
        assert lines[2 * k + 1].get_linestyle() == "--"
    circles = [ln for ln in loss.get_lines() if ln.get_marker() == "o"]
    finite = np.isfinite(data["tau_mem_first_seed"])
    np.testing.assert_allclose([c.get_xdata()[0] for c in circles], data["tau_mem_first_seed"][finite])
    steps = spectrum.get_lines()
    np.testing.assert_array_equal(np.nan_to_num(steps[0].get_ydata()), data["hist"][0])
    points = [ln for ln in times.get_lines() if ln.get_linestyle() == "None"]
    for ln, values in zip(points, data["times"]):
        np.testing.assert_allclose(ln.get_ydata(), values.ravel())
    legend = [t.get_text() for t in times.get_legend().get_texts()]
    assert [f"b = {b:.2f}" in text for b, text in zip(data["law_slope"], legend)] == [True] * len(legend)


GALLERY_CATALOG = """
experiments:
  imgs:
    dataset:
      images: {images: tiny, scale: symmetric}
      n_train: [4, 8]
    process: {T: 1.0, t_min: 0.05, n_steps: 6}
    model: {kind: mlp, widths: [16], epochs: [1, 3], batch_size: 8, lr: 1.0e-3,
            diagnostics: {n_time: 2, n_noise: 1, n_points: 4}}
    training: {quadrature: gauss-legendre-log-t, n_time: 2, n_noise: 1}
    schedules: ["h"]
    sampler: {kind: sde, block_steps: 3}
    n_samples: 5
    d_star: 1
    store: imgs.zarr
"""


@pytest.fixture(scope="module")
def gallery_store(tmp_path_factory, write_idx_folder):
    """A pixel store sweeping checkpoints (epoch 1, 3) and n_train (4, 8) of a small MLP on ten 5 x 5 images."""
    tmp = tmp_path_factory.mktemp("gallery")
    write_idx_folder(tmp / "tiny", np.random.default_rng(3).integers(0, 256, (10, 5, 5)), np.arange(10) % 2)
    (tmp / "cat.yaml").write_text(GALLERY_CATALOG)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RIDGEXR_CACHE", str(tmp / "cache"))
        return ridgexr.open_dataset(run_experiment(experiment_from_file(tmp / "cat.yaml"), data_dir=tmp / "d").store)


def test_the_training_gallery_shows_each_checkpoints_final_samples_named_by_checkpoint_and_gate(
        gallery_store, figure_layout_problems):
    """One row per checkpoint at one n: its first final samples as images (the store's last state over alpha,
    mapped from [-1, 1] to [0, 255]), named in the margin by the checkpoint and the gate's verdict on that cell; a
    last row of the cell's training images; drawn as summarized, nothing overlapping."""
    from ridgexr.quality import sample_quality

    ds = gallery_store
    data = figures.fashion_gallery_summary(8, n_samples=4, epoch_unit="epochs")(ds)
    assert data["images"].shape == (3, 4, 5, 5) and data["images"].dtype == np.uint8
    gates = sample_quality(ds.sel(n_train=8).isel(schedule=0))["gate"]
    assert list(data["labels"]) == [f"{e} epochs: {gates.sel(epoch=e).item()}" for e in (1, 3)] + ["training images"]
    for i, e in enumerate((1, 3)):
        last = ds.sel(n_train=8, epoch=e).isel(schedule=0, step=-1)
        x = last.trajectory.isel(sample=slice(0, 4)).values / float(last.alpha)
        want = np.clip(np.round(np.clip((x.reshape(4, 5, 5) + 1) / 2, 0, 1) * 255), 0, 255)
        np.testing.assert_array_equal(data["images"][i], want.astype(np.uint8))
    train = ds.train_data.values[:4].reshape(4, 5, 5)
    np.testing.assert_array_equal(data["images"][2], np.round(np.clip((train + 1) / 2, 0, 1) * 255).astype(np.uint8))
    fig = figures.fashion_gallery_draw(data)
    assert not figure_layout_problems(fig)
    axes = np.array(fig.axes).reshape(3, 4)
    assert [ax.get_ylabel() for ax in axes[:, 0]] == list(data["labels"])
    np.testing.assert_array_equal(axes[1, 2].images[0].get_array(), data["images"][1, 2])


def test_the_training_gallery_shows_each_n_at_its_checkpoints_with_f_mem_and_the_nearest_training_images(
        gallery_store, figure_layout_problems):
    """Per n: a row per checkpoint nearest the steps asked (its first final samples as images), named by n, the
    checkpoint and f_mem with its interval (the timescale tables' measure); then the nearest training image among
    the cell's n of each sample of the last row, found here by brute force over every pair; drawn as summarized."""
    from ridgexr.analysis import memorized_share

    ds = gallery_store
    data = figures.training_gallery_summary(steps=(1, 2.9), n_samples=4)(ds)  # 2.9 is nearest the epoch 3
    assert data["images"].shape == (2 * 3, 4, 5, 5) and data["images"].dtype == np.uint8
    for k, n in enumerate((4, 8)):
        fm = memorized_share(ds.sel(n_train=n).isel(schedule=0, width=0)).compute()
        for i, e in enumerate((1, 3)):
            f = fm.sel(epoch=e)
            assert data["labels"][3 * k + i] == (f"n = {n}, {e} steps: f_mem {float(f.f_mem):.2f} "
                                                 f"[{float(f.f_mem_low):.2f}, {float(f.f_mem_high):.2f}]")
            last = ds.sel(n_train=n, epoch=e).isel(schedule=0, width=0, step=-1)
            x = last.trajectory.isel(sample=slice(0, 4)).values / float(last.alpha)
            want = np.round(np.clip((x.reshape(4, 5, 5) + 1) / 2, 0, 1) * 255).astype(np.uint8)
            np.testing.assert_array_equal(data["images"][3 * k + i], want)
        assert data["labels"][3 * k + 2] == f"n = {n}: nearest training images"
        train = ds.train_data.values[:n]
        for j in range(4):
            dist = [np.linalg.norm(x[j] - train[i]) for i in range(n)]
            img = np.round(np.clip((train[int(np.argmin(dist))].reshape(5, 5) + 1) / 2, 0, 1) * 255)
            np.testing.assert_array_equal(data["images"][3 * k + 2, j], img.astype(np.uint8))
    fig = figures.fashion_gallery_draw(data)
    assert not figure_layout_problems(fig)
    axes = np.array(fig.axes).reshape(6, 4)
    assert [ax.get_ylabel() for ax in axes[:, 0]] == list(data["labels"])


def _synthetic_unet_timescales():
    """Training timescales of three n over two seeds whose f_mem is a logistic in log(steps / n) (so b = 1), with
    tau_mem the first checkpoint above 0.1 and the largest n censored."""
    import xarray as xr

    ns, seeds, steps = np.array([8, 32, 128]), np.array([0, 1]), np.geomspace(100, 12_000, 12).round()
    shift = np.array([0.0, 0.2])[None, :, None]
    f = 1 / (1 + np.exp(-(np.log(steps[None, None, :] / ns[:, None, None]) - np.log(60.0) - shift) * 2.5))
    f[2] = 0.02  # n = 128 never memorizes here
    first = (f > 0.1).argmax(-1)
    reached = (f > 0.1).any(-1)
    tau = np.where(reached, steps[first], steps[-1])
    low = np.where(reached, steps[np.maximum(first - 1, 0)], steps[-1])
    dims = ("n_train", "seed", "epoch")
    return xr.Dataset(
        {"f_mem": (dims, f), "f_mem_low": (dims, f * 0.9), "f_mem_high": (dims, np.minimum(f * 1.1, 1)),
         "f_mem_n_valid": (dims, np.full(f.shape, 512.0)), "tau_mem": (dims[:2], tau),
         "tau_mem_low": (dims[:2], low), "tau_mem_high": (dims[:2], np.where(reached, tau, np.inf)),
         "tau_mem_censored": (dims[:2], ~reached)},
        coords={"n_train": ns, "seed": seeds, "epoch": steps})


def test_the_unet_fmem_figure_draws_every_curve_its_tau_mem_and_the_collapse_at_the_fitted_b(figure_layout_problems):
    """The summary holds f_mem of every (n, seed, step) and tau_mem (NaN where censored); the figure draws each
    (n, seed) curve against the steps and against steps / n^b at the summary's b, a circle at each uncensored
    tau_mem on its curve, and the threshold; nothing overlapping."""
    tt = _synthetic_unet_timescales()
    df = figures.unet_fmem_summary(tt)
    assert len(df) == 3 * 2 * 12
    row = df[(df.n == 32) & (df.seed == 1)].sort_values("step")
    np.testing.assert_allclose(row.f_mem, tt.f_mem.sel(n_train=32, seed=1))
    assert (row.tau_mem == float(tt.tau_mem.sel(n_train=32, seed=1))).all()
    assert df[df.n == 128].tau_mem.isna().all()
    from ridgexr.analysis import memorization_collapse

    col = memorization_collapse(tt)
    assert [df[k].iloc[0] for k in ("b", "b_low", "b_high")] == [
        float(col[f"f_mem_collapse{k}"]) for k in ("", "_low", "_high")]
    fig = figures.unet_fmem_draw(_as_read_back(df))
    assert not figure_layout_problems(fig)
    left, right = fig.axes[0], fig.axes[1]
    curves = [ln for ln in left.get_lines() if ln.get_marker() in ("None", "")][:6]
    b = df.b.iloc[0]
    for ln, ((n, seed), g) in zip(curves, df.groupby(["n", "seed"], sort=True)):
        np.testing.assert_allclose(ln.get_xdata(), g.sort_values("step").step)
        np.testing.assert_allclose(ln.get_ydata(), g.sort_values("step").f_mem)
    collapsed = [ln for ln in right.get_lines() if ln.get_marker() in ("None", "")][:6]
    for ln, ((n, seed), g) in zip(collapsed, df.groupby(["n", "seed"], sort=True)):
        np.testing.assert_allclose(ln.get_xdata(), g.sort_values("step").step / n ** b)
    circles = [ln for ln in left.get_lines() if ln.get_marker() == "o"]
    assert sorted(c.get_xdata()[0] for c in circles) == sorted(df.dropna(subset=["tau_mem"]).groupby(
        ["n", "seed"]).tau_mem.first())
    assert f"b = {b:.2f}" in right.get_xlabel()


def test_the_cells_gallery_shows_every_complete_cells_final_samples_named_by_cell_and_gate(
        gallery_store, figure_layout_problems):
    """One row per complete cell (the same noise in every row), named in the margin by the labels that differ
    between the cells (here epoch and n_train; schedule and width are constant) and the gate's verdict on it; a last
    row of training images; drawn as summarized."""
    from ridgexr.quality import sample_quality

    ds = gallery_store
    data = figures.cells_gallery_summary(n_samples=3)(ds)
    done = ds.cell_complete.to_series()
    cells = [dict(zip(done.index.names, i)) for i in done[done].index]
    assert len(cells) >= 4 and data["images"].shape == (len(cells) + 1, 3, 5, 5)
    gates = sample_quality(ds)["gate"]
    for row, cell in enumerate(cells):
        label = data["labels"][row]
        assert label == f"epoch {cell['epoch']}, n_train {cell['n_train']}: {gates.sel(cell).item()}", label
        last = ds.sel(cell).isel(step=-1)
        x = last.trajectory.isel(sample=slice(0, 3)).values / float(last.alpha)
        want = np.round(np.clip((x.reshape(3, 5, 5) + 1) / 2, 0, 1) * 255).astype(np.uint8)
        np.testing.assert_array_equal(data["images"][row], want)
    assert data["labels"][-1] == "training images"
    fig = figures.fashion_gallery_draw(data)
    assert not figure_layout_problems(fig)
    axes = np.array(fig.axes).reshape(len(cells) + 1, 3)
    assert [ax.get_ylabel() for ax in axes[:, 0]] == list(data["labels"])


def _as_read_back(df: pd.DataFrame) -> pd.DataFrame:
    import io

    return pd.read_csv(io.StringIO(df.to_csv(index=False)))


def test_the_coverage_figure_draws_draw_means_the_reference_slope_and_the_floor(figure_layout_problems):
    """delta_N per model: the line through its means over the training draws, each draw as a dot; the slope -1/k
    through the memorizer's first mean; the ideal sampler's floor flat at its median, its range shaded; the outputs'
    distance to M beside it."""
    rng = np.random.default_rng(1)
    ns = np.array([100, 316, 1000, 3162])
    rows = [dict(model=m, draw=j, N=n, delta_N=a * n ** -0.5 * np.exp(rng.normal(0, 0.1)), **{"dist to M": 0.01 * a})
            for m, a in (("memorize", 2.0), ("gamma-0", 1.2)) for j in range(4) for n in ns]
    df = figures.coverage_summary_of(pd.DataFrame(rows), 2, Null(0.1, 0.08, 0.12, how="x"), 5000)
    df = _as_read_back(df)
    fig = figures.coverage_draw("sphere")(df)
    assert not figure_layout_problems(fig)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    for m in ("memorize", "gamma-0"):
        want = df[df.model == m].groupby("N").delta_N.mean()
        np.testing.assert_allclose(lines[m].get_xdata(), want.index)
        np.testing.assert_allclose(lines[m].get_ydata(), want.to_numpy())
    ref = next(ln for label, ln in lines.items() if label.startswith("slope"))
    y = np.asarray(ref.get_ydata(), float)
    np.testing.assert_allclose(np.log(y[-1] / y[0]) / np.log(ns[-1] / ns[0]), -0.5)
    assert y[0] == pytest.approx(df[df.model == "memorize"].groupby("N").delta_N.mean().iloc[0])
    floor = next(ln for label, ln in lines.items() if label.startswith("floor"))
    np.testing.assert_allclose(floor.get_ydata(), 0.1)
    dots = [c.get_offsets() for c in ax.collections if len(c.get_offsets()) == 16]
    assert len(dots) == 2  # every draw of both models
    assert ax.get_xscale() == ax.get_yscale() == "log"



def test_the_coverage_figure_keeps_distances_far_below_its_axis_and_marks_them(figure_layout_problems):
    """A memorizer's distance to M at the sampler's precision (5e-11 .. 2e-6) survives the summary's rounding to
    significant digits (6 decimals made it 0) and is drawn as a triangle at ON_M where below it, named in the
    legend; the values above are drawn where they are."""
    ns = np.array([100, 1000, 10000, 100000])
    dist = {"memorize": [5e-11, 3e-8, 5.84e-7, 1.6e-6], "gamma-0": [0.07, 0.08, 0.085, 0.086]}
    rows = [dict(model=m, draw=j, N=n, delta_N=2 * n ** -0.5, **{"dist to M": d})
            for m in dist for j in range(2) for n, d in zip(ns, dist[m])]
    df = _as_read_back(figures.coverage_summary_of(pd.DataFrame(rows), 2, Null(0.1, 0.08, 0.12, how="x"), 5000))
    np.testing.assert_allclose(df[df.model == "memorize"].groupby("N")["dist to M"].mean(), dist["memorize"])
    fig = figures.coverage_draw("sphere")(df)
    assert not figure_layout_problems(fig)
    ax = fig.axes[1]
    marks = {(tuple(c.get_offsets()[:, 0]), tuple(c.get_offsets()[:, 1])) for c in ax.collections
             if len(c.get_offsets()) and c.get_sizes()[0] == 22}
    assert marks == {((100.0, 1000.0, 10000.0), (figures.ON_M,) * 3)}
    above = [c.get_offsets() for c in ax.collections if len(c.get_offsets()) == 1 and c.get_sizes()[0] == 12]
    np.testing.assert_allclose(above[0], [[100000, 1.6e-6]])
    assert ax.get_ylim()[0] < figures.ON_M
    assert f"distance below {figures.ON_M:g}" in [t.get_text() for t in fig.legends[0].get_texts()]

def test_the_manifold_figure_draws_each_model_and_the_noise_floor(figure_layout_problems):
    """Four panels against N (distance to M, ridge Hausdorff, sliced W2 with its band, novelty), one line per model;
    the noise floor is the mean norm of N(0, h I) in the normal directions (checked against a simulation)."""
    h, m = 0.002, 1
    z = np.random.default_rng(0).standard_normal((200_000, m)) * np.sqrt(h)
    assert figures._gauss_norm_mean(h, m) == pytest.approx(np.linalg.norm(z, axis=1).mean(), rel=0.01)
    z = np.random.default_rng(1).standard_normal((200_000, 14)) * np.sqrt(h)
    assert figures._gauss_norm_mean(h, 14) == pytest.approx(np.linalg.norm(z, axis=1).mean(), rel=0.01)
    ns = [8, 32, 128, 512, 1024]
    rows = [dict(model=lab, N=n, manifold_dist=0.1 * a, ridge_hausdorff=a / n ** 0.3, sliced_w2=0.3 * a,
                 w2_low=0.25 * a, w2_high=0.35 * a, novelty_median=a * n / 100, noise_floor=0.036, t_min=0.001,
                 samples=128) for lab, a in (("random features, τ = 1000", 1.0), ("random features, converged", 2.0),
                                            ("exact denoiser", 0.5)) for n in ns]
    df = _as_read_back(pd.DataFrame(rows))
    fig = figures.manifold_noise_draw("circle")(df)
    assert not figure_layout_problems(fig)
    assert [ax.get_title() for ax in fig.axes] == [p[1] for p in figures.MANIFOLD_PANELS]
    for ax, (col, _, _) in zip(fig.axes, figures.MANIFOLD_PANELS):
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        for lab in df.model.unique():
            np.testing.assert_allclose(lines[lab].get_ydata(), df[df.model == lab].sort_values("N")[col])
    floor = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("sampler")]
    np.testing.assert_allclose(floor[0].get_ydata(), 0.036)


def test_the_variance_figures_draw_their_summaries_readably(figure_layout_problems):
    """The effect figure (rows: near-mode share and spread differences; a panel per loss weight; a colour per width;
    values beyond the axis as triangles and counted), the ensemble figure (Delta G against p/P per n_noise with its
    interval) and the prediction figure (measured and predicted Delta G, and their difference in P1's band)."""
    rng = np.random.default_rng(2)
    rows = []
    for s in ("1", "h2"):
        for w in (64, 256, 1024):
            for n in (4, 16, 64, 256, 1024):
                v = rng.normal(0, 0.05)
                rows.append(dict(schedule=s, width=w, n_noise=n, near_mode_diff=v, near_mode_diff_low=v - 0.02,
                                 near_mode_diff_high=v + 0.02, spread_diff=v, spread_diff_low=v - 0.03,
                                 spread_diff_high=v + 0.03))
    rows[3]["spread_diff"] = 1e4  # a cell whose samples left the data
    df = _as_read_back(pd.DataFrame(rows))
    fig = figures.effect_draw("two points")(df)
    assert not figure_layout_problems(fig)
    axes = np.array(fig.axes).reshape(2, 2)
    assert [ax.get_title() for ax in axes[0]] == ["w = 1", "w = h²"]
    assert [t.get_text() for t in axes[1, 0].texts] == ["1 off scale (▲▼)"]
    bars = axes[0, 1].containers[0]  # h2, width 64
    sub = df[(df.schedule.astype(str) == "h2") & (df.width == 64)].sort_values("n_noise")
    np.testing.assert_allclose(np.asarray(bars.lines[0].get_ydata(), float), sub.near_mode_diff)
    np.testing.assert_allclose(np.array(bars.lines[2][0].get_segments())[:, :, 1],
                               sub[["near_mode_diff_low", "near_mode_diff_high"]].to_numpy())

    rows = []
    for s in ("1", "h", "h2"):
        for p in (16, 64, 256, 1024):
            for n in (1, 4, 16, 64):
                v = rng.normal(0, 0.02)
                rows.append({"w": s, "p": p, "n_noise": n, "p/P": p / (32 * n), "diff": v, "diff_low": v - 0.01,
                             "diff_high": v + 0.01, "draws": 32, "measured": v, "measured_low": v - 0.01,
                             "measured_high": v + 0.01, "predicted": v / 2, "predicted_low": v / 2 - 0.01,
                             "predicted_high": v / 2 + 0.01, "error": v / 2, "error_low": v / 2 - 0.01,
                             "error_high": v / 2 + 0.01})
    df = _as_read_back(pd.DataFrame(rows))
    fig = figures.ensemble_draw(df)
    assert not figure_layout_problems(fig)
    assert [ax.get_title() for ax in fig.axes] == ["w = 1", "w = h", "w = h²"]
    for ax, s in zip(fig.axes, ("1", "h", "h2")):
        assert len(ax.containers) == 4
        for bars, n in zip(ax.containers, (1, 4, 16, 64)):
            sub = df[(df.w.astype(str) == s) & (df.n_noise == n)].sort_values("p/P")
            np.testing.assert_allclose(np.asarray(bars.lines[0].get_ydata(), float), sub["diff"])
    fig = figures.prediction_draw(df)
    assert not figure_layout_problems(fig)
    axes = np.array(fig.axes).reshape(2, 3)
    bars = axes[1, 2].containers[1]  # h2, n_noise 4: measured - predicted
    sub = df[(df.w.astype(str) == "h2") & (df.n_noise == 4)].sort_values("p/P")
    np.testing.assert_allclose(np.asarray(bars.lines[0].get_ydata(), float), sub["error"])
    top = axes[0, 0].containers  # w = 1: measured then predicted per n_noise
    sub = df[(df.w.astype(str) == "1") & (df.n_noise == 1)].sort_values("p/P")
    np.testing.assert_allclose(np.asarray(top[0].lines[0].get_ydata(), float), sub["measured"])
    np.testing.assert_allclose(np.asarray(top[1].lines[0].get_ydata(), float), sub["predicted"])


ENSEMBLE_CATALOG = """
experiments:
  ens:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 12}
    model: {widths: [8, 16], n_frequencies: 3, include_exact: false}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: [1, 2], target: [dsm, ideal], draws: 3}
    schedules: ["1", "h2"]
    sampler: {kind: ode, block_steps: 8}
    n_samples: 16
    d_star: 1
    store: ens.zarr
"""


def test_the_ensemble_summary_is_the_stores_gap_mass_difference(tmp_path, figure_layout_problems):
    """On a tiny ensemble store: Delta G of each cell is the share of the DSM draws' final samples in the gap
    |x_1| < 2 alpha_t minus the ideal draws' (diverged samples outside), counted by brute force; its interval holds
    it; P and p/P follow from the rows (2 points x 4 nodes x n_noise); the figure draws it readably."""
    from ridgexr.catalog import load_catalog_file

    f = tmp_path / "cat.yaml"
    f.write_text(ENSEMBLE_CATALOG)
    ds = ridgexr.open_dataset(run_experiment(load_catalog_file(f)["ens"], data_dir=tmp_path / "d").store)
    df = figures.ensemble_summary(ds)
    last = ds.isel(step=-1)
    alpha = float(last.alpha)
    assert len(df) == 2 * 2 * 2
    for _, row in df.iterrows():
        x = {k: last.trajectory.sel(schedule=row.w, width=row.p, n_noise=row.n_noise, target=k).values
             for k in ("dsm", "ideal")}
        gap = {k: (np.isfinite(v).all(-1) & (np.abs(v[..., 0]) < 2 * alpha)).mean() for k, v in x.items()}
        assert row["diff"] == pytest.approx(gap["dsm"] - gap["ideal"], abs=1e-6)
        assert row.diff_low - 1e-9 <= row["diff"] <= row.diff_high + 1e-9
        assert row.P == 2 * 4 * row.n_noise and row["p/P"] == pytest.approx(row.p / row.P)
    fig = figures.ensemble_draw(_as_read_back(df))
    assert not figure_layout_problems(fig)


def test_a_timescales_unet_summary_reads_back_as_written_and_gives_the_same_laws(tmp_path):
    """analyses/timescales_unet.py commits each complete store's training timescales: written and read back, the
    summary holds the same numbers (censoring flags boolean again), and the laws' claims over the seeds are the
    same as from the original."""
    import xarray as xr

    import timescales_unet

    tt = _synthetic_unet_timescales()
    tt = tt.assign(tau_gen=tt.tau_mem * 0 + 12_000, tau_gen_low=tt.tau_mem * 0 + 12_000,
                   tau_gen_high=tt.tau_mem * 0 + np.inf, tau_gen_censored=tt.tau_mem_censored | True)
    tt = tt.assign({k: tt.f_mem * 0 for k in timescales_unet.SUMMARY_VARS if k not in tt})  # the excess, f_fresh, ...
    back = [timescales_unet.read_summary(timescales_unet.write_summary(tt.sel(seed=s), tmp_path / f"{s}.nc"))
            for s in tt.seed.values]
    again = xr.concat([b.expand_dims(seed=[s]) for b, s in zip(back, tt.seed.values)], dim="seed")
    for name in timescales_unet.SUMMARY_VARS:
        assert again[name].dtype == tt[name].dtype, name
        xr.testing.assert_allclose(again[name].transpose(*tt[name].dims), tt[name])
    assert timescales_unet.tables(again)["laws"] == timescales_unet.tables(tt[list(timescales_unet.SUMMARY_VARS)])["laws"]


def test_timescales_unet_summaries_of_sizes_run_in_pieces_merge_into_the_whole():
    """A store run one n_train at a time (``ridgexr run NAME --cells n_train=N``) is summarized by its complete sizes:
    ``complete_sizes`` reads them off ``cell_complete``; a store's sizes merged with a committed summary's give the
    whole seed's timescales (the store's values where both hold a size); a (n, seed) that no part holds is left out
    of the table, of the laws' points and named among the sizes not yet complete."""
    import xarray as xr

    import timescales_unet

    tt = _synthetic_unet_timescales()
    tt = tt.assign({k: tt.f_mem * 0 for k in timescales_unet.SUMMARY_VARS if k not in tt})
    tt = tt.assign(tau_gen=tt.tau_mem, tau_gen_low=tt.tau_mem_low, tau_gen_high=tt.tau_mem_high,
                   tau_gen_censored=tt.tau_mem_censored)[list(timescales_unet.SUMMARY_VARS)]
    marks = xr.DataArray(np.ones((3, 12), bool), dims=("n_train", "epoch"), coords={"n_train": tt.n_train})
    marks[1, 5] = False
    assert timescales_unet.complete_sizes(xr.Dataset({"cell_complete": marks})) == [8, 128]
    one = tt.sel(seed=0)
    whole = timescales_unet.merged(one.sel(n_train=[8, 128]), one.sel(n_train=[32]))
    xr.testing.assert_identical(whole.transpose(*one.dims), one.drop_vars("seed"))
    spoiled = one.sel(n_train=[8, 32]).copy(deep=True)
    spoiled["f_mem"][:] = -1
    again = timescales_unet.merged(one.sel(n_train=[32, 128]), spoiled)  # n = 32 from the store, 8 from the summary
    assert (again.f_mem.sel(n_train=32) == one.f_mem.sel(n_train=32)).all() and (again.f_mem.sel(n_train=8) == -1).all()
    # seed 1 lacks n = 32
    parts = [one.drop_vars("seed").expand_dims(seed=[0]),
             tt.sel(seed=1, n_train=[8, 128]).drop_vars("seed").expand_dims(seed=[1])]
    partial = xr.concat(parts, dim="seed", data_vars="minimal", coords="minimal", compat="override", join="outer")
    table = timescales_unet.tables(partial)["times"]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| n ")]
    assert len(rows) == 5 and not any(line.startswith("| 32 | 1 |") for line in rows)
    law = timescales_unet.interval_law(partial, "tau_mem")
    assert int(law["tau_mem_points"]) == 5
    assert int(timescales_unet.memorization_collapse(partial, n_boot=10)["f_mem_collapse_runs"]) == 5
    names = ["timescales-unet", "timescales-unet-seed1"]
    assert timescales_unet.not_yet_read(partial, names, "timescales-unet") == [
        "`timescales-unet` n = 16, 64", "`timescales-unet-seed1` n = 16, 32, 64", "`timescales-unet-seed2`"]


def test_the_fmem_figure_of_a_design_is_summarized_from_its_committed_summaries_without_a_store(tmp_path):
    """Where no store of the design is on the machine, its f_mem figure reads the committed summaries
    (``reads_summaries``), every (n, seed) of them, and its summary table is built from those."""
    import timescales_unet

    fig = figures.REGISTRY["timescales_unet_fmem"]
    assert fig.reads_summaries
    tt = fig.open(tmp_path / "timescales-unet.zarr")  # nothing there
    committed = [timescales_unet.read_summary(timescales_unet.summaries("timescales-unet") / f"{e}.nc")
                 for e in timescales_unet.DESIGNS["timescales-unet"]]
    assert tt.sizes["seed"] == len(committed)
    for s, one in zip(tt.seed.values, committed):
        np.testing.assert_array_equal(tt.f_mem.sel(seed=s).transpose(*one.f_mem.dims).values, one.f_mem.values)
    df = figures.unet_fmem_summary(tt)
    assert len(df) == tt.f_mem.size


def test_the_unet_fmem_figure_of_one_size_draws_its_curves_and_says_there_is_no_collapse_yet(figure_layout_problems):
    """With one n measured (a design run in pieces) b is undefined: the left panel draws each seed's curve, the
    right one no curve and the words 'no collapse yet'; nothing overlapping."""
    tt = _synthetic_unet_timescales().sel(n_train=[8])
    df = figures.unet_fmem_summary(tt)
    assert df.b.isna().all()
    fig = figures.unet_fmem_draw(_as_read_back(df))
    assert not figure_layout_problems(fig)
    left, right = fig.axes[0], fig.axes[1]
    curves = [ln for ln in left.get_lines() if ln.get_marker() in ("None", "") and ln.get_linestyle() == "-"]
    assert len(curves) == 2
    for ln, (seed, g) in zip(curves, df.groupby("seed", sort=True)):
        np.testing.assert_allclose(ln.get_ydata(), g.sort_values("step").f_mem)
    assert [ln for ln in right.get_lines() if ln.get_linestyle() == "-"] == []
    assert any("no collapse yet: 1 size(s) measured" in t.get_text() for t in right.texts)
