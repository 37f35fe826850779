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

Cost of an iteration.  One moment pass (:meth:`SmoothedEmpirical.moments_flat`), one batched
``eigh`` and two batched matrix products (the normal step); the eigenvalue diagnostics
(curvature, gap, degenerate flag, rank) are formed only in iterations where some point stops,
and the per-point bookkeeping (the stopping rule, ``stop_degenerate``'s runs, the acceleration
state) runs on numpy arrays of the active points, so an iteration with one or a few active points
(the tail of slow points) costs little more than its moment pass.  The default loop gives the
plain loop's results bit for bit (tests/test_scms.py).

Straggler tails (``accelerate=True``).  Where a point's plain steps f_k = E E^T (alpha E[x0|x_k] -
x_k) follow a geometric model -- ratio r = |f_k| / |f_{k-1}|, turning angle theta between
consecutive steps -- the next m plain steps are replaced by their predicted sum omega f_k,
omega = sum_{j<m} r^j (the whole tail, 1 / (1 - r), where r < 0.995), with the longest run m
(3 to 256 steps) whose predicted deviation from those steps, were the turning and the drift of r
to persist, is at most ``tol`` (:class:`_Extrapolation`).  This is over-relaxation of the normal mean-shift
step along itself: a fixed point (f = 0) is one of the plain iteration, the stopping rule is the
plain one (|f| < tol at an evaluated point), and an extrapolation whose next step exceeds the
predicted one is undone (the plain step is taken instead).  The points differ from the plain
iteration's by no more than the plain end point's own distance from its limit, ~ tol r / (1 - r),
except where the plain path crawls past an unstable region and its end point moves as much when
its start moves by ``tol`` (tested on hypothesis-drawn mixtures).  It is opt-in: the default is the
plain iteration.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from ._backend import threads_for
from .choices import FRAME_METHODS
from .empirical import LOWRANK_MIN_D, LowRankSpectrum, Moments, SmoothedEmpirical, upper_pair_count
from .empirical.lowrank import OVERSAMPLE
from .empirical.kernels import default_gap_floor, degenerate_floor

__all__ = ["eigh_2x2", "CLOSED_FORM_MAX_D", "RIDGE_KINDS", "FRAME_METHODS", "FlatFrame", "ScmsResult", "batched_eigh",
           "fix_signs", "frame_flat", "frame_from_moments", "frame_width", "use_lowrank", "project_onto", "default_tol",
           "scms", "default_gap_floor"]

RIDGE_KINDS = ("log", "density")


def use_lowrank(frame: str, kind: str, d: int, d_star: int) -> bool:
    """Whether a frame takes the low-rank paths (:mod:`ridgexr.empirical.lowrank`).

    ``frame="lowrank"``: always (``kind="log"`` only); ``"dense"``: never; ``"auto"``: for the log ridge
    where d > :data:`~ridgexr.empirical.LOWRANK_MIN_D` and the block of d* + 1 + ``OVERSAMPLE``
    eigenpairs is at most d / 2 (otherwise the dense (d, d) eigh is as cheap and gives every eigenpair).
    """
    if frame == "dense" or kind != "log":
        return False
    return frame == "lowrank" or (d > LOWRANK_MIN_D and 2 * frame_width(d, d_star) <= d)


def frame_width(d: int, d_star: int) -> int:
    """Eigenpairs a low-rank frame computes: min(d, d* + 1 + ``OVERSAMPLE``)."""
    return min(d, d_star + 1 + OVERSAMPLE)


