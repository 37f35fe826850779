"""Geometry kernels: the ridge frame and subspace-constrained mean shift on flat tensors.

This is the array kernel behind :mod:`ridgexr.ridge` (which validates, reshapes and
converts) and :mod:`ridgexr.observe` (which observes sampler blocks).  Every function
here takes *flat, validated* torch tensors -- queries ``xf`` (Q, d) and times ``tf`` (Q,)
-- and returns typed results whose field names are the public ones.

The frame at x (see :mod:`ridgexr.ridge` for the definitions) comes from one
eigendecomposition of the posterior covariance Cov[x0 | x_t = x] (log ridge) or of
grad^2 p / p (density ridge); SCMS iterates x <- x + E E^T (alpha_t E[x0|x] - x) for all
points at once with an active set, each point stopping when its normal step is below
``tol``.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from .empirical import Moments, SmoothedEmpirical

__all__ = ["eigh_2x2", "CLOSED_FORM_MAX_D", "RIDGE_KINDS", "FlatFrame", "ScmsResult", "batched_eigh", "fix_signs",
           "frame_flat", "frame_from_moments", "project_onto", "default_tol", "scms"]

RIDGE_KINDS = ("log", "density")


@dataclass
class FlatFrame:
    """The ridge frame at Q flat queries (torch tensors).

    Attributes
    ----------
    step : (Q, d)  mean-shift step alpha_t E[x0|x] - x = h_t grad log p_t(x), data units
    normal : (Q, d, d - d*)  orthonormal normal basis
    tangent : (Q, d, d*)  orthonormal tangent basis
    eigenvalues : (Q, d)  Hessian eigenvalues, descending, 1 / data units^2
    normal_curvature : (Q,)  eigenvalues[:, d*], the largest normal eigenvalue
    eigengap : (Q,)  eigenvalues[:, d*-1] - eigenvalues[:, d*] (inf for d* = 0)
    degenerate : (Q,)  the gap is below its certified numerical floor
    alpha, h : (Q,)  alpha_t and h_t at each query
    dropped_mass : (Q,)  posterior mass dropped by top-k truncation
    resolved_rank : (Q,)  int, posterior-covariance eigenvalues above the numerical floor
        2 d cov_error + sqrt(eps) mu_max of the O(1)-scaled covariance (the floor of
        ``degenerate``): the number of directions in which the posterior is resolved;
        -1 for ``kind="density"`` (not computed)
    """

    step: torch.Tensor
    normal: torch.Tensor
    tangent: torch.Tensor
    eigenvalues: torch.Tensor
    normal_curvature: torch.Tensor
    eigengap: torch.Tensor
    degenerate: torch.Tensor
    alpha: torch.Tensor
    h: torch.Tensor
    dropped_mass: torch.Tensor
    resolved_rank: torch.Tensor | None = None


@dataclass
class ScmsResult:
    """Result of :func:`scms` at Q flat starting points (fields as in :class:`ridgexr.RidgeProjection`).

    ``residual``, ``normal_curvature``, ``eigengap``, ``degenerate`` and ``dropped_mass``
    are evaluated at ``point``, the last position of each point.
    """

    point: torch.Tensor
    converged: torch.Tensor
    iterations: torch.Tensor
    residual: torch.Tensor
    normal_curvature: torch.Tensor
    eigengap: torch.Tensor
    degenerate: torch.Tensor
    dropped_mass: torch.Tensor

    @property
    def on_ridge(self) -> torch.Tensor:
        """Converged and normal curvature < 0."""
        return self.converged & (self.normal_curvature < 0)


@functools.lru_cache(maxsize=None)
def _eigh_pool(n_threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(n_threads, thread_name_prefix="ridgexr-eigh")


#: batches of symmetric matrices up to this size use the closed form (2 x 2: one rotation angle)
CLOSED_FORM_MAX_D = 2


def eigh_2x2(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Closed-form eigendecomposition of symmetric 2 x 2 matrices (B, 2, 2), vectorised.

    For [[a, b], [b, c]]: eigenvalues (a + c)/2 -+ hypot((a - c)/2, b) (ascending), the
    eigenvector of the larger one at the angle theta = atan2(b, (a - c)/2) / 2.  The absolute
    error is O(eps |M|), the same guarantee as LAPACK's ``syevd``; a repeated eigenvalue
    returns the identity basis (any basis is valid, and the callers flag such frames).
    """
    a, c = m[:, 0, 0], m[:, 1, 1]
    b = 0.5 * (m[:, 0, 1] + m[:, 1, 0])
    half = 0.5 * (a - c)
    r = torch.hypot(half, b)
    mean = 0.5 * (a + c)
    theta = 0.5 * torch.atan2(b, half)
    cos, sin = torch.cos(theta), torch.sin(theta)
    vals = torch.stack([mean - r, mean + r], -1)
    vecs = torch.stack([torch.stack([-sin, cos], -1), torch.stack([cos, sin], -1)], -1)  # columns: small, large
    return vals, vecs


