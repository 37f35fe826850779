import io
import math
import os
import signal
import subprocess
import sys
import time

import dask.array as da
import numpy as np
import pytest
import torch
import zarr

import ridgexr
from ridgexr import SmoothedEmpirical, time_grid
from ridgexr.catalog import experiment_from_file, resolve_store
from ridgexr.datasets import load_training_set
from ridgexr.run import ConfigMismatchError, CellTask, plan_layout, run_cell, run_experiment
from ridgexr.run.verification import check_identity
from ridgexr.sampling import reverse_sde
from ridgexr.schema import SCHEMA_VERSION
from ridgexr.store import StoreLock, StoreLockedError
from ridgexr.store.lifecycle import create_store

from reference_runs import RUN_SCRIPT, assert_same_store

@pytest.fixture(scope="module")
def small_run(tmp_path_factory, write_catalog):
    tmp = tmp_path_factory.mktemp("run")
    exp = experiment_from_file(write_catalog(tmp))
    res = run_experiment(exp, data_dir=tmp / "data")
    return exp, res


def test_store_schema_and_invariants(small_run):
    exp, res = small_run
    g = zarr.open_group(str(res.store), mode="r")
    assert g.metadata.zarr_format == 3
    ds = ridgexr.open_dataset(res.store)
    assert isinstance(ds["trajectory"].data, da.Array)  # lazy
    assert ds["trajectory"].dims == ("schedule", "width", "sample", "step", "dim")
    assert list(ds.schedule.values) == ["1", "h2", "exact"] and list(ds.width.values) == [8, 16]
    np.testing.assert_allclose(ds.t.values, time_grid(20, 2.0, 0.01))
    np.testing.assert_allclose(ds.h.values, -np.expm1(-2 * ds.t.values))
    assert ds.attrs["tau_units"].startswith("paper") and ds.attrs["init"] == "normal"
    assert ds.attrs["schema_version"] == SCHEMA_VERSION and len(ds.attrs["config_hash"]) == 64
    for key in ("provenance", "config", "seeds", "device", "created"):
        assert key in ds.attrs
    for name in ("trajectory", "ridge_projection", "ridge_distance", "residual_normal", "loss", "excess_tangent"):
        assert ds[name].attrs["units"] and ds[name].attrs["long_name"]
    assert bool(ds.cell_complete.all())
    assert res.cells_run == 6
    from ridgexr.store import complete_cells

    assert {"schedule": "exact", "width": 16} in complete_cells(ds) and len(complete_cells(ds)) == 6
    x = ds.trajectory.values
    assert np.isfinite(x).all() and not ds.diverged.values.any()
    dist = np.linalg.norm(x - ds.ridge_projection.values, axis=-1)
    np.testing.assert_allclose(ds.ridge_distance.values, dist, rtol=1e-12)
    # two points on the x-axis: projections on the axis, curvature -1/h
    np.testing.assert_allclose(ds.ridge_projection.values[..., 1], 0, atol=1e-10)
    np.testing.assert_allclose(ds.normal_curvature.values, np.broadcast_to(-1 / ds.h.values, dist.shape),
                               rtol=1e-8)
    # the exact denoiser has no error; its trajectories do not depend on width
    ex = ds.sel(schedule="exact")
    assert float(abs(ex.residual_tangent).max()) == 0.0
    np.testing.assert_array_equal(ex.trajectory.isel(width=0).values, ex.trajectory.isel(width=1).values)


def test_trajectory_and_residuals_recomputed_independently(small_run):
    exp, res = small_run
    ds = ridgexr.open_dataset(res.store)
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    fits = ridgexr.fit_sweep(train, widths=[8, 16], schedules=["1", "h2"], taus=[math.inf],
                             model_kwargs=dict(n_frequencies=3, feature_period=2.0, activation="relu",
                                               parametrization="posterior_mean", seed=0),
                             t_min=0.01, T=2.0, quadrature="gauss-legendre-log-t", n_time=4, n_noise=4, seed=0,
                             init="normal", init_seed=0)
    model = fits[("h2", 16)].denoiser(math.inf)
    grid = time_grid(20, 2.0, 0.01)
    blocks = list(reverse_sde(lambda x, t: model.score(x, t), 16, 2, grid, seed=0, block_steps=8))
    traj = torch.cat([b.x for b in blocks]).numpy()  # (steps, samples, d)
    cell = ds.sel(schedule="h2", width=16)
    np.testing.assert_array_equal(cell.trajectory.values, np.swapaxes(traj, 0, 1))
    # residuals: N N^T e + T T^T e = e, with e = denoise - posterior mean (independent computation)
    k = 13
    x = traj[k]
    t = grid[k]
    e = model.denoise(x, t) - SmoothedEmpirical(train, t).posterior_mean(x)
    rn = cell.residual_normal.isel(step=k).values
    rt = cell.residual_tangent.isel(step=k).values
    np.testing.assert_allclose(rn + rt, e, atol=1e-9)
    np.testing.assert_allclose((rn * rt).sum(-1), 0, atol=1e-9)
    np.testing.assert_allclose(rn[:, 0], 0, atol=1e-9)  # two points: normal = y axis


