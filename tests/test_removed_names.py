"""The spellings removed in 0.4 are refused: not a parameter, a TypeError or AttributeError, a CLI usage error.

Each call uses arguments under which the current spelling works, so a forwarding shim left in
place would make the call succeed and the test fail.  The replacements are in CHANGELOG.md.
"""

import inspect
import math
import re

import numpy as np
import pytest
import torch
import xarray as xr
from typer.testing import CliRunner

import ridgexr
from ridgexr import SmoothedEmpirical, projection, reader, report, sampling, time_grid
from ridgexr.analysis import memorization_fraction, summary_table
from ridgexr.catalog import experiment_from_file
from ridgexr.cli import app
from ridgexr.run import run_experiment
from ridgexr.training import GradientFlow

TWO = np.array([[-3.0, 0.0], [3.0, 0.0]])

# (function, removed keyword, its replacement)
REMOVED_KEYWORDS = [
    (projection.project_to_ridge, "dim", "feature_dim"),
    (projection.ridge_residual, "dim", "feature_dim"),
    (projection.ridge_frame, "dim", "feature_dim"),
    (sampling.reverse_sde, "dim", "d"),
    (sampling.probability_flow, "dim", "d"),
    (report.make_report, "frames", "n_frames"),
    (reader.open_dataset, "out_dir", "data_dir"),
    (ridgexr.open_dataset, "out_dir", "data_dir"),
    (run_experiment, "out_dir", "data_dir"),
    (summary_table, "mode_r", "r"),
    (summary_table, "n_boot", "ci"),
    (memorization_fraction, "n_boot", "ci_method"),
    (memorization_fraction, "seed", "ci_method"),
]


@pytest.mark.parametrize("func, old, new", REMOVED_KEYWORDS,
                         ids=[f"{f.__module__}.{f.__name__}-{old}" for f, old, _ in REMOVED_KEYWORDS])
def test_signature_is_real_and_has_only_the_new_name(func, old, new):
    # follow_wrapped=False: a functools.wraps shim would show its own (*args, **kwargs) here
    params = inspect.signature(func, follow_wrapped=False).parameters
    kinds = {p.kind for p in params.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds
    assert old not in params
    assert new in params


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory, write_catalog):
    tmp = tmp_path_factory.mktemp("removed")
    return run_experiment(experiment_from_file(write_catalog(tmp, steps=5, samples=4)), data_dir=tmp / "data").store


@pytest.fixture(scope="module")
def walk_ds():
    """A synthetic one-cell store Dataset (two training points, four samples, five steps)."""
    walk = np.random.default_rng(0).normal(size=(1, 1, 4, 5, 2)) * 3
    return xr.Dataset({
        "trajectory": (("schedule", "width", "sample", "step", "dim"), walk),
        "ridge_projection": (("schedule", "width", "sample", "step", "dim"), walk),
        "ridge_distance": (("schedule", "width", "sample", "step"), np.abs(walk[..., 0])),
        "train_data": (("train", "dim"), TWO)},
        coords={"schedule": ["1"], "width": [8], "t": ("step", np.linspace(1, 0.1, 5)),
                "alpha": ("step", np.exp(-np.linspace(1, 0.1, 5)))})


def _refused(call, old):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
        call()


@pytest.mark.parametrize("name", ["project_to_ridge", "ridge_residual", "ridge_frame"])
def test_labelled_dim_is_refused(name):
    p = SmoothedEmpirical(TWO, 0.5)
    x = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "coord"))
    func = getattr(projection, name)
    assert func(p, x, 1, feature_dim="coord") is not None
    _refused(lambda: func(p, x, 1, dim="coord"), "dim")


@pytest.mark.parametrize("name", ["reverse_sde", "probability_flow"])
def test_sampler_dim_is_refused(name):
    func = getattr(sampling, name)
    grid = time_grid(3, 1.0, 0.1)
    assert list(func(lambda x, t: -x, 2, 2, grid, seed=0))[-1].x.shape[-2:] == (2, 2)
    _refused(lambda: list(func(lambda x, t: -x, 2, grid=grid, dim=2, seed=0)), "dim")


