"""Several model blocks in one store: random features, a trained MLP, a user's module and the exact denoiser."""

import math
import textwrap

import numpy as np
import pytest

import ridgexr
from ridgexr.catalog import CatalogError, load_catalog_file
from ridgexr.run import run_experiment
from ridgexr.schema import SCHEMA_VERSION

CATALOG = """
experiments:
  multi:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 20}
    models:
      - {kind: random_features, widths: [8], n_frequencies: 3}
      - {kind: mlp, widths: [16], embed_dim: 8, epochs: [2, 4], batch_size: 2}
      - {kind: module, name: mine, module: "exactmods:exact_x0", parametrization: x0%(time)s}
      - {kind: exact}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1", "h2"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: 16
    d_star: 1
    store: multi.zarr
"""

MODULE = textwrap.dedent("""
    import torch
    from ridgexr import ExactDenoiser
    from ridgexr.datasets import point_set

    def exact_x0():
        '''E[x0 | x_t] of the two-point set: a user's "model" that is exactly right (OU time).'''
        ex = ExactDenoiser(point_set("two-points"))
        return lambda y, t: torch.as_tensor(ex.denoise(y.double(), t.double()))
""")


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("multi")
    (folder / "exactmods.py").write_text(MODULE)
    cat = folder / "cat.yaml"
    cat.write_text(CATALOG % dict(time=""))
    exp = load_catalog_file(cat)["multi"]
    res = run_experiment(exp, data_dir=folder / "data")
    return exp, res, folder


def test_blocks_share_one_store_and_masked_cells_never_run(multi_run):
    exp, res, _ = multi_run
    ds = ridgexr.open_dataset(res.store)
    assert ds["trajectory"].dims[:4] == ("model", "schedule", "width", "epoch")
    assert list(ds.model.values) == ["random_features", "mlp", "mine", "exact"]
    assert list(ds.width.values) == [8, 16] and list(ds.epoch.values) == [2, 4]
    applies = ds["cell_applies"].values
    # rf: 2 schedules at width 8 (first epoch); mlp: 2 schedules x 2 epochs at width 16; module and exact: one each
    assert applies.sum() == 8 and res.cells_run == 8
    assert applies[0, :, 0, 0].all() and applies[1, :, 1, :].all() and applies[2, 0, 0, 0] and applies[3, 0, 0, 0]
    np.testing.assert_array_equal(ds["cell_complete"].values, applies)
    masked = ds["trajectory"].where(~ds["cell_applies"]).values
    assert np.isnan(masked).all()
    assert np.isfinite(ds["trajectory"].where(ds["cell_applies"], 0.0).values).all()
    assert ds.attrs["schema_version"] == SCHEMA_VERSION and "note_masked" in ds.attrs


def test_a_module_that_returns_the_exact_posterior_mean_has_zero_residuals(multi_run):
    _, res, _ = multi_run
    ds = ridgexr.open_dataset(res.store)
    cell = ds.sel(model="mine").isel(schedule=0, width=0, epoch=0)
    for name in ("residual_normal", "residual_tangent"):
        assert float(np.abs(cell[name]).max()) <= 1e-8, name
    assert abs(float(cell["excess_loss"])) <= 1e-8 and abs(float(cell["excess_normal"])) <= 1e-8
    exact = ds.sel(model="exact").isel(schedule=0, width=0, epoch=0)
    assert float(exact["excess_loss"]) == pytest.approx(0.0, abs=1e-12)
    assert float(exact["optimal_loss"]) == pytest.approx(float(cell["optimal_loss"]), rel=1e-12)