def test_summary_rows_are_the_final_step_of_the_store(small_run):
    """Every summary column against numpy on the arrays read back with zarr (no dask, no xarray)."""
    exp, res = small_run
    g = zarr.open_group(str(res.store), mode="r")
    arr = lambda name: np.asarray(g[name][...])  # noqa: E731
    traj, train, alpha = arr("trajectory")[..., -1, :], arr("train_data"), float(arr("alpha")[-1])
    dist, conv = arr("ridge_distance")[..., -1], arr("ridge_converged")[..., -1]
    rdeg, fdeg = arr("ridge_degenerate")[..., -1], arr("frame_degenerate")[..., -1]
    normal, tangent = arr("residual_normal")[..., -1, :], arr("residual_tangent")[..., -1, :]
    schedules, widths = list(g["schedule"][...]), list(g["width"][...])
    assert len(res.summary) == len(schedules) * len(widths)
    for row in res.summary:
        i, j = schedules.index(row["schedule"]), widths.index(row["width"])
        x = traj[i, j]  # (sample, dim)
        d = np.sort(np.linalg.norm(x[:, None] - alpha * train[None], axis=-1), axis=1)
        masked = lambda v, flag: np.where(flag[i, j][..., None] if v.ndim == 4 else flag[i, j], np.nan, v[i, j])  # noqa: E731
        rms = lambda v: np.sqrt(np.nanmean((masked(v, fdeg) ** 2).sum(-1)))  # noqa: E731
        observed = np.isfinite(dist[i, j])
        expect = {
            "ridge_distance": np.nanmean(masked(dist, rdeg)),
            "converged": conv[i, j].mean(),
            "rms_residual_normal": rms(normal),
            "rms_residual_tangent": rms(tangent),
            "near_mode": np.mean(d[:, 0] < 0.5),
            "memorized": np.mean(d[:, 0] / d[:, 1] < 1 / 3),
            "diverged": arr("diverged")[i, j].sum(),
            "excess_loss": arr("excess_loss")[i, j],
            "degenerate": (fdeg[i, j] & observed).sum() / observed.sum(),
        }
        assert row["complete"] is True
        for key, value in expect.items():
            np.testing.assert_allclose(row[key], value, rtol=1e-12, atol=1e-15, err_msg=key)


def test_resume_and_config_mismatch(small_run, tmp_path, write_catalog):
    exp, res = small_run
    again = run_experiment(exp, store=res.store)
    assert again.cells_run == 0 and again.cells_skipped == 6
    # an entry's text is not its configuration: a reworded description resumes the store, which stays intact
    reworded = run_experiment(exp.model_copy(update={"description": "reworded"}), store=res.store)
    assert reworded.cells_run == 0 and reworded.cells_skipped == 6
    assert check_identity(res.store) == []
    other = experiment_from_file(write_catalog(tmp_path, samples=17))
    with pytest.raises(ConfigMismatchError, match="different configuration"):
        run_experiment(other, store=res.store)


def test_a_run_in_pieces_of_cells_writes_the_store_of_one_run(small_run, tmp_path):
    """``cells`` runs only the cells it names (and the source of a legacy exact twin it names, which the twin is
    copied from); pieces that together name every cell write the store an uninterrupted run writes, value for
    value."""
    exp, res = small_run
    store = tmp_path / "pieces.zarr"
    first = run_experiment(exp, store=store, cells={"width": ["16"]})  # text, as --cells gives it
    assert (first.cells_run, first.cells_skipped, first.cells_left) == (4, 0, 2)  # exact/16 needs exact/8
    ds = ridgexr.open_dataset(store)
    np.testing.assert_array_equal(ds.cell_complete.values, [[False, True], [False, True], [True, True]])
    second = run_experiment(exp, store=store, cells={"schedule": ["exact", "h2"], "width": 8})
    assert (second.cells_run, second.cells_skipped, second.cells_left) == (1, 4, 1)
    last = run_experiment(exp, store=store)
    assert (last.cells_run, last.cells_skipped, last.cells_left) == (1, 5, 0)
    assert_same_store(res.store, store)


