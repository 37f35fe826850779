"""Catalog loading: validation errors that name file, entry and field; renamed fields; data sources."""

import warnings
from pathlib import Path

import numpy as np
import pytest

import ridgexr
from ridgexr.catalog import CatalogError, experiment_from_file, load_catalog_file
from ridgexr.datasets import load_training_set
from ridgexr.run import run_experiment


def test_catalog_errors_name_file_entry_field(tmp_path, catalog_text):
    f = tmp_path / "bad.yaml"
    f.write_text(catalog_text(5, 4).replace("n_samples: 4", "n_samples: 4\n    colour: red"))
    with pytest.raises(CatalogError, match=r"bad.yaml: entry 'tiny': field 'colour'"):
        load_catalog_file(f)
    f.write_text(catalog_text(5, 4).replace('["1", "h2"]', '["1", "h9"]'))
    with pytest.raises(CatalogError, match=r"field 'schedules'.*h9"):
        load_catalog_file(f)
    f.write_text(catalog_text(5, 4).replace("widths: [8, 16]", "widths: [0]"))
    with pytest.raises(CatalogError, match=r"field 'model.widths'"):
        load_catalog_file(f)
    f.write_text(catalog_text(5, 4).replace("tiny.zarr", "../escape.zarr"))
    with pytest.raises(CatalogError, match=r"field 'store'"):
        load_catalog_file(f)
    f.write_text("experiments: !!python/object/apply:os.system ['echo hi']")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog_file(f)
    f.write_text(catalog_text(5, 4).replace("{points: two-points}", "{file: missing.npy}"))
    exp = load_catalog_file(f)["tiny"]
    with pytest.raises(ValueError, match="missing.npy"):
        run_experiment(exp, data_dir=tmp_path)


def test_user_array_file_dataset(tmp_path, catalog_text):
    np.save(tmp_path / "pts.npy", np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]]))
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(6, 4).replace("{points: two-points}", "{file: pts.npy}"))
    exp = experiment_from_file(f)
    np.testing.assert_array_equal(load_training_set(exp.dataset, base_dir=exp.base_dir)[1], [4.0, 0.0])
    res = run_experiment(exp, data_dir=tmp_path)
    assert ridgexr.open_dataset(res.store).sizes["train"] == 3


def test_builtin_catalog_is_valid():
    cat = ridgexr.open_catalog()
    assert "two-points" in cat.experiments
    exp = cat["two-points"]
    assert exp.n_samples >= 256 and exp.process.n_steps >= 300 and len(exp.schedules) == 3
    assert len(exp.model.widths) == 3


def test_removed_ridge_fields_are_refused_with_their_replacement(tmp_path, catalog_text):
    f = tmp_path / "old.yaml"
    f.write_text(catalog_text(5, 4).replace("d_star: 1", "d_star: 1\n    ridge: {top_k_bound: 1.0e-4}"))
    with pytest.raises(CatalogError, match=r"field 'ridge': .*'top_k_bound' was removed in ridgexr 0.4; use 'drop_tol'"):
        load_catalog_file(f)
    f.write_text(catalog_text(5, 4).replace("d_star: 1", "d_star: 1\n    ridge: {compare_d_star: [1]}"))
    with pytest.raises(CatalogError, match="use 'd_star_alt'"):
        load_catalog_file(f)
    f.write_text(catalog_text(5, 4).replace("d_star: 1", "d_star: 1\n    ridge: {drop_tol: 1.0e-4, d_star_alt: [1]}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert experiment_from_file(f).ridge.drop_tol == 1e-4


def test_unknown_fields_suggest_the_closest_name(tmp_path, catalog_text):
    f = tmp_path / "typo.yaml"
    f.write_text(catalog_text(5, 4).replace("n_samples: 4", "n_sample: 4"))
    with pytest.raises(CatalogError, match=r"unknown field 'n_sample'; did you mean 'n_samples'\?"):
        load_catalog_file(f)
    f.write_text(catalog_text(5, 4).replace("widths: [8, 16]", "widths: [8, 16], n_frequency: 3"))
    with pytest.raises(CatalogError, match=r"did you mean 'n_frequencies'\?"):
        load_catalog_file(f)


def test_config_hash_tracks_numbers_not_text(tmp_path, catalog_text):
    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    exp = experiment_from_file(f)
    train = load_training_set(exp.dataset)
    h = exp.config_hash(train)
    assert exp.model_copy(update={"description": "other words"}).config_hash(train) == h
    assert exp.model_copy(update={"n_samples": 5}).config_hash(train) != h
    assert exp.config_hash(train + 1e-12) != h  # the data are part of the hash


def test_config_hash_leaves_out_fields_at_their_neutral_value(tmp_path, catalog_text, monkeypatch):
    import hashlib
    import json

    from ridgexr.catalog import HASH_NEUTRAL, NOT_HASHED

    f = tmp_path / "c.yaml"
    f.write_text(catalog_text(5, 4))
    exp = experiment_from_file(f)
    train = load_training_set(exp.dataset)

    def direct(cfg):  # the hash of a configuration that never had the neutral fields, computed here
        h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
        h.update(np.ascontiguousarray(train, dtype=np.float64).tobytes())
        return h.hexdigest()

    cfg = exp.model_dump(exclude=set(NOT_HASHED))
    for key in ("stop_degenerate", "d_star_alt", "accelerate"):
        del cfg["ridge"][key]
    del cfg["dataset"]["n_train"], cfg["model"]["name"], cfg["training"]["draws"]
    assert {"ridge.stop_degenerate", "ridge.d_star_alt", "ridge.accelerate", "dataset.n_train",
            "models[].name"} <= set(HASH_NEUTRAL)
    assert exp.config_hash(train) == direct(cfg)
    # a non-neutral value enters the hash
    ridge = exp.ridge.model_copy(update={"stop_degenerate": 3})
    assert exp.model_copy(update={"ridge": ridge}).config_hash(train) != exp.config_hash(train)
    # a field added later at its neutral value leaves the hash as it was
    monkeypatch.setitem(HASH_NEUTRAL, "ridge.max_iter", 200)
    del cfg["ridge"]["max_iter"]
    assert exp.config_hash(train) == direct(cfg)


def test_published_catalog_reference_is_current():
    from pathlib import Path

    from ridgexr.catalog import schema_markdown

    page = Path(__file__).resolve().parent.parent / "docs" / "catalogs.md"
    assert page.read_text() == schema_markdown(), (
        "docs/catalogs.md is stale: regenerate it with python -c \"from ridgexr.catalog import schema_markdown; "
        "open('docs/catalogs.md', 'w').write(schema_markdown())\"")
    for field in ("drop_tol", "d_star_alt", "feature_period", "block_steps", "n_samples"):
        assert f"`{field}`" in page.read_text()


def test_builtin_catalogs_are_package_data():
    import importlib.resources

    from ridgexr.catalog import builtin_catalog_files

    files = builtin_catalog_files()
    assert {f.name for f in files} >= {"points2d.yaml", "mnist.yaml"}
    assert all(f.parent == Path(str(importlib.resources.files("ridgexr.catalogs"))) for f in files)


def test_unknown_entry_names_suggest_the_closest_entry():
    cat = ridgexr.open_catalog()
    with pytest.raises(KeyError, match=r"no experiment 'two-point'; did you mean 'two-points'\?"):
        cat["two-point"]
    with pytest.raises(KeyError, match=r"no experiment 'zzzz' in the catalogs"):
        cat["zzzz"]
