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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from ._backend import as_tensor, to_like
from .empirical import SmoothedEmpirical

__all__ = ["RidgeFrame", "RidgeProjection", "ridge_frame", "ridge_residual", "project_to_ridge",
           "suggest_d_star", "RIDGE_KINDS"]

RIDGE_KINDS = ("log", "density")


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

    def as_dict(self) -> dict:
        """The fields as a plain dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# ---------------------------------------------------------------------------- validation
def _check_density(density: Any) -> SmoothedEmpirical:
    if not isinstance(density, SmoothedEmpirical):
        raise TypeError(f"density must be a SmoothedEmpirical, got {type(density).__name__}")
    return density


def _check_d_star(d_star: Any, d: int) -> int:
    if isinstance(d_star, bool) or not isinstance(d_star, (int, np.integer)):
        raise ValueError(f"d_star must be an integer in [0, {d}), got {d_star!r}")
    if not 0 <= int(d_star) < d:
        raise ValueError(f"d_star must be in [0, d) = [0, {d}), got {d_star}")
    return int(d_star)


def _check_kind(kind: str) -> str:
    if kind not in RIDGE_KINDS:
        raise ValueError(f"kind must be one of {RIDGE_KINDS}, got {kind!r}")
    return kind


# ---------------------------------------------------------------------------- core (flat)
_EIGH_POOL: ThreadPoolExecutor | None = None


def batched_eigh(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh`` over a batch (B, d, d), split across CPU threads.

    torch's CPU eigh solves batch members one after another on one thread; splitting a
    large batch into ``torch.get_num_threads()`` parts (the kernels release the GIL)
    uses every core.  CUDA input goes straight to torch.
    """
    global _EIGH_POOL
    nthreads = torch.get_num_threads()
    if m.device.type != "cpu" or nthreads < 2 or m.shape[0] < 256:
        return torch.linalg.eigh(m)
    if _EIGH_POOL is None or _EIGH_POOL._max_workers != nthreads:
        _EIGH_POOL = ThreadPoolExecutor(nthreads, thread_name_prefix="ridgexr-eigh")
    parts = list(_EIGH_POOL.map(torch.linalg.eigh, m.chunk(nthreads)))
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _fix_signs(vecs: torch.Tensor) -> torch.Tensor:
    """Make each eigenvector's largest-magnitude entry positive (deterministic output)."""
    idx = vecs.abs().argmax(dim=-2, keepdim=True)
    sign = torch.sign(torch.gather(vecs, -2, idx))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return vecs * sign


def _frame_flat(density: SmoothedEmpirical, xf: torch.Tensor, tf: torch.Tensor, d_star: int,
                kind: str, top_k: int | None):
    """Frame quantities at flat queries xf (Q, d) with times tf (Q,).

    Returns a dict of tensors: mean-shift step (Q, d), normal basis (Q, d, d-d*),
    tangent basis (Q, d, d*), Hessian eigenvalues descending (Q, d), eigengap,
    degenerate, h, dropped_mass.
    """
    mom = density._moments_flat(xf, tf, cov=True, top_k=top_k)
    a, h = mom["alpha"], mom["h"]
    d = xf.shape[-1]
    step = a[:, None] * mom["mean"] - xf  # = h * grad log p
    eps = torch.finfo(xf.dtype).eps
    if kind == "log":
        # eigenvectors from the O(1)-scaled covariance: resolved even where C underflows
        mu_unit, vecs = batched_eigh(mom["cov_unit"])  # ascending
        mu = torch.exp(mom["log_cov_scale"])[:, None] * mu_unit
        lam = (a[:, None] ** 2 * mu - h[:, None]) / h[:, None] ** 2
        # eigenvalues of cov_unit are resolved to (Weyl) d x entry error, plus rounding
        if d_star > 0:
            floor = 2 * d * mom["cov_error"] + math.sqrt(eps) * mu_unit.abs().amax(-1)
            gap_c = mu_unit[:, d - d_star] - mu_unit[:, d - d_star - 1]
    else:
        g = step / h[:, None]
        eye = torch.eye(d, dtype=xf.dtype, device=xf.device)
        hess = (a[:, None, None] ** 2 * mom["cov"] - h[:, None, None] * eye) / h[:, None, None] ** 2
        m = hess + g[:, :, None] * g[:, None, :]
        lam, vecs = batched_eigh(0.5 * (m + m.transpose(1, 2)))
        if d_star > 0:
            cov_abs_err = mom["cov_error"] * torch.exp(mom["log_cov_scale"])
            floor = 2 * d * cov_abs_err * (a / h) ** 2 + math.sqrt(eps) * lam.abs().amax(-1)
            gap_c = lam[:, d - d_star] - lam[:, d - d_star - 1]
    vecs = _fix_signs(vecs)
    lam_desc = torch.flip(lam, (-1,))
    vecs_desc = torch.flip(vecs, (-1,))
    tangent = vecs_desc[..., :d_star]
    normal = vecs_desc[..., d_star:]
    if d_star > 0:
        gap = lam_desc[:, d_star - 1] - lam_desc[:, d_star]
        degenerate = gap_c <= floor
    else:
        gap = torch.full_like(h, math.inf)
        degenerate = torch.zeros_like(h, dtype=torch.bool)
    return dict(step=step, normal=normal, tangent=tangent, eigenvalues=lam_desc, eigengap=gap,
                degenerate=degenerate, h=h, dropped_mass=mom["dropped_mass"])


