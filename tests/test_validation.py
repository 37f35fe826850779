"""The one validation helper: types, bounds and messages (property-based)."""

import math
import numbers
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ridgexr._validation import check_float, check_int, check_option, check_scalar


@given(v=st.integers(-10**6, 10**6), lo=st.integers(-100, 100), width=st.integers(0, 200))
def test_check_int_accepts_exactly_the_closed_interval(v, lo, width):
    hi = lo + width
    if lo <= v <= hi:
        assert check_int(v, "n", min_val=lo, max_val=hi) == v
        assert check_int(np.int64(v), "n", min_val=lo, max_val=hi) == v
    else:
        with pytest.raises(ValueError, match=r"^`n` must be (>=|<=) .*; got "):
            check_int(v, "n", min_val=lo, max_val=hi)


@given(v=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
       bound=st.floats(-10, 10), side=st.sampled_from(["both", "left", "right", "neither"]))
def test_check_scalar_boundaries(v, bound, side):
    low_ok = side in ("both", "left")
    ok = v > bound or (v == bound and low_ok)
    if ok:
        assert check_scalar(v, "x", numbers.Real, min_val=bound, include_boundaries=side) == v
    else:
        with pytest.raises(ValueError, match="`x` must be"):
            check_scalar(v, "x", numbers.Real, min_val=bound, include_boundaries=side)


@pytest.mark.parametrize("bad", [True, np.bool_(False), 1.0, "3", None, [1]])
def test_wrong_types_are_type_errors_naming_the_argument(bad):
    with pytest.raises(TypeError, match=r"^`n_samples` must be an integer; got "):
        check_int(bad, "n_samples", min_val=1)


def test_floats_nan_and_infinity():
    with pytest.raises(ValueError, match="must not be NaN"):
        check_float(math.nan, "tol")
    with pytest.raises(ValueError, match="must be finite"):
        check_float(math.inf, "tol")
    assert check_float(math.inf, "tau", finite=False) == math.inf
    with pytest.raises(TypeError, match="`tol` must be a real number"):
        check_float("1e-3", "tol")
    assert isinstance(check_float(3, "T"), float)


def test_check_option_names_choices():
    assert check_option("sde", "kind", ("sde", "ode")) == "sde"
    with pytest.raises(ValueError, match=r"`kind` must be one of \('sde', 'ode'\); got 'euler'"):
        check_option("euler", "kind", ("sde", "ode"))
    with pytest.raises(ValueError, match="`kind` must be one of"):
        check_option(["sde"], "kind", {"sde": 1})  # unhashable: not an option, not a crash


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (3,)])  # one time takes the Python-float path
@pytest.mark.parametrize("bad, message", [(0.0, "`t` must be > 0, got min 0.0"), (-2.0, "`t` must be > 0, got min -2.0"),
                                          (math.nan, "`t` contains 1 non-finite"), (math.inf, "`t` contains 1 non-finite")])
def test_positive_time_check_names_the_argument_for_one_time_and_many(shape, bad, message):
    from ridgexr._backend import check_positive_time

    good = torch.full(shape, 0.5, dtype=torch.float64)
    check_positive_time(good, "`t`")
    t = good.clone()
    t.view(-1)[-1] = bad
    with pytest.raises(ValueError, match=re.escape(message)):
        check_positive_time(t, "`t`")
