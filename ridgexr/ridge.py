"""The log-density ridge R_t of the smoothed empirical density: frame, residual, projection.

At a point x let H = grad^2 log p_t(x) with eigenvalues l_1 >= ... >= l_d and
eigenvectors v_1..v_d.  For a ridge dimension d* the *tangent* space is span(v_1..v_d*)
and the *normal* space E = [v_{d*+1} .. v_d] (the d - d* smallest eigenvalues).  x is on
the d*-dimensional ridge when

    E E^T grad log p_t(x) = 0        and        l_{d*+1} < 0.

Because H = (alpha_t^2 Cov[x0|x] - h_t I) / h_t^2 is an increasing function of the
posterior covariance C, the frame is computed from eigh(C), which is better conditioned:
tangent = top-d* eigenvectors of C.

``kind="density"`` uses instead the Hessian of p_t itself, grad^2 p / p = H + g g^T with
g = grad log p (the classic density ridge of Ozertem & Erdogmus).

Projection is subspace-constrained mean shift (SCMS): the mean-shift step of the
Gaussian mixture, alpha_t E[x0|x] - x = h_t grad log p_t(x), projected on the normal
space, iterated for all points at once until the normal step is below ``tol``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from ._backend import as_tensor, to_like
from ._validation import check_bool, check_float, check_int, check_option, check_optional_int
from .empirical import SmoothedEmpirical
from .scms import FRAME_METHODS, RIDGE_KINDS, default_tol, frame_flat, scms

__all__ = ["RidgeFrame", "RidgeProjection", "ridge_frame", "ridge_residual", "project_to_ridge",
           "suggest_d_star", "check_ridge_args", "default_tol", "RIDGE_KINDS"]


@dataclass
class RidgeFrame:
    """Local ridge geometry at a batch of points (arrays of the input's kind).

    Attributes
    ----------
    tangent : (..., d, d*)  orthonormal tangent basis (top-d* Hessian eigenvectors)
    normal : (..., d, d - d*)  orthonormal normal basis (the remaining eigenvectors)
    eigenvalues : (..., d)  Hessian eigenvalues, descending (1 / data-units^2)
    normal_curvature : (...,)  largest normal eigenvalue, eigenvalues[..., d*]; < 0 on a ridge
    eigengap : (...,)  eigenvalues[..., d*-1] - eigenvalues[..., d*] (inf when d* = 0)
    degenerate : (...,)  True where the gap is below the numerical floor, so the
        tangent/normal split is not determined by the data (eigenvectors are still
        returned deterministically: each column's largest-magnitude entry is positive)
    """

    tangent: Any
    normal: Any
    eigenvalues: Any
    normal_curvature: Any
    eigengap: Any
    degenerate: Any


@dataclass
class RidgeProjection:
    """Result of :func:`project_to_ridge` (arrays of the input's kind, batch shape ``...``).

    Attributes
    ----------
    point : (..., d)  the projected point (data units)
    converged : (...,)  the normal step fell below ``tol`` within ``max_iter`` iterations
    iterations : (...,)  SCMS iterations used
    residual : (...,)  |E E^T grad log p_t| at ``point`` (1 / data units)
    normal_curvature : (...,)  largest normal Hessian eigenvalue at ``point``
    eigengap : (...,)  Hessian eigengap between tangent and normal space at ``point``
    degenerate : (...,)  the frame at ``point`` is numerically undetermined
    on_ridge : (...,)  converged and normal_curvature < 0
    dropped_mass : (...,)  posterior mass dropped by top-k truncation (0 without it)
    """

    point: Any
    converged: Any
    iterations: Any
    residual: Any
    normal_curvature: Any
    eigengap: Any
    degenerate: Any
    on_ridge: Any
    dropped_mass: Any


# ---------------------------------------------------------------------------- validation
def check_ridge_args(density: Any, d_star: Any, *, kind: Any = "log", tol: Any = None, max_iter: Any = 1,
                     top_k: Any = None, stop_degenerate: Any = None, accelerate: Any = False,
                     frame: Any = "auto") -> dict:
    """Validate the arguments shared by the ridge functions; returns them normalised.

    The single rule for ``density`` (a :class:`SmoothedEmpirical`), ``d_star`` (integer in
    [0, d)), ``kind`` (one of :data:`RIDGE_KINDS`), ``tol`` (None or finite > 0),
    ``max_iter`` (integer >= 1), ``top_k`` and ``stop_degenerate`` (None or integer >= 1), ``accelerate``
    (a bool), ``frame`` (one of :data:`~ridgexr.scms.FRAME_METHODS`; ``"lowrank"`` needs ``kind="log"``),
    used by the array
    functions here and by :mod:`ridgexr.projection` before it builds a dask graph.

    Raises
    ------
    TypeError, ValueError
        Naming the argument and the bad value.
    """
    if not isinstance(density, SmoothedEmpirical):
        raise TypeError(f"`density` must be a SmoothedEmpirical; got {type(density).__name__}")
    kind = check_option(kind, "kind", RIDGE_KINDS)
    frame = check_option(frame, "frame", FRAME_METHODS)
    if frame == "lowrank" and kind != "log":
        raise ValueError(f"`frame` = 'lowrank' needs kind = 'log' (the low-rank paths diagonalise the posterior "
                         f"covariance); got kind = {kind!r}")
    return dict(
        d_star=check_int(d_star, "d_star", min_val=0, max_val=density.d - 1),
        kind=kind,
        tol=None if tol is None else check_float(tol, "tol", min_val=0, include_boundaries="neither"),
        max_iter=check_int(max_iter, "max_iter", min_val=1),
        top_k=check_optional_int(top_k, "top_k", min_val=1),
        stop_degenerate=check_optional_int(stop_degenerate, "stop_degenerate", min_val=1),
        accelerate=check_bool(accelerate, "accelerate"),
        frame=frame,
    )


def _flatten(density: SmoothedEmpirical, x: Any):
    xt, tb = density.validate_queries(x)
    return xt, xt.reshape(-1, density.d), tb.reshape(-1)


# ---------------------------------------------------------------------------- public
def ridge_frame(density: SmoothedEmpirical, x: Any, d_star: int, *, kind: str = "log",
                top_k: int | None = None) -> RidgeFrame:
    """Tangent and normal bases of the d*-dimensional ridge frame at ``x``.

    Parameters
    ----------
    density : SmoothedEmpirical
        p_t; its ``t`` broadcasts against the batch shape of ``x``.
    x : array (..., d)
        Query points (numpy or torch).
    d_star : int
        Ridge dimension, 0 <= d_star < d.
    kind : {"log", "density"}
        Frame of the Hessian of log p_t (default, the paper's ridge) or of p_t.
    top_k : int, optional
        Truncate the posterior to the k most responsible training points.

    Returns
    -------
    RidgeFrame
        tangent (..., d, d*), normal (..., d, d-d*), eigenvalues (..., d) descending, ...

    Examples
    --------
    >>> import numpy as np
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> f = ridge_frame(p, np.array([0.0, 0.3]), 1)
    >>> np.abs(f.tangent[:, 0]).round(6).tolist()
    [1.0, 0.0]
    """
    args = check_ridge_args(density, d_star, kind=kind, top_k=top_k)
    d_star = args["d_star"]
    xt, xf, tf = _flatten(density, x)
    batch = xt.shape[:-1]
    d = xt.shape[-1]
    # the full bases and spectrum it returns come from the dense eigh (the low-rank frames of
    # ridge_residual and project_to_ridge hold only the top eigenpairs)
    fr = frame_flat(density, xf, tf, d_star, args["kind"], args["top_k"], frame="dense")
    out = RidgeFrame(
        tangent=fr.tangent.reshape(*batch, d, d_star),
        normal=fr.normal.reshape(*batch, d, d - d_star),
        eigenvalues=fr.eigenvalues.reshape(*batch, d),
        normal_curvature=fr.normal_curvature.reshape(batch),
        eigengap=fr.eigengap.reshape(batch),
        degenerate=fr.degenerate.reshape(batch),
    )
    return RidgeFrame(**{f.name: to_like(getattr(out, f.name), x) for f in fields(out)})


def ridge_residual(density: SmoothedEmpirical, x: Any, d_star: int, *, kind: str = "log",
                   top_k: int | None = None, frame: str = "auto") -> Any:
    """Norm of the normal part of the score, ``|E E^T grad log p_t(x)|``.

    Zero exactly on the ridge (first-order condition).  Units: 1 / data units.

    Parameters
    ----------
    density, x, d_star, kind, top_k
        As in :func:`ridge_frame`.
    frame : {"auto", "dense", "lowrank"}
        How the frame's eigenpairs are computed (as in :func:`project_to_ridge`).

    Returns
    -------
    array (...,)

    Examples
    --------
    >>> import numpy as np
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> float(ridge_residual(p, np.array([1.0, 0.0]), 1)) < 1e-12
    True
    """
    args = check_ridge_args(density, d_star, kind=kind, top_k=top_k, frame=frame)
    xt, xf, tf = _flatten(density, x)
    fr = frame_flat(density, xf, tf, args["d_star"], args["kind"], args["top_k"], frame=args["frame"])
    res = fr.project_normal(fr.step).norm(dim=-1) / fr.h
    return to_like(res.reshape(xt.shape[:-1]), x)


def project_to_ridge(density: SmoothedEmpirical, x: Any, d_star: int, *, kind: str = "log",
                     tol: float | None = None, max_iter: int = 500,
                     top_k: int | None = None, stop_degenerate: int | None = None,
                     accelerate: bool = False, frame: str = "auto") -> RidgeProjection:
    """Project points onto the d*-dimensional ridge by subspace-constrained mean shift.

    Iterates x <- x + E E^T (alpha_t E[x0|x] - x) for all points at once, each point
    stopping when its normal step ``|E E^T (alpha_t E[x0|x] - x)|`` < ``tol``.  Points that
    do not converge, or whose normal curvature is not negative, have ``on_ridge = False``.

    Parameters
    ----------
    density : SmoothedEmpirical
        p_t; ``density.t`` broadcasts against the batch shape of ``x``.
    x : array (..., d)
        Starting points (numpy or torch), data units.
    d_star : int
        Ridge dimension, 0 <= d_star < d (0 projects onto modes).
    kind : {"log", "density"}
        Ridge of log p_t (default) or of p_t (classic SCMS).
    tol : float, optional
        Stopping tolerance on the normal step, data units.  Default
        1e-9 (1 + R) in float64 and 2e-5 (1 + R) in float32, R the training radius.
    max_iter : int
        Iteration cap (>= 1).
    top_k : int, optional
        Truncate the posterior to the k most responsible training points
        (``dropped_mass`` reports what was left out).
    stop_degenerate : int, optional
        Stop a point after this many consecutive iterations with a degenerate frame (its
        normal space is numerically arbitrary, so its steps are too); it is reported with
        ``converged = False`` and ``degenerate = True``.  Default: iterate to ``tol``.
    accelerate : bool
        Extrapolate the geometric tail of a slow point's normal steps (:mod:`ridgexr.scms`):
        the same fixed points and stopping rule in fewer iterations; the projected points move
        within the plain iteration's own distance from its limit, ~ ``tol`` r / (1 - r) for a
        contraction ratio r (docs/performance.md).  Default False: the plain iteration.
    frame : {"auto", "dense", "lowrank"}
        How each iteration's frame is computed: ``"dense"`` diagonalises the (d, d) posterior
        covariance; ``"lowrank"`` computes only its top d* + 1 + 10 eigenpairs without forming it
        (:mod:`ridgexr.empirical.lowrank`: the k x k Gram matrix of a certified top-k support, a
        certified randomized subspace iteration where the posterior is spread; the log ridge only);
        ``"auto"`` (default) is dense up to d = 128 (``ridgexr.empirical.LOWRANK_MIN_D``) and low rank
        above.  Both give the same points to the certified accuracy (docs/reference.md).

    Returns
    -------
    RidgeProjection
        With ``point`` (..., d) and per-point diagnostics (...,).

    Raises
    ------
    TypeError
        When ``density`` is not a SmoothedEmpirical or an argument has the wrong type.
    ValueError
        On bad shapes, non-finite ``x``, ``d_star`` outside [0, d), bad ``kind``,
        ``tol <= 0``, ``max_iter < 1`` or ``top_k < 1`` (``TypeError`` for a non-bool ``accelerate``).

    Examples
    --------
    >>> import numpy as np
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> r = project_to_ridge(p, np.array([[1.0, 2.0]]), 1)
    >>> np.round(r.point, 6).tolist(), bool(r.on_ridge[0])
    ([[1.0, 0.0]], True)
    """
    args = check_ridge_args(density, d_star, kind=kind, tol=tol, max_iter=max_iter, top_k=top_k,
                            stop_degenerate=stop_degenerate, accelerate=accelerate, frame=frame)
    xt, xf, tf = _flatten(density, x)
    batch = xt.shape[:-1]
    d = xf.shape[1]
    res, _ = scms(density, xf, tf, **args)
    out = RidgeProjection(
        point=res.point.reshape(*batch, d), converged=res.converged.reshape(batch),
        iterations=res.iterations.reshape(batch), residual=res.residual.reshape(batch),
        normal_curvature=res.normal_curvature.reshape(batch), eigengap=res.eigengap.reshape(batch),
        degenerate=res.degenerate.reshape(batch), on_ridge=res.on_ridge.reshape(batch),
        dropped_mass=res.dropped_mass.reshape(batch),
    )
    return RidgeProjection(**{f.name: to_like(getattr(out, f.name), x) for f in fields(out)})


def suggest_d_star(train: Any, t: float, *, n_points: int = 256, seed: int = 0) -> tuple[int, np.ndarray]:
    """A ridge dimension from the data: the largest gap in the posterior-covariance spectrum.

    Evaluates Cov[x0 | x_t = x] at x = alpha_t x_i + sqrt(h_t) z for up to ``n_points``
    training points x_i (noisy copies at the small time ``t``), averages the descending
    eigenvalues over the points and returns d* = argmax_k log(mu_k / mu_{k+1}) (1 <= d* < d)
    with the averaged spectrum (d,).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> line = np.c_[np.linspace(-5, 5, 200), np.zeros((200, 2))]   # points on a line in 3-D
    >>> suggest_d_star(line, 0.05)[0]
    1
    """
    tr = np.asarray(as_tensor(train, name="train", dtype=torch.float64).cpu().numpy())
    n_points = check_int(n_points, "n_points", min_val=1)
    if tr.ndim != 2:
        raise ValueError(f"`train` must have shape (N, d); got shape {tr.shape}")
    n, d = tr.shape
    if d < 2:
        raise ValueError(f"`train` must have d >= 2 columns for suggest_d_star; got d={d}")
    dens = SmoothedEmpirical(tr, t)
    rng = np.random.default_rng(seed)
    idx = rng.choice(n, size=min(n, n_points), replace=False)
    a, h = dens.process.alpha(float(t)), dens.process.h(float(t))
    x = a * tr[idx] + math.sqrt(h) * rng.standard_normal((idx.size, d))
    mu = np.linalg.eigvalsh(dens.posterior_cov(x))[:, ::-1]
    spec = np.clip(mu, 0, None).mean(0)
    floor = max(float(spec[0]) * 1e-12, 1e-300)
    gaps = np.log(np.maximum(spec[:-1], floor)) - np.log(np.maximum(spec[1:], floor))
    return int(np.argmax(gaps)) + 1, spec