def batched_eigh(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh`` over a batch (B, d, d), split across CPU threads; closed form for d = 2.

    torch's CPU eigh solves batch members one after another on one thread; splitting a
    large batch into ``torch.get_num_threads()`` parts (the kernels release the GIL)
    uses every core.  2 x 2 matrices use :func:`eigh_2x2` (a few vectorised passes instead
    of one LAPACK call per matrix).  CUDA input goes straight to torch.  Returns eigenvalues
    (B, d) ascending and eigenvectors (B, d, d) as columns.
    """
    if m.shape[-1] == 2 and CLOSED_FORM_MAX_D >= 2:
        return eigh_2x2(m)
    n_threads = torch.get_num_threads()
    if m.device.type != "cpu" or n_threads < 2 or m.shape[0] < 256:
        return torch.linalg.eigh(m)
    parts = list(_eigh_pool(n_threads).map(torch.linalg.eigh, m.chunk(n_threads)))
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def fix_signs(vecs: torch.Tensor) -> torch.Tensor:
    """Make each eigenvector's (column's) largest-magnitude entry positive (deterministic output)."""
    # argmax over a contiguous last axis: the same index (first maximum) as argmax over dim -2,
    # ~12x faster for large batches of small matrices
    idx = vecs.abs().transpose(-1, -2).contiguous().argmax(dim=-1)  # (..., k)
    sign = torch.sign(torch.gather(vecs, -2, idx.unsqueeze(-2)))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return vecs * sign


def project_onto(basis: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """B B^T v for orthonormal bases B (Q, d, k) and vectors v (Q, d) -> (Q, d)."""
    coef = torch.einsum("qdk,qd->qk", basis, v)
    return torch.einsum("qdk,qk->qd", basis, coef)


def frame_flat(density: SmoothedEmpirical, xf: torch.Tensor, tf: torch.Tensor, d_star: int, kind: str,
               top_k: int | None) -> FlatFrame:
    """The d*-dimensional ridge frame at flat queries xf (Q, d) with times tf (Q,).

    ``kind="log"``: eigenvectors of the O(1)-scaled posterior covariance (resolved even
    where the covariance underflows), eigenvalues mapped to the Hessian of log p_t.
    ``kind="density"``: eigh of grad^2 p / p = H + g g^T.  ``degenerate`` compares the
    tangent/normal gap with the certified error of the matrix (Weyl: d x the entry error)
    plus rounding.
    """
    mom = density.moments_flat(xf, tf, cov=True, top_k=top_k)
    return frame_from_moments(mom, xf, d_star, kind)


def frame_from_moments(mom: Moments, xf: torch.Tensor, d_star: int, kind: str, signs: bool = True) -> FlatFrame:
    """:func:`frame_flat` from moments already computed at xf (with ``cov=True``).

    ``signs=False`` skips :func:`fix_signs` (the projections N N^T and T T^T do not depend on
    the eigenvectors' signs; only frames handed to users need deterministic signs).
    """
    return _frame_diagnostics(_spectrum(mom, xf, d_star, kind), d_star, signs)


@dataclass
class _Spectrum:
    """One eigendecomposition behind a frame at Q points: SCMS forms the normal step from it every
    iteration and the diagnostics (:func:`_frame_diagnostics`) only when a point stops.

    ``vals`` (Q, d), ``vecs`` (Q, d, d), ascending: of the O(1)-scaled posterior covariance
    ``cov_unit`` (``kind="log"``) or of grad^2 p / p (``kind="density"``).
    """

    mom: Moments
    step: torch.Tensor
    vals: torch.Tensor
    vecs: torch.Tensor
    kind: str


def _spectrum(mom: Moments, xf: torch.Tensor, d_star: int, kind: str) -> _Spectrum:
    a, h = mom.alpha, mom.h
    step = a[:, None] * mom.mean - xf  # = h * grad log p
    if kind == "log":
        # eigenvectors from the O(1)-scaled covariance: resolved even where C underflows
        vals, vecs = batched_eigh(mom.cov_unit)  # ascending
    else:
        d = xf.shape[-1]
        g = step / h[:, None]
        eye = torch.eye(d, dtype=xf.dtype, device=xf.device)
        hess = (a[:, None, None] ** 2 * mom.cov - h[:, None, None] * eye) / h[:, None, None] ** 2
        m = hess + g[:, :, None] * g[:, None, :]
        vals, vecs = batched_eigh(0.5 * (m + m.transpose(1, 2)))
    return _Spectrum(mom=mom, step=step, vals=vals, vecs=vecs, kind=kind)


def _gap_floor(sp: _Spectrum, d_star: int):
    """The tangent/normal gap of the diagonalised matrix and its certified floor (Q,) each (d* > 0), and
    the Hessian eigenvalues (Q, d) ascending; ``degenerate`` is gap <= floor."""
    mom = sp.mom
    a, h = mom.alpha, mom.h
    d = sp.vals.shape[-1]
    eps = torch.finfo(sp.vals.dtype).eps
    if sp.kind == "log":
        mu_unit = sp.vals
        mu = torch.exp(mom.log_cov_scale)[:, None] * mu_unit
        lam = (a[:, None] ** 2 * mu - h[:, None]) / h[:, None] ** 2
        # eigenvalues of cov_unit are resolved to (Weyl) d x entry error, plus rounding
        floor = 2 * d * mom.cov_error + math.sqrt(eps) * mu_unit.abs().amax(-1)
        gap_c = mu_unit[:, d - d_star] - mu_unit[:, d - d_star - 1] if d_star > 0 else None
    else:
        lam = sp.vals
        cov_abs_err = mom.cov_error * torch.exp(mom.log_cov_scale)
        floor = 2 * d * cov_abs_err * (a / h) ** 2 + math.sqrt(eps) * lam.abs().amax(-1)
        gap_c = lam[:, d - d_star] - lam[:, d - d_star - 1] if d_star > 0 else None
    return gap_c, floor, lam


def _normal_basis(sp: _Spectrum, d_star: int) -> torch.Tensor:
    """The normal basis (Q, d, d - d*) of a spectrum, columns in the frame's (descending) order."""
    return torch.flip(sp.vecs, (-1,))[..., d_star:]


def _frame_diagnostics(sp: _Spectrum, d_star: int, signs: bool) -> FlatFrame:
    gap_c, floor, lam = _gap_floor(sp, d_star)
    h = sp.mom.h
    if sp.kind == "log":
        rank = (sp.vals > floor[:, None]).sum(-1)
    else:
        rank = torch.full_like(h, -1, dtype=torch.int64)
    vecs = fix_signs(sp.vecs) if signs else sp.vecs
    lam_desc = torch.flip(lam, (-1,))
    vecs_desc = torch.flip(vecs, (-1,))
    if d_star > 0:
        gap = lam_desc[:, d_star - 1] - lam_desc[:, d_star]
        degenerate = gap_c <= floor
    else:
        gap = torch.full_like(h, math.inf)
        degenerate = torch.zeros_like(h, dtype=torch.bool)
    return FlatFrame(step=sp.step, normal=vecs_desc[..., d_star:], tangent=vecs_desc[..., :d_star],
                     eigenvalues=lam_desc, normal_curvature=lam_desc[:, d_star], eigengap=gap,
                     degenerate=degenerate, alpha=sp.mom.alpha, h=h, dropped_mass=sp.mom.dropped_mass,
                     resolved_rank=rank)


def default_tol(dtype: torch.dtype, radius: float) -> float:
    """Default SCMS stopping tolerance on the normal step, data units: 1e-9 (1 + R) in
    float64 and 2e-5 (1 + R) in float32, R the training radius."""
    base = 1e-9 if dtype == torch.float64 else 2e-5
    return base * (1.0 + radius)


#: accelerate=True: a point's step is extrapolated when its last two plain ratios are below this...
ACCEL_MAX_RATIO = 0.995
#: ... agree to this fraction of 1 - ratio ...
ACCEL_RATIO_AGREEMENT = 0.05
#: ... and its last two normal steps point the same way to this cosine
ACCEL_MIN_COSINE = 0.999
ACCEL_DEVIATION = 1.0
ACCEL_HORIZON = 256
ACCEL_MIN_STEPS = 3
ACCEL_GROWTH = 1.5


def scms(density: SmoothedEmpirical, xf: torch.Tensor, tf: torch.Tensor, d_star: int, kind: str = "log",
         tol: float | None = None, max_iter: int = 500,
         top_k: int | None = None, stop_degenerate: int | None = None,
         accelerate: bool = False) -> tuple[ScmsResult, FlatFrame]:
    """SCMS from flat validated points xf (Q, d) at times tf (Q,).

    ``tol=None`` uses :func:`default_tol`.  ``stop_degenerate=k`` stops a point whose frame
    has been degenerate for k consecutive iterations (its normal space is arbitrary there, so
    further steps are too): it keeps ``converged = False`` and ``degenerate = True``.  Points
    whose frame never stays degenerate that long take exactly the steps of the default
    (``None``: iterate to ``tol`` or ``max_iter``).

    ``accelerate=True`` extrapolates the geometric tail of a point's normal steps (see the
    module docstring): same fixed points, same stopping rule, fewer iterations for slow points.

    Every iteration diagonalises the posterior covariance in full (a warm-started
    Rayleigh-Ritz/LOBPCG update of the top d* + 1 eigenpairs was measured slower on the CPU; see
    docs/performance.md); only the first frame gets deterministic eigenvector signs, and the
    other diagnostics are formed only in iterations where some point stops.

    Returns the result and the frame at the *starting* points (the first iteration's), so
    callers that also need the frame at x (e.g. the directional residuals of
    :mod:`ridgexr.observe`) do not evaluate it twice.
    """
    if tol is None:
        tol = default_tol(xf.dtype, density.radius)
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
    # the active points are kept compact (their positions, times and degenerate runs); a point's
    # results are written to the outputs once, when it stops, so an iteration in which no point
    # stops (the typical iteration of a slow tail) does no scattering at all
    active = torch.arange(q, device=dev)
    xa, ta = xf, tf
    run = torch.zeros(q, dtype=torch.int64, device=dev)  # consecutive degenerate frames (stop_degenerate)
    acc = _Extrapolation(xf, ACCEL_DEVIATION * tol) if accelerate else None
    first = None
    for it in range(max_iter + 1 if q else 0):
        mom = density.moments_flat(xa, ta, cov=True, top_k=top_k)
        sp = _spectrum(mom, xa, d_star, kind)
        fr = None
        if first is None:
            fr = first = _frame_diagnostics(sp, d_star, signs=True)  # the frame at the starting points, in their order
            normal = fr.normal
        else:
            normal = _normal_basis(sp, d_star)  # N N^T does not depend on the eigenvectors' signs
        nstep = project_onto(normal, sp.step)
        norm = nstep.norm(dim=-1)
        small = norm < tol
        stop = small.clone() if it < max_iter else torch.ones_like(small)  # the last evaluation ends every point
        if acc is not None and it < max_iter:
            stop &= acc.check(xa, nstep, norm)  # a rejected extrapolation is retried as a plain step
        if stop_degenerate is not None:
            if d_star > 0:
                gap_c, floor, _ = _gap_floor(sp, d_star)
                frame_degenerate = gap_c <= floor
            else:
                frame_degenerate = torch.zeros_like(small)
            run = torch.where(frame_degenerate, run + 1, 0)
            stop |= run >= stop_degenerate
        if bool(stop.any()):
            if fr is None:
                fr = _frame_diagnostics(sp, d_star, signs=False)
            done = active[stop]
            point[done] = xa[stop]
            residual[done] = norm[stop] / fr.h[stop]
            curvature[done] = fr.normal_curvature[stop]
            gap[done] = fr.eigengap[stop]
            degenerate[done] = fr.degenerate[stop]
            dropped[done] = fr.dropped_mass[stop]
            converged[done] = small[stop]
            iterations[done] = it
            keep = ~stop
            if not bool(keep.any()):
                break
            active, xa, ta, nstep, run = active[keep], xa[keep], ta[keep], nstep[keep], run[keep]
            if acc is not None:
                acc.keep(keep)
        xa = xa + nstep if acc is None else acc.step(xa, nstep)
    result = ScmsResult(point=point, converged=converged, iterations=iterations, residual=residual,
                        normal_curvature=curvature, eigengap=gap, degenerate=degenerate, dropped_mass=dropped)
    return result, first


class _Extrapolation:
    """Per-point state of ``accelerate=True``: the geometric-tail extrapolation of the normal steps.

    A plain SCMS step is f_k = E E^T (alpha E[x0|x_k] - x_k).  Where the iteration contracts
    linearly, f_{k+1} ~ r f_k, and the rest of the plain path sums to f_k / (1 - r).  A point
    whose last two plain ratios r = |f_k| / |f_{k-1}| agree (to ``ACCEL_RATIO_AGREEMENT`` (1 - r)),
    are below ``ACCEL_MAX_RATIO`` and whose last two steps point the same way (cosine >=
    ``ACCEL_MIN_COSINE``) steps x_k + f_k / (1 - r) (over-relaxation along its own normal step,
    so a fixed point, f = 0, is one of the plain iteration).  The next evaluation checks it:
    a step that did not shrink undoes the extrapolation (the point takes the plain step
    x_k + f_k instead, that evaluation is not tested against ``tol``) and the point is not
    extrapolated again.  After an extrapolation two plain steps re-measure the ratio.
    """

    def __init__(self, xf: torch.Tensor, eps: float):
        self.eps = eps
        q = xf.shape[0]
        self.j = torch.arange(ACCEL_HORIZON, dtype=xf.dtype, device=xf.device)
        self.limit = torch.zeros(q, dtype=xf.dtype, device=xf.device)
        dev, dt = xf.device, xf.dtype
        self.prev_step = torch.zeros_like(xf)  # f_{k-1}
        self.prev_norm = torch.zeros(q, dtype=dt, device=dev)
        self.prev_ratio = torch.full((q,), math.inf, dtype=dt, device=dev)
        self.plain = torch.zeros(q, dtype=torch.int64, device=dev)  # plain steps since the last extrapolation
        self.jumped = torch.zeros(q, dtype=torch.bool, device=dev)  # the last step was extrapolated
        self.banned = torch.zeros(q, dtype=torch.bool, device=dev)
        self.base = xf  # x_k of the last step (to undo an extrapolation)
        self.redo = torch.zeros(q, dtype=torch.bool, device=dev)

    def check(self, xa: torch.Tensor, nstep: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """After an evaluation: False where an extrapolation is undone (that point must not stop now)."""
        self.redo = self.jumped & (norm > self.limit)
        return ~self.redo

    def keep(self, keep: torch.Tensor) -> None:
        for name in ("prev_step", "prev_norm", "prev_ratio", "plain", "jumped", "banned", "base", "redo", "limit"):
            setattr(self, name, getattr(self, name)[keep])

    def _omega(self, norm, ratio, cosine, prev_ratio):
        """Relaxation factor: the sum of the next m plain steps under the geometric model, the largest m
        whose deviation from that model (turning and ratio drift) is within the budget."""
        j = self.j
        r = ratio.clamp(0, 2)[:, None]
        pw = r ** j
        theta = torch.sqrt((2 * (1 - cosine)).clamp_min(0))[:, None]
        drift = (ratio - prev_ratio).abs()[:, None] / r.clamp_min(1e-3)
        s0 = pw.cumsum(-1)
        dev = norm[:, None] * (theta * (j * pw).cumsum(-1) + drift * (0.5 * j * (j - 1) * pw).cumsum(-1))
        m = (dev <= self.eps).sum(-1)  # dev grows with m
        omega = torch.gather(s0, 1, (m - 1).clamp_min(0)[:, None])[:, 0]
        rm = torch.gather(pw, 1, m.clamp(max=pw.shape[1] - 1)[:, None])[:, 0]
        r1 = r[:, 0]
        one = (1 - r1).clamp_min(1e-300)
        dev_inf = norm * (theta[:, 0] * r1 / one ** 2 + drift[:, 0] * r1 ** 2 / one ** 3)
        inf = (r1 < ACCEL_MAX_RATIO) & (dev_inf <= self.eps)
        omega = torch.where(inf, 1 / one, omega)
        limit = torch.where(inf, norm, ACCEL_GROWTH * norm * rm)
        return omega, m, inf, limit

    def step(self, xa: torch.Tensor, nstep: torch.Tensor) -> torch.Tensor:
        norm = nstep.norm(dim=-1)
        redo = self.redo
        ratio = norm / self.prev_norm
        cosine = (nstep * self.prev_step).sum(-1) / (norm * self.prev_norm)
        ready = (self.plain >= 2) & ~self.banned & ~redo & (cosine >= ACCEL_MIN_COSINE)
        # cheap screen: the deviation of the shortest extrapolation (ACCEL_MIN_STEPS = 3 steps) within the budget
        r = ratio.clamp(0, 2)
        theta = torch.sqrt((2 * (1 - cosine)).clamp_min(0))
        ready &= norm * (theta * (r + 2 * r * r) + (ratio - self.prev_ratio).abs() * r) <= self.eps
        go = ready.clone()
        omega = torch.ones_like(norm)
        if bool(ready.any()):
            rows = ready.nonzero().squeeze(1)
            om, m, inf, limit = self._omega(norm[rows], ratio[rows], cosine[rows], self.prev_ratio[rows])
            ok = inf | (m >= ACCEL_MIN_STEPS)
            rows, om, limit = rows[ok], om[ok], limit[ok]
            go = torch.zeros_like(ready)
            go[rows] = True
            omega[rows] = om
            self.limit[rows] = limit
        if bool(redo.any()):  # undo: the plain step from the point before the extrapolation
            plain_from = torch.where(redo[:, None], self.base + self.prev_step, xa)
            self.banned = self.banned | redo
        else:
            plain_from = None
        new = xa + omega[:, None] * nstep
        if plain_from is not None:
            new = torch.where(redo[:, None], plain_from, new)
            # the undone point's state is that of its plain step from base: keep f_{k-1}
            nstep = torch.where(redo[:, None], self.prev_step, nstep)
            norm = torch.where(redo, self.prev_norm, norm)
            ratio = torch.where(redo, self.prev_ratio, ratio)
        self.base = torch.where(redo[:, None], self.base, xa)
        self.plain = torch.where(go, 0, torch.where(redo, 0, self.plain + 1))
        self.jumped = go
        self.prev_step, self.prev_norm, self.prev_ratio = nstep, norm, ratio
        return new