def test_mlp_cells_carry_their_epoch_and_comparable_diagnostics(multi_run):
    _, res, folder = multi_run
    ds = ridgexr.open_dataset(res.store)
    mlp = ds.sel(model="mlp", width=16)
    ex = mlp["excess_loss"].values  # (schedule, epoch)
    assert np.isfinite(ex).all() and (ex > 0).all()
    assert not np.allclose(mlp["trajectory"].isel(schedule=0, epoch=0).values,
                           mlp["trajectory"].isel(schedule=0, epoch=1).values)  # other weights, other samples
    # the excess splits into tangent and normal parts of sum c lambda |f - f*|^2 (>= the excess's expectation)
    assert (mlp["excess_tangent"].values > 0).all() and (mlp["excess_normal"].values > 0).all()
    rf = ds.sel(model="random_features", width=8).isel(epoch=0)
    assert np.isfinite(rf["excess_loss"].values).all()
    assert list(res.store.parent.glob("multi.zarr.checkpoints/*/mlp/*/checkpoint.pt"))  # resumable training


def test_rerun_keeps_every_cell(multi_run):
    exp, res, folder = multi_run
    again = run_experiment(exp, data_dir=folder / "data")
    assert again.cells_run == 0 and again.cells_skipped == 8


@pytest.mark.parametrize("block, msg", [
    ("{kind: mlp, widths: [8], tau: 3.0}", r"field 'models\[3\]\.tau': not a field of model kind 'mlp'"),
    ("{kind: random_features}", r"field 'models\[3\]\.widths': Field required"),
    ("{kind: module}", r"field 'models\[3\]\.module': Field required"),
    ("{kind: module, module: nocolon}", "package.module:factory"),
    ("{kind: mlp, activation: sigmoid}", r"field 'models\[3\]\.activation': Input should be 'relu', 'silu', 'tanh' or 'gelu'"),
    ("{kind: vae}", r"unknown model kind 'vae' \(known: random_features, exact, mlp, module, diffusers, unet\)"),
    ("{kind: unet}", r"field 'models\[3\]\.sample_size': Field required"),
    ("{kind: mpl, widths: [8]}", r"unknown model kind 'mpl'; did you mean 'mlp'\?"),
    ("{kind: mlp, widths: [8], epochs: [2, 2]}", "epochs must be distinct"),
    ("{kind: unet, sample_size: [4, 4], block_out_channels: [8], norm_num_groups: 4, epochs: [3, 1, 3]}",
     "epochs must be distinct"),
])
def test_bad_model_blocks_name_the_field(tmp_path, block, msg):
    f = tmp_path / "c.yaml"
    f.write_text(CATALOG.replace("- {kind: exact}", "- " + block) % dict(time=""))
    with pytest.raises(CatalogError, match=msg):
        load_catalog_file(f)


@pytest.mark.parametrize("kind, block", [
    ("mlp", "{kind: mlp, widths: [8]}"),
    ("unet", "{kind: unet, sample_size: [4, 4], block_out_channels: [8], norm_num_groups: 4}"),
])
def test_networks_trained_on_the_dsm_target_refuse_an_entry_without_it(tmp_path, kind, block):
    """mlp and unet blocks (EpochTrainedSpec) need 'dsm' among training.target; with it they load."""
    f = tmp_path / "c.yaml"
    text = CATALOG.replace("- {kind: mlp, widths: [16], embed_dim: 8, epochs: [2, 4], batch_size: 2}", "- " + block)
    f.write_text(text.replace("n_noise: 4}", "n_noise: 4, target: ideal}") % dict(time=""))
    with pytest.raises(CatalogError, match=f"{kind} models are trained on the DSM target: training.target must "
                                           "include 'dsm'"):
        load_catalog_file(f)
    f.write_text(text.replace("n_noise: 4}", "n_noise: 4, target: [ideal, dsm]}") % dict(time=""))
    assert [b.kind for b in load_catalog_file(f)["multi"].blocks].count(kind) == 1


