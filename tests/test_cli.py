import asyncio
import sys

import pytest
from typer.testing import CliRunner

import ridgexr
from ridgexr.cli import app

runner = CliRunner()


def test_demo_prints_summary():
    r = runner.invoke(app, ["demo", "--n-points", "200"])
    assert r.exit_code == 0, r.output
    assert "on ridge" in r.output and "100.0%" in r.output


def test_run_info_list(tmp_path, write_catalog):
    cat = write_catalog(tmp_path, steps=10, samples=8)
    r = runner.invoke(app, ["run", str(cat), "--data-dir", str(tmp_path / "data")])
    assert r.exit_code == 0, r.output
    store = tmp_path / "data" / "tiny.zarr"
    assert "store:" in r.output and str(store) in r.output.replace("\n", "")
    assert "ran 6 cell(s)" in r.output
    # not a terminal: a plain progress line per tenth of the cells (a log keeps only a live bar's last frame)
    assert all(f"cells: {k}/6 (" in r.output for k in range(1, 7)), r.output
    # and the fit's first message (later ones at most once a minute): a stage without a count
    fitting = [line for line in r.output.splitlines() if line.startswith("fitting models: ")]
    assert len(fitting) == 1 and fitting[0].endswith(" s)"), r.output
    ds = ridgexr.open_dataset(store)
    assert bool(ds.cell_complete.all())
    r2 = runner.invoke(app, ["run", str(cat), "--data-dir", str(tmp_path / "data")])
    assert "kept 6 complete" in r2.output
    r3 = runner.invoke(app, ["info", str(store)])
    assert r3.exit_code == 0 and "complete cells: 6 of 6" in r3.output
    r4 = runner.invoke(app, ["list"])
    assert r4.exit_code == 0 and "two-points" in r4.output


def test_cli_errors_name_the_problem(tmp_path, write_catalog):
    r = runner.invoke(app, ["run", "no-such-experiment"])
    assert r.exit_code != 0 and "no-such-experiment" in r.output
    cat = write_catalog(tmp_path, steps=5, samples=4)
    r = runner.invoke(app, ["run", str(cat), "--device", "tpu"])
    assert r.exit_code != 0 and "--device" in r.output
    r = runner.invoke(app, ["info", str(tmp_path / "nothing.zarr")])
    assert r.exit_code == 2 and "neither a ridgexr store nor a catalog entry" in r.output


def test_entry_names_resolve_in_the_data_folder_and_missing_stores_say_where(tmp_path, write_catalog, monkeypatch):
    cat = write_catalog(tmp_path, steps=5, samples=4)
    data = tmp_path / "elsewhere"
    r = runner.invoke(app, ["run", str(cat), "--data-dir", str(data)])
    assert r.exit_code == 0 and (data / "tiny.zarr" / "zarr.json").is_file()
    # an entry name from an extra catalog file, with the data folder given three ways
    # the store records its entry: the name opens it without the catalog file that defined it, and `list` shows it
    by_name = runner.invoke(app, ["info", "tiny", "--data-dir", str(data)])
    assert by_name.exit_code == 0 and "complete cells: 6 of 6" in by_name.output
    listed = runner.invoke(app, ["list", "--data-dir", str(data)]).output
    assert [line.split() for line in listed.splitlines() if "tiny.zarr" in line] == [["tiny.zarr", "tiny", "not",
                                                                                      "read"]]
    missing = runner.invoke(app, ["info", "tiny", "--catalog", str(cat), "--data-dir", str(tmp_path / "empty")])
    assert missing.exit_code == 2 and str(tmp_path / "empty" / "tiny.zarr") in missing.output
    assert "--data-dir" in missing.output and "RIDGEXR_DATA" in missing.output
    found = runner.invoke(app, ["info", "tiny", "--catalog", str(cat), "--data-dir", str(data)])
    assert found.exit_code == 0 and "complete cells: 6 of 6" in found.output
    monkeypatch.setenv("RIDGEXR_DATA", str(data))
    monkeypatch.setenv("RIDGEXR_CATALOGS", str(cat))
    assert "complete cells: 6 of 6" in runner.invoke(app, ["info", "tiny"]).output
    import ridgexr

    assert ridgexr.open_dataset("tiny").sizes["sample"] == 4
    monkeypatch.delenv("RIDGEXR_DATA")
    assert ridgexr.open_dataset("tiny", data_dir=data).sizes["sample"] == 4