def test_the_plan_says_what_a_rerun_picks_up_at_the_store(small_run, tmp_path, catalog_text):
    """``ridgexr run --plan`` with a store at the path says how many of the selected cells it marks complete (the
    store's own marks, counted here independently), which training runs its checkpoints resume and at what epoch
    (a real side file, stopped mid-run; a torn one reads as unreadable, not skipped), and names a store whose cell
    grid is another entry's; with no store there it says nothing of one."""
    from typer.testing import CliRunner

    from ridgexr import MLPDenoiser, fit_neural
    from ridgexr.cli import app
    from ridgexr.run.resumes import what_resumes
    from ridgexr.run.runner import checkpoint_root

    exp, _ = small_run
    data = tmp_path / "data"

    def plan_line(source, *cells):
        r = CliRunner().invoke(app, ["run", "--plan", str(source), "--data-dir", str(data), *cells],
                               env={"COLUMNS": "400"})
        assert r.exit_code == 0, r.output
        return " ".join(r.output.split())

    assert "store there" not in plan_line(exp.source) and not what_resumes(exp, data / "tiny.zarr").exists
    store = run_experiment(exp, data_dir=data, cells={"width": ["16"]}).store
    marks = ridgexr.open_dataset(store).cell_complete
    for where, sel in ((None, {}), ({"width": 8}, {"width": [8]}),
                       ({"schedule": ["1", "exact"]}, {"schedule": ["1", "exact"]})):
        state = what_resumes(exp, store, where)
        chosen = marks.sel(sel)
        assert (state.complete, state.selected) == (int(chosen.sum()), chosen.size)
    assert (what_resumes(exp, store, {"width": 8}).complete, what_resumes(exp, store).complete) == (1, 4)

    root = checkpoint_root(store, ridgexr.open_dataset(store).attrs["config_hash"])

    def stop_at_3(epoch, epochs, loss):
        if epoch == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit_neural(MLPDenoiser(2, hidden=(8,), embed_dim=4, seed=0), np.random.default_rng(0).normal(size=(8, 2)),
                   epochs=6, batch_size=8, device="cpu", seed=0, checkpoint_dir=root / "mlp" / "h2-n8",
                   progress=stop_at_3)
    (root / "mlp" / "1-n8").mkdir(parents=True)
    (root / "mlp" / "1-n8" / "checkpoint.pt").write_bytes(b"torn")
    assert what_resumes(exp, store).training == [("mlp/1-n8", None, None), ("mlp/h2-n8", 3, 6)]
    line = plan_line(exp.source)
    assert "the store there marks 4 of these 6 cells complete (a run of this configuration keeps them)" in line
    assert "resumes from its checkpoint: mlp/1-n8 (its checkpoint cannot be read), mlp/h2-n8 at epoch 3 of 6" in line
    piece = plan_line(exp.source, "--cells", "schedule=1,h2", "--cells", "width=8")
    assert "the store there marks none of these 2 cells complete" in piece

    other = tmp_path / "other.yaml"  # the same store name, one width: another cell grid
    other.write_text(catalog_text().replace("widths: [8, 16]", "widths: [8]"))
    assert what_resumes(experiment_from_file(other), store).other_shape
    assert "another cell grid" in plan_line(other)


@pytest.mark.parametrize("cells, match", [({"n_train": [8]}, "'n_train' is not a cell dimension.*schedule, width"),
                                          ({"width": ["12", 8]}, "width has no label '12'.*labels are 8, 16"),
                                          ({"schedule": "h"}, "schedule has no label 'h'")])
def test_a_selection_of_cells_that_names_no_cell_fails_before_the_store(small_run, tmp_path, cells, match):
    exp, _ = small_run
    with pytest.raises(ValueError, match=f"`cells`: {match}"):
        run_experiment(exp, store=tmp_path / "none.zarr", cells=cells)
    assert not (tmp_path / "none.zarr").exists()


def test_a_selection_of_cells_does_not_replace_a_store(small_run):
    """An ``--overwrite`` swaps in a whole store: with ``cells`` it is refused, the old store untouched."""
    exp, res = small_run
    before = ridgexr.open_dataset(res.store).cell_complete.values.copy()
    with pytest.raises(ValueError, match="`cells` cannot be combined with `overwrite`"):
        run_experiment(exp, store=res.store, cells={"width": 8}, overwrite=True)
    np.testing.assert_array_equal(ridgexr.open_dataset(res.store).cell_complete.values, before)


