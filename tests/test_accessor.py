"""The ``.ridge`` accessor: each method has its function's signature (minus the object argument) and
docstring, and returns what the function returns."""

import importlib
import inspect

import numpy as np
import pytest
import xarray as xr

import ridgexr  # noqa: F401  (registers the accessor)
from ridgexr.accessor import (DATAARRAY_METHODS, DATASET_METHODS, RidgeDataArrayAccessor,
                              RidgeDatasetAccessor)

TABLES = [(xr.DataArray(np.zeros((1, 2)), dims=("sample", "dim")), RidgeDataArrayAccessor, DATAARRAY_METHODS),
          (xr.Dataset(), RidgeDatasetAccessor, DATASET_METHODS)]


@pytest.mark.parametrize("obj, cls, table", TABLES, ids=["DataArray", "Dataset"])
def test_every_method_has_its_functions_signature_minus_the_object_and_its_docstring(obj, cls, table):
    assert set(table) <= set(dir(cls))
    for name, (module, argument) in table.items():
        func = getattr(importlib.import_module(f"ridgexr.{module}"), name)
        full = inspect.signature(func)
        expected = full.replace(parameters=[p for p in full.parameters.values() if p.name != argument])
        method = getattr(obj.ridge, name)
        assert inspect.signature(method) == expected, name
        assert argument in full.parameters and len(expected.parameters) == len(full.parameters) - 1
        assert "*args" not in str(inspect.signature(method))
        # the docstring is the function's (its first line, its Parameters), plus one line naming it
        doc, own = inspect.getdoc(method), inspect.getdoc(func)
        assert doc.splitlines()[0] == own.splitlines()[0], name
        assert f"ridgexr.{module}.{name}" in doc and "Forwards to" not in doc
        assert own.partition("\n\n")[2].strip() in doc
        # class access (help(), Sphinx): the same signature with self first
        unbound = inspect.signature(getattr(cls, name))
        assert list(unbound.parameters)[0] == "self"
        assert list(unbound.parameters)[1:] == list(expected.parameters)


def test_methods_forward_keyword_and_positional_arguments_and_refuse_unknown_ones(rng):
    from ridgexr import SmoothedEmpirical, projection

    train = rng.normal(size=(5, 2)) * 2
    p = SmoothedEmpirical(train, t=0.4)
    x = xr.DataArray(rng.normal(size=(7, 2)), dims=("sample", "dim"))
    direct = projection.ridge_residual(p, x, 1)
    for got in (x.ridge.ridge_residual(p, 1), x.ridge.ridge_residual(density=p, d_star=1),
                x.ridge.ridge_residual(p, d_star=1)):
        np.testing.assert_array_equal(got.values, direct.values)
    with pytest.raises(TypeError, match="ridge_residual\\(\\): got an unexpected keyword argument 'dstar'"):
        x.ridge.ridge_residual(p, 1, dstar=1)
    with pytest.raises(TypeError, match="missing a required argument: 'd_star'"):
        x.ridge.ridge_residual(p)
