import dask.array as da
import numpy as np
import pytest
import xarray as xr

import ridgexr
from ridgexr import SmoothedEmpirical, projection

THREE = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


def lazy_points(rng):
    x = rng.uniform(-1, 6, size=(3, 40, 2))
    return xr.DataArray(da.from_array(x, chunks=(1, 20, 2)), dims=("step", "sample", "dim"),
                        coords={"step": [0, 1, 2], "sample": np.arange(40)}, name="trajectory")


def test_projection_lazy_labelled_and_equal_to_array_layer(rng):
    p = SmoothedEmpirical(THREE, 0.3)
    x = lazy_points(rng)
    t = xr.DataArray([0.2, 0.4, 0.8], dims="step", coords={"step": [0, 1, 2]})
    ds = projection.project_to_ridge(p, x, 1, t=t)
    assert isinstance(ds.ridge_projection.data, da.Array)  # still lazy
    assert ds.ridge_projection.dims == ("step", "sample", "dim")
    assert ds.on_ridge.dims == ("step", "sample")
    assert ds.ridge_residual.attrs["units"] == "data_unit-1"
    np.testing.assert_array_equal(ds.sample.values, np.arange(40))
    res = ds.compute()
    ref = ridgexr.project_to_ridge(SmoothedEmpirical(THREE, t.values[:, None]), x.values, 1)
    np.testing.assert_allclose(res.ridge_projection.values, ref.point, atol=1e-12)
    np.testing.assert_array_equal(res.on_ridge.values, ref.on_ridge)


def test_residual_and_frame_and_accessor(rng):
    p = SmoothedEmpirical(THREE, 0.5)
    x = lazy_points(rng)
    r = x.ridge.ridge_residual(p, 1)
    assert isinstance(r.data, da.Array) and r.dims == ("step", "sample")
    np.testing.assert_allclose(r.values, ridgexr.ridge_residual(p, x.values, 1), rtol=1e-12)
    fr = x.ridge.ridge_frame(p, 1).compute()
    assert fr.tangent.dims == ("step", "sample", "dim", "tangent_axis")
    assert fr.normal.sizes["normal_axis"] == 1
    ref = ridgexr.ridge_frame(p, x.values, 1)
    np.testing.assert_allclose(fr.eigenvalues.values, ref.eigenvalues, rtol=1e-12)
    acc = x.ridge.project_to_ridge(p, 1).compute()
    np.testing.assert_allclose(acc.ridge_projection.values, ridgexr.project_to_ridge(p, x.values, 1).point)


def test_labelled_bad_input(rng):
    p = SmoothedEmpirical(THREE, 0.5)
    x = lazy_points(rng)
    with pytest.raises(ValueError, match="dim"):
        projection.project_to_ridge(p, x, 1, feature_dim="feature")
    with pytest.raises(ValueError, match="dim"):
        projection.project_to_ridge(p, x.isel(dim=[0]), 1)
    with pytest.raises(TypeError, match="x"):
        projection.project_to_ridge(p, x.values, 1)
    with pytest.raises(ValueError, match="d_star"):
        projection.ridge_residual(p, x, 2)


@pytest.mark.parametrize("kwargs, name", [
    (dict(kind="hessian"), "kind"), (dict(tol=-1.0), "tol"), (dict(max_iter=0), "max_iter"), (dict(top_k=0), "top_k"),
    (dict(stop_degenerate=0), "stop_degenerate"),
])
def test_labelled_validates_before_building_the_graph(rng, kwargs, name):
    p = SmoothedEmpirical(THREE, 0.5)
    x = lazy_points(rng)
    assert x.chunks  # dask-backed: a late check would only fire at .compute()
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        projection.project_to_ridge(p, x, 1, **kwargs)  # raises here, at the call
    if name not in ("tol", "max_iter", "stop_degenerate"):
        with pytest.raises(ValueError, match=f"`{name}` must be"):
            projection.ridge_frame(p, x, 1, **kwargs)


def test_labelled_accelerate_is_checked_at_the_call_and_reaches_scms(rng):
    p = SmoothedEmpirical(THREE, 0.5)
    x = lazy_points(rng)
    with pytest.raises(TypeError, match="`accelerate` must be a bool"):
        projection.project_to_ridge(p, x, 1, accelerate="yes")  # raises here, before .compute()
    fast = projection.project_to_ridge(p, x, 1, tol=1e-8, accelerate=True).compute()
    plain = projection.project_to_ridge(p, x, 1, tol=1e-8).compute()
    ref = ridgexr.project_to_ridge(p, x.values, 1, tol=1e-8, accelerate=True)
    np.testing.assert_allclose(fast.ridge_projection.values, ref.point, atol=1e-12)
    assert fast.ridge_iterations.sum() < plain.ridge_iterations.sum()  # the option reached SCMS