@dataclass
class FlatFrame:
    """The ridge frame at Q flat queries (torch tensors).

    Attributes
    ----------
    step : (Q, d)  mean-shift step alpha_t E[x0|x] - x = h_t grad log p_t(x), data units
    normal : (Q, d, d - d*)  orthonormal normal basis; None for a low-rank frame (its normal space is
        the orthogonal complement of ``tangent``: use :meth:`project_normal`)
    tangent : (Q, d, d*)  orthonormal tangent basis
    eigenvalues : (Q, m)  Hessian eigenvalues, descending, 1 / data units^2: all of them (m = d) for a
        dense frame, the top m = :func:`frame_width` for a low-rank one
    normal_curvature : (Q,)  eigenvalues[:, d*], the largest normal eigenvalue
    eigengap : (Q,)  eigenvalues[:, d*-1] - eigenvalues[:, d*] (inf for d* = 0)
    degenerate : (Q,)  the gap is below its certified numerical floor
    alpha, h : (Q,)  alpha_t and h_t at each query
    dropped_mass : (Q,)  posterior mass dropped by top-k truncation
    resolved_rank : (Q,)  int, posterior-covariance eigenvalues above the numerical floor
        2 d cov_error + c mu_max of the O(1)-scaled covariance (the floor of ``degenerate``; c =
        ``gap_floor``, default sqrt(eps)): the number of directions in which the posterior is resolved;
        -1 for ``kind="density"`` (not computed); a lower bound where ``rank_censored`` (on the low-rank
        paths the rank is counted by the kernel, under the same floor)
    relative_gap : (Q,)  the tangent/normal gap of the diagonalised matrix less its certified error
        2 d cov_error, over its largest eigenvalue: the frame is degenerate under a floor c exactly
        where relative_gap <= c (inf for d* = 0)
    vectors : (Q, d, m)  the eigenvectors of ``eigenvalues`` (columns, descending): [tangent, normal]
        for a dense frame
    rank_censored : (Q,)  bool, ``resolved_rank`` counts only the m computed eigenvalues, all above the
        floor (the randomized low-rank path); False on the dense and Gram paths, where it is exact
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
    relative_gap: torch.Tensor | None = None
    vectors: torch.Tensor | None = None
    rank_censored: torch.Tensor | None = None

    def project_tangent(self, v: torch.Tensor) -> torch.Tensor:
        """T T^T v for vectors v (Q, d) -> (Q, d)."""
        return project_onto(self.tangent, v)

    def project_normal(self, v: torch.Tensor) -> torch.Tensor:
        """N N^T v for vectors v (Q, d) -> (Q, d) (v - T T^T v for a low-rank frame)."""
        return project_onto(self.normal, v) if self.normal is not None else v - project_onto(self.tangent, v)




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
    # two batched matrix products (the same bmm that einsum("qdk,qd->qk") and einsum("qdk,qk->qd")
    # dispatch to, without einsum's per-call parsing)
    return (basis @ (basis.mT @ v[..., None]))[..., 0]


def frame_flat(density: SmoothedEmpirical, xf: torch.Tensor, tf: torch.Tensor, d_star: int, kind: str,
               top_k: int | None, gap_floor: float | None = None, frame: str = "auto") -> FlatFrame:
    """The d*-dimensional ridge frame at flat queries xf (Q, d) with times tf (Q,).

    ``kind="log"``: eigenvectors of the O(1)-scaled posterior covariance (resolved even
    where the covariance underflows), eigenvalues mapped to the Hessian of log p_t.
    ``kind="density"``: eigh of grad^2 p / p = H + g g^T.  ``degenerate`` compares the
    tangent/normal gap with the certified error of the matrix (Weyl: d x the entry error)
    plus rounding: ``gap_floor`` x the largest eigenvalue (default sqrt(eps), :func:`default_gap_floor`), plus
    twice the certified eigenvalue error on the randomized low-rank path.
    ``frame`` (one of :data:`FRAME_METHODS`) chooses the dense (d, d) eigh or the low-rank paths
    (:func:`use_lowrank`); a low-rank frame has ``normal=None`` and the top :func:`frame_width`
    eigenpairs.
    """
    if use_lowrank(frame, kind, xf.shape[-1], d_star):
        spec = density.spectrum_flat(xf, tf, n_eig=frame_width(xf.shape[-1], d_star), need=d_star + 1, top_k=top_k,
                                     gap_floor=gap_floor)
        return _frame_diagnostics(_lowrank_spectrum(spec, xf, gap_floor), d_star, True)
    mom = density.moments_flat(xf, tf, cov=True, top_k=top_k)
    return frame_from_moments(mom, xf, d_star, kind, gap_floor=gap_floor)


def frame_from_moments(mom: Moments, xf: torch.Tensor, d_star: int, kind: str, signs: bool = True,
                       gap_floor: float | None = None) -> FlatFrame:
    """:func:`frame_flat` from moments already computed at xf (with ``cov=True``).

    ``signs=False`` skips :func:`fix_signs` (the projections N N^T and T T^T do not depend on
    the eigenvectors' signs; only frames handed to users need deterministic signs).
    """
    return _frame_diagnostics(_spectrum(mom, xf, d_star, kind, gap_floor), d_star, signs)


@dataclass
class _Spectrum:
    """One eigendecomposition behind a frame at Q points: SCMS forms the normal step from it every
    iteration and the diagnostics (:func:`_frame_diagnostics`) only when a point stops.

    ``vals`` (Q, m), ``vecs`` (Q, d, m), ascending: of the O(1)-scaled posterior covariance
    ``cov_unit`` (``kind="log"``) or of grad^2 p / p (``kind="density"``); m = d, or the top m
    eigenpairs of a low-rank spectrum (``lowrank``, whose ``mom`` is the
    :class:`~ridgexr.empirical.LowRankSpectrum` itself).
    """

    mom: Moments | LowRankSpectrum
    step: torch.Tensor
    vals: torch.Tensor
    vecs: torch.Tensor
    kind: str
    gap_floor: float  # relative floor c of the eigengap
    lowrank: bool = False


def _lowrank_spectrum(spec: LowRankSpectrum, xf: torch.Tensor, gap_floor: float | None = None) -> _Spectrum:
    step = spec.alpha[:, None] * spec.mean - xf
    return _Spectrum(mom=spec, step=step, vals=torch.flip(spec.values, (-1,)), vecs=torch.flip(spec.vectors, (-1,)),
                     kind="log", gap_floor=default_gap_floor(xf.dtype) if gap_floor is None else float(gap_floor),
                     lowrank=True)


def _spectrum(mom: Moments, xf: torch.Tensor, d_star: int, kind: str, gap_floor: float | None = None) -> _Spectrum:
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
    return _Spectrum(mom=mom, step=step, vals=vals, vecs=vecs, kind=kind,
                     gap_floor=default_gap_floor(xf.dtype) if gap_floor is None else float(gap_floor))


def _gap_floor(sp: _Spectrum, d_star: int):
    """The tangent/normal gap of the diagonalised matrix and its certified floor (Q,) each (d* > 0), and
    the Hessian eigenvalues (Q, d) ascending; ``degenerate`` is gap <= floor.  The floor is the certified
    error of the matrix's eigenvalues plus ``sp.gap_floor`` x its largest eigenvalue (rounding)."""
    mom = sp.mom
    a, h = mom.alpha, mom.h
    d = sp.step.shape[-1]
    w = sp.vals.shape[-1]  # d, or the width of a low-rank spectrum
    c = sp.gap_floor
    if sp.kind == "log":
        mu_unit = sp.vals
        mu = torch.exp(mom.log_cov_scale)[:, None] * mu_unit
        lam = (a[:, None] ** 2 * mu - h[:, None]) / h[:, None] ** 2
        # eigenvalues of cov_unit are resolved to (Weyl) d x entry error, plus rounding (plus, on the
        # randomized low-rank path, the certified error of each computed eigenvalue, twice for a gap)
        floor = degenerate_floor(mu_unit, mom.cov_error, d, c)
        if sp.lowrank:
            floor = floor + 2 * mom.eig_error
        gap_c = mu_unit[:, w - d_star] - mu_unit[:, w - d_star - 1] if d_star > 0 else None
    else:
        lam = sp.vals
        cov_abs_err = mom.cov_error * torch.exp(mom.log_cov_scale)
        floor = 2 * d * cov_abs_err * (a / h) ** 2 + c * lam.abs().amax(-1)
        gap_c = lam[:, w - d_star] - lam[:, w - d_star - 1] if d_star > 0 else None
    return gap_c, floor, lam


def _normal_step(sp: _Spectrum, d_star: int) -> torch.Tensor:
    """N N^T step (Q, d) of a spectrum (step - T T^T step for a low-rank one)."""
    if sp.lowrank:
        w = sp.vecs.shape[-1]
        return sp.step - project_onto(sp.vecs[..., w - d_star:], sp.step)
    return project_onto(torch.flip(sp.vecs, (-1,))[..., d_star:], sp.step)


def _frame_diagnostics(sp: _Spectrum, d_star: int, signs: bool) -> FlatFrame:
    gap_c, floor, lam = _gap_floor(sp, d_star)
    h = sp.mom.h
    censored = torch.zeros_like(h, dtype=torch.bool)
    if sp.lowrank:  # counted over every eigenvalue by the low-rank kernel (censored on the randomized path)
        rank, censored = sp.mom.rank, sp.mom.rank_censored
    elif sp.kind == "log":
        rank = (sp.vals > floor[:, None]).sum(-1)
    else:
        rank = torch.full_like(h, -1, dtype=torch.int64)
    vecs = fix_signs(sp.vecs) if signs else sp.vecs
    lam_desc = torch.flip(lam, (-1,))
    vecs_desc = torch.flip(vecs, (-1,))
    if d_star > 0:
        gap = lam_desc[:, d_star - 1] - lam_desc[:, d_star]
        degenerate = gap_c <= floor
        scale = (sp.vals if sp.kind == "log" else lam).abs().amax(-1)
        relative_gap = (gap_c - (floor - sp.gap_floor * scale)) / scale
    else:
        gap = torch.full_like(h, math.inf)
        degenerate = torch.zeros_like(h, dtype=torch.bool)
        relative_gap = torch.full_like(h, math.inf)
    return FlatFrame(step=sp.step, normal=None if sp.lowrank else vecs_desc[..., d_star:],
                     tangent=vecs_desc[..., :d_star], eigenvalues=lam_desc, normal_curvature=lam_desc[:, d_star],
                     eigengap=gap, degenerate=degenerate, alpha=sp.mom.alpha, h=h, dropped_mass=sp.mom.dropped_mass,
                     resolved_rank=rank, relative_gap=relative_gap, vectors=vecs_desc, rank_censored=censored)


def default_tol(dtype: torch.dtype, radius: float) -> float:
    """Default SCMS stopping tolerance on the normal step, data units: 1e-9 (1 + R) in
    float64 and 2e-5 (1 + R) in float32, R the training radius."""
    base = 1e-9 if dtype == torch.float64 else 2e-5
    return base * (1.0 + radius)


#: ``accelerate=True``: the deviation budget of one extrapolation, in units of ``tol``
ACCEL_DEVIATION = 1.0
#: ... the lengths of the finite runs of plain steps one extrapolation may stand for (shorter: plain steps)
ACCEL_RUNS = (3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
#: ... the whole geometric tail is summed only where the ratio is below this
ACCEL_MAX_RATIO = 0.995
#: ... the last two normal steps must point the same way to this cosine
ACCEL_MIN_COSINE = 0.999
#: ... an extrapolation is undone when the next step exceeds this times the step the model predicts
ACCEL_GROWTH = 1.5


_ACCEL_LADDER = np.array(ACCEL_RUNS, dtype=np.float64)


def _host(t: torch.Tensor) -> np.ndarray:
    """A small per-point tensor as a numpy array (zero-copy on the CPU): the loop's bookkeeping."""
    return t.detach().cpu().numpy()


def scms(density: SmoothedEmpirical, xf: torch.Tensor, tf: torch.Tensor, d_star: int, kind: str = "log",
         tol: float | None = None, max_iter: int = 500,
         top_k: int | None = None, stop_degenerate: int | None = None,
         accelerate: bool = False, gap_floor: float | None = None, frame: str = "auto"
         ) -> tuple[ScmsResult, FlatFrame]:
    """SCMS from flat validated points xf (Q, d) at times tf (Q,).

    ``tol=None`` uses :func:`default_tol`.  ``stop_degenerate=k`` stops a point whose frame
    has been degenerate for k consecutive iterations (its normal space is arbitrary there, so
    further steps are too): it keeps ``converged = False`` and ``degenerate = True``.  Points
    whose frame never stays degenerate that long take exactly the steps of the default
    (``None``: iterate to ``tol`` or ``max_iter``).

    ``accelerate=True`` extrapolates runs of plain steps that follow a geometric model
    (:class:`_Extrapolation`, the module docstring): the same fixed points and the same stopping
    rule, fewer iterations for slow points; the points differ from the plain ones within the
    plain iteration's own distance from its limit.  ``gap_floor``: the relative floor of the frame's
    eigengap (``degenerate``, ``resolved_rank``, ``stop_degenerate``; default sqrt(eps)).

    ``frame`` (:func:`use_lowrank`): with the dense frame every iteration diagonalises the posterior
    covariance in full (a warm-started Rayleigh-Ritz/LOBPCG update of the top d* + 1 eigenpairs was
    measured slower on the CPU at small d; see docs/performance.md); with the low-rank frame (the
    default above d = ``LOWRANK_MIN_D``) each iteration computes the top :func:`frame_width` eigenpairs
    (:meth:`~ridgexr.empirical.SmoothedEmpirical.spectrum_flat`: the Gram path, the support path of spread
    posteriors up to d = 2 048, or above it the randomized path warm-started from the point's previous
    eigenvectors), and the normal step is step - T T^T step.  Only the first frame gets deterministic eigenvector signs, the other
    diagnostics are formed only in iterations where some point stops, and the per-point
    bookkeeping (stopping, acceleration) runs on numpy arrays of the active points.

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
    run = np.zeros(q, dtype=np.int64)  # consecutive degenerate frames (stop_degenerate)
    acc = _Extrapolation(xf, ACCEL_DEVIATION * tol) if accelerate else None
    first = None
    lowrank = use_lowrank(frame, kind, d, d_star)
    width = frame_width(d, d_star)
    basis = None  # the active points' last eigenvectors (Q', d, width): the low-rank path's warm start
    # a small active set (the slow tail) runs on one thread: its ops are too small for torch's pool
    point_flops = 2.0 * density.n_train * (d + 2 + upper_pair_count(d))
    for it in range(max_iter + 1 if q else 0):
        with threads_for(len(active) * point_flops, dev):
            if lowrank:
                sp = _lowrank_spectrum(density.spectrum_flat(xa, ta, n_eig=width, need=d_star + 1, top_k=top_k,
                                                             start=basis, gap_floor=gap_floor), xa, gap_floor)
                basis = torch.flip(sp.vecs, (-1,))
            else:
                sp = _spectrum(density.moments_flat(xa, ta, cov=True, top_k=top_k), xa, d_star, kind, gap_floor)
            fr = None
            if first is None:
                # the frame at the starting points, in their order
                fr = first = _frame_diagnostics(sp, d_star, signs=True)
            nstep = _normal_step(sp, d_star)  # N N^T does not depend on the eigenvectors' signs
            norm = torch.linalg.vector_norm(nstep, dim=-1)
            small = _host(norm < tol)
            stop = small.copy() if it < max_iter else np.ones_like(small)  # the last evaluation ends every point
            if acc is not None and it < max_iter:
                stop &= acc.check(nstep, norm)  # an undone extrapolation is retried as a plain step
            if stop_degenerate is not None:
                if d_star > 0:
                    gap_c, floor, _ = _gap_floor(sp, d_star)
                    run = np.where(_host(gap_c <= floor), run + 1, 0)
                else:
                    run = np.zeros_like(run)
                stop |= run >= stop_degenerate
            if stop.any():
                if fr is None:
                    fr = _frame_diagnostics(sp, d_star, signs=False)
                sel = torch.from_numpy(stop).to(dev)
                done = active[sel]
                point[done] = xa[sel]
                residual[done] = norm[sel] / fr.h[sel]
                curvature[done] = fr.normal_curvature[sel]
                gap[done] = fr.eigengap[sel]
                degenerate[done] = fr.degenerate[sel]
                dropped[done] = fr.dropped_mass[sel]
                converged[done] = torch.from_numpy(small[stop]).to(dev)
                iterations[done] = it
                keep = ~stop
                if not keep.any():
                    break
                kept = torch.from_numpy(keep).to(dev)
                active, xa, ta, nstep, run = active[kept], xa[kept], ta[kept], nstep[kept], run[keep]
                if basis is not None:
                    basis = basis[kept]
                if acc is not None:
                    acc.keep(keep, kept)
            xa = xa + nstep if acc is None else acc.step(xa, nstep)
    result = ScmsResult(point=point, converged=converged, iterations=iterations, residual=residual,
                        normal_curvature=curvature, eigengap=gap, degenerate=degenerate, dropped_mass=dropped)
    return result, first


class _Extrapolation:
    """Per-point state of ``accelerate=True``: runs of plain SCMS steps replaced by their predicted sum.

    A plain step is f_k = E E^T (alpha_t E[x0|x_k] - x_k) (the normal mean-shift step).  After two
    plain steps in a row a point has a ratio r = |f_k| / |f_{k-1}|, its previous ratio r', and a
    turning angle theta between f_{k-1} and f_k.  The geometric model predicts the next m plain steps
    as f_k r^j (j = 0..m-1), summing to omega f_k with omega = sum_{j<m} r^j.  Were the turning and
    the drift of the ratio to persist, the model would deviate from the steps it stands for by

        dev(m) = |f_k| sum_{j<m} r^j (theta j + |r - r'| / r j (j - 1) / 2)
              <= |f_k| max(1, r^m) (theta m (m - 1) / 2 + |r - r'| / r m (m - 1) (m - 2) / 6),

    and the point steps x_k + omega f_k with the longest run m in ``ACCEL_RUNS`` whose bound is at most
    ``ACCEL_DEVIATION`` x tol -- or with the whole tail, omega = 1 / (1 - r), where r <
    ``ACCEL_MAX_RATIO`` and the exact dev(inf) = |f_k| (theta r / (1 - r)^2 + |r - r'| r / (1 - r)^3)
    is within the budget -- provided the steps turned by less than arccos(``ACCEL_MIN_COSINE``);
    otherwise it takes the plain step.  This is over-relaxation of the normal mean-shift step along
    itself, so a fixed point (f = 0) is one of the plain iteration, and the stopping rule (|f| < tol at
    an evaluated point) is the plain one.  The next evaluation checks the prediction: a step larger
    than ``ACCEL_GROWTH`` x the predicted |f_k| r^m (for the whole tail: not smaller than |f_k|) undoes
    the extrapolation -- the point takes the plain step x_k + f_k instead (that evaluation is not
    tested against ``tol``) and is not extrapolated again.  Two plain steps re-measure r and theta
    after every extrapolation.

    The scalar state (norms, ratios, counters) lives in numpy arrays; the steps in torch.
    """

    _FIELDS = ("prev_norm", "prev_ratio", "plain", "jumped", "banned", "redo", "limit")

    def __init__(self, xf: torch.Tensor, eps: float):
        self.eps = eps
        q = xf.shape[0]
        self.prev_step = torch.zeros_like(xf)  # f_{k-1}
        self.base = xf  # x_k of the last step (to undo an extrapolation)
        self.prev_norm = np.full(q, np.nan)  # no step yet: NaN ratios and cosines, never extrapolated
        self.prev_ratio = np.full(q, np.nan)
        self.plain = np.zeros(q, dtype=np.int64)  # plain steps since the last extrapolation
        self.jumped = np.zeros(q, dtype=bool)  # the last step was extrapolated
        self.banned = np.zeros(q, dtype=bool)
        self.redo = np.zeros(q, dtype=bool)
        self.limit = np.zeros(q)  # the largest step accepted after an extrapolation
        self.norm = self.cosine = None

    def check(self, nstep: torch.Tensor, norm: torch.Tensor) -> np.ndarray:
        """After an evaluation: False where an extrapolation is undone (that point must not stop now)."""
        both = np.asarray(_host(torch.stack([norm, (nstep * self.prev_step).sum(-1)])), dtype=np.float64)
        self.norm = both[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.cosine = both[1] / (both[0] * self.prev_norm)
        self.redo = self.jumped & (self.norm > self.limit)
        return ~self.redo

    def keep(self, keep: np.ndarray, kept: torch.Tensor) -> None:
        self.prev_step, self.base = self.prev_step[kept], self.base[kept]
        self.norm, self.cosine = self.norm[keep], self.cosine[keep]
        for name in self._FIELDS:
            setattr(self, name, getattr(self, name)[keep])

    def _omega(self, norm, ratio, cosine, prev_ratio):
        """For some points: omega, the largest step accepted at the next evaluation, and whether to extrapolate."""
        r = np.minimum(ratio, 2.0)
        theta = np.sqrt(np.maximum(2 * (1 - cosine), 0.0))
        drift = np.abs(ratio - prev_ratio) / np.maximum(r, 1e-3)
        # dev(m) <= |f| max(1, r^m) (theta m (m - 1) / 2 + drift m (m - 1) (m - 2) / 6), on a ladder of m
        m = _ACCEL_LADDER[None, :]
        rm = r[:, None] ** m
        bound = norm[:, None] * np.maximum(rm, 1.0) * (theta[:, None] * m * (m - 1) / 2
                                                       + drift[:, None] * m * (m - 1) * (m - 2) / 6)
        n_ok = (bound <= self.eps).sum(-1)  # the bound grows with m: the longest run within the budget
        pick = np.maximum(n_ok - 1, 0)[:, None]
        mm = np.take_along_axis(np.broadcast_to(m, rm.shape), pick, 1)[:, 0]
        rmm = np.take_along_axis(rm, pick, 1)[:, 0]
        one = 1 - r
        flat = np.abs(one) < 1e-12
        omega = np.where(flat, mm, (1 - rmm) / np.where(flat, 1.0, one))  # sum_{j<m} r^j
        predicted = norm * rmm
        # the whole tail: omega = 1 / (1 - r), with the exact sums sum_j j r^j and sum_j j (j - 1) / 2 r^j
        safe = np.maximum(one, 1e-12)
        whole = (r < ACCEL_MAX_RATIO) & (norm * (theta * r / safe ** 2 + drift * r ** 2 / safe ** 3) <= self.eps)
        omega = np.where(whole, 1 / safe, omega)
        limit = np.where(whole, norm, ACCEL_GROWTH * predicted)
        return omega, limit, whole | (n_ok > 0)

    def step(self, xa: torch.Tensor, nstep: torch.Tensor) -> torch.Tensor:
        """x_{k+1} for every active point (after :meth:`check` and :meth:`keep` of this iteration)."""
        norm, redo = self.norm, self.redo
        ratio = norm / self.prev_norm  # NaN before a point's first step
        ready = (self.plain >= 2) & (self.cosine >= ACCEL_MIN_COSINE) & ~self.banned & ~redo
        go = np.zeros_like(ready)
        new = None
        rows = np.flatnonzero(ready)
        if rows.size:  # a cheap screen: the shortest run (3 steps) or the whole tail within the budget
            r = np.minimum(ratio[rows], 2.0)
            theta = np.sqrt(np.maximum(2 * (1 - self.cosine[rows]), 0.0))
            drift = np.abs(r - self.prev_ratio[rows]) / r
            short = norm[rows] * np.maximum(r ** 3, 1.0) * (3 * theta + drift)
            one = np.maximum(1 - r, 1e-12)
            tail = norm[rows] * (theta * r / one ** 2 + drift * r ** 2 / one ** 3)
            rows = rows[(short <= self.eps) | ((r < ACCEL_MAX_RATIO) & (tail <= self.eps))]
        if rows.size:
            om, limit, take = self._omega(norm[rows], ratio[rows], self.cosine[rows], self.prev_ratio[rows])
            rows = rows[take]
            go[rows] = True
            omega = np.ones_like(norm)
            omega[rows] = om[take]
            self.limit[rows] = limit[take]
            new = xa + torch.from_numpy(omega).to(xa)[:, None] * nstep
        if new is None:
            new = xa + nstep  # every point's plain step (bit for bit the plain iteration's)
        if redo.any():  # undo: the plain step from the point before the extrapolation
            back = torch.from_numpy(redo).to(xa.device)[:, None]
            new = torch.where(back, self.base + self.prev_step, new)
            # the undone point continues from its plain step from base: its last step is f_{k-1}
            nstep = torch.where(back, self.prev_step, nstep)
            norm = np.where(redo, self.prev_norm, norm)
            ratio = np.where(redo, self.prev_ratio, ratio)
            self.banned = self.banned | redo
            self.base = torch.where(back, self.base, xa)
        else:
            self.base = xa
        self.plain = np.where(go | redo, 0, self.plain + 1)
        self.jumped = go
        self.prev_step, self.prev_norm, self.prev_ratio = nstep, norm, ratio
        return new