def test_import_and_help_load_neither_torch_nor_xarray_and_the_accessor_still_registers():
    import subprocess
    import sys

    code = ("import sys, ridgexr, ridgexr.cli; heavy = [m for m in ('torch', 'xarray') if m in sys.modules]; "
            "import xarray as xr; print(heavy, hasattr(xr.Dataset, 'ridge'), hasattr(xr.DataArray, 'ridge'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] True True"
    code = "import xarray as xr, ridgexr; print(hasattr(xr.Dataset, 'ridge'))"  # xarray imported first
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "True"
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"ridgexr {ridgexr.__version__}"


def _unraisable_reports(make):
    """The real hook arguments of the unraisable exceptions raised while ``make()``'s objects are collected."""
    import gc

    seen = []
    saved, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        make()
        gc.collect()
    finally:
        sys.unraisablehook = saved
    return seen


def test_after_an_interrupt_only_abandoned_coroutines_are_silenced(capsys, monkeypatch):
    """The interrupt path's unraisable hook drops reports of coroutines (zarr's abandoned writes)
    and passes anything else, and everything before an interrupt, to Python's default hook."""
    from ridgexr import cli

    async def write():
        try:
            await asyncio.sleep(0)
        finally:
            raise RuntimeError("Event loop is closed")  # as a write abandoned with its loop

    def abandoned():
        coro = write()
        coro.send(None)  # suspended in the sleep, then dropped: closed by the collector

    class Broken:  # another unraisable exception, from __del__
        def __del__(self):
            raise RuntimeError("Event loop is closed")

    (coro_report,) = _unraisable_reports(abandoned)
    (other_report,) = _unraisable_reports(Broken)
    for interrupted, reported in ((False, True), (True, False)):
        monkeypatch.setitem(cli._STATE, "interrupted", interrupted)
        cli._quiet_after_interrupt(coro_report)
        assert ("Event loop is closed" in capsys.readouterr().err) == reported
        cli._quiet_after_interrupt(other_report)
        assert "Event loop is closed" in capsys.readouterr().err


def test_a_stop_signal_swallowed_by_a_finalizer_is_raised_at_the_next_progress_update(capsys, monkeypatch):
    """A SIGTERM whose KeyboardInterrupt lands in a finalizer cannot propagate (Python reports it as
    "Exception ignored" and goes on; CI once saw a run finish with status 0 so). The run's progress
    bar raises it again at its next update, and the swallowed one is not reported."""
    import gc
    import os
    import signal

    from ridgexr import cli

    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # restored after the test
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    progress = cli._progress()
    bar = progress.add_task("cells", total=3)
    with pytest.raises(KeyboardInterrupt), cli._stop_signals():
        progress.advance(bar)

        class SignalledWhileFinalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the finalizer
                for _ in range(1000):  # bytecode, so that the pending handler runs in this frame
                    pass

        SignalledWhileFinalized()
        gc.collect()
        swallowed = True  # reached: the interrupt did not propagate
        assert progress.tasks[0].completed == 1
        progress.advance(bar)  # raises
    assert swallowed and progress.tasks[0].completed == 1
    assert "KeyboardInterrupt" not in capsys.readouterr().err
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_list_and_help_import_neither_torch_nor_xarray():
    import subprocess
    import sys

    code = ("import sys; from ridgexr.cli import app\n"
            "for argv in (['list', '--no-estimate'], ['--help']):\n"
            "    try:\n        app(argv)\n    except SystemExit as e:\n        assert not e.code, e.code\n"
            "print(sorted(m for m in ('torch', 'xarray', 'dask', 'zarr', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "two-points" in out and out.strip().splitlines()[-1] == "[]"


def test_a_summary_whose_frames_are_all_degenerate_says_why_its_columns_are_nan(capsys):
    from ridgexr.cli import _summary_table

    nan = float("nan")
    row = {"schedule": "h", "complete": True, "ridge_distance": nan, "converged": 0.0, "rms_residual_normal": nan,
           "rms_residual_tangent": nan, "near_mode": 0.0, "degenerate": 1.0}
    _summary_table([row, dict(row, schedule="1")], "cells")
    out = " ".join(capsys.readouterr().out.split())
    assert "ridge dist / rms e_N / rms e_T nan: every state's ridge frame is degenerate (degen 1)" in out
    _summary_table([dict(row, degenerate=0.5)], "cells")  # some frames determined: the nan is not explained so
    assert "nan: every state" not in " ".join(capsys.readouterr().out.split())


def test_a_long_summary_prints_its_first_rows_and_counts_every_cell(capsys):
    """A 3 072-cell store's summary printed 3 072 rows: the table now stops at max_rows, says so and how to print
    them all, and a line below it counts every row (complete, diverged, the quality gate), so a cut table hides
    no count.  At max_rows or fewer nothing changes."""
    from ridgexr.cli import _summary_table

    rows = [{"draw": i, "complete": i != 7, "ridge_distance": 0.1 * i, "diverged": int(i % 50 == 3),
             "quality": "generates" if i % 10 else "does not generate"} for i in range(250)]
    _summary_table(rows, "cells", max_rows=20, more="ridgexr info X --all-rows")
    out = capsys.readouterr().out
    drawn = [line for line in out.splitlines() if line.startswith("│")]
    assert [int(line.split("│")[2]) for line in drawn] == list(range(20))  # the first 20 cells, in order
    text = " ".join(out.split())
    assert "the first 20 of 250 cells (ridgexr info X --all-rows prints every one)" in text
    assert "all cells: 249 of 250 cells complete; 5 with a diverged sample; quality: 225 generates, 25 does not " \
           "generate" in text
    _summary_table(rows[:20], "cells", max_rows=20)
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("│")]) == 20 and "all cells" not in out


