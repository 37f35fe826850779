"""The command line and the catalog loader: YAML 1.2 floats, a broken catalog file in the data folder,
``list`` whole, ``--debug`` anywhere, "did you mean"."""

import math

import pytest
from typer.testing import CliRunner

from ridgexr.catalog import CatalogError, CatalogWarning, load_catalog_file, open_catalog
from ridgexr.cli import app

runner = CliRunner()

def _flat(output: str) -> str:
    """The CLI's output as one line (click's error box and rich's wrapping removed)."""
    return " ".join(output.replace("│", " ").split())


BROKEN = "experiments:\n  half: {dataset: {points: two-points}\n"  # an unclosed flow mapping


@pytest.mark.parametrize("field, text, value", [("t_min", "1e-3", 1e-3), ("T", "1.0e6", 1e6), ("t_min", "2.5E-2", 0.025),
                                                ("T", "1e+2", 100.0), ("t_min", ".5", 0.5), ("t_min", "-3e-1", -0.3),
                                                ("t_min", "0.01", 0.01)])
def test_yaml_12_floats_are_floats(tmp_path, catalog_text, field, text, value):
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(steps=5, samples=4).replace("{T: 2.0, t_min: 0.01,", "{T: 2.0, t_min: 0.01e0,")
                 .replace(f"{field}: {'2.0' if field == 'T' else '0.01e0'}", f"{field}: {text}"))
    if value <= 0:
        with pytest.raises(CatalogError, match="t_min"):  # read as a number (-0.3), refused as a value
            load_catalog_file(f)
        return
    exp = load_catalog_file(f)["tiny"]
    got = getattr(exp.process, field)
    assert isinstance(got, float) and math.isclose(got, value, rel_tol=1e-15)
    assert exp.process.n_steps == 5 and type(exp.process.n_steps) is int  # ints stay ints
    other = exp.process.T if field == "t_min" else exp.process.t_min
    assert other == (2.0 if field == "t_min" else 0.01)  # "0.01e0" (YAML 1.1: a string) is read too


def test_a_float_where_an_int_is_asked_is_still_refused(tmp_path, catalog_text):
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(steps=5, samples=4).replace("n_samples: 4", "n_samples: 1e3"))
    with pytest.raises(CatalogError, match="n_samples"):
        load_catalog_file(f)