def test_a_piece_is_planned_and_priced_as_the_cells_it_runs(small_run, tmp_path):
    """``plan_run(cells=...)`` (``ridgexr run --plan --cells``, and the stages a piece prints as it starts) counts
    the cells the piece runs (those the layout selects, and the source of a legacy exact twin among them) and
    prices only them: pieces that split the entry's cells sample, together, what the whole entry samples.  A bad
    selection fails before the training set is read."""
    from typer.testing import CliRunner

    from ridgexr.cli import app
    from ridgexr.run import plan_run
    from ridgexr.run.plan import format_seconds

    exp, res = small_run
    data = res.store.parent
    layout = res.plan.layout
    whole = plan_run(exp, data_dir=data, read_data=False)
    for where in ({"schedule": ["exact", "h2"], "width": 8}, {"schedule": "1"}, {}):
        piece = plan_run(exp, data_dir=data, read_data=False, cells=where)
        assert piece.n_cells == len(layout.select(where)) and piece.summary()["cells"] == (where or {})
    # exact/16 is copied from exact/8, which runs with it (test_a_run_in_pieces_of_cells_writes_the_store_of_one_run)
    assert plan_run(exp, data_dir=data, read_data=False, cells={"width": ["16"]}).n_cells == 4
    parts = [plan_run(exp, data_dir=data, read_data=False, cells={"schedule": [s]}) for s in ("1", "h2", "exact")]
    sampling = [p.stage_seconds["sampling and observation"] for p in parts]
    assert sum(sampling) == pytest.approx(whole.stage_seconds["sampling and observation"], rel=1e-12)
    assert 0 < sampling[0] < whole.stage_seconds["sampling and observation"]
    # the random features' fit is one per training set, whatever schedules a piece runs: each piece pays it
    assert all(p.stage_seconds["fit"] == pytest.approx(whole.stage_seconds["fit"], rel=1e-12) for p in parts)
    assert sum(p.n_cells for p in parts) == whole.n_cells == len(layout.cells())
    with pytest.raises(ValueError, match="`cells`: width has no label '12'"):
        plan_run(exp, data_dir=tmp_path / "nowhere", cells={"width": "12"})  # the data folder is never looked at
    r = CliRunner().invoke(app, ["run", "--plan", str(exp.source), "--data-dir", str(data), "--cells", "schedule=h2"],
                           env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in r.output.splitlines()
            if line.startswith("│")}
    assert rows["total"] == format_seconds(sum(parts[1].stage_seconds.values()))
    assert "(2 run by --cells schedule=h2)" in " ".join(r.output.split())


def test_a_store_of_an_older_schema_with_unfinished_cells_is_not_resumed(small_run, tmp_path):
    """A store written with schema 1.5 (before final_sample and data_draw) that has an unfinished cell
    is refused with a message naming --overwrite, and so is one of schema 1.8 (before the quality gate's own
    draws and measures of 1.9); the same store at this schema resumes that cell."""
    import shutil

    exp, res = small_run
    for version, refused in (("1.5", True), ("1.8", True), (ridgexr.schema.SCHEMA_VERSION, False)):
        store = tmp_path / f"copy-{version}.zarr"
        shutil.copytree(res.store, store)
        group = zarr.open_group(store, mode="r+")
        if version != ridgexr.schema.SCHEMA_VERSION:  # written before stores kept a record of their creation
            shutil.rmtree(store / ".creation")
            del group.attrs["generation"]
        group.attrs["schema_version"] = version
        marks = group["cell_complete"]
        first = np.argwhere(marks[...])[0]
        marks[tuple(first)] = False  # one unfinished cell
        zarr.consolidate_metadata(store)
        if refused:
            with pytest.raises(ConfigMismatchError, match=f"unfinished cells.*schema {version}.*--overwrite"):
                run_experiment(exp, store=store)
        else:
            again = run_experiment(exp, store=store)
            assert again.cells_run == 1 and again.cells_skipped == 5