def test_bad_module_path_fails_before_the_store_is_created(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(CATALOG.replace("exactmods:exact_x0", "exactmods:missing") % dict(time=""))
    (tmp_path / "exactmods.py").write_text(MODULE)
    exp = load_catalog_file(f)["multi"]
    with pytest.raises(ridgexr.models.module.denoiser.ModelError, match="no attribute 'missing'"):
        run_experiment(exp, data_dir=tmp_path / "data")
    assert not (tmp_path / "data" / "multi.zarr").exists()


def test_python_api_takes_your_own_model_and_hashes_its_weights(tmp_path, catalog_text):
    """run_experiment(model=...): a bare callable (read as an OU score) that is exact gives zero residuals;
    a trained MLP handed in as a module runs; other weights are refused as another configuration."""
    import torch

    from ridgexr import ExactDenoiser, MLPDenoiser, fit_neural
    from ridgexr.datasets import point_set
    from ridgexr.models.module.denoiser import ModuleDenoiser
    from ridgexr.run import ConfigMismatchError

    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(12, 8))
    exp = load_catalog_file(f)["tiny"]
    ex = ExactDenoiser(point_set("two-points"))

    def exact_score(y, t):
        return torch.as_tensor(ex.score(y.double(), t.double()))

    res = run_experiment(exp, store=tmp_path / "api.zarr", model=exact_score)
    ds = ridgexr.open_dataset(res.store)
    assert list(ds.model.values) == ["exact_score"] and res.cells_run == 1
    assert float(np.abs(ds["residual_normal"]).max()) <= 1e-8 and float(np.abs(ds["residual_tangent"]).max()) <= 1e-8

    net = MLPDenoiser(2, hidden=(32, 32), embed_dim=8, seed=0)
    fit = fit_neural(net, point_set("two-points"), epochs=3, batch_size=2, device="cpu", t_min=0.01, T=2.0)
    mine = ModuleDenoiser(fit.model, parametrization="score", name="my-mlp")
    res = run_experiment(exp, store=tmp_path / "mlp.zarr", model=mine)
    ds = ridgexr.open_dataset(res.store)
    assert list(ds.model.values) == ["my-mlp"] and list(ds.schedule.values) == ["1", "h2"]
    np.testing.assert_array_equal(ds["cell_complete"].values, [[True, False]])  # stored at schedule '1' only
    assert float(ds["excess_loss"].sel(schedule="1").squeeze()) > 0
    # a model trained with w = h^2 says so: it is stored under that schedule, its diagnostics weighted by h^2
    h2 = run_experiment(exp, store=tmp_path / "mlp-h2.zarr",
                        model=ModuleDenoiser(fit.model, parametrization="score", name="my-mlp", schedule="h2"))
    ds2 = ridgexr.open_dataset(h2.store)
    np.testing.assert_array_equal(ds2["cell_complete"].values, [[False, True]])
    assert float(ds2["excess_loss"].sel(schedule="h2").squeeze()) != float(ds["excess_loss"].sel(schedule="1").squeeze())
    with pytest.raises(ValueError, match="'h' is not one of the entry's schedules"):
        run_experiment(exp, store=tmp_path / "mlp-h.zarr",
                       model=ModuleDenoiser(fit.model, parametrization="score", name="my-mlp", schedule="h"))
    with torch.no_grad():
        next(fit.model.parameters()).add_(0.1)
    with pytest.raises(ConfigMismatchError, match="module"):
        run_experiment(exp, store=tmp_path / "mlp.zarr", model=mine)


