"""The command line and the catalog loader: YAML 1.2 floats, a broken catalog file in the data folder,
``list`` whole, ``--debug`` anywhere, "did you mean"."""

import math
import time

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


def test_list_shows_every_value_whole_and_is_fast(tmp_path):
    from ridgexr.catalog import describe

    cat = open_catalog(data_dir=tmp_path)
    t0 = time.perf_counter()
    r = runner.invoke(app, ["list", "--no-estimate", "--data-dir", str(tmp_path)])
    elapsed = time.perf_counter() - t0
    assert r.exit_code == 0 and "…" not in r.output
    rows, new = [], True  # entries are separated by a line; a folded value continues on the next lines
    for line in r.output.splitlines():
        if line.startswith(("├", "└")):
            new = True
        elif line.startswith("│"):
            cells = [c.replace(" ", "") for c in line.split("│")[1:-1]]  # a value may wrap at a space
            rows.append(cells) if new else rows.__setitem__(-1, [a + b for a, b in zip(rows[-1], cells)])
            new = False
    assert {row[0]: row for row in rows} == {  # every column but the store path (--wide's)
        n: [str(v).replace(" ", "") for k, v in describe(cat[n]).items() if k != "store"] for n in cat}
    wide = runner.invoke(app, ["list", "--wide", "--no-estimate", "--data-dir", str(tmp_path)])
    lines = {line.split("│")[1].strip(): line for line in wide.output.splitlines() if line.startswith("│")}
    for name in cat:  # one line per entry, each value whole on it
        assert all(str(v) in lines[name] for v in describe(cat[name]).values()), name
    assert elapsed < 5.0  # in-process, after the first import (the subprocess timing is in test_cli)


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