def test_run_plan_prints_the_stages_and_their_costs_and_writes_nothing(tmp_path, write_catalog):
    from ridgexr.catalog import experiment_from_file
    from ridgexr.run.plan import estimate_resources, estimate_stage_seconds, format_seconds, scms_upper_seconds

    cat = write_catalog(tmp_path, steps=10, samples=8)
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["run", "--plan", str(cat), "--data-dir", str(tmp_path / "data")])
    assert r.exit_code == 0, r.output
    assert sorted(tmp_path.rglob("*")) == before  # no data folder, no store, no checkpoint, no lock
    exp = experiment_from_file(cat)
    seconds = estimate_stage_seconds(exp, (2, 2))
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in r.output.splitlines()
            if line.startswith("│")}
    upper = scms_upper_seconds(exp, (2, 2))  # the entry's cap (200) is above the assumed 20 iterations: a bound row
    assert upper is not None and upper > seconds["sampling and observation"]
    assert rows == {**{k: format_seconds(v) for k, v in seconds.items()}, "total": format_seconds(sum(seconds.values())),
                    f"sampling and observation at ridge.max_iter = {exp.ridge.max_iter}": format_seconds(upper)}
    peak = estimate_resources(exp, (2, 2))["peak_memory"] / 2**30
    flat = " ".join(r.output.split())
    assert f"peak memory ~{peak:.3g} GiB" in flat and "it fits this machine" in flat and "ran " not in flat


