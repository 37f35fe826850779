"""Opening stores: time as an index, CF labels, masking without changing dtypes, netCDF round trips."""

import warnings

import numpy as np
import pytest
import xarray as xr

import ridgexr
from ridgexr import analysis
from ridgexr.catalog import experiment_from_file
from ridgexr.run import run_experiment
from ridgexr.store.layout import StoreLayout
from ridgexr.store.lifecycle import create_store


@pytest.fixture(scope="module")
def store(tmp_path_factory, write_catalog):
    tmp = tmp_path_factory.mktemp("reader")
    return run_experiment(experiment_from_file(write_catalog(tmp, steps=12, samples=8)), data_dir=tmp).store


def test_time_is_an_index_and_windows_follow_sampling_order(store):
    ds = ridgexr.open_dataset(store)
    t = ds.t.values
    assert "t" in ds.indexes and isinstance(ds.t.data, np.ndarray)  # loaded eagerly
    assert np.all(np.diff(t) < 0)  # sampling order: t decreases along step
    k = int(np.argmin(np.abs(t - 0.1)))
    assert int(ds.sel(t=0.1, method="nearest").step) == k
    window = ds.sel(t=slice(0.5, 0.05))  # from the larger time to the smaller
    np.testing.assert_array_equal(window.t.values, t[(t <= 0.5) & (t >= 0.05)])
    late = ds.where(ds.t < 0.5, drop=True)
    np.testing.assert_array_equal(late.t.values, t[t < 0.5])
    np.testing.assert_array_equal(late.trajectory.values, ds.trajectory.values[..., t < 0.5, :])


def test_analyses_accept_t_where_they_accept_step(store):
    ds = ridgexr.open_dataset(store)
    k = int(np.argmin(np.abs(ds.t.values - 0.2)))
    by_t = analysis.mode_counts(ds, t=0.2).compute()
    by_step = analysis.mode_counts(ds, step=k).compute()
    xr.testing.assert_identical(by_t, by_step)
    a = analysis.memorization_fraction(ds, t=0.2).compute()
    b = analysis.memorization_fraction(ds, step=k).compute()
    xr.testing.assert_identical(a, b)
    with pytest.raises(ValueError, match="`t` must be > 0"):
        analysis.mode_counts(ds, t=-1.0)


def test_every_coordinate_is_labelled_and_attrs_are_strings(store):
    ds = ridgexr.open_dataset(store)
    for name in ds.coords:  # quantities have units; names, counts and indices none (CF: dimensionless may omit)
        assert ds[name].attrs.get("long_name"), name
        assert bool(ds[name].attrs.get("units")) == (name in ("t", "alpha", "h", "tau")), name
    for name in ds.data_vars:  # the digest is a checksum, not a quantity: no units
        assert ds[name].attrs.get("long_name") and ("units" in ds[name].attrs) == (name != "cell_digest"), name
    assert ds.attrs["Conventions"].startswith("CF-") and "He, Qiu & Tao" in ds.attrs["references"]
    assert all(isinstance(v, (str, int, float)) for v in ds.attrs.values())  # no dict attrs
    np.testing.assert_array_equal(ds.train.values, np.arange(ds.sizes["train"]))
    assert ds.ridge.config["n_samples"] == 8 and ds.ridge.provenance["device"] == "cpu"


def test_slice_to_netcdf_round_trip(store, tmp_path):
    ds = ridgexr.open_dataset(store)
    part = ds.sel(schedule="h2", width=16).sel(t=slice(1.0, 0.05)).isel(sample=slice(0, 3))
    part.to_netcdf(tmp_path / "part.nc")
    back = xr.open_dataset(tmp_path / "part.nc").load()
    for name in part.data_vars:
        np.testing.assert_array_equal(back[name].values, part[name].values, err_msg=name)
        assert back[name].dtype == part[name].dtype, name
    np.testing.assert_array_equal(back.t.values, part.t.values)


def test_plain_open_zarr_is_silent_and_consolidated(store):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = xr.open_zarr(store)
    assert "trajectory" in plain


def test_complete_only_masks_without_changing_dtypes(tmp_path):
    layout = StoreLayout(coords=(("schedule", ("1",)), ("width", (4, 8))), n_samples=2, t=np.array([1.0, 0.1]),
                         sampler_step=np.arange(2), d=2, block_steps=2, sample_chunk=2)
    path = tmp_path / "s.zarr"
    create_store(path, layout, np.zeros((2, 2)), {})
    from ridgexr.store.write import write_block, write_cell_end
    from ridgexr.schema import CELL_DIAGNOSTICS

    vals = {n: np.ones((2, 2, 2)) for n in ("trajectory", "ridge_projection", "residual_normal", "residual_tangent")}
    vals |= {n: np.ones((2, 2)) for n in ("ridge_distance", "ridge_residual", "normal_curvature",
                                          "residual_normal_rank", "residual_tangent_rank", "projected_gradient",
                                          "projected_gradient_tmin", "projected_gradient_scaled",
                                          "projected_gradient_tmin_scaled", "frame_gap_relative",
                                          "ridge_distance_resolved")}
    vals["ridge_converged"] = np.ones((2, 2), dtype=bool)
    vals |= {n: np.zeros((2, 2), dtype=bool) for n in ("frame_degenerate", "ridge_degenerate")}
    vals["resolved_rank"] = np.ones((2, 2), dtype=np.int16)
    for cell in ((0, 0), (0, 1)):
        write_block(path, layout, cell, 0, vals)
    write_cell_end(path, layout, (0, 1), np.array([True, False]), {n: 1.0 for n in CELL_DIAGNOSTICS})
    full = ridgexr.open_dataset(path)
    masked = ridgexr.open_dataset(path, complete_only=True)
    for name in full.data_vars:
        assert masked[name].dtype == full[name].dtype, name
    assert not masked.ridge_converged.sel(width=4).values.any() and masked.ridge_converged.sel(width=8).values.all()
    assert np.isnan(masked.trajectory.sel(width=4).values).all()
    np.testing.assert_array_equal(masked.trajectory.sel(width=8).values, 1.0)