@pytest.mark.slow
def test_report_of_a_model_store_draws_each_block_at_its_run_cell(multi_run, tmp_path, drawn_matplotlib_image):
    import holoviews as hv

    from ridgexr import analysis, plot
    from ridgexr.report import make_report

    _, res, _ = multi_run
    ds = ridgexr.open_dataset(res.store)
    plot.ensure_backends()
    near = analysis.near_mode_fraction(ds)["near_mode"].compute()
    # the first run cell of every (model, schedule): rf width 8, mlp width 16 epoch 2, module and exact at schedule '1'
    expected = {("1", "random_features"): near.sel(model="random_features", schedule="1", width=8, epoch=2),
                ("h2", "random_features"): near.sel(model="random_features", schedule="h2", width=8, epoch=2),
                ("1", "mlp"): near.sel(model="mlp", schedule="1", width=16, epoch=2),
                ("h2", "mlp"): near.sel(model="mlp", schedule="h2", width=16, epoch=2),
                ("1", "mine"): near.sel(model="mine", schedule="1", width=8, epoch=2),
                ("1", "exact"): near.sel(model="exact", schedule="1", width=8, epoch=2)}
    drawn = drawn_matplotlib_image(hv.render(plot.phase_diagram(ds, x="schedule", y="model", metric="near_mode"),
                                             backend="matplotlib"))
    assert {k: v for k, v in drawn.items() if np.isfinite(v)} == pytest.approx({k: float(v) for k, v in expected.items()})
    assert math.isnan(drawn[("h2", "exact")]) and math.isnan(drawn[("h2", "mine")])  # never run
    paths = make_report(ds, tmp_path / "rep", title="multi", n_frames=2)
    assert paths["near_mode_diagram"].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_model_blocks_run_the_same_on_a_local_cluster_with_processes(multi_run, tmp_path):
    """The mlp weights, the user's module (imported in each worker from the catalog's folder) and the masks
    travel to dask worker processes: the store equals the in-process one."""
    exp, res, _ = multi_run
    other = run_experiment(exp, store=tmp_path / "dask.zarr", scheduler="local", n_workers=2)
    a, b = ridgexr.open_dataset(res.store), ridgexr.open_dataset(other.store)
    assert other.cells_run == 8
    for name in ("trajectory", "ridge_projection", "residual_normal", "resolved_rank", "excess_loss", "cell_complete"):
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_cli_analyze_lists_only_the_cells_that_were_run(multi_run):
    from typer.testing import CliRunner

    from ridgexr.cli import app

    _, res, _ = multi_run
    out = CliRunner().invoke(app, ["analyze", str(res.store)], terminal_width=250)
    assert out.exit_code == 0, out.output
    rows = [line for line in out.output.splitlines() if line.startswith("│")]
    assert len(rows) == 8  # 8 run cells of 32: no row for a masked cell
    assert sum(" mine " in r for r in rows) == 1 and sum(" mlp " in r for r in rows) == 4
    info = CliRunner().invoke(app, ["info", str(res.store)], terminal_width=250)
    assert "complete cells: 8 of 8 (24 masked" in info.output
    header = next(line for line in out.output.splitlines() if "model" in line and "schedule" in line)
    assert header.index("model") < header.index("schedule") < header.index("width") < header.index("epoch")


BREAKING = textwrap.dedent("""
    import torch
    from ridgexr import ExactDenoiser
    from ridgexr.datasets import point_set

    def breaks_late():
        '''The exact E[x0 | x_t], but NaN for t < 0.3 on the half plane y_0 > 0 (a model that breaks mid-run).'''
        ex = ExactDenoiser(point_set("two-points"))

        def f(y, t):
            out = torch.as_tensor(ex.denoise(y.double(), t.double())).clone()
            out[(t < 0.3) & (y[:, 0] > 0)] = float("nan")
            return out
        return f
""")


