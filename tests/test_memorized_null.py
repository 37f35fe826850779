"""The memorized share's null (ridgexr.quality.cells.memorized_null, ridgexr.run.fill_memorized_null) on a small
training-time store whose fresh draws are memorized: the stored counts against a brute-force nearest /
second-nearest count, tau_mem on the excess against does-not-memorize at every checkpoint, and the counts added to a
store written without them equal to a fresh run's, byte for byte."""

import shutil

import numpy as np
import pytest
import zarr

import ridgexr
from ridgexr import defaults
from ridgexr.analysis import training_timescales
from ridgexr.catalog.experiment import ClaimSpec
from ridgexr.claims import store_claims
from ridgexr.store import StoreDamagedError

pytestmark = pytest.mark.slow  # each test runs a small training-time entry (about 10 s on one core)

NULL = ("quality_memorized_null_count", "quality_memorized_null_draws")

# a two-point law in effect: the mixture's modes +-(1, 1) with sigma 0.05; at n_train = 2 (one training point per
# mode) every fresh draw is memorized (d1 ~ 0.07 against d2 ~ 2.8), at n_train = 4 (two per mode, 0.07 apart) few
NEAR_CATALOG = """
experiments:
  near:
    dataset:
      mixture: {dim: 2, mean: 1.0, sigma: 0.05, n: 4, seed: 0, n_population: 400}
      n_train: [2, 4]
    process: {T: 3.0, t_min: 0.01, n_steps: 10}
    model: {kind: mlp, widths: [32], epochs: [1, 100, 400], batch_size: 64, lr: 1.0e-2,
            diagnostics: {n_time: 2, n_noise: 1, n_points: 8}}
    training: {quadrature: gauss-legendre-log-t, n_time: 2, n_noise: 1}
    schedules: ["h"]
    sampler: {record_every: 10, block_steps: 2}
    ridge: {observe: false}
    n_samples: 48
    d_star: 1
    store: near.zarr
"""


@pytest.fixture(scope="module")
def near_store(tmp_path_factory, run_entry):
    """A run of NEAR_CATALOG (epochs x n_train): its path."""
    tmp = tmp_path_factory.mktemp("near")
    return run_entry(NEAR_CATALOG, tmp)[1].store


def _brute_count(fresh, train):
    """Memorized fresh draws by the full distance matrix: d1 / d2 < 1/3, nearest and second-nearest of ``train``."""
    d = np.sqrt(((fresh[:, None, :] - train[None, :, :]) ** 2).sum(-1))
    d.sort(axis=1)
    return int((d[:, 0] / d[:, 1] < defaults.MEMORIZED_RATIO).sum()), len(fresh)


def test_the_stored_null_is_the_brute_force_count_of_memorized_fresh_draws(near_store):
    ds = ridgexr.open_dataset(near_store)
    fresh = ds["population_data"].values
    train = ds["train_data"].values
    counts = {}
    for n in ds.n_train.values:
        k0, n0 = _brute_count(fresh, train[:n])
        cells = ds[list(NULL)].sel(n_train=n)
        assert (cells[NULL[0]] == k0).all() and (cells[NULL[1]] == n0).all()  # every epoch: the same set
        counts[int(n)] = k0 / n0
    assert counts[2] > 0.99 and counts[4] < 0.9  # fresh draws memorized where one training point sits per mode
    assert ds[NULL[0]].attrs["units"] == "1" and "d1/d2 < 1/3" in ds[NULL[0]].attrs["long_name"]