def test_make_report_frames_is_refused(tiny_store, tmp_path):
    ds = ridgexr.open_dataset(tiny_store)
    _refused(lambda: report.make_report(ds, tmp_path / "rep", frames=2), "frames")
    assert not (tmp_path / "rep").exists()


def test_open_dataset_out_dir_is_refused(tiny_store):
    assert ridgexr.open_dataset(tiny_store, data_dir=tiny_store.parent).sizes["sample"] == 4
    _refused(lambda: ridgexr.open_dataset(tiny_store, out_dir=tiny_store.parent), "out_dir")


def test_run_experiment_out_dir_is_refused(tmp_path, write_catalog):
    exp = experiment_from_file(write_catalog(tmp_path, steps=5, samples=4))
    _refused(lambda: run_experiment(exp, out_dir=tmp_path / "data"), "out_dir")
    assert not (tmp_path / "data").exists()


# the random walk has no phase times, so their median in the summary is over NaNs only
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")
def test_summary_table_mode_r_and_n_boot_are_refused(walk_ds):
    assert summary_table(walk_ds, r=0.25).compute().near_mode.size == 1
    _refused(lambda: summary_table(walk_ds, r=0.5, mode_r=0.25), "mode_r")
    _refused(lambda: summary_table(walk_ds, n_boot=100), "n_boot")


@pytest.mark.parametrize("old", ["n_boot", "seed"])
def test_memorization_bootstrap_arguments_are_refused(walk_ds, old):
    assert memorization_fraction(walk_ds).compute().memorized.size == 1
    _refused(lambda: memorization_fraction(walk_ds, **{old: 3}), old)


@pytest.mark.parametrize("old, new", [("project", "project_to_ridge"), ("residual", "ridge_residual"),
                                      ("frame", "ridge_frame")])
def test_dataarray_accessor_short_names_are_gone(old, new):
    acc = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "dim")).ridge
    assert callable(getattr(acc, new))
    with pytest.raises(AttributeError):
        getattr(acc, old)


@pytest.mark.parametrize("old, new", [("position", "ridge_position"), ("memorization", "memorization_fraction"),
                                      ("summary", "summary_table")])
def test_dataset_accessor_short_names_are_gone(walk_ds, old, new):
    acc = walk_ds.ridge
    assert callable(getattr(acc, new))
    with pytest.raises(AttributeError):
        getattr(acc, old)


def test_gradient_flow_A_method_is_gone():
    U = torch.eye(3, dtype=torch.float64)
    flow = GradientFlow(U, torch.ones(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64))
    assert flow.path([1.0, math.inf]).A.shape == (2, 2, 3)
    with pytest.raises(AttributeError):
        flow.A


def test_report_frames_option_is_refused(tiny_store, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["report", str(tiny_store), "--out", str(tmp_path / "rep"), "--frames", "2"])
    assert r.exit_code == 2 and "--frames" in r.output, r.output
    assert not (tmp_path / "rep").exists()


def test_run_out_option_is_refused(tmp_path, write_catalog):
    cat = write_catalog(tmp_path, steps=5, samples=4)
    r = CliRunner().invoke(app, ["run", str(cat), "--out", str(tmp_path / "data")])
    assert r.exit_code == 2 and "--out" in r.output, r.output
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------- removed in the model and catalog move


@pytest.mark.parametrize("old", ["d", "feature_period"])  # `dim=` and `T=` were their 0.1 spellings
def test_random_feature_dim_and_T_are_refused(old):
    from ridgexr import RandomFeatureDenoiser

    params = inspect.signature(RandomFeatureDenoiser.__init__).parameters
    assert old in params and "dim" not in params and "T" not in params
    with pytest.raises(TypeError):
        RandomFeatureDenoiser(2, 4, T=3.0)
    with pytest.raises(TypeError):
        RandomFeatureDenoiser(dim=2, width=4)
    m = RandomFeatureDenoiser(2, 4, feature_period=3.0)
    for attr in ("T", "dim"):
        with pytest.raises(AttributeError):
            getattr(m, attr)