def test_list_shows_the_planners_time_and_the_descriptions_first_sentence(tmp_path):
    from ridgexr.catalog import open_catalog
    from ridgexr.datasets import training_shape
    from ridgexr.run.plan import estimate_stage_seconds, format_seconds

    r = runner.invoke(app, ["list", "--wide", "--estimate", "--data-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    exp = open_catalog(data_dir=tmp_path)["two-points"]
    total = sum(estimate_stage_seconds(exp, training_shape(exp.dataset)).values())
    line = next(x for x in r.output.splitlines() if x.startswith("│ two-points "))
    cells = [c.strip() for c in line.split("│")[1:-1]]
    assert cells[:3] == ["two-points", "~" + format_seconds(total), "Two training points (-3,0),(3,0)."]


def test_list_works_without_the_images_extra(tmp_path, monkeypatch):
    """A plain install has no diffusers (the images extra): `ridgexr list` names it in the time column of the unet
    entries instead of failing (found by a fresh-venv check of a non-editable install)."""
    from ridgexr.models.unet import denoiser

    monkeypatch.setitem(sys.modules, "diffusers", None)  # `import diffusers` now raises ImportError, as uninstalled
    denoiser._forward_flops.cache_clear()  # an architecture counted before would skip the import
    try:
        r = runner.invoke(app, ["list", "--wide", "--estimate", "--data-dir", str(tmp_path)])
    finally:
        denoiser._forward_flops.cache_clear()
    assert r.exit_code == 0, r.output
    cells = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in r.output.splitlines()
             if line.startswith("│ ")}
    assert cells["fashion-unet-16"] == "? (needs diffusers)"
    assert cells["two-points"].startswith("~")


def test_one_and_two_threads_write_the_same_store_and_record_the_count(tmp_path, write_catalog):
    import json

    import numpy as np
    import torch

    cat = write_catalog(tmp_path, steps=6, samples=4)
    n = torch.get_num_threads()
    try:
        stores = {}
        for k in (1, 2):
            r = runner.invoke(app, ["run", str(cat), "--threads", str(k), "--data-dir", str(tmp_path / f"d{k}")])
            assert r.exit_code == 0, r.output
            assert f"{k} thread(s) (--threads)" in " ".join(r.output.split())
            stores[k] = ridgexr.open_dataset(tmp_path / f"d{k}" / "tiny.zarr")
    finally:
        torch.set_num_threads(n)
    for k, ds in stores.items():
        prov = json.loads(ds.attrs["provenance"])
        assert prov["threads"] == k and prov["threads_source"] == "n_threads"
    a, b = stores[1], stores[2]
    assert set(a.data_vars) == set(b.data_vars)
    for name in a.data_vars:  # bit for bit, NaN where NaN
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_run_cells_runs_the_named_cells_and_says_what_is_left(tmp_path, write_catalog):
    """``--cells DIM=LABEL[,LABEL]`` (repeatable) runs those cells only and says how many wait; a malformed option or
    an unknown label is a usage error naming it, before anything is written."""
    cat = write_catalog(tmp_path, steps=6, samples=4)
    args = ["run", str(cat), "--threads", "1", "--data-dir", str(tmp_path / "d")]
    r = runner.invoke(app, [*args, "--cells", "schedule=1,h2", "--cells", "width=8"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "ran 2 cell(s), kept 0 complete cell(s)" in text and "4 cell(s) outside --cells not run yet" in text
    ds = ridgexr.open_dataset(tmp_path / "d" / "tiny.zarr")
    assert ds.cell_complete.values.tolist() == [[True, False], [True, False], [False, False]]
    for bad, words in (("width", "expected DIM=LABEL"), ("width=", "expected DIM=LABEL"),
                       ("width=32", "width has no label '32'; its labels are 8, 16")):
        r = runner.invoke(app, [*args[:4], "--data-dir", str(tmp_path / "e"), "--cells", bad])
        assert r.exit_code != 0 and words in " ".join(r.output.replace("│", " ").split()), (bad, r.output)
    assert not (tmp_path / "e" / "tiny.zarr").exists()


@pytest.mark.parametrize("cores, load, expected", [(2, 0.0, 2), (2, 0.99, 2), (2, 1.0, 1), (2, 5.0, 1), (8, 2.5, 6)])
def test_the_default_threads_are_the_cores_not_busy(cores, load, expected):
    from ridgexr.threads import default_threads

    assert default_threads(cores, load) == expected


def test_threads_from_the_environment_and_bad_values(monkeypatch):
    from ridgexr.threads import resolve_threads

    monkeypatch.setenv("RIDGEXR_THREADS", "3")
    assert resolve_threads() == (3, "$RIDGEXR_THREADS") and resolve_threads(1) == (1, "--threads")
    monkeypatch.setenv("RIDGEXR_THREADS", "zero")
    with pytest.raises(ValueError, match="RIDGEXR_THREADS"):
        resolve_threads()
    with pytest.raises(ValueError, match=r"`threads` \(--threads\) must be between 1 and"):
        resolve_threads(0)
    from ridgexr.threads import max_threads

    assert resolve_threads(max_threads()) == (max_threads(), "--threads")
    with pytest.raises(ValueError, match=rf"must be between 1 and {max_threads()} .*got {max_threads() + 1}"):
        resolve_threads(max_threads() + 1)  # issue 59: --threads 100000 crashed the libraries (exit 139)
    monkeypatch.setenv("RIDGEXR_THREADS", str(max_threads() + 1))
    with pytest.raises(ValueError, match=r"\$RIDGEXR_THREADS must be between 1 and"):
        resolve_threads()


def test_the_summary_says_why_near_is_zero_at_image_scale_and_only_there():
    """Issue 42: an image store's summary read `near 0` without saying why (the paper's radius of 0.5 data
    units is small at d = 784); a point set whose samples are simply not near a mode gets no such note."""
    from ridgexr.cli import _why_empty

    rows = [{"complete": True, "near_mode": 0.0, "memorized": 0.0}, {"complete": True, "near_mode": 0.0,
                                                                      "memorized": 0.0}]
    keys = ["near_mode", "memorized"]
    assert "near 0 in every cell" in _why_empty(rows, keys, d=784) and "d = 784" in _why_empty(rows, keys, d=784)
    assert _why_empty(rows, keys, d=2) == "" and _why_empty(rows, keys) == ""
    rows[1]["near_mode"] = 0.25
    assert _why_empty(rows, keys, d=784) == ""