def test_a_store_of_schema_1_6_without_clip_shift_opens_verifies_and_is_not_resumed(small_run, tmp_path):
    """A store written with schema 1.6 (before clip_shift) opens, verifies (schema and chunks) without damage and
    reruns nothing when complete; with an unfinished cell it is refused naming --overwrite."""
    import shutil

    from ridgexr.run import check_store_schema
    from ridgexr.store import verify_store
    from ridgexr.store.integrity import cell_digest

    exp, res = small_run
    store = tmp_path / "old.zarr"
    shutil.copytree(res.store, store)
    shutil.rmtree(store / "clip_shift")  # what 1.6 wrote: no clip_shift array, the cell digests without it,
    shutil.rmtree(store / ".creation")  # and no record of the store's creation
    group = zarr.open_group(store, mode="r+", use_consolidated=False)
    group.attrs["schema_version"] = "1.6"
    digests = group["cell_digest"]
    for idx in np.argwhere(group["cell_complete"][...]):
        digests[tuple(idx)] = cell_digest(store, tuple(idx), group=group)
    zarr.consolidate_metadata(store)
    ds = ridgexr.open_dataset(store)
    assert "clip_shift" not in ds and bool(ds.cell_complete.all())
    np.testing.assert_array_equal(ds["trajectory"].values, ridgexr.open_dataset(res.store)["trajectory"].values)
    assert check_store_schema(store) == []
    assert verify_store(store)[0] == []
    assert run_experiment(exp, store=store).cells_run == 0
    marks = zarr.open_group(store, mode="r+")["cell_complete"]
    marks[tuple(np.argwhere(marks[...])[0])] = False
    zarr.consolidate_metadata(store)
    with pytest.raises(ConfigMismatchError, match="unfinished cells.*schema 1.6.*--overwrite"):
        run_experiment(exp, store=store)


def test_legacy_exact_cells_are_sampled_once_and_copied(small_run, tmp_path):
    """The legacy form's exact denoiser at the second width is the first width's computation: it is
    copied, not sampled again.  The copy equals an independent sampling of that cell, and a resume
    whose copy was lost (completion cleared, values spoiled) copies it again from the store."""
    import shutil
    from dataclasses import replace

    from ridgexr.run.plan import plan_tasks
    from ridgexr.schema import STEP_VARIABLES
    from ridgexr.store.update import clear_completion

    exp, res = small_run
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    layout = plan_layout(exp, train)
    tasks = plan_tasks(exp, train, layout)
    twins = [t for t in tasks if t.twin_of is not None]
    assert [(t.labels["schedule"], t.labels["width"], t.twin_of) for t in twins] == [("exact", 16, (2, 0))]
    store = tmp_path / "independent.zarr"
    create_store(store, layout, train, {"config_hash": "x"})
    run_cell(exp.model_dump_json(), str(store), layout, replace(twins[0], twin_of=None))  # sampled anew
    copied = ridgexr.open_dataset(res.store).isel(schedule=2, width=1)
    sampled = ridgexr.open_dataset(store).isel(schedule=2, width=1)
    names = list(STEP_VARIABLES) + ["diverged", "max_dropped_mass", "loss", "optimal_loss", "cell_complete"]
    for name in names:
        np.testing.assert_array_equal(copied[name].values, sampled[name].values, err_msg=name)
    assert bool(copied.cell_complete)

    resumed = tmp_path / "resumed.zarr"
    shutil.copytree(res.store, resumed)
    clear_completion(resumed, [{"schedule": "exact", "width": 16}])
    zarr.open_group(str(resumed), mode="r+")["trajectory"][2, 1] = 0.0
    again = run_experiment(exp, store=resumed)
    assert again.cells_run == 1 and again.cells_skipped == 5
    back = ridgexr.open_dataset(resumed).isel(schedule=2, width=1)
    for name in names:
        np.testing.assert_array_equal(back[name].values, copied[name].values, err_msg=name)


MULTI_BLOCK = """
experiments:
  multi:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 8}
    models:
      - {kind: random_features, widths: [8], n_frequencies: 3}
      - {kind: mlp, widths: [16], embed_dim: 8, epochs: [2], batch_size: 2}
      - {kind: exact}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1", "h2"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: 4
    d_star: 1
    store: multi.zarr
"""


@pytest.fixture
def trained_cells(monkeypatch):
    """[(kind, cell labels)] of every cell a kind's training entry point was handed (fitted or diagnosed), in
    order: each kind's real ``fit``, counted where the registry resolves it (``ModelKind.trainer``)."""
    import importlib

    from ridgexr.models import REGISTRY

    seen = []
    for kind in ("random_features", "mlp", "exact"):
        module_name, attr = REGISTRY[kind].fit.split(":")
        module = importlib.import_module(module_name)

        def counted(ctx, bi, block, cells, fit=getattr(module, attr), kind=kind):
            seen.extend((kind, dict(lab)) for _, lab in cells)
            return fit(ctx, bi, block, cells)

        monkeypatch.setattr(module, attr, counted)
    return seen


