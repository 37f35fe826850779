"""Renamed public names keep working for one release and warn (FutureWarning) when used."""

import math

import numpy as np
import pytest
import torch
import xarray as xr

from ridgexr import RandomFeatureDenoiser, SmoothedEmpirical, labelled, time_grid
from ridgexr.analysis import summary_table
from ridgexr.sampling import reverse_sde
from ridgexr.training import GradientFlow

TWO = np.array([[-3.0, 0.0], [3.0, 0.0]])


def test_labelled_dim_is_now_feature_dim():
    p = SmoothedEmpirical(TWO, 0.5)
    x = xr.DataArray(np.array([[1.0, 2.0]]), dims=("sample", "coord"))
    new = labelled.project_to_ridge(p, x, 1, feature_dim="coord")
    with pytest.warns(FutureWarning, match=r"project_to_ridge\(dim=...\).*feature_dim"):
        old = labelled.project_to_ridge(p, x, 1, dim="coord")
    xr.testing.assert_identical(old, new)
    with pytest.raises(TypeError, match="both"):
        labelled.ridge_residual(p, x, 1, dim="coord", feature_dim="coord")


@pytest.mark.parametrize("old, new, args", [
    ("project", "project_to_ridge", (1,)), ("residual", "ridge_residual", (1,)), ("frame", "ridge_frame", (1,)),
])
def test_dataarray_accessor_short_names(old, new, args):
    p = SmoothedEmpirical(TWO, 0.5)
    x = xr.DataArray(np.array([[1.0, 2.0], [0.0, 1.0]]), dims=("sample", "dim"))
    with pytest.warns(FutureWarning, match=fr"\.ridge\.{old}\(\).*\.ridge\.{new}\(\)"):
        a = getattr(x.ridge, old)(p, *args)
    xr.testing.assert_identical(a, getattr(x.ridge, new)(p, *args))
    xr.testing.assert_identical(a, getattr(labelled, new)(p, x, *args))


def test_model_T_is_feature_period():
    with pytest.warns(FutureWarning, match=r"T=\.\.\..*feature_period"):
        m = RandomFeatureDenoiser(2, 4, n_frequencies=2, T=7.0)
    assert m.feature_period == 7.0
    with pytest.warns(FutureWarning, match="RandomFeatureDenoiser.feature_period"):
        assert m.T == 7.0
    x = torch.ones(3, 2, dtype=torch.float64)
    np.testing.assert_array_equal(m.features(x, 0.4).numpy(),
                                  RandomFeatureDenoiser(2, 4, n_frequencies=2, feature_period=7.0).features(x, 0.4).numpy())


def test_size_arguments_are_d():
    with pytest.warns(FutureWarning, match="dim"):
        m = RandomFeatureDenoiser(dim=2, width=4, n_frequencies=1)
    assert m.d == 2
    with pytest.warns(FutureWarning, match="RandomFeatureDenoiser.d"):
        assert m.dim == 2
    assert not hasattr(SmoothedEmpirical(TWO, 0.5), "dim")  # removed in 0.4, without an alias
    grid = time_grid(3, 1.0, 0.1)
    with pytest.warns(FutureWarning, match=r"reverse_sde\(dim=...\)"):
        old = list(reverse_sde(lambda x, t: -x, 2, grid=grid, dim=2, seed=0))
    new = list(reverse_sde(lambda x, t: -x, 2, 2, grid, seed=0))
    assert torch.equal(old[-1].x, new[-1].x)


def test_gradient_flow_A_is_path():
    U = torch.eye(3, dtype=torch.float64)
    V = torch.ones(2, 3, dtype=torch.float64)
    flow = GradientFlow(U, V, torch.zeros(2, 3, dtype=torch.float64))
    with pytest.warns(FutureWarning, match="path"):
        old = flow.A([1.0, math.inf])
    assert torch.equal(old, flow.path([1.0, math.inf]).A)


def test_summary_table_mode_r_is_r():
    rng = np.random.default_rng(0)
    walk = rng.normal(size=(1, 1, 4, 5, 2))
    ds = xr.Dataset({
        "trajectory": (("schedule", "width", "sample", "step", "dim"), walk),
        "ridge_projection": (("schedule", "width", "sample", "step", "dim"), walk),
        "ridge_distance": (("schedule", "width", "sample", "step"), np.abs(walk[..., 0])),
        "train_data": (("train", "dim"), TWO)},
        coords={"schedule": ["1"], "width": [8], "t": ("step", np.linspace(1, 0.1, 5)),
                "alpha": ("step", np.exp(-np.linspace(1, 0.1, 5)))})
    with pytest.warns(FutureWarning, match="mode_r"):
        old = summary_table(ds, r=0.5, mode_r=0.25).compute()
    new = summary_table(ds, r=0.25).compute()
    np.testing.assert_array_equal(old.near_mode.values, new.near_mode.values)


def test_experiment_load_train_forwards_to_datasets():
    from ridgexr import open_catalog
    from ridgexr.datasets import load_training_set

    exp = open_catalog()["two-points"]
    with pytest.warns(FutureWarning, match="load_training_set"):
        old = exp.load_train()
    np.testing.assert_array_equal(old, load_training_set(exp.dataset))


def test_bootstrap_arguments_of_memorization_warn_and_are_ignored():
    from ridgexr.analysis import memorization_fraction

    rng = np.random.default_rng(1)
    walk = rng.normal(size=(1, 1, 6, 3, 2)) * 3
    ds = xr.Dataset({"trajectory": (("schedule", "width", "sample", "step", "dim"), walk),
                     "train_data": (("train", "dim"), TWO)},
                    coords={"schedule": ["1"], "width": [8], "alpha": ("step", [0.5, 0.7, 0.9])})
    with pytest.warns(FutureWarning, match="n_boot"):
        old = memorization_fraction(ds, n_boot=100, seed=3).compute()
    xr.testing.assert_identical(old, memorization_fraction(ds).compute())