def test_a_module_that_breaks_mid_run_gives_diverged_trajectories_and_complete_cells(tmp_path):
    """Divergence is data for a user's module too: non-finite outputs mid-run flag the trajectories
    that met them, the run completes (the exact cell too), a rerun keeps every cell; a model that
    is broken at the probe is still refused."""
    (tmp_path / "breaking.py").write_text(BREAKING)
    text = (CATALOG.replace("exactmods:exact_x0", "breaking:breaks_late")
            .replace("      - {kind: random_features, widths: [8], n_frequencies: 3}\n", "")
            .replace("      - {kind: mlp, widths: [16], embed_dim: 8, epochs: [2, 4], batch_size: 2}\n", "")
            .replace('schedules: ["1", "h2"]', 'schedules: ["1"]'))
    cat = tmp_path / "cat.yaml"
    cat.write_text(text % dict(time=""))
    exp = load_catalog_file(cat)["multi"]
    res = run_experiment(exp, data_dir=tmp_path / "data")
    ds = ridgexr.open_dataset(res.store)
    assert bool(ds["cell_complete"].all()) and res.cells_run == 2
    mine, exact = ds.sel(model="mine").squeeze(), ds.sel(model="exact").squeeze()
    assert not exact["diverged"].values.any()
    div = mine["diverged"].values
    x = mine["trajectory"].values  # (sample, step, d)
    t = ds["t"].values
    # a flagged trajectory met the NaN: a finite state at t < 0.3 with x_0 > 0, then non-finite states only
    late = (t[:-1] < 0.3)
    met = ((x[:, :-1, 0] > 0) & late[None, :]).any(1)
    np.testing.assert_array_equal(div, met)
    np.testing.assert_array_equal(div, ~np.isfinite(x[:, -1]).all(-1))
    assert 0 < div.sum() < div.size  # the ones headed for (3, 0): the same noise as the exact cell's
    np.testing.assert_array_equal(div, exact["trajectory"].values[:, -1, 0] > 0)
    assert np.isfinite(x[~div]).all() and np.isnan(mine["ridge_distance"].values[div, -1]).all()
    assert np.isnan(float(mine["excess_loss"])) and np.isfinite(float(exact["excess_loss"]))  # NaN, not an error
    again = run_experiment(exp, data_dir=tmp_path / "data")
    assert again.cells_run == 0 and again.cells_skipped == 2

    # the same model handed in as a Python object: the same flags; the caller's object is not changed
    import importlib

    from ridgexr.models.module.denoiser import ModuleDenoiser

    mine_obj = ModuleDenoiser(importlib.import_module("breaking").breaks_late(), parametrization="x0", name="mine")
    api = run_experiment(exp, store=tmp_path / "api.zarr", model=mine_obj)
    assert mine_obj.on_nonfinite == "raise" and api.cells_run == 1
    np.testing.assert_array_equal(ridgexr.open_dataset(api.store)["diverged"].values.squeeze(), div)

    (tmp_path / "broken.py").write_text("import torch\n"
                                        "def nan():\n    return lambda y, t: torch.full_like(y, float('nan'))\n")
    cat.write_text(text.replace("breaking:breaks_late", "broken:nan").replace("multi.zarr", "b.zarr") % dict(time=""))
    with pytest.raises(ridgexr.models.module.denoiser.ModelError, match="non-finite"):
        run_experiment(load_catalog_file(cat)["multi"], data_dir=tmp_path / "data")
    assert not (tmp_path / "data" / "b.zarr").exists()


AUTHORS_SAMPLER = """
experiments:
  rescaled:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 12}
    models:
      - {kind: exact}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1"]
    sampler: {kind: sde, block_steps: 8, score_scale: inverse_sigma}
    n_samples: 5
    d_star: 1
    store: rescaled.zarr
"""