def test_tau_mem_and_does_not_memorize_agree_where_fresh_draws_are_memorized(near_store):
    """At n_train = 2 the network's samples are memorized by d1/d2 (raw f_mem crosses the threshold by the last
    checkpoint) because fresh draws of the law are too: tau_mem on the excess is not reached, and at every
    checkpoint does-not-memorize's interval is tau_mem's and its verdict what tau_mem says."""
    ds = ridgexr.open_dataset(near_store)
    out = training_timescales(ds, n_boot=200).compute()
    raw = training_timescales(ds.drop_vars(list(NULL)), n_boot=200).compute()
    assert out.attrs["tau_mem_measure"] == "f_mem - f_fresh" and raw.attrs["tau_mem_measure"] == "f_mem"
    two = dict(n_train=2, schedule="h", width=32)
    assert not bool(raw["tau_mem_censored"].sel(two))  # the raw rule: "has memorized"
    assert float(raw["f_mem_low"].sel(epoch=400, **two)) > defaults.MEMORIZED_SHARE
    assert bool(out["tau_mem_censored"].sel(two))  # the excess: not reached
    claims = store_claims(ds, [ClaimSpec(kind="does-not-memorize")])
    assert len(claims) == ds.sizes["epoch"] * ds.sizes["n_train"]
    for c in claims:
        cell = out.sel({k: v for k, v in c.labels.items() if k in out.dims})
        np.testing.assert_allclose([c.estimate, c.low, c.high], [float(cell["f_mem_excess"]),
                                                                 float(cell["f_mem_excess_low"]),
                                                                 float(cell["f_mem_excess_high"])])
        tau = out.sel({k: v for k, v in c.labels.items() if k in out.dims and k != "epoch"})
        reached = (not bool(tau["tau_mem_censored"])) and c.labels["epoch"] >= float(tau["tau_mem"])
        assert c.evidence == ("disagrees" if reached else "agrees"), (c.labels, c.evidence)


def test_the_null_added_to_a_store_written_without_it_is_a_fresh_runs(near_store, tmp_path, run_entry, monkeypatch):
    """A store written as schema 1.9 wrote it (no null: the two variables out of the table), one of its cells left
    unfinished, filled in by fill_memorized_null: its complete cells get the fresh run's values and digests (every
    chunk the same bytes), verify finds nothing, the store says schema 1.10, filling again changes nothing, and a
    resume by this ridgexr finishes it as the fresh run is."""
    from ridgexr import schema
    from ridgexr.run import fill_memorized_null, verify
    from ridgexr.store import layout
    from ridgexr.store.update import clear_completion

    with monkeypatch.context() as m:
        for name in NULL:
            m.delitem(schema.VARIABLES, name)
        m.setattr(layout, "SCHEMA_VERSION", "1.9")
        old = run_entry(NEAR_CATALOG, tmp_path)[1].store
    before = ridgexr.open_dataset(old)
    assert before.attrs["schema_version"] == "1.9" and not any(v in before for v in NULL)
    left = {"schedule": "h", "width": 32, "epoch": 400, "n_train": 2}
    clear_completion(old, [left])
    report = fill_memorized_null(old)
    assert report == {"cells": 5, "training_sets": 2, "schema_version": schema.SCHEMA_VERSION}
    fresh, filled = (zarr.open_group(str(p), mode="r") for p in (near_store, old))
    done = np.asarray(filled["cell_complete"][...], dtype=bool)
    assert int(done.sum()) == 5
    for name in (*NULL, "cell_digest"):
        np.testing.assert_array_equal(filled[name][...][done], fresh[name][...][done], err_msg=name)
    assert verify(old).damage == [] and verify(old).schema == []
    ds = ridgexr.open_dataset(old)
    assert ds[NULL[0]].attrs["long_name"] == schema.VARIABLES[NULL[0]].long_name
    assert fill_memorized_null(old) == report
    np.testing.assert_array_equal(zarr.open_group(str(old), mode="r")["cell_digest"][...][done],
                                  fresh["cell_digest"][...][done])
    run_entry(NEAR_CATALOG, tmp_path)  # resumed: the unfinished cell
    resumed = zarr.open_group(str(old), mode="r")
    for name in (*NULL, "cell_digest", "cell_complete"):
        np.testing.assert_array_equal(resumed[name][...], fresh[name][...], err_msg=name)
    # a complete cell whose chunk was swapped with another cell's: refused before anything is written
    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(old, damaged)
    chunks = sorted((damaged / "quality_sliced_wasserstein").rglob("c/*/*/*/*"))
    swapped = next(c for c in chunks if c.read_bytes() != chunks[0].read_bytes())
    swapped.write_bytes(chunks[0].read_bytes())
    stamp = {p: p.stat().st_mtime_ns for p in (damaged / NULL[0]).rglob("*") if p.is_file()}
    with pytest.raises(StoreDamagedError, match="ridgexr verify"):
        fill_memorized_null(damaged)
    assert {p: p.stat().st_mtime_ns for p in (damaged / NULL[0]).rglob("*") if p.is_file()} == stamp