def test_a_complete_cell_with_a_missing_chunk_is_never_read_as_fill_values(store, tmp_path):
    """Issue 29, item 3: ``open_dataset`` (and ``complete_only``), ``info`` and ``run`` list the chunks of every
    complete cell; one that misses a chunk is named in a warning and treated as incomplete."""
    import shutil

    from typer.testing import CliRunner

    from ridgexr.cli import app
    from ridgexr.store import StoreWarning

    path = tmp_path / "s.zarr"
    shutil.copytree(store, path)
    clean = ridgexr.open_dataset(store)
    (path / "diverged" / "c" / "1" / "0" / "0").unlink()  # schedule h2, width 8: fill value False
    (path / "trajectory" / "c" / "1" / "0" / "0" / "1" / "0").unlink()
    with pytest.warns(StoreWarning, match=r"cell schedule=h2 width=8 is marked complete but chunks of diverged, "
                                          r"trajectory are missing"):
        ds = ridgexr.open_dataset(path, complete_only=True)
    assert ds.cell_complete.values.sum() == clean.cell_complete.values.sum() - 1
    assert not bool(ds.cell_complete.sel(schedule="h2", width=8))
    assert np.isnan(ds.trajectory.sel(schedule="h2", width=8).values).all()  # masked, not half fill values
    others = ds.drop_sel(schedule="h2")
    np.testing.assert_array_equal(others.trajectory.values, clean.drop_sel(schedule="h2").trajectory.values)
    res = CliRunner().invoke(app, ["info", str(path)])
    assert res.exit_code == 0 and "schedule=h2 width=8 is marked complete but" in res.output.replace("\n", "")
    exp = experiment_from_file(next(store.parent.glob("*.yaml")))
    with pytest.warns(StoreWarning, match="they are recomputed"):
        again = run_experiment(exp, store=path)
    assert again.cells_run == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)
        fixed = ridgexr.open_dataset(path)
    for name in clean.variables:
        np.testing.assert_array_equal(fixed[name].values, clean[name].values, err_msg=name)


def _fake_store(path, **attrs):
    """A folder that reads as a ridgexr store's root (enough for name resolution, not for opening)."""
    import json

    path.mkdir(parents=True)
    (path / "zarr.json").write_text(json.dumps({"attributes": {"schema_version": "1.7", **attrs}}))
    return path


def test_a_store_from_a_file_catalog_opens_by_the_entry_name_it_records(store, tmp_path):
    import shutil

    from ridgexr.reader import store_path

    # `tiny` is defined only by the file given to the run (not a catalog of the data folder, not built in)
    data = store.parent
    assert "tiny" not in ridgexr.open_catalog(data_dir=data).experiments
    ds = ridgexr.open_dataset("tiny", data_dir=data)
    assert ds.attrs["experiment"] == "tiny" and ds.attrs["config_hash"] == xr.open_zarr(store).attrs["config_hash"]
    # matched on the name the store records, not its folder's name
    elsewhere = tmp_path / "data"
    shutil.copytree(store, elsewhere / "runs" / "renamed.zarr")
    assert store_path("tiny", data_dir=elsewhere) == elsewhere / "runs" / "renamed.zarr"
    shutil.copytree(store, elsewhere / "again.zarr")  # two stores record it: ambiguous, both named
    with pytest.raises(ValueError, match=r"'tiny' names 2 stores .*again.zarr.*renamed.zarr"):
        store_path("tiny", data_dir=elsewhere)
    # a store that records no entry name is found as <data folder>/<name>.zarr
    bare = _fake_store(tmp_path / "bare" / "plain.zarr")
    assert store_path("plain", data_dir=bare.parent) == bare
    # a catalog entry still resolves to its own store, whatever another store records
    _fake_store(tmp_path / "shadow" / "mine.zarr", experiment="two-points")
    with pytest.raises(FileNotFoundError, match=r"no ridgexr store for 'two-points' at .*shadow/two-points.zarr"):
        store_path("two-points", data_dir=tmp_path / "shadow")
    with pytest.raises(FileNotFoundError, match="neither a ridgexr store nor a catalog entry"):
        store_path("nothing", data_dir=tmp_path / "shadow")