def test_a_run_with_the_authors_score_scale_steps_and_observes_score_over_sigma(tmp_path):
    """The stored trajectories are a hand-stepped Euler-Maruyama loop with score / sigma_t, and the observed model
    error is that of the rescaled score: e = (x + h s / sigma) / alpha - E[x0 | x]."""
    import torch

    from ridgexr import ExactDenoiser, OU, time_grid
    from ridgexr.datasets import point_set

    cat = tmp_path / "cat.yaml"
    cat.write_text(AUTHORS_SAMPLER)
    exp = load_catalog_file(cat)["rescaled"]
    ds = ridgexr.open_dataset(run_experiment(exp, data_dir=tmp_path / "data").store)
    ex, ou = ExactDenoiser(point_set("two-points")), OU()
    grid = time_grid(12, 2.0, 0.01, "exponential")
    gen = torch.Generator().manual_seed(exp.seeds.sampler)
    x = torch.randn(5, 2, generator=gen, dtype=torch.float64)
    hand = [x.numpy().copy()]
    for i in range(12):
        dt = grid[i] - grid[i + 1]
        z = torch.randn(5, 2, generator=gen, dtype=torch.float64)
        x = x + (x + 2 * ex.score(x, grid[i]) / math.sqrt(ou.h(grid[i]))) * dt + math.sqrt(2 * dt) * z
        hand.append(x.numpy().copy())
    traj = ds.trajectory.squeeze().transpose("step", "sample", "dim").values
    np.testing.assert_allclose(traj, np.stack(hand), rtol=1e-10, atol=1e-10)
    k = 6
    xk, tk = torch.tensor(traj[k]), float(grid[k])
    err = ((xk + ou.h(tk) * ex.score(xk, tk) / math.sqrt(ou.h(tk))) / ou.alpha(tk) - ex.denoise(xk, tk)).numpy()
    got = (ds.residual_normal + ds.residual_tangent).squeeze().isel(step=k).transpose("sample", "dim").values
    np.testing.assert_allclose(got, err, rtol=1e-8, atol=1e-10)
    assert np.abs(err).max() > 1e-3  # the exact denoiser's rescaled score has an error


EPOCHS = """
experiments:
  e%(name)s:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 20}
    models:
      - {kind: mlp, widths: [16], embed_dim: 8, epochs: %(epochs)s, batch_size: 2}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1", "h2"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: 16
    d_star: 1
    store: e%(name)s.zarr
"""


@pytest.mark.slow
def test_one_training_run_feeds_every_checkpoint_of_the_epoch_dimension(tmp_path):
    """Training time as an axis: the epochs [2, 4] of a schedule come from one training run (one checkpoint
    folder per schedule, counted), and the epoch-2 cell is bit-identical to a run that stops at epoch 2."""
    cat = tmp_path / "cat.yaml"
    cat.write_text(EPOCHS % dict(name="long", epochs="[2, 4]") + EPOCHS.split("experiments:")[1]
                   % dict(name="short", epochs="[2]"))
    entries = load_catalog_file(cat)
    long = run_experiment(entries["elong"], data_dir=tmp_path / "data")
    short = run_experiment(entries["eshort"], data_dir=tmp_path / "data")
    runs = sorted(p.name for p in long.store.parent.glob("elong.zarr.checkpoints/*/mlp/*"))
    assert runs == ["1-w16-nall", "h2-w16-nall"]  # 2 schedules x 2 epochs = 4 cells, 2 training runs
    a, b = ridgexr.open_dataset(long.store), ridgexr.open_dataset(short.store)
    assert int(a["cell_complete"].sum()) == 4
    np.testing.assert_array_equal(a["trajectory"].sel(epoch=2).values, b["trajectory"].sel(epoch=2).values)
    assert not np.array_equal(a["trajectory"].sel(epoch=4).values, b["trajectory"].sel(epoch=2).values)


def test_every_report_figure_of_a_model_store_is_readable(multi_run, figure_layout_problems):
    """A store of four model blocks (four cell dimensions: long panel titles and legend entries): every report
    figure, as saved, has nothing overlapping or clipped (conftest.figure_layout_problems); the user's module that
    wraps the exact denoiser and the exact denoiser draw identical samples and share their panels."""
    import matplotlib.pyplot as plt

    from ridgexr import plot
    from ridgexr.report import report_figures

    _, res, _ = multi_run
    ds = ridgexr.open_dataset(res.store)
    problems = []
    for name, (obj, caption) in report_figures(ds, n_frames=2).items():
        fig = plot.matplotlib_figure(obj)
        problems += [f"{name}: {p}" for p in figure_layout_problems(fig)]
        plt.close(fig)
        if name == "final_samples":
            assert "model mine, exact (2 cells)" in caption
    assert not problems, "\n".join(problems)
