"""One place for argument checks at the package boundary.

In the style of scikit-learn's ``utils.validation.check_scalar``: every check names the
argument and the bad value, raises ``TypeError`` for a value of the wrong type and
``ValueError`` for a value of the right type outside its allowed range or set.  Messages
read "`{name}` must be ...; got ...".

Public functions call these once, before any work (and the labelled wrappers before they
build a dask graph); code behind the boundary trusts validated values.  This module
imports nothing from ridgexr.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import numpy as np

__all__ = ["check_scalar", "check_int", "check_float", "check_option", "check_optional_int", "check_bool"]

_BOUNDS = ("both", "left", "right", "neither")


def _type_name(target_type) -> str:
    if isinstance(target_type, tuple):
        return " or ".join(_type_name(t) for t in target_type)
    return {numbers.Integral: "an integer", numbers.Real: "a real number"}.get(
        target_type, f"{getattr(target_type, '__name__', target_type)}")


def check_scalar(value: Any, name: str, target_type: type | tuple, *, min_val: float | None = None,
                 max_val: float | None = None, include_boundaries: str = "both") -> Any:
    """Check that ``value`` is a scalar of ``target_type`` inside [min_val, max_val].

    Parameters
    ----------
    value : object
        The argument to check.
    name : str
        Its name, used in the message.
    target_type : type or tuple of types
        E.g. ``numbers.Integral`` or ``numbers.Real``.  ``bool`` is never accepted as a
        number (``True`` is not a sample count).
    min_val, max_val : float, optional
        Bounds; ``None`` means unbounded on that side.
    include_boundaries : {"both", "left", "right", "neither"}
        Which bounds are allowed values.

    Returns
    -------
    The value unchanged.

    Raises
    ------
    TypeError
        If ``value`` is not an instance of ``target_type`` (or is a bool).
    ValueError
        If ``value`` is NaN or lies outside the bounds.

    Examples
    --------
    >>> import numbers
    >>> check_scalar(3, "n_steps", numbers.Integral, min_val=1)
    3
    >>> check_scalar(0, "n_steps", numbers.Integral, min_val=1)
    Traceback (most recent call last):
    ...
    ValueError: `n_steps` must be >= 1; got 0
    """
    if include_boundaries not in _BOUNDS:
        raise ValueError(f"`include_boundaries` must be one of {_BOUNDS}; got {include_boundaries!r}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, target_type):
        raise TypeError(f"`{name}` must be {_type_name(target_type)}; got {value!r} "
                        f"of type {type(value).__name__}")
    if isinstance(value, numbers.Real) and math.isnan(value):
        raise ValueError(f"`{name}` must not be NaN; got {value!r}")
    low_ok = include_boundaries in ("both", "left")
    high_ok = include_boundaries in ("both", "right")
    if min_val is not None and (value < min_val or (value == min_val and not low_ok)):
        raise ValueError(f"`{name}` must be {'>=' if low_ok else '>'} {min_val}; got {value!r}")
    if max_val is not None and (value > max_val or (value == max_val and not high_ok)):
        raise ValueError(f"`{name}` must be {'<=' if high_ok else '<'} {max_val}; got {value!r}")
    return value


def check_int(value: Any, name: str, *, min_val: int | None = None, max_val: int | None = None) -> int:
    """An integer (Python or numpy, not bool) in [min_val, max_val]; returns ``int(value)``.

    Examples
    --------
    >>> check_int(np.int64(4), "width", min_val=1)
    4
    """
    return int(check_scalar(value, name, numbers.Integral, min_val=min_val, max_val=max_val))


def check_optional_int(value: Any, name: str, *, min_val: int | None = None,
                       max_val: int | None = None) -> int | None:
    """``None``, or an integer as in :func:`check_int`."""
    return None if value is None else check_int(value, name, min_val=min_val, max_val=max_val)


def check_float(value: Any, name: str, *, min_val: float | None = None, max_val: float | None = None,
                include_boundaries: str = "both", finite: bool = True) -> float:
    """A real number (int or float, not bool) in the bounds, finite unless ``finite=False``.

    Returns ``float(value)``.

    Examples
    --------
    >>> check_float(0.5, "t_min", min_val=0, include_boundaries="neither")
    0.5
    >>> check_float(float("inf"), "T")
    Traceback (most recent call last):
    ...
    ValueError: `T` must be finite; got inf
    """
    check_scalar(value, name, numbers.Real, min_val=min_val, max_val=max_val,
                 include_boundaries=include_boundaries)
    if finite and not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite; got {value!r}")
    return float(value)


def check_bool(value: Any, name: str) -> bool:
    """A bool (Python or numpy); returns ``bool(value)``.

    Examples
    --------
    >>> check_bool(True, "accelerate")
    True
    >>> check_bool(1, "accelerate")
    Traceback (most recent call last):
    ...
    TypeError: `accelerate` must be a bool; got 1 of type int
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be a bool; got {value!r} of type {type(value).__name__}")
    return bool(value)


def check_option(value: Any, name: str, options: Iterable) -> Any:
    """``value`` must be one of ``options`` (compared with ``in``).

    Examples
    --------
    >>> check_option("log", "kind", ("log", "density"))
    'log'
    """
    options = tuple(options)
    try:
        ok = value in options
    except TypeError:  # unhashable value against a dict's keys
        ok = False
    if not ok:
        raise ValueError(f"`{name}` must be one of {options}; got {value!r}")
    return value