def _project_onto(basis: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """B B^T v for orthonormal bases B (Q, d, k) and vectors v (Q, d)."""
    coef = torch.einsum("qdk,qd->qk", basis, v)
    return torch.einsum("qdk,qk->qd", basis, coef)


def _flatten(density: SmoothedEmpirical, x: Any, d_star: Any):
    density = _check_density(density)
    xt, tb = density._prepare(x)
    d = density.dim
    d_star = _check_d_star(d_star, d)
    return xt, xt.reshape(-1, d), tb.reshape(-1), d_star


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
    _check_kind(kind)
    xt, xf, tf, d_star = _flatten(density, x, d_star)
    batch = xt.shape[:-1]
    d = xt.shape[-1]
    fr = _frame_flat(density, xf, tf, d_star, kind, top_k)
    lam = fr["eigenvalues"]
    out = RidgeFrame(
        tangent=fr["tangent"].reshape(*batch, d, d_star),
        normal=fr["normal"].reshape(*batch, d, d - d_star),
        eigenvalues=lam.reshape(*batch, d),
        normal_curvature=lam[:, d_star].reshape(batch),
        eigengap=fr["eigengap"].reshape(batch),
        degenerate=fr["degenerate"].reshape(batch),
    )
    return RidgeFrame(**{f.name: to_like(getattr(out, f.name), x) for f in fields(out)})


def ridge_residual(density: SmoothedEmpirical, x: Any, d_star: int, *, kind: str = "log",
                   top_k: int | None = None) -> Any:
    """Norm of the normal part of the score, |E E^T grad log p_t(x)|.

    Zero exactly on the ridge (first-order condition).  Units: 1 / data units.

    Parameters
    ----------
    density, x, d_star, kind, top_k
        As in :func:`ridge_frame`.

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
    _check_kind(kind)
    xt, xf, tf, d_star = _flatten(density, x, d_star)
    fr = _frame_flat(density, xf, tf, d_star, kind, top_k)
    res = _project_onto(fr["normal"], fr["step"]).norm(dim=-1) / fr["h"]
    return to_like(res.reshape(xt.shape[:-1]), x)


def default_tol(dtype: torch.dtype, radius: float) -> float:
    """Default SCMS stopping tolerance on the normal step (data units)."""
    base = 1e-9 if dtype == torch.float64 else 2e-5
    return base * (1.0 + radius)


def project_to_ridge(density: SmoothedEmpirical, x: Any, d_star: int, *, kind: str = "log",
                     tol: float | None = None, max_iter: int = 500,
                     top_k: int | None = None) -> RidgeProjection:
    """Project points onto the d*-dimensional ridge by subspace-constrained mean shift.

    Iterates x <- x + E E^T (alpha_t E[x0|x] - x) for all points at once, each point
    stopping when its normal step |E E^T (alpha_t E[x0|x] - x)| < ``tol``.  Points that
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

    Returns
    -------
    RidgeProjection
        With ``point`` (..., d) and per-point diagnostics (...,).

    Raises
    ------
    ValueError
        On bad shapes, non-finite ``x``, ``d_star`` outside [0, d), bad ``kind``,
        ``tol <= 0`` or ``max_iter < 1``.

    Examples
    --------
    >>> import numpy as np
    >>> p = SmoothedEmpirical(np.array([[-3.0, 0.0], [3.0, 0.0]]), t=0.5)
    >>> r = project_to_ridge(p, np.array([[1.0, 2.0]]), 1)
    >>> np.round(r.point, 6).tolist(), bool(r.on_ridge[0])
    ([[1.0, 0.0]], True)
    """
    _check_kind(kind)
    xt, xf, tf, d_star = _flatten(density, x, d_star)
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if tol is not None and not (isinstance(tol, (int, float, np.floating)) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0, got {tol!r}")
    batch = xt.shape[:-1]
    d = xf.shape[1]
    out, _ = _scms(density, xf, tf, d_star, kind, tol, max_iter, top_k)
    point, converged, iterations, residual, curvature, gap, degenerate, dropped = (
        out[k] for k in ("point", "converged", "iterations", "residual", "curvature", "gap", "degenerate",
                         "dropped"))
    on_ridge = converged & (curvature < 0)
    res = RidgeProjection(
        point=point.reshape(*batch, d), converged=converged.reshape(batch),
        iterations=iterations.reshape(batch), residual=residual.reshape(batch),
        normal_curvature=curvature.reshape(batch), eigengap=gap.reshape(batch),
        degenerate=degenerate.reshape(batch), on_ridge=on_ridge.reshape(batch),
        dropped_mass=dropped.reshape(batch),
    )
    return RidgeProjection(**{f.name: to_like(getattr(res, f.name), x) for f in fields(res)})


def _scms(density: SmoothedEmpirical, xf: torch.Tensor, tf: torch.Tensor, d_star: int, kind: str,
          tol: float | None, max_iter: int, top_k: int | None):
    """SCMS on flat validated points xf (Q, d) at times tf (Q,); ``tol=None`` = :func:`default_tol`.

    Returns (dict of result tensors, the frame dict of ``_frame_flat`` at the starting points),
    so callers that also need the frame at x (e.g. the directional residuals) do not
    evaluate it a second time.
    """
    if tol is None:
        tol = default_tol(xf.dtype, math.sqrt(density._radius2(xf.dtype, xf.device)))
    q, d = xf.shape
    dev, dt = xf.device, xf.dtype
    point = xf.clone()
    converged = torch.zeros(q, dtype=torch.bool, device=dev)
    iterations = torch.zeros(q, dtype=torch.int64, device=dev)
    residual = torch.empty(q, dtype=dt, device=dev)
    curvature = torch.empty(q, dtype=dt, device=dev)
    gap = torch.empty(q, dtype=dt, device=dev)
    degenerate = torch.zeros(q, dtype=torch.bool, device=dev)
    dropped = torch.zeros(q, dtype=dt, device=dev)
    active = torch.arange(q, device=dev)

    def record(idx, fr, nstep):
        residual[idx] = nstep.norm(dim=-1) / fr["h"]
        curvature[idx] = fr["eigenvalues"][:, d_star]
        gap[idx] = fr["eigengap"]
        degenerate[idx] = fr["degenerate"]
        dropped[idx] = fr["dropped_mass"]

    first = None
    for _ in range(max_iter + 1):
        if active.numel() == 0:
            break
        fr = _frame_flat(density, point[active], tf[active], d_star, kind, top_k)
        if first is None:
            first = fr  # the frame at the starting points, in their order
        nstep = _project_onto(fr["normal"], fr["step"])
        small = nstep.norm(dim=-1) < tol
        record(active, fr, nstep)
        converged[active[small]] = True
        still = ~small
        if _ == max_iter:  # evaluated the final position; no step left
            break
        moving = active[still]
        point[moving] = point[moving] + nstep[still]
        iterations[moving] += 1
        active = moving
    out = dict(point=point, converged=converged, iterations=iterations, residual=residual, curvature=curvature,
               gap=gap, degenerate=degenerate, dropped=dropped)
    return out, first


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
    n, d = tr.shape
    if d < 2:
        raise ValueError(f"suggest_d_star needs d >= 2, got d={d}")
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