def test_smoothed_empirical_dim_is_gone():
    with pytest.raises(AttributeError):
        SmoothedEmpirical(TWO, 0.5).dim


def test_experiment_load_train_is_gone(tmp_path, write_catalog):
    exp = experiment_from_file(write_catalog(tmp_path))
    with pytest.raises(AttributeError):
        exp.load_train()


@pytest.mark.parametrize("module", ["ridgexr.neural", "ridgexr.external", "ridgexr.training.neural",
                                    "ridgexr._deprecation", "ridgexr.store.variables", "ridgexr.engine"])
def test_old_module_paths_are_gone(module):
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_catalog_feature_period_T_is_refused_with_its_replacement():
    from ridgexr.models import validate_block

    with pytest.raises(Exception, match=r"'T' was removed in 0.4: leave feature_period out \(null\)"):
        validate_block({"widths": [4], "feature_period": "T"})
    assert validate_block({"widths": [4]}).feature_period is None


def test_the_renamed_labelled_module_says_where_its_functions_went():
    """ridgexr.labelled (the ridge projection's labelled layer) is ridgexr.projection since issue 43."""
    import ridgexr

    with pytest.raises(AttributeError, match="ridgexr.labelled was renamed ridgexr.projection"):
        ridgexr.labelled
    assert ridgexr.projection.project_to_ridge is projection.project_to_ridge


def test_the_renamed_backend_module_says_where_it_went():
    """ridgexr.engine (the xarray backend, not the claims engine) is ridgexr.xarray_backend; engine="ridgexr"
    still names the backend."""
    from importlib.metadata import entry_points

    import ridgexr

    with pytest.raises(AttributeError, match="ridgexr.engine was renamed ridgexr.xarray_backend"):
        ridgexr.engine
    (point,) = [e for e in entry_points(group="xarray.backends") if e.name == "ridgexr"]
    assert point.value == "ridgexr.xarray_backend:RidgexrBackendEntrypoint"
    assert "ridgexr" in xr.backends.list_engines()


# ---------------------------------------------------------------- removed with the claims registry


@pytest.mark.parametrize("module, name", [("ridgexr.analysis.arrays", "slope_verdict"),
                                          ("ridgexr.analysis.arrays", "SLOPE_VERDICTS"),
                                          ("ridgexr.choices", "CLAIM_KINDS"),
                                          ("ridgexr.catalog.sections", "CLAIM_TIMES"),
                                          ("ridgexr.defaults", "TIMESCALE_MEM_LEVEL")])
def test_the_names_the_claims_registry_replaced_are_gone(module, name):
    """A second verdict function, the kinds' names and times outside the registry, and a second memorization
    threshold: their replacements are the registry (ridgexr.claims.KINDS: timescale-slope's criterion, each kind's
    times) and ridgexr.defaults.MEMORIZED_SHARE."""
    import importlib

    from ridgexr import claims, defaults

    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), name)
    assert "timescale-slope" in claims.KINDS and claims.KINDS["reach-falls"].times == 2
    assert defaults.MEMORIZED_SHARE == 0.1