def test_a_broken_catalog_file_in_the_data_folder_is_skipped_with_a_warning_unless_asked_for(tmp_path, write_catalog):
    data = tmp_path / "data"
    (data / "catalogs").mkdir(parents=True)
    bad = data / "catalogs" / "broken.yaml"
    bad.write_text(BROKEN)
    write_catalog(data / "catalogs", steps=5, samples=4, name="good.yaml")
    with pytest.warns(CatalogWarning, match=r"broken\.yaml.*not valid YAML"):
        cat = open_catalog(data_dir=data)
    assert "tiny" in cat and "two-points" in cat and list(cat.skipped) == [bad.resolve()]
    assert bad.resolve() not in cat.files
    # the entry asked for is in no file that could be read: the skipped file's error is the answer
    with pytest.raises(CatalogError, match=r"no experiment 'half'.*skipped: .*broken\.yaml: not valid YAML"):
        cat["half"]
    # named explicitly it is the one asked for: its error is raised
    with pytest.raises(CatalogError, match=r"broken\.yaml: not valid YAML"):
        open_catalog(data_dir=data, files=[bad])
    # the CLI: a one-line warning naming the file, the other entries listed; asking for it: exit 2
    r = runner.invoke(app, ["list", "--wide", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    assert "warning:" in r.output and "broken.yaml" in r.output and "tiny" in r.output
    r = runner.invoke(app, ["run", "half", "--data-dir", str(data)])
    assert r.exit_code == 2 and "broken.yaml" in r.output and "Traceback" not in r.output


def test_info_on_a_store_path_works_with_a_broken_catalog_file(tmp_path, write_catalog):
    data = tmp_path / "data"
    cat = write_catalog(tmp_path, steps=3, samples=2)
    assert runner.invoke(app, ["run", str(cat), "--data-dir", str(data)]).exit_code == 0
    (data / "catalogs").mkdir()
    (data / "catalogs" / "broken.yaml").write_text(BROKEN)
    r = runner.invoke(app, ["info", str(data / "tiny.zarr"), "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    assert "complete cells: 6 of 6" in r.output
    r = runner.invoke(app, ["info", "tiny", "--data-dir", str(data)])  # by name: the catalog is read, with a warning
    assert r.exit_code == 2 and "broken.yaml" in r.output


@pytest.mark.parametrize("columns", [100, 72])
def test_list_prints_one_line_per_entry_within_columns_and_wide_every_value_whole(tmp_path, columns):
    """At $COLUMNS (read also when the output is captured, as here), one line per entry and none longer: the name
    whole, then the description's first sentence, cut with an ellipsis where it does not fit; --wide prints every
    field whole on one line per entry."""
    from ridgexr.catalog import describe
    from ridgexr.catalog.files import summary_line

    cat = open_catalog(data_dir=tmp_path)
    r = runner.invoke(app, ["list", "--data-dir", str(tmp_path)], env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in cat.experiments}
    assert list(rows) == list(cat)  # every entry, in the catalogs' order, on exactly one line each
    assert len([line for line in lines if line.split() and line.split()[0] in cat.experiments]) == len(cat)
    cut = 0
    for name, line in rows.items():
        text = line[len(name):].strip()
        first = " ".join(summary_line(cat[name].description).split())
        if text.endswith("…"):  # cut: a start of the first sentence, at a word boundary unless a word is long
            cut += 1
            assert first.startswith(text[:-1].rstrip(" ,;:")) and len(text) < len(first), (name, text)
        else:
            assert text == first, (name, text)
    assert cut > 0  # at this width some descriptions are cut: the check above is not vacuous
    wide = runner.invoke(app, ["list", "--wide", "--data-dir", str(tmp_path)], env={"COLUMNS": str(columns)})
    lines = {line.split("│")[1].strip(): line for line in wide.output.splitlines() if line.startswith("│")}
    for name in cat:  # one line per entry, each value whole on it
        assert all(str(v) in lines[name] for v in describe(cat[name]).values()), name


@pytest.mark.parametrize("args", [["run", "nope", "--debug"], ["--debug", "run", "nope"], ["run", "--debug", "nope"]])
def test_debug_is_accepted_anywhere(tmp_path, args):
    r = runner.invoke(app, args + ["--data-dir", str(tmp_path)])
    assert "No such option" not in r.output
    assert r.exit_code == 2 and "no experiment 'nope'" in _flat(r.output)  # a usage error (click), shown without traceback


def test_debug_anywhere_shows_the_traceback(tmp_path):
    cat = tmp_path / "bad.yaml"
    cat.write_text(BROKEN)
    quiet = runner.invoke(app, ["run", str(cat), "--data-dir", str(tmp_path)])
    assert quiet.exit_code == 2 and "not valid YAML" in quiet.output and quiet.exception.__class__ is SystemExit
    loud = runner.invoke(app, ["run", str(cat), "--data-dir", str(tmp_path), "--debug"])
    assert isinstance(loud.exception, CatalogError)  # --debug after the command re-raises, as before it


def test_did_you_mean_for_entry_names_and_fields(tmp_path, catalog_text):
    r = runner.invoke(app, ["run", "two-point", "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and "did you mean 'two-points'?" in _flat(r.output)
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(steps=5, samples=4).replace("n_samples:", "n_sample:"))
    r = runner.invoke(app, ["run", str(f), "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and "unknown field 'n_sample'; did you mean 'n_samples'?" in _flat(r.output)


def test_run_on_a_catalog_file_with_three_mistakes_prints_all_three_and_exits_2(tmp_path, catalog_text):
    f = tmp_path / "three.yaml"
    f.write_text(catalog_text(steps=5, samples=4).replace("n_samples:", "n_sample:").replace("d_star: 1", "d_star: -1")
                 .replace("n_steps: 5", "n_steps: 0"))
    r = runner.invoke(app, ["run", str(f), "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and r.exception.__class__ is SystemExit  # a user error: no traceback
    lines = r.output.splitlines()
    assert lines[0] == f"error: {f}: 3 problems:"
    assert sorted(line.split(":")[0].strip() for line in lines[1:]) == [
        "entry 'tiny', field 'd_star'", "entry 'tiny', field 'n_sample'", "entry 'tiny', field 'process.n_steps'"]


def test_flags_show_no_value_in_help_and_take_a_no_form():
    out = runner.invoke(app, ["--help"], terminal_width=100).output
    debug = [line for line in out.splitlines() if "--debug" in line]
    assert len(debug) == 1 and "--no-debug" in debug[0] and "<bool>" not in debug[0]
    for command, flag in (("verify", "--repair"), ("run", "--overwrite"), ("list", "--wide")):
        lines = [line for line in runner.invoke(app, [command, "--help"], terminal_width=100).output.splitlines()
                 if flag in line]
        assert len(lines) == 1 and f"--no-{flag[2:]}" in lines[0] and "<bool>" not in lines[0], (command, lines)
    r = runner.invoke(app, ["--no-debug", "run", "nope"])
    assert r.exit_code == 2 and "no experiment 'nope'" in _flat(r.output)


def test_list_estimates_on_request_in_a_column_that_fits(tmp_path):
    """--estimate adds the planner's total beside each name (the time `run --plan` prints), within $COLUMNS."""
    from ridgexr.datasets import training_shape
    from ridgexr.run.plan import estimate_stage_seconds, format_seconds

    r = runner.invoke(app, ["list", "--estimate", "--data-dir", str(tmp_path)], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 100
    exp = open_catalog(data_dir=tmp_path)["two-points"]
    total = sum(estimate_stage_seconds(exp, training_shape(exp.dataset)).values())
    line = next(line for line in r.output.splitlines() if line.startswith("two-points "))
    assert line.split()[1:3] == ["~" + format_seconds(total).split()[0], format_seconds(total).split()[1]]
    plain = runner.invoke(app, ["list", "--data-dir", str(tmp_path)], env={"COLUMNS": "100"}).output
    assert "~" + format_seconds(total) not in plain  # without it, no estimate is computed


def _fake_store(folder, entry):
    """A folder that reads as a store of ``entry`` to the lookups by name (its root metadata only)."""
    import json

    folder.mkdir(parents=True)
    (folder / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {
        "schema_version": "9", "experiment": entry}}))


@pytest.mark.parametrize("command", ["info", "analyze", "claims", "verify"])
def test_a_mistyped_store_or_entry_name_gets_one_line_with_a_suggestion(tmp_path, command):
    data = tmp_path / "data"
    _fake_store(data / "my-own-run.zarr", "my-own-run")  # a store made by an entry of no catalog read here
    r = runner.invoke(app, [command, "two-point", "--data-dir", str(data)])
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and len(r.output.splitlines()) == 1, r.output
    assert "did you mean 'two-points'?" in errors[0] and "fashion-exact" not in errors[0]  # no list of every entry
    r = runner.invoke(app, [command, "my-own-rum", "--data-dir", str(data)])
    assert r.exit_code == 2 and "did you mean 'my-own-run'?" in r.output, r.output
    r = runner.invoke(app, [command, "nothing-like-it-at-all", "--data-dir", str(data)])
    assert r.exit_code == 2 and "did you mean" not in r.output and "'ridgexr list'" in _flat(r.output), r.output


def test_a_data_folder_that_does_not_exist_is_named_in_one_line(tmp_path):
    gone = tmp_path / "no-such-folder"
    for name in ("two-points", "my-own-run"):  # an entry, and the name of a store the folder would hold
        r = runner.invoke(app, ["info", name, "--data-dir", str(gone)])
        assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
        assert f"the data folder {str(gone)!r} (from --data-dir" in r.output and "does not exist" in r.output
        assert "fashion-exact" not in r.output
    r = runner.invoke(app, ["list", "--data-dir", str(gone)], env={"COLUMNS": "300"})
    assert r.exit_code == 0 and f"no stores in the data folder {gone} (the folder does not exist)" in r.output


def test_a_wrong_type_names_the_value_given_and_an_example(tmp_path, catalog_text):
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(steps=5, samples=4).replace("widths: [8, 16]", "widths: 64")
                 .replace("n_samples: 4", "n_samples: '4'").replace('schedules: ["1", "h2"]', "schedules: h2")
                 .replace("d_star: 1", "d_star: 1\n    sampler: [sde]", 1).replace("    sampler: {kind: sde, block_steps: 8}\n", ""))
    r = runner.invoke(app, ["run", str(f), "--data-dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert r.exit_code == 2, r.output
    lines = r.output.splitlines()
    assert lines[0] == f"error: {f}: 4 problems:"
    assert set(lines[1:]) == {
        "  entry 'tiny', field 'model.widths': expected a list, got 64 (an integer); write e.g. `widths: [64]`",
        "  entry 'tiny', field 'n_samples': expected an integer, got '4' (a string); write e.g. `n_samples: 4`",
        "  entry 'tiny', field 'schedules': expected a list, got 'h2' (a string); write e.g. `schedules: [h2]`",
        "  entry 'tiny', field 'sampler': expected a mapping of its fields, got ['sde'] (a list); write e.g. "
        "`sampler: {name: value, ...}` (docs/catalogs.md lists the fields)"}
    fixed = load_catalog_file_text(tmp_path, catalog_text(steps=5, samples=4).replace("widths: [8, 16]", "widths: [64]")
                                   .replace('schedules: ["1", "h2"]', "schedules: [h2]"))
    assert fixed["tiny"].model.widths == [64] and fixed["tiny"].schedules == ["h2"]  # the examples load


def load_catalog_file_text(tmp_path, text):
    f = tmp_path / "fixed.yaml"
    f.write_text(text)
    return load_catalog_file(f)


def test_a_missing_data_file_names_the_path_tried(tmp_path, catalog_text, monkeypatch):
    folder = tmp_path / "catalogs"
    folder.mkdir()
    f = folder / "c.yaml"
    f.write_text(catalog_text(steps=5, samples=4).replace("dataset: {points: two-points}", "dataset: {file: pts.npy}"))
    monkeypatch.chdir(tmp_path)  # a relative catalog path: the data file is looked for beside the catalog file
    for args in (["run", "catalogs/c.yaml", "--plan"], ["run", "catalogs/c.yaml", "--data-dir", "data"]):
        r = runner.invoke(app, args, env={"COLUMNS": "300"})
        errors = [line for line in r.output.splitlines() if line.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1, r.output
        assert "'catalogs/pts.npy' does not exist" in errors[0] and f"(looked for {str(folder / 'pts.npy')!r})" in errors[0]


def test_the_plan_says_when_a_named_data_set_is_not_installed(tmp_path, monkeypatch):
    """Fashion-MNIST looked for in empty folders: `run --plan` still prices the entry from the published shape,
    and says the data are missing, where it looked and how to install them."""
    import ridgexr.datasets.images as images

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(images, "DEBIAN_DATASETS", empty)
    monkeypatch.setenv("RIDGEXR_IMAGES", str(empty))
    monkeypatch.setenv("RIDGEXR_DATA", str(empty))
    r = runner.invoke(app, ["run", "fashion-exact-1k", "--plan"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    flat = _flat(r.output)
    assert "training set 60000 x 784 (not installed here)" in flat
    assert "training data missing: no fashion-mnist IDX files" in flat and str(empty / "fashion-mnist") in flat
    assert "apt-get install dataset-fashion-mnist" in flat and "cannot run here" in flat
    monkeypatch.undo()  # installed (this machine's Debian package), or not: the plan says which
    r = runner.invoke(app, ["run", "fashion-exact-1k", "--plan", "--data-dir", str(tmp_path)], env={"COLUMNS": "300"})
    installed = images._has_idx(images.DEBIAN_DATASETS / "fashion-mnist", "train")
    assert r.exit_code == 0 and ("training data missing" in r.output) != installed, r.output


def test_list_without_estimates_imports_neither_torch_nor_xarray(tmp_path):
    """What keeps `ridgexr list` fast, checked by what it imports rather than by a clock: without --estimate it
    loads neither torch nor xarray nor zarr (with it, the planner loads torch)."""
    import subprocess
    import sys

    code = ("import sys; from typer.testing import CliRunner; from ridgexr.cli import app; "
            f"r = CliRunner().invoke(app, ['list', '--data-dir', {str(tmp_path)!r}]); assert r.exit_code == 0, r.output; "
            "print([m for m in ('torch', 'xarray', 'zarr') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
