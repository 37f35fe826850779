"""The Zarr v3 store: schema from a layout, region writes, completion marks, JSON attrs, the lock."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgexr import OU
from ridgexr.store import StoreLock, StoreLockedError, cells, complete_cells, json_attr, open_store
from ridgexr.schema import CELL_DIAGNOSTICS, SCHEMA_VERSION
from ridgexr.store.layout import StoreLayout
from ridgexr.store.lifecycle import create_store
from ridgexr.store.write import write_block, write_cell_end

STEP_NAMES = ("trajectory", "ridge_projection", "ridge_distance", "ridge_residual", "ridge_converged",
              "normal_curvature", "residual_normal", "residual_tangent", "frame_degenerate", "ridge_degenerate",
              "resolved_rank", "residual_normal_rank", "residual_tangent_rank")


def small_layout(**kw):
    t = np.array([1.0, 0.5, 0.25, 0.1, 0.05])
    base = dict(coords=(("schedule", ("1", "exact")), ("width", (4, 8))), n_samples=3, t=t, sampler_step=np.arange(5),
                d=2, block_steps=2, sample_chunk=3)
    return StoreLayout(**{**base, **kw})


def block_values(rng, B, n, d):
    return {
        "trajectory": rng.normal(size=(B, n, d)), "ridge_projection": rng.normal(size=(B, n, d)),
        "ridge_distance": rng.random((B, n)), "ridge_residual": rng.random((B, n)),
        "ridge_converged": rng.random((B, n)) > 0.5, "normal_curvature": -rng.random((B, n)),
        "residual_normal": rng.normal(size=(B, n, d)), "residual_tangent": rng.normal(size=(B, n, d)),
        "frame_degenerate": rng.random((B, n)) > 0.8, "ridge_degenerate": rng.random((B, n)) > 0.8,
        "resolved_rank": rng.integers(0, d + 1, (B, n)).astype(np.int16),
        "residual_normal_rank": rng.random((B, n)), "residual_tangent_rank": rng.random((B, n)),
        **{name: rng.random((B, n)) for name in ("projected_gradient", "projected_gradient_tmin",
                                                 "projected_gradient_scaled", "projected_gradient_tmin_scaled",
                                                 "frame_gap_relative", "ridge_distance_resolved")},
    }


def test_template_schema_coords_and_chunks(tmp_path):
    layout = small_layout(d_star_alt=(0,))
    train = np.array([[-3.0, 0.0], [3.0, 0.0]])
    create_store(tmp_path / "s.zarr", layout, train, {"config": json.dumps({"a": 1})})
    ds = open_store(tmp_path / "s.zarr")
    assert zarr.open_group(str(tmp_path / "s.zarr"), mode="r").metadata.zarr_format == 3
    assert ds.attrs["schema_version"] == SCHEMA_VERSION
    assert ds.trajectory.dims == ("schedule", "width", "sample", "step", "dim")
    assert ds.trajectory.encoding["chunks"] == (1, 1, 3, 2, 2)  # one cell, one block of steps per chunk
    np.testing.assert_array_equal(ds.alpha.values, OU().alpha(layout.t))
    np.testing.assert_array_equal(ds.h.values, OU().h(layout.t))
    np.testing.assert_array_equal(ds.train_data.values, train)
    assert set(CELL_DIAGNOSTICS) <= set(ds.data_vars)
    assert ds.final_ridge_residual_alt.dims[-1] == "d_star_alt"
    # nothing written yet: floats read NaN, marks False
    assert np.isnan(ds.trajectory.values).all() and not ds.cell_complete.values.any()
    assert cells(ds) == [{"schedule": s, "width": w} for s in ("1", "exact") for w in (4, 8)]


def test_cell_writer_writes_the_same_chunks_as_write_block_and_reports_errors(tmp_path, rng):
    """CellWriter (background thread, bounded queue) = write_block, chunk for chunk; a failing write is raised
    to the caller, not lost; every chunk of the written region is on disk (verify needs them)."""
    from ridgexr.store import verify_store
    from ridgexr.store.write import CellWriter

    layout = small_layout()
    blocks = [(0, block_values(rng, 2, 3, 2)), (2, block_values(rng, 2, 3, 2)), (4, block_values(rng, 1, 3, 2))]
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    for p in (a, b):
        create_store(p, layout, np.zeros((2, 2)), {})
    for start, vals in blocks:
        write_block(a, layout, (0, 1), start, vals)
    with CellWriter(b, layout, (0, 1), queue_size=1) as w:
        for start, vals in blocks:
            w.write(start, vals)
    da_, db_ = open_store(a), open_store(b)
    for name in STEP_NAMES:
        np.testing.assert_array_equal(da_[name].values, db_[name].values, err_msg=name)
    write_cell_end(b, layout, (0, 1), np.zeros(3, bool), {})
    damage, n_read = verify_store(b)
    assert damage == [] and n_read > 0
    bad = dict(blocks[0][1], trajectory=np.zeros((2, 3, 5)))  # wrong shape: the write fails in the thread
    with pytest.raises(ValueError):
        with CellWriter(b, layout, (1, 1)) as w:
            w.write(0, bad)
            w.write(2, blocks[1][1])


def test_region_writes_land_in_their_cell_and_the_mark_comes_last(tmp_path, rng):
    layout = small_layout()
    path = tmp_path / "s.zarr"
    create_store(path, layout, np.zeros((2, 2)), {})
    b0, b1, b2 = block_values(rng, 2, 3, 2), block_values(rng, 2, 3, 2), block_values(rng, 1, 3, 2)
    for start, vals in ((0, b0), (2, b1), (4, b2)):
        write_block(path, layout, (1, 0), start, vals)
    ds = open_store(path)
    assert not ds.cell_complete.values.any()  # data without the end mark: still incomplete
    cell = ds.isel(schedule=1, width=0)
    for name in STEP_NAMES:
        expected = np.concatenate([b0[name], b1[name], b2[name]])  # (step, sample, ...)
        np.testing.assert_array_equal(np.swapaxes(cell[name].values, 0, 1), expected, err_msg=name)
    assert np.isnan(ds.isel(schedule=0).trajectory.values).all()  # other cells untouched
    diag = {name: float(i) for i, name in enumerate(CELL_DIAGNOSTICS)}
    write_cell_end(path, layout, (1, 0), np.array([True, False, False]), diag, max_dropped_mass=1e-9)
    ds = open_store(path)
    assert complete_cells(ds) == [{"schedule": "exact", "width": 4}]
    assert ds.isel(schedule=1, width=0).diverged.values.tolist() == [True, False, False]
    for name, value in diag.items():
        assert float(ds[name].isel(schedule=1, width=0)) == value
    assert np.isnan(ds[CELL_DIAGNOSTICS[0]].isel(schedule=0).values).all()  # other cells untouched


def test_cell_end_checks_shapes_before_writing_anything(tmp_path):
    layout = small_layout(d_star_alt=(0,))
    path = tmp_path / "s.zarr"
    create_store(path, layout, np.zeros((2, 2)), {})
    with pytest.raises(ValueError, match="`diverged` has shape \\(4,\\); expected \\(3,\\)"):
        write_cell_end(path, layout, (0, 0), np.zeros(4, bool), {"excess_loss": 1.0},
                       final_ridge_residual_alt=np.zeros((3, 1)))
    with pytest.raises(ValueError, match="final_ridge_residual_alt"):
        write_cell_end(path, layout, (0, 0), np.zeros(3, bool), {"excess_loss": 1.0},
                       final_ridge_residual_alt=np.zeros((3, 2)))
    ds = open_store(path)
    assert not ds.cell_complete.values.any() and np.isnan(ds.excess_loss.values).all()
    write_cell_end(path, layout, (0, 1), np.ones(3, bool), {}, final_ridge_residual_alt=np.full((3, 1), 0.5))
    cell = open_store(path).isel(schedule=0, width=1)
    assert cell.diverged.values.all() and (cell.final_ridge_residual_alt.values == 0.5).all()
    assert bool(cell.cell_complete) and np.isnan(cell.excess_loss.values)  # missing diagnostics are NaN


def test_json_attr_parses_and_names_damage(tmp_path):
    ds = xr.Dataset(attrs={"provenance": json.dumps({"device": "cpu"}), "config": "{not json"})
    assert json_attr(ds, "provenance") == {"device": "cpu"}
    assert json_attr(ds, "seeds") == {}
    with pytest.raises(ValueError, match="'config' is not valid JSON"):
        json_attr(ds, "config")


def test_open_store_names_the_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no ridgexr store"):
        open_store(tmp_path / "nothing.zarr")


def test_lock_refuses_a_second_writer_and_takes_over_a_dead_ones(tmp_path):
    store = tmp_path / "s.zarr"
    with StoreLock(store):
        with pytest.raises(StoreLockedError, match="being written by pid"):
            StoreLock(store).acquire()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    lock = StoreLock(store)
    lock.path.write_text(json.dumps({"pid": proc.pid, "host": os.uname().nodename, "since": "x"}))
    with StoreLock(store) as taken:  # the note of a gone process does not block
        assert json.loads(taken.path.read_text())["pid"] == os.getpid()


def _write_cell(path, layout, cell, rng):
    for start in range(0, layout.n_steps, layout.block_steps):
        B = min(layout.block_steps, layout.n_steps - start)
        write_block(path, layout, cell, start, block_values(rng, B, layout.n_samples, layout.d))
    write_cell_end(path, layout, cell, np.zeros(layout.n_samples, bool), {})


def test_verify_passes_a_clean_store_whose_only_cell_dimension_is_model(tmp_path, rng):
    """Issue 29, item 6: the ``model`` coordinate is one store-level chunk, not a per-cell array."""
    from ridgexr.store import verify_store
    from ridgexr.store.update import consolidate

    layout = small_layout(coords=(("model", ("mine", "exact")),))
    path = tmp_path / "s.zarr"
    create_store(path, layout, np.zeros((2, 2)), {})
    for cell in [(0,), (1,)]:
        _write_cell(path, layout, cell, rng)
    consolidate(path)
    damage, n_read = verify_store(path)
    assert damage == [] and n_read > 0


def test_the_digest_ties_each_chunk_to_its_cell_and_position(tmp_path, rng):
    """Issue 29, item 8: two chunks swapped between cells decode and pass their checksums; the digest does not."""
    from ridgexr.store import verify_store
    from ridgexr.store.integrity import cell_digest

    layout = small_layout()
    path = tmp_path / "s.zarr"
    create_store(path, layout, np.zeros((2, 2)), {})
    for cell in [(0, 0), (0, 1)]:
        _write_cell(path, layout, cell, rng)
    ds = open_store(path)
    assert ds.cell_digest.dtype == np.int32
    assert int(ds.cell_digest[0, 0]) == cell_digest(path, (0, 0)) != cell_digest(path, (0, 1))
    assert verify_store(path)[0] == []
    a, b = path / "trajectory/c/0/0/0/1/0", path / "trajectory/c/0/1/0/1/0"
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    assert open_store(path).trajectory[0, 0].notnull().all()  # both decode: the checksum cannot tell
    damage, _ = verify_store(path)
    assert {(d.variable, tuple(d.cell.values())) for d in damage} == {("cell_digest", ("1", 4)),
                                                                     ("cell_digest", ("1", 8))}
    a.write_bytes(data_a)  # a chunk moved along step within its cell is found too
    b.write_bytes(data_b)
    (path / "ridge_distance/c/0/0/0/0").write_bytes((path / "ridge_distance/c/0/0/0/1").read_bytes())
    assert [(d.variable, tuple(d.cell.values())) for d in verify_store(path)[0]] == [("cell_digest", ("1", 4))]


def test_damaged_small_arrays_and_metadata_are_named(tmp_path, rng):
    """Issue 29, item 7: a flipped byte in ``cell_complete`` or ``t``, a garbled array ``zarr.json``: the
    error names the array and the file."""
    import shutil

    from ridgexr.store import StoreDamagedError

    layout = small_layout()
    clean = tmp_path / "clean.zarr"
    create_store(clean, layout, np.zeros((2, 2)), {})
    _write_cell(clean, layout, (0, 1), rng)
    for name, rel in [("cell_complete", "cell_complete/c/0/1"), ("t", "t/c/0"), ("alpha", "alpha/c/0"),
                      ("h", "h/c/0"), ("sampler_step", "sampler_step/c/0")]:  # issue 44, item 5: alpha was 't'
        path = tmp_path / f"{name}.zarr"
        shutil.copytree(clean, path)
        data = bytearray((path / rel).read_bytes())
        data[len(data) // 2] ^= 0x10
        (path / rel).write_bytes(bytes(data))
        with pytest.raises(StoreDamagedError, match=rf"array '{name}'.* chunk file '{path / rel}'"):
            open_store(path)
    path = tmp_path / "meta.zarr"
    shutil.copytree(clean, path)
    (path / "loss" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "arr')
    with pytest.raises(StoreDamagedError, match=rf"metadata file '{path / 'loss' / 'zarr.json'}' is damaged"):
        open_store(path)


def test_the_schema_document_lists_every_step_variable_and_the_current_version():
    """docs/schema.md is the versioned schema: its title and ``schema_version`` give :data:`SCHEMA_VERSION`, its
    history has an entry for it naming every array that version added (:data:`ridgexr.schema.SINCE`), and every
    per-step variable has a row."""
    import re
    from pathlib import Path

    from ridgexr.schema import SINCE, STEP_VARIABLES

    text = (Path(__file__).resolve().parents[1] / "docs" / "schema.md").read_text()
    assert f"# Store schema (version {SCHEMA_VERSION})" in text and f'`schema_version` = `"{SCHEMA_VERSION}"`' in text
    rows = set(re.findall(r"^\| `(\w+)`", text, flags=re.M)) | set(re.findall(r"^\| `\w+`, `(\w+)`", text, flags=re.M))
    assert set(STEP_VARIABLES) <= rows, set(STEP_VARIABLES) - rows
    entry = re.search(rf"^- {re.escape(SCHEMA_VERSION)} \(.*?(?=^- )", text, flags=re.M | re.S)
    assert entry is not None
    assert all(f"`{name}`" in entry.group(0) for name, v in SINCE.items() if v == SCHEMA_VERSION)


def test_a_store_with_a_damaged_root_zarr_json_is_named(tmp_path):
    """Issue 44, item 3: truncated or deleted root metadata: the error names the file (not 'neither a ridgexr store
    nor a catalog entry')."""
    import shutil

    from ridgexr.reader import store_path
    from ridgexr.store import StoreDamagedError
    from ridgexr.store.lifecycle import damaged_root

    clean = tmp_path / "clean.zarr"
    create_store(clean, small_layout(), np.zeros((2, 2)), {})
    for case, damage in [("truncated", lambda f: f.write_bytes(f.read_bytes()[:40])), ("deleted", lambda f: f.unlink())]:
        path = tmp_path / f"{case}.zarr"
        shutil.copytree(clean, path)
        damage(path / "zarr.json")
        assert damaged_root(path) is not None
        with pytest.raises(StoreDamagedError, match=rf"root metadata file '{path / 'zarr.json'}' is "
                                                    rf"{'damaged' if case == 'truncated' else 'missing'}"):
            store_path(path)
    assert damaged_root(clean) is None and damaged_root(tmp_path) is None  # a store, or a folder of something else


@pytest.mark.parametrize("name, key, value", [("trajectory", "scale_factor", 2.0), ("resolved_rank", "_FillValue", 1),
                                              ("t", "add_offset", 1.0), ("ridge_converged", "dtype", "int8")])
def test_attributes_that_change_decoded_values_are_damage_and_repaired(tmp_path, rng, name, key, value):
    """Issue 44, item 4: a value-changing attribute added to an array's zarr.json differs from the schema (verify
    once said ok and rebuilt the consolidated metadata from it); the repair restores the file bit for bit."""
    import shutil

    from ridgexr.store.integrity import check_schema, repair_schema
    from ridgexr.store.update import consolidate

    path, ref = tmp_path / "s.zarr", tmp_path / "ref.zarr"
    create_store(path, small_layout(), np.zeros((2, 2)), {})
    _write_cell(path, small_layout(), (0, 1), rng)
    consolidate(path)
    shutil.copytree(path, ref)
    before = (path / name / "zarr.json").read_bytes()
    meta = json.loads(before)
    meta["attributes"][key] = value
    (path / name / "zarr.json").write_text(json.dumps(meta))
    damage = check_schema(path, ref)
    assert [d.variable for d in damage] == [name] and f"{key}={value!r}" in damage[0].reason, damage
    assert repair_schema(path, ref, damage) == [name]
    assert (path / name / "zarr.json").read_bytes() == before and check_schema(path, ref) == []


def test_a_variable_added_to_the_table_reaches_template_writer_reader_verify_and_size_bound(tmp_path, rng,
                                                                                            monkeypatch, write_catalog):
    """Issue 43: adding a stored variable is one entry of :data:`ridgexr.schema.VARIABLES` (and the code
    that computes it).  A per-step variable added here only is in the template (dims, chunks, attributes), is
    required of every block and written by it, reads back, is checked by verify and the cell digest, is in
    observe's empty block, and enters the store-size bound by one chunk file per block of each cell."""
    import math

    from ridgexr.catalog import experiment_from_file
    from ridgexr.run.plan import count_run_cells, estimate_resources
    from ridgexr import units
    from ridgexr.store import verify_store
    from ridgexr.store.integrity import cell_digest
    from ridgexr import schema as table

    cat = write_catalog(tmp_path, steps=10, samples=8)
    exp = experiment_from_file(cat)
    bound_before = estimate_resources(exp, (2, 2))["store_size"]
    extra = table.Variable("ridge_extra", "step", "a variable of this test", units.DATA, since=SCHEMA_VERSION)
    monkeypatch.setitem(table.VARIABLES, extra.name, extra)

    layout, path = small_layout(), tmp_path / "s.zarr"
    create_store(path, layout, np.zeros((2, 2)), {})
    ds = open_store(path)
    assert ds["ridge_extra"].dims == ("schedule", "width", "sample", "step")
    assert ds["ridge_extra"].encoding["chunks"] == (1, 1, 3, 2) and np.isnan(ds["ridge_extra"].values).all()
    assert ds["ridge_extra"].attrs == {"long_name": "a variable of this test", "units": units.DATA}
    values = block_values(rng, 2, 3, 2)
    with pytest.raises(ValueError, match=r"block values lack \['ridge_extra'\]"):
        write_block(path, layout, (0, 1), 0, values)
    with pytest.raises(ValueError, match=r"block value 'ridge_extra' has shape \(2, 2\); expected \(2, 3\)"):
        write_block(path, layout, (0, 1), 0, values | {"ridge_extra": np.zeros((2, 2))})
    written = {}
    for start in range(0, 5, 2):
        B = min(2, 5 - start)
        written[start] = rng.random((B, 3))
        write_block(path, layout, (0, 1), start, block_values(rng, B, 3, 2) | {"ridge_extra": written[start]})
    write_cell_end(path, layout, (0, 1), np.zeros(3, dtype=bool), {})
    got = open_store(path)["ridge_extra"].values[0, 1]  # (sample, step)
    np.testing.assert_array_equal(got, np.concatenate([written[s] for s in sorted(written)]).T)
    assert verify_store(path)[0] == []
    digest = cell_digest(path, (0, 1))
    (path / "ridge_extra" / "c" / "0" / "1" / "0" / "2").unlink()  # its chunk of steps [4, 5)
    assert cell_digest(path, (0, 1)) != digest
    assert [(d.variable, d.cell) for d in verify_store(path)[0]] == [("ridge_extra", {"schedule": "1", "width": 8})]
    assert table.empty_step_values(2, 3, 2)["ridge_extra"].shape == (2, 3)

    S, bs, k = exp.n_samples, exp.sampler.block_steps, len(exp.cell_coords())
    n_rec = math.ceil(exp.process.n_steps / exp.sampler.record_every) + 1
    raw = 8.0 * min(S, 512) * bs  # one float64 chunk of (sample_chunk, block_steps)
    per_file = 4096 * math.ceil((raw + raw / 256 + 128) / 4096) + 4096 * (k + 3)  # blocks and k + 2 folder levels
    grew = estimate_resources(exp, (2, 2))["store_size"] - bound_before
    assert grew == count_run_cells(exp) * math.ceil(n_rec / bs) * per_file, grew


def test_the_store_package_exports_what_a_user_needs():
    """``ridgexr.store`` exports at most 20 names, each a plain entry of ``__all__`` (no comments in it) that resolves;
    the lifecycle's internals are not among them and are not attributes of the package."""
    import ast
    import tokenize

    import ridgexr.store as store

    assert len(store.__all__) <= 20 and len(set(store.__all__)) == len(store.__all__)
    assert all(callable(getattr(store, name)) for name in store.__all__)  # functions and classes, no constants
    assert set(store.__all__) == {n for n in vars(store) if not n.startswith("_")} - {  # nothing else on the package
        "integrity", "layout", "lifecycle", "lock", "opening", "record", "update", "write"}
    path = store.__file__
    (node,) = [n for n in ast.parse(open(path).read()).body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"]
    with open(path, "rb") as f:
        comments = [t for t in tokenize.tokenize(f.readline) if t.type == tokenize.COMMENT
                    and node.lineno <= t.start[0] <= node.end_lineno]
    assert not comments, comments
    for internal in ("SWAP_NAME", "IN_PROCESS", "journal_path", "LOCK_NAME", "create_staging", "commit_staging"):
        assert internal not in store.__all__
        with pytest.raises(AttributeError):
            getattr(store, internal)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_selection_of_cells_is_the_cells_whose_labels_it_names(data):
    """``StoreLayout.select`` against a brute-force filter of every run cell: labels given as values or as their text
    (how ``--cells`` passes them), over any subset of the cell dims and of their labels, masked cells never chosen."""
    schedules = ("1", "h", "h2", "exact")
    widths = (4, 8, 16)
    taus = (100.0, float("inf"))
    k = [data.draw(st.integers(1, len(v)), label=name) for name, v in (("s", schedules), ("w", widths), ("t", taus))]
    coords = (("schedule", schedules[:k[0]]), ("width", widths[:k[1]]), ("tau", taus[:k[2]]))
    every = list(np.ndindex(*(len(v) for _, v in coords)))
    applies = tuple(data.draw(st.lists(st.sampled_from(every), min_size=1, unique=True), label="applies"))
    lay = small_layout(coords=coords, applies=applies)
    where = {}
    for name, values in coords:
        if data.draw(st.booleans(), label=f"select {name}"):
            picked = data.draw(st.lists(st.sampled_from(values), min_size=1, unique=True), label=name)
            as_text = data.draw(st.booleans(), label=f"{name} as text")
            where[name] = [str(v) for v in picked] if as_text else picked
    expected = [idx for idx in lay.cells()
                if all(lay.cell_labels(idx)[name] in [type(lay.cell_labels(idx)[name])(v) for v in wanted]
                       for name, wanted in where.items())]
    assert lay.select(where) == expected
    assert lay.select(None) == lay.cells() == sorted(applies)
