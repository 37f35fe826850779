"""Catalog loading: validation errors that name file, entry and field; renamed fields; data sources."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import ridgexr
from ridgexr.catalog import CatalogError, experiment_from_file, load_catalog_file, open_catalog
from ridgexr.datasets import load_training_set
from ridgexr.run import run_experiment
from ridgexr.models.model_spec import DiagnosticsSpec


def test_catalog_errors_name_file_entry_field(tmp_path, catalog_text):
    f = tmp_path / "bad.yaml"
    f.write_text(catalog_text(5, 4).replace("n_samples: 4", "n_samples: 4\n    colour: red"))
    with pytest.raises(CatalogError, match=r"bad.yaml: entry 'tiny', field 'colour': unknown field 'colour'$"):
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
    with pytest.raises(CatalogError, match=r"field 'ridge.top_k_bound': field 'top_k_bound' was removed in ridgexr 0.4; "
                                           r"use 'drop_tol'"):
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


def test_a_catalog_file_with_three_mistakes_reports_all_three_located_in_words(tmp_path, catalog_text):
    # three mistakes in two entries: a misspelt top-level field and a negative d_star in the first, a misspelt
    # field of a model block in the second (listed in a `models` list, so its location has an index)
    first = catalog_text(5, 4).replace("n_samples: 4", "n_sample: 4").replace("d_star: 1", "d_star: -1")
    second = (catalog_text(5, 4).split("experiments:\n", 1)[1].replace("tiny:", "second:")
              .replace("model: {widths: [8, 16], n_frequencies: 3, include_exact: true}",
                       "models: [{widths: [8]}, {name: b, widths: [16], n_frequency: 3}]")
              .replace("tiny.zarr", "second.zarr"))
    f = tmp_path / "three.yaml"
    f.write_text(first + second)
    with pytest.raises(CatalogError) as info:
        load_catalog_file(f)
    lines = str(info.value).splitlines()
    assert lines[0] == f"{f}: 3 problems:"
    assert sorted(line.strip() for line in lines[1:]) == sorted([
        "entry 'tiny', field 'n_sample': unknown field 'n_sample'; did you mean 'n_samples'?",
        "entry 'tiny', field 'd_star': d_star must be an integer >= 1 or 'auto'",
        "entry 'second', field 'models[1].n_frequency': unknown field 'n_frequency'; did you mean 'n_frequencies'?",
    ])
    f.write_text(first.replace("n_sample: 4", "n_samples: 4"))  # one mistake: one line, file and location on it
    with pytest.raises(CatalogError) as info:
        load_catalog_file(f)
    assert str(info.value) == f"{f}: entry 'tiny', field 'd_star': d_star must be an integer >= 1 or 'auto'"


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
    for key in ("stop_degenerate", "d_star_alt", "accelerate", "logits", "observe"):
        del cfg["ridge"][key]
    del cfg["dataset"]["n_train"], cfg["dataset"]["images"], cfg["model"]["name"], cfg["model"]["diagnostics"]
    del cfg["sampler"]["scheduler_class"], cfg["sampler"]["eta"], cfg["training"]["draws"]
    del cfg["training"]["redraw"], cfg["model"]["penalty"]
    assert {"ridge.stop_degenerate", "ridge.d_star_alt", "ridge.accelerate", "dataset.n_train",
            "sampler.scheduler_class", "sampler.eta", "dataset.images",
            "dataset.mnist.space", "training.draws", "ridge.observe", "training.redraw"} <= set(HASH_NEUTRAL)
    assert {"name", "diagnostics", "penalty"} <= set(type(exp.model).neutral_fields())  # declared by the kind's spec
    assert exp.config_hash(train) == direct(cfg)
    # a non-neutral value enters the hash
    ridge = exp.ridge.model_copy(update={"stop_degenerate": 3})
    assert exp.model_copy(update={"ridge": ridge}).config_hash(train) != exp.config_hash(train)
    sized = exp.model.model_copy(update={"diagnostics": DiagnosticsSpec(n_time=3)})
    assert exp.model_copy(update={"model": sized}).config_hash(train) != exp.config_hash(train)
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


# The authors' settings of each -paper entry, read off their code (rf_diffusion_experiments):
# (entry, setting, the authors' value, their file)
AUTHORS_SETTINGS = [
    ("two-points-paper", "points", "two-points", "Sampling_Quantifying/Ridge_2mode.py: DATA_CENTERS (-3,0),(3,0)"),
    ("two-points-paper", "T", 10.0, "Ridge_2mode.py: T = 10.0"),
    ("two-points-paper", "widths", [2000], "Ridge_2mode.py: DIMS_TO_TEST = [2000]"),
    ("two-points-paper", "n_frequencies", 128, "Ridge_2mode.py: K_t = 128"),
    ("two-points-paper", "n_time", 2001, "Ridge_2mode.py: L_t = 2000 Simpson intervals"),
    ("two-points-paper", "quadrature", "simpson-t", "Ridge_2mode.py: Simpson weights 1, 4, 2, ..., 1"),
    ("two-points-paper", "n_noise", 2000, "Ridge_2mode.py: m_z = 2000"),
    ("two-points-paper", "taus", [1000.0, 1500.0, 2000.0, 5000.0, math.inf], "Ridge_2mode.py: TAUS_TO_TEST"),
    ("two-points-paper", "null_cutoff", "absolute", "Ridge_2mode.py: compute_A_infty, lam > 1 / (p * 10000)"),
    ("two-points-paper", "t_min", 1e-3, "Ridge_2mode.py: start_t = 1e-3, sample_exponential t_min = 1e-3"),
    ("three-points-paper", "points", "three-points", "sampling_implementation_1126.py: DATA_CENTERS (0,0),(5,0),(0,5)"),
    ("three-points-paper", "T", 40.0, "sampling_implementation_1126.py: T = 40.0"),
    ("three-points-paper", "widths", [1000], "sampling_implementation_1126.py: DIMS_TO_TEST = [1000]"),
    ("three-points-paper", "n_frequencies", 128, "sampling_implementation_1126.py: K_t = 128"),
    ("three-points-paper", "n_time", 4001, "sampling_implementation_1126.py: L_t = 4000 Simpson intervals"),
    ("three-points-paper", "quadrature", "simpson-t", "sampling_implementation_1126.py: Simpson weights"),
    ("three-points-paper", "n_noise", 4000, "sampling_implementation_1126.py: m_z = 4000"),
    ("three-points-paper", "schedules", ["1"], "sampling_implementation_1126.py: compute_UV_unweighted (w = 1)"),
    ("three-points-paper", "taus", [5.0, 10.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0, 10000.0, math.inf],
     "sampling_implementation_1126.py: TAUS_TO_TEST"),
    ("three-points-paper", "null_cutoff", "absolute", "sampling_implementation_1126.py: compute_A_infty"),
    ("three-points-paper", "t_min", 1e-3, "sampling_implementation_1126.py: start_t = 1e-3, t_min = 1e-3"),
    ("three-points-paper", "n_samples", 2000, "sampling_implementation_1126.py: num_samples=2000"),
    ("three-points-paper", "n_steps", 2000, "sampling_implementation_1126.py: num_steps=2000"),
    ("mnist-authors", "digits", [1], "Sampling_Quantifying/MNIST.ipynb: target_digit = 1"),
    ("mnist-authors", "T", 10.0, "MNIST.ipynb: CONFIG['T'] = 10.0"),
    ("mnist-authors", "lr", 1e-4, "MNIST.ipynb: optim.Adam(score_model.parameters(), lr=0.0001)"),
    ("mnist-authors", "batch_size", 1024, "MNIST.ipynb: CONFIG['batch_size'] = 1024"),
    ("mnist-authors", "keep", "best", "MNIST.ipynb: best_model_state by epoch_loss"),
    # optimizer steps, not epochs: theirs run over ~6 742 images of the digit (7 steps an epoch at batch 1024), the
    # entry over the bundled subset's 500 (one step an epoch), so it keeps their step counts
    ("mnist-authors", "vae_steps", 100 * 7, "MNIST.ipynb: CONFIG['vae_epochs'] = 100 over 6 742 images at batch 1024"),
    ("mnist-authors", "mlp_steps", 150 * 7, "MNIST.ipynb: 150 epochs over 6 742 images at batch 1024"),
    ("mnist-authors", "n_samples", 2000, "MNIST.ipynb: 2 000 samples in the histograms (the batch of the maximum)"),
    ("mnist-authors", "vae_batch_size", 1024, "MNIST.ipynb: train_loader batch_size = CONFIG['batch_size']"),
    ("mnist-authors", "score_scale", "inverse_sigma", "MNIST.ipynb: score = score_model(x, t_batch) / std"),
    ("mnist-authors", "n_steps", 1000, "MNIST.ipynb: euler_maruyama_sampler num_steps=1000"),
    ("mnist-authors", "t_min", 1e-3, "MNIST.ipynb: t_min = 1e-3; loss eps = 1e-3"),
    ("mnist-authors", "schedules", ["1"], "MNIST.ipynb: loss weight 1 / h_t on |s sigma + z|^2 (w = 1)"),
    ("mnist-authors", "d_star", 25, "MNIST.ipynb: d_star = 25"),
]


def _setting(exp, name):
    block = exp.blocks[0]
    mnist = exp.dataset.mnist
    return {"points": lambda: exp.dataset.points, "T": lambda: exp.process.T, "t_min": lambda: exp.process.t_min,
            "widths": lambda: block.values("width"), "n_frequencies": lambda: block.n_frequencies,
            "n_time": lambda: exp.training.n_time, "quadrature": lambda: exp.training.quadrature,
            "n_noise": lambda: exp.training.n_noise, "taus": lambda: block.taus,
            "null_cutoff": lambda: exp.training.null_cutoff, "schedules": lambda: exp.schedules,
            "n_samples": lambda: exp.n_samples, "n_steps": lambda: exp.process.n_steps,
            "digits": lambda: mnist.digits, "lr": lambda: block.lr, "batch_size": lambda: block.batch_size,
            "keep": lambda: exp.training.keep,
            # the bundled subset (no IDX files here): 500 images of the digit, ceil(500 / batch) steps an epoch
            "vae_steps": lambda: mnist.epochs * math.ceil(500 / mnist.batch_size),
            "mlp_steps": lambda: max(block.epoch_list) * math.ceil(500 / block.batch_size),
            "vae_batch_size": lambda: mnist.batch_size, "score_scale": lambda: exp.sampler.score_scale,
            "d_star": lambda: exp.d_star}[name]()


@pytest.fixture(scope="module")
def builtin_catalog():
    return open_catalog()


@pytest.mark.parametrize("entry, name, value, source", AUTHORS_SETTINGS)
def test_paper_entries_use_the_authors_settings(builtin_catalog, entry, name, value, source):
    exp = builtin_catalog[entry]
    assert _setting(exp, name) == value, f"{entry}: {name} differs from the authors' ({source})"


def test_renamed_paper_entries_say_so_and_name_the_new_entry(builtin_catalog):
    cat = builtin_catalog
    for old, new in (("square-center-paper", "square-center-ours"), ("grid-3x3-paper", "grid-3x3-ours")):
        assert old not in cat.experiments and new in cat.experiments
        with pytest.raises(KeyError, match=f"renamed in ridgexr 0.4.*did you mean '{new}'"):
            cat[old]


def test_point_law_entries_store_more_fresh_draws_than_samples():
    """The quality gate of a manifold or mixture cell uses the first S fresh draws (population_data) as its
    perfect sampler and the rest as the reference (quality.point_quality): an entry with S samples needs more
    than S.  Read from this checkout's catalog files (manifold-coverage and -circle once had S >= 2000 = the
    default)."""
    short = []
    for path in sorted((Path(__file__).resolve().parents[1] / "catalogs").glob("*.yaml")):
        for name, exp in load_catalog_file(path).items():
            law = exp.dataset.manifold or exp.dataset.mixture
            if law is not None and law.n_population <= exp.n_samples:
                short.append(f"{path.name}:{name} ({law.n_population} <= {exp.n_samples})")
    assert not short, short


def test_the_default_entry_is_a_quick_demo_with_claims_where_reach_is_not_true_by_construction():
    """`ridgexr run` without a name runs defaults.DEFAULT_ENTRY: a catalog entry on a point set that is not on one
    line (on a line the ridge is that line and every model predicts the normal coordinate exactly, so reach and align
    are true by construction and every cell's ridge distance is the same), with the three schedules, several widths
    and the exact denoiser, claims of the registry's cell kinds written before its run (not post hoc), and a plan
    of under 30 s on 2 idle cores (the README's first command runs it)."""
    import inspect

    from ridgexr import defaults
    from ridgexr.claims import check_claim_specs
    from ridgexr.cli import run
    from ridgexr.run.plan import estimate_stage_seconds

    assert inspect.signature(run).parameters["name"].default.default == defaults.DEFAULT_ENTRY
    exp = open_catalog()[defaults.DEFAULT_ENTRY]
    train = load_training_set(exp.dataset)
    assert train.shape[1] == 2 and np.linalg.matrix_rank(train - train.mean(0), tol=1e-9) == 2
    assert set(exp.cell_schedules) == {"1", "h", "h2", "exact"} and len(exp.model.widths) >= 3
    check_claim_specs(exp.claims)
    assert {c.kind for c in exp.claims} >= {"reach-falls", "align-tangent", "slide-slower"}
    assert not any(c.post_hoc for c in exp.claims) and all(c.written for c in exp.claims)
    assert sum(estimate_stage_seconds(exp, train).values()) < 30