def test_training_timescales_writes_no_verdict_of_its_own():
    """The slopes' verdicts are the registry's (ridgexr.claims.timescale_slope.slope_claims), not variables of the
    analysis."""
    from ridgexr.analysis import training_timescales

    epochs, sizes = [1, 10, 100], [64, 128, 256]
    r = np.where(np.asarray(epochs)[:, None, None] >= np.asarray(sizes)[None, :, None], 0.1, 0.8) * np.ones((1, 1, 50))
    ds = xr.Dataset({"nearest_ratio": (("epoch", "n_train", "sample", "step"), r[..., None]),
                     "quality_sliced_wasserstein": (("epoch", "n_train"), np.ones((3, 3)))},
                    coords={"epoch": epochs, "n_train": sizes, "step": [0], "t": ("step", [0.001])})
    out = training_timescales(ds, n_boot=20)
    assert "tau_mem_slope" in out and "tau_mem_slope_points" in out
    assert "tau_mem_verdict" not in out and "tau_gen_verdict" not in out


# ---------------------------------------------------------------- moved when training stopped importing models

KINDS = ("random_features", "exact", "mlp", "module", "diffusers", "unet")


@pytest.mark.parametrize("old, new", [(f"ridgexr.models.{k}.training", f"ridgexr.models.{k}.fit_adapter") for k in KINDS]
                         + [("ridgexr.models.parametrization", "ridgexr.parametrization")])
def test_modules_moved_out_of_the_training_models_cycle_are_gone(old, new):
    """Each kind's fit adapter is ``ridgexr.models.<kind>.fit_adapter`` (``training`` named the package it calls);
    the output parametrizations sit below both training and the models, in ``ridgexr.parametrization``."""
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert importlib.import_module(new) is not None


def test_the_random_feature_network_lives_below_training():
    """The network that training fits and the kind builds on is ``ridgexr.features.RandomFeatureDenoiser``; the
    kind's denoiser module names it for its builder, and the spec's lists are the catalog's (``ridgexr.choices``)."""
    from ridgexr import choices, features
    from ridgexr.models import RandomFeatureDenoiser, random_features
    from ridgexr.models.random_features import denoiser

    assert RandomFeatureDenoiser is features.RandomFeatureDenoiser is denoiser.RandomFeatureDenoiser
    assert random_features.ACTIVATION_NAMES == choices.RF_ACTIVATIONS == tuple(features.ACTIVATIONS)
    for name in ("draw_features", "ACTIVATIONS", "PARAMETRIZATIONS"):
        assert not hasattr(denoiser, name), name


# ---------------------------------------------------------------- removed with the store's small face

#: every name ``ridgexr.store`` exported before it kept what a user needs, with the module that owns it
STORE_NAMES_MOVED = {
    "ridgexr.schema": ["ARRAYS_SCHEMA", "CELL_DIAGNOSTICS", "CELL_DIMS", "CELL_QUALITY", "CF_ATTRS", "COORD_ATTRS",
                       "DEGENERATE_FLAGS", "QUALITY_VARIABLES", "SCHEMA_VERSION", "SINCE", "STEP_BOOL", "STEP_INT",
                       "STEP_OPTIONAL", "STEP_SCALAR", "STEP_VARIABLES", "STEP_VECTOR", "VARIABLES", "VARIABLE_ATTRS",
                       "Variable", "schema_older"],
    "ridgexr.store.layout": ["CODECS", "ROOT_ATTRS", "StoreLayout", "chunk_keys", "write_template"],
    "ridgexr.store.opening": ["EAGER_COORDS", "IN_PROCESS", "PinnedStore", "cell_label", "is_consolidated",
                              "per_cell_arrays"],
    "ridgexr.store.update": ["clear_completion", "consolidate", "set_root_attrs"],
    "ridgexr.store.lock": ["LOCK_NAME"],
    "ridgexr.store.lifecycle": ["IDENTIFYING_ARRAYS", "Opening", "SWAP_NAME", "chunk_leftover", "commit_staging",
                                "create_staging", "create_store", "damaged_root", "finish_interrupted",
                                "foreign_entries", "interrupted", "journal_path", "open_for_run", "recover_store",
                                "remove_partial_creations", "remove_partial_files", "replace_store"],
    "ridgexr.store.integrity": ["CONSOLIDATED", "Damage", "NOT_DIGESTED", "cell_digest", "check_schema",
                                "creation_array", "missing_chunks", "repair_schema", "restore_marks"],
    "ridgexr.store.record": ["DECODING_ATTRS", "RECORD", "SCHEMA_FIELDS", "read_record"],
    "ridgexr.store.write": ["CellWriter", "copy_cell", "write_block", "write_cell_end"],
}