def test_a_resume_fits_only_the_models_of_the_cells_left(tmp_path, trained_cells):
    """A resume hands each kind's training only the cells it still runs (the complete cells' models are neither
    refitted nor diagnosed again), and the resumed store equals the uninterrupted one, every variable."""
    import shutil

    from reference_runs import assert_same_store
    from ridgexr.catalog import load_catalog_file
    from ridgexr.store.update import clear_completion

    cat = tmp_path / "multi.yaml"
    cat.write_text(MULTI_BLOCK)
    exp = load_catalog_file(cat)["multi"]
    ref = run_experiment(exp, store=tmp_path / "ref.zarr").store
    ds = ridgexr.open_dataset(ref)
    cell_dims = ds["cell_complete"].dims
    runs = np.broadcast_to(ds["cell_applies"].values.astype(bool), ds["cell_complete"].shape)
    assert len(trained_cells) == int(runs.sum()) == 5  # random features and mlp at 2 schedules, exact at one
    cells = [{dim: ds[dim].values.tolist()[i] for dim, i in zip(cell_dims, idx)} for idx in zip(*np.nonzero(runs))]
    left = [lab for lab in cells if lab["model"] == "exact" or (lab["model"] == "mlp" and lab["schedule"] == "h2")]
    assert len(left) == 2
    resumed = tmp_path / "resumed.zarr"
    shutil.copytree(ref, resumed)
    clear_completion(resumed, left)
    trained_cells.clear()
    again = run_experiment(exp, store=resumed)
    assert again.cells_run == 2 and again.cells_skipped == 3
    assert sorted((kind, lab["schedule"]) for kind, lab in trained_cells) == [("exact", "1"), ("mlp", "h2")]
    assert_same_store(ref, resumed)