@pytest.mark.parametrize("owner, name", [(o, n) for o, names in STORE_NAMES_MOVED.items() for n in names])
def test_names_that_left_the_store_package_say_which_module_owns_them(owner, name):
    """``ridgexr.store.X`` of a name the package no longer exports is an AttributeError naming the module that owns
    it (``from ridgexr.store import X`` an ImportError); the name is there."""
    import importlib

    import ridgexr.store

    assert name not in ridgexr.store.__all__
    with pytest.raises(AttributeError, match=f"import it from {owner.replace('.', '[.]')} "):
        getattr(ridgexr.store, name)
    with pytest.raises(ImportError):
        exec(f"from ridgexr.store import {name}", {})
    assert hasattr(importlib.import_module(owner), name)


# ---------------------------------------------------------------- modules renamed so that no two share a name

#: (old module path, the words of the AttributeError its parent raises for it, where its names are now)
RENAMED_MODULES = [("ridgexr.analysis.labelled", "was renamed ridgexr.analysis.trajectories",
                    ("ridgexr.analysis.trajectories", "phase_times")),
                   ("ridgexr.analysis.ensemble", "was renamed ridgexr.analysis.pooled_draws",
                    ("ridgexr.analysis.pooled_draws", "gap_mass")),
                   ("ridgexr.analysis.claims", "was removed: the verdict names are ridgexr.verdicts'",
                    ("ridgexr.analysis.arrays", "median_interval")),
                   ("ridgexr.quality.labelled", "was renamed ridgexr.quality.store_quality",
                    ("ridgexr.quality.store_quality", "sample_quality")),
                   ("ridgexr.quality.images", "was renamed ridgexr.quality.pixel_quality",
                    ("ridgexr.quality.pixel_quality", "image_quality")),
                   ("ridgexr.models.spec", "was renamed ridgexr.models.model_spec",
                    ("ridgexr.models.model_spec", "ModelSpec")),
                   ("ridgexr.run.experiment", "was renamed ridgexr.run.runner",
                    ("ridgexr.run.runner", "execute"))]


@pytest.mark.parametrize("old, words, new", RENAMED_MODULES, ids=[r[0] for r in RENAMED_MODULES])
def test_renamed_modules_are_gone_and_say_where_their_names_went(old, words, new):
    """``analysis.labelled`` / ``quality.labelled`` and ``analysis.claims`` / ``claims/`` and ``analysis.ensemble`` /
    ``run.ensemble`` shared a module name: the old path does not import, its parent's attribute names the new one."""
    import importlib

    parent, name = old.rsplit(".", 1)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    with pytest.raises(AttributeError, match=f"ridgexr[.]{parent.split('.', 1)[1]}[.]{name} {re.escape(words)}"):
        getattr(importlib.import_module(parent), name)
    assert hasattr(importlib.import_module(new[0]), new[1])


def test_no_two_modules_of_the_package_share_a_name_outside_the_model_kinds():
    """A module's (or package's) name says what it is, once: the names shared are only a model kind's own files
    (``models/<kind>/denoiser.py``, ``fit_adapter.py``, ``cost.py``, one per kind as diffusers has them)."""
    from collections import Counter
    from pathlib import Path

    pkg = Path(ridgexr.__file__).parent
    # a package is named by its folder
    names = Counter(p.parent.name if p.name == "__init__.py" else p.stem for p in pkg.rglob("*.py"))
    kind_files = {"denoiser", "fit_adapter", "cost"}
    shared = {n for n, c in names.items() if c > 1} - kind_files
    assert not shared, shared