def test_a_rerun_is_priced_without_its_complete_cells_and_from_each_checkpoints_epoch(tmp_path):
    """What a rerun has left is priced as it runs: the cells the store marks complete are not priced (all of them:
    nothing left), and a training run whose checkpoint holds epoch e of E costs (E - e) / E of its fit (at E: as
    if its cells were complete).  The run folders priced are those the fit writes.  A real run stopped at epoch 3
    of 6 of one mlp run shows it in ``ridgexr run --plan``'s 'left there' column and in the line the resumed run
    prints, and the resumed store is the uninterrupted one."""
    import shutil

    from rich.console import Console
    from rich.progress import Progress
    from typer.testing import CliRunner

    from ridgexr.catalog import load_catalog_file
    from ridgexr.cli import app
    from ridgexr.datasets import training_shape
    from ridgexr.run.plan import estimate_stage_seconds, format_seconds, resumed_training, run_cell_indexes
    from ridgexr.run.resumes import what_resumes
    from ridgexr.run.runner import checkpoint_root
    from ridgexr.store.layout import cell_labels
    from ridgexr.store.update import clear_completion

    cat = tmp_path / "multi.yaml"
    cat.write_text(MULTI_BLOCK.replace("epochs: [2]", "epochs: [6]"))
    exp = load_catalog_file(cat)["multi"]
    shape, coords, every = training_shape(exp.dataset), exp.cell_coords(), run_cell_indexes(exp)
    mlp = exp.blocks[1]
    ref = run_experiment(exp, store=tmp_path / "ref.zarr").store
    root = checkpoint_root(ref, ridgexr.open_dataset(ref).attrs["config_hash"])
    written = {p.parent.relative_to(root).as_posix() for p in root.glob("**/checkpoint.pt")}
    cells = {idx: cell_labels(coords, idx) for idx in every}
    mlp_cells = [lab for lab in cells.values() if lab["model"] == "mlp"]
    assert written == {f"mlp/{f}" for f in mlp.training_runs(mlp_cells, exp.dataset.n_trains[0])} \
        == {f"mlp/{mlp.run_folder(lab | {'n_train': None})}" for lab in mlp_cells}

    def price(**kw):
        return estimate_stage_seconds(exp, shape, **kw)

    assert price(done=every) == {"fit": 0.0, "diagnostics": 0.0, "sampling and observation": 0.0}
    h2 = next(idx for idx, lab in cells.items() if lab["model"] == "mlp" and lab["schedule"] == "h2")
    folder = f"mlp/{mlp.run_folder(cells[h2])}"
    done = {idx for idx, lab in cells.items() if lab["model"] != "exact" and idx != h2}
    full, without = price(done=done)["fit"], price(done=done | {h2})["fit"]
    assert full > without == 0  # no fit but this run's: the random features' cells are complete, exact has none
    for e in (0, 2, 3, 6):
        assert price(done=done, reached={folder: e})["fit"] == pytest.approx(full - (full - without) * e / 6, rel=1e-12)
    assert price(done=done, reached={"mlp/elsewhere": 3}) == price(done=done)  # a run the rerun does not train

    stopped = tmp_path / "data" / "multi.zarr"  # the entry's store in a data folder; no checkpoints beside it
    shutil.copytree(ref, stopped)
    clear_completion(stopped, [cells[idx] for idx in every if idx not in done])

    class StopAtEpoch3(Progress):
        def update(self, task_id, **kw):
            if "h2" in str(kw.get("description")) and "epoch 3/6" in str(kw.get("description")):
                raise KeyboardInterrupt
            super().update(task_id, **kw)

    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, store=stopped, progress=StopAtEpoch3(console=Console(file=io.StringIO())))
    state = what_resumes(exp, stopped)
    assert state.done == done and state.training == [(folder, 3, 6)]
    assert resumed_training(exp, state.reached) == {folder: 3} and resumed_training(exp, state.reached, done=every) == {}
    left = price(done=done, reached={folder: 3})
    r = CliRunner().invoke(app, ["run", "--plan", str(cat), "--data-dir", str(stopped.parent)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in r.output.splitlines()
            if line.startswith("│")}
    assert rows["fit"][-1] == format_seconds(left["fit"]) and rows["total"][-1] == format_seconds(sum(left.values()))
    assert "the table's 'left there' prices what a rerun has left" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["run", str(cat), "--data-dir", str(stopped.parent)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert (f"left (3 complete cell(s) kept; {folder} from epoch 3) on 2 idle cores (within ~2x): fit "
            f"~{format_seconds(left['fit'])}") in " ".join(r.output.split())
    assert_same_store(ref, stopped)


def test_overwrite_replaces(tmp_path, write_catalog):
    exp = experiment_from_file(write_catalog(tmp_path, steps=8, samples=4))
    r1 = run_experiment(exp, data_dir=tmp_path)
    other = experiment_from_file(write_catalog(tmp_path, steps=8, samples=5, name="b.yaml"))
    r2 = run_experiment(other, data_dir=tmp_path, overwrite=True)
    assert r2.store == r1.store and ridgexr.open_dataset(r2.store).sizes["sample"] == 5


def test_lock_refuses_second_writer_and_takes_over_stale(tmp_path, write_catalog):
    exp = experiment_from_file(write_catalog(tmp_path, steps=8, samples=4))
    store = resolve_store(exp, tmp_path)
    with StoreLock(store):
        with pytest.raises(StoreLockedError, match="being written by pid"):
            run_experiment(exp, store=store)
    # a lock file left by a dead process (its content is only a note) does not block
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    lock = StoreLock(store)
    lock.path.write_text('{"pid": %d, "host": "%s", "since": "x"}' % (proc.pid, os.uname().nodename))
    res = run_experiment(exp, store=store)
    assert res.cells_run == 6
    with StoreLock(store):  # released by the run
        pass


def test_diverged_trajectories_are_flagged(tmp_path, write_catalog):
    exp = experiment_from_file(write_catalog(tmp_path, steps=8, samples=4))
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    layout = plan_layout(exp, train)
    store = tmp_path / "div.zarr"
    create_store(store, layout, train, {"config_hash": "x"})
    task = CellTask(index=(0, 0), labels={"schedule": "1", "width": 8}, diagnostics={},
                    state=np.full((2, 8), 1e306))  # a random-feature readout that diverges
    run_cell(exp.model_dump_json(), str(store), layout, task)
    ds = ridgexr.open_dataset(store)
    cell = ds.isel(schedule=0, width=0)
    assert cell.diverged.values.all()
    assert np.isnan(cell.ridge_distance.values[:, -1]).all()  # no geometry for non-finite states
    assert bool(cell.cell_complete)


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_store(small_run, tmp_path):
    exp, res = small_run
    dist = run_experiment(exp, data_dir=tmp_path, scheduler="local", n_workers=2)
    a, b = ridgexr.open_dataset(res.store), ridgexr.open_dataset(dist.store)
    for name in ("trajectory", "ridge_projection", "residual_normal", "ridge_converged", "loss", "cell_complete"):
        np.testing.assert_array_equal(a[name].values, b[name].values)


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_equals_uninterrupted(tmp_path, write_catalog):
    cat = write_catalog(tmp_path, steps=150, samples=64)
    exp = experiment_from_file(cat)
    ref = run_experiment(exp, store=tmp_path / "ref.zarr")
    store = tmp_path / "killed.zarr"
    proc = subprocess.Popen([sys.executable, "-c", RUN_SCRIPT, str(cat), str(store)])
    marks = store / "cell_complete" / "c"
    while proc.poll() is None and not (marks.exists() and any(marks.rglob("*"))):  # the first cell's mark, however
        time.sleep(0.05)  # long the loaded machine takes to write it
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ds = ridgexr.open_dataset(store)
    n_done = int(ds.cell_complete.sum())
    assert 1 <= n_done < 6, n_done  # killed mid-run
    res = run_experiment(exp, store=store)  # stale lock taken over, incomplete cells redone
    assert res.cells_skipped == n_done and res.cells_run == 6 - n_done
    assert_same_store(ref.store, store)  # every variable, coordinates included


@pytest.mark.slow
def test_existing_cluster_by_address_and_env(small_run, tmp_path, monkeypatch):
    from dask.distributed import LocalCluster

    exp, res = small_run
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        by_address = run_experiment(exp, data_dir=tmp_path / "a", scheduler=cluster.scheduler_address)
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", cluster.scheduler_address)
        by_env = run_experiment(exp, data_dir=tmp_path / "b")
    ref = ridgexr.open_dataset(res.store)
    for r in (by_address, by_env):
        ds = ridgexr.open_dataset(r.store)
        assert "tcp://" in ds.attrs["provenance"]
        np.testing.assert_array_equal(ds.trajectory.values, ref.trajectory.values)


def test_the_plan_run_plan_prints_is_the_plan_the_run_executes(tmp_path, write_catalog, small_run):
    """``ridgexr run --plan`` prints :func:`ridgexr.run.plan_run`'s Plan priced from the data's shape; the run builds
    one from the data and executes it: the stages, costs, cells and store are the same, and its layout is the
    store's.  A plan priced from the shape does not run."""
    from typer.testing import CliRunner

    from ridgexr.cli import app
    from ridgexr.run import execute, plan_run
    from ridgexr.run.plan import format_seconds

    cat = write_catalog(tmp_path, steps=6, samples=4)
    exp, data = experiment_from_file(cat), tmp_path / "data"
    shown = plan_run(exp, data_dir=data, read_data=False)
    assert shown.train is None and shown.layout is None and shown.config_hash is None
    r = CliRunner().invoke(app, ["run", "--plan", str(cat), "--data-dir", str(data)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in r.output.splitlines()
            if line.startswith("│")}
    s = shown.summary()
    assert rows == {**{k: format_seconds(v) for k, v in s["stage_seconds"].items()},
                    "total": format_seconds(sum(s["stage_seconds"].values())),
                    f"sampling and observation at ridge.max_iter = {s['max_iter']}": format_seconds(s["scms_upper_seconds"])}
    flat = " ".join(r.output.split())
    assert f"({s['n_cells']} run)" in flat and f"peak memory ~{s['peak_memory'] / 2**30:.3g} GiB" in flat
    assert f"store up to {s['store_size'] / 2**30:.3g} GiB" in flat and str(s["store"]) in flat.replace(" ", "")
    with pytest.raises(ValueError, match="read_data"):
        execute(shown)
    assert plan_run(exp, data_dir=data).fate == "create"
    res = run_experiment(exp, data_dir=data)
    assert plan_run(exp, data_dir=data).fate == "resume" and plan_run(exp, data_dir=data, overwrite=True).fate == "replace"
    other = exp.model_copy(update={"n_samples": 3})
    assert plan_run(other, data_dir=data).fate == "refuse"
    with pytest.raises(ConfigMismatchError, match="different configuration"):
        run_experiment(other, data_dir=data)
    assert res.plan.summary() == s
    assert res.plan.config_hash == exp.config_hash(load_training_set(exp.dataset))
    assert res.plan.resolved.d_star == exp.d_star and res.store == s["store"] and res.cells_run == s["n_cells"]
    ds = ridgexr.open_dataset(res.store)
    layout = res.plan.layout
    assert dict(ds["cell_complete"].sizes) == dict(zip(layout.cell_dims, layout.cell_shape))
    np.testing.assert_array_equal(ds["t"].values, layout.t)
    # the module fixture's store was written by run_experiment = execute(plan_run(...)) too
    assert small_run[1].plan.layout.cell_shape == tuple(ridgexr.open_dataset(small_run[1].store)["cell_complete"].shape)
