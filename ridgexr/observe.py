"""Per-step quantities of sampler trajectories: ridge projection, distance and the model's
directional residuals.

For a block of states x (B steps, n samples, d) at times t (B,), with p_t the smoothed
empirical density of the training set:

- ``ridge_projection``: :func:`ridgexr.project_to_ridge` of x onto R_t (log ridge, d*)
- ``ridge_distance``: |x - ridge_projection|
- ``ridge_residual``, ``ridge_converged``, ``normal_curvature``: diagnostics at the projection
- ``residual_normal`` / ``residual_tangent``: the model's error e = denoise(x, t) - E[x0 | x_t = x]
  split by the ridge frame *at x*: N N^T e and T T^T e (data units)
- ``frame_degenerate``: the frame at x is numerically undetermined (tangent/normal eigengap
  below its certified floor), so the split above is arbitrary there; ``ridge_degenerate``:
  the same at the projection; ``resolved_rank``: the number of resolved posterior-covariance
  directions at x (:class:`ridgexr.scms.FlatFrame`), the rule of the time-dependent ridge
  dimension d*(t); ``residual_normal_rank`` / ``residual_tangent_rank``: |N N^T e| and
  |T T^T e| with the frame's tangent space the top ``resolved_rank`` eigenvectors at x (the
  split at d*(x, t) instead of the fixed d*; never degenerate, the gap at the rank is resolved
  by construction).  With a low-rank frame (``frame``, d > 128 by default: :func:`ridgexr.scms.use_lowrank`)
  only the top d* + 11 eigenvectors are computed: where the resolved rank reaches them the two ``*_rank``
  splits are NaN (``resolved_rank`` itself is exact on the Gram and support paths, and a lower bound on
  the randomized path of d > 2 048, where it is censored)
- ``projected_gradient`` / ``projected_gradient_tmin``: the authors' measure of distance to the ridge,
  |E E^T grad log p_s(x)| at the state itself, E the d - d* most negative Hessian eigenvectors of log
  p_s at x, with s the state's own time t (``_tmin``: the sampler's last time t_min, as the authors'
  notebook evaluates it); 1 / data units, unmasked (the authors mask nothing)
- ``frame_gap_relative``: the frame's tangent/normal eigengap at x less its certified error, over the
  largest posterior-covariance eigenvalue: ``frame_degenerate`` is ``frame_gap_relative <= gap_floor``,
  so the degenerate share under any other floor is read off it
- ``ridge_distance_resolved`` (with ``resolved=True``): |x - SCMS projection| at the state's resolved
  dimension d*(x, t) = min(d*, resolved_rank), the fixed-d* distance where the rank reaches d*
- ``projected_gradient_scaled`` / ``projected_gradient_tmin_scaled``: the same divided by their
  maximum over the block's finite states of each step (the authors' normalisation by the batch
  maximum; dimensionless, in [0, 1])

States that are not finite, or beyond the divergence bound (|x| > ``bound``, see
:func:`ridgexr.sampling.divergence_bound`), count as diverged: they get NaN geometry and are flagged in
``finite``/``diverged``; nothing is silently dropped and no huge state is ever "projected".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .empirical import SmoothedEmpirical
from .sampling import within_bound
from .scms import frame_flat, scms
from .schema import empty_step_values

__all__ = ["step_quantities", "unobserved_step", "batch_scaled"]

#: points per call of the model's denoiser when a block is observed (bounds its scratch memory)
DENOISE_CHUNK = 8192


@torch.no_grad()  # observation never needs gradients (a trainable model's output would carry them)
def step_quantities(density: SmoothedEmpirical, x: torch.Tensor, t: np.ndarray, d_star: int,
                    denoise: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None, *,
                    tol: float | None = None, max_iter: int = 200, top_k: int | None = None,
                    bound: float = math.inf, stop_degenerate: int | None = None,
                    score: torch.Tensor | None = None, accelerate: bool = False,
                    t_min: float | None = None, gap_floor: float | None = None, resolved: bool = False,
                    frame: str = "auto") -> dict:
    """All per-step quantities of a block, as numpy arrays.

    Parameters
    ----------
    density : SmoothedEmpirical
        Of the training set (its own t is ignored; ``t`` is used).
    x : (B, n, d) tensor of states
    t : (B,) times
    d_star : int
    denoise : callable (x (M, d), t (M,)) -> (M, d), or None for the exact denoiser
        (whose error is zero by definition).
    tol, max_iter, top_k, stop_degenerate, accelerate, frame : SCMS settings (see :func:`ridgexr.project_to_ridge`)
    bound : float
        States with ``|x| > bound`` (or not finite) get no geometry (data units; default: none).
    score : (B, n, d) tensor, optional
        The model's score at each state as the sampler evaluated it (:attr:`ridgexr.sampling.StepBlock.score`);
        the model's denoiser output is then (x + h_t score) / alpha_t (every model's ``denoise`` and
        ``score`` are related so), and ``denoise`` is called only where it is NaN (the last step).
        Ignored when ``denoise`` is None.
    t_min : float, optional
        The time of ``projected_gradient_tmin`` (OU time; the sampler's last time). Default: the
        smallest of ``t``.
    gap_floor : float, optional
        Relative floor of the frame's eigengap (``frame_degenerate``, ``resolved_rank``; default sqrt(eps),
        :func:`ridgexr.scms.default_gap_floor`).
    resolved : bool
        Also project each state at its resolved dimension min(d*, resolved_rank) (``ridge_distance_resolved``;
        one more SCMS run per distinct dimension below d*). Default False: NaN.

    Returns
    -------
    dict with ``trajectory`` (B, n, d), ``ridge_projection`` (B, n, d), ``ridge_distance``
    (B, n), ``ridge_residual`` (B, n), ``ridge_converged`` (B, n) bool, ``normal_curvature``
    (B, n), ``residual_normal`` (B, n, d), ``residual_tangent`` (B, n, d), ``finite`` (B, n)
    (finite and within ``bound``) and
    ``dropped_mass`` (B, n) (top-k truncation of the projection; 0 without it), and the authors'
    measures ``projected_gradient``, ``projected_gradient_tmin`` (B, n) (1 / data units) with their
    batch-maximum-scaled forms ``projected_gradient_scaled``, ``projected_gradient_tmin_scaled`` (B, n).
    """
    B, n, d = x.shape
    out = unobserved_step(x, bound)  # the states, and every other per-step variable at its fill (NaN, False, -1)
    finite = torch.as_tensor(out["finite"], device=x.device)
    if not bool(finite.any()):
        return _with_scaled(out)
    tt = torch.as_tensor(np.broadcast_to(np.asarray(t, dtype=np.float64)[:, None], (B, n)).copy(),
                         device=x.device, dtype=x.dtype)
    states = _States(out["finite"], x[finite], tt[finite])
    ridge = _Ridge(density, d_star, tol, max_iter, top_k, stop_degenerate, accelerate, gap_floor, frame)
    fr = _observe_frame(out, states, ridge, resolved)
    _observe_projected_gradient(out, states, ridge, fr, float(np.min(t)) if t_min is None else float(t_min))
    _with_scaled(out)
    _observe_residual_split(out, states, fr, denoise, None if score is None else score[finite])
    return out


@dataclass(frozen=True)
class _States:
    """The observed states of a block: where they are in it (``mask`` (B, n) bool), and the states ``x`` (M, d)
    and their times ``t`` (M,) as tensors."""

    mask: np.ndarray
    x: torch.Tensor
    t: torch.Tensor


@dataclass(frozen=True)
class _Ridge:
    """The ridge a block is observed against: the density, d* and the SCMS settings of :func:`step_quantities`."""

    density: SmoothedEmpirical
    d_star: int
    tol: float | None
    max_iter: int
    top_k: int | None
    stop_degenerate: int | None
    accelerate: bool
    gap_floor: float | None
    frame: str

    def project(self, x: torch.Tensor, t: torch.Tensor, d_star: int):
        """SCMS of ``x`` at times ``t`` onto the ``d_star``-dimensional log ridge: (projection, frame at x)."""
        return scms(self.density.with_time(t), x, t, d_star, "log", self.tol, self.max_iter, self.top_k,
                    self.stop_degenerate, accelerate=self.accelerate, gap_floor=self.gap_floor, frame=self.frame)


def _observe_frame(out: dict, states: _States, ridge: _Ridge, resolved: bool):
    """Fill the projection onto the ridge and the frame at each state: ``ridge_projection``, ``ridge_distance``,
    ``ridge_residual``, ``ridge_converged``, ``normal_curvature``, ``dropped_mass``, ``frame_degenerate``,
    ``ridge_degenerate``, ``resolved_rank``, ``frame_gap_relative`` and, with ``resolved``,
    ``ridge_distance_resolved``.  Returns the frame at the states (SCMS's first evaluation), which the other
    parts reuse."""
    mask, xf, tf = states.mask, states.x, states.t
    proj, fr = ridge.project(xf, tf, ridge.d_star)
    out["ridge_projection"][mask] = proj.point.cpu().numpy()
    out["ridge_distance"][mask] = (proj.point - xf).norm(dim=-1).cpu().numpy()
    out["ridge_residual"][mask] = proj.residual.cpu().numpy()
    out["ridge_converged"][mask] = proj.converged.cpu().numpy()
    out["normal_curvature"][mask] = proj.normal_curvature.cpu().numpy()
    out["dropped_mass"][mask] = proj.dropped_mass.cpu().numpy()
    out["frame_degenerate"][mask] = fr.degenerate.cpu().numpy()
    out["ridge_degenerate"][mask] = proj.degenerate.cpu().numpy()
    out["resolved_rank"][mask] = fr.resolved_rank.cpu().numpy()
    out["frame_gap_relative"][mask] = fr.relative_gap.cpu().numpy()
    if resolved:
        # d*(x, t) = min(d*, resolved rank): the fixed-d* projection where the rank reaches d*, one more SCMS
        # run for each smaller dimension present (a few distinct values)
        dist = (proj.point - xf).norm(dim=-1)
        dim_x = torch.clamp(fr.resolved_rank, max=ridge.d_star)
        for k in torch.unique(dim_x[dim_x < ridge.d_star]).tolist():
            sel = (dim_x == k).nonzero().squeeze(-1)
            pk, _ = ridge.project(xf[sel], tf[sel], int(k))
            dist[sel] = (pk.point - xf[sel]).norm(dim=-1)
        out["ridge_distance_resolved"][mask] = dist.cpu().numpy()
    return fr


def _observe_projected_gradient(out: dict, states: _States, ridge: _Ridge, fr, t_min: float) -> None:
    """Fill the authors' measure at the state, |E E^T grad log p_s(x)| = |N N^T step| / h_s:
    ``projected_gradient`` at s = t (from ``fr``, the frame at x) and ``projected_gradient_tmin`` at s = ``t_min``
    (one more frame)."""
    mask, xf, tf = states.mask, states.x, states.t
    out["projected_gradient"][mask] = (fr.project_normal(fr.step).norm(dim=-1) / fr.h).cpu().numpy()
    tm = torch.full_like(tf, t_min)
    fm = frame_flat(ridge.density.with_time(tm), xf, tm, ridge.d_star, "log", ridge.top_k, ridge.gap_floor,
                    frame=ridge.frame)
    out["projected_gradient_tmin"][mask] = (fm.project_normal(fm.step).norm(dim=-1) / fm.h).cpu().numpy()


def _observe_residual_split(out: dict, states: _States, fr, denoise, score: torch.Tensor | None) -> None:
    """Fill the model's error e = denoise(x, t) - E[x0 | x_t = x] split by the frame at x ``fr``:
    ``residual_normal``, ``residual_tangent`` (N N^T e, T T^T e) and ``residual_normal_rank``,
    ``residual_tangent_rank`` (the split at the state's resolved rank); zero for the exact denoiser
    (``denoise`` None).  ``score`` (M, d): the sampler's score at the states, or None."""
    mask, xf, tf = states.mask, states.x, states.t
    if denoise is None:
        for name in ("residual_normal", "residual_tangent", "residual_normal_rank", "residual_tangent_rank"):
            out[name][mask] = 0.0
        return
    # the frame at x itself is the first SCMS evaluation: reuse it
    mean = (fr.step + xf) / fr.alpha[:, None]  # step = alpha m - x
    # the model is evaluated in chunks of points: a block holds block_steps x n_samples states, and a
    # width-p random-feature model needs ~3 x 8p bytes per point (the whole block at once held
    # 1.5 GB for p = 1024, the default entry's peak memory)
    if score is not None:  # the sampler's own evaluation: D = (x + h s) / alpha
        pred = (xf + fr.h[:, None] * score.to(xf.dtype)) / fr.alpha[:, None]
        todo = (~torch.isfinite(pred).all(-1)).nonzero().squeeze(-1)
    else:
        pred = torch.empty_like(xf)
        todo = torch.arange(xf.shape[0], device=xf.device)
    if todo.numel():
        pred[todo] = torch.cat([denoise(xf[todo[i:i + DENOISE_CHUNK]], tf[todo[i:i + DENOISE_CHUNK]]).to(xf.dtype)
                                for i in range(0, todo.numel(), DENOISE_CHUNK)])
    err = pred - mean
    out["residual_normal"][mask] = fr.project_normal(err).cpu().numpy()
    out["residual_tangent"][mask] = fr.project_tangent(err).cpu().numpy()
    # the same split with the state's own ridge dimension d*(x, t) = resolved_rank: the frame's
    # eigenvectors (descending) are tangent up to the rank, normal beyond it; a low-rank frame holds
    # the top m eigenvectors, so the split is known where the rank is below m (else NaN: censored)
    coef = torch.einsum("qdk,qd->qk", fr.vectors, err) ** 2
    inside = torch.arange(coef.shape[-1], device=coef.device)[None, :] < fr.resolved_rank[:, None]
    tangent_rank = (coef * inside).sum(-1)
    known = fr.resolved_rank < coef.shape[-1]
    if fr.normal is not None:  # dense: every eigenvector, the normal part summed as before
        normal_rank, known = (coef * ~inside).sum(-1), torch.ones_like(known)
    else:
        normal_rank = ((err * err).sum(-1) - tangent_rank).clamp_min(0)
    nan = torch.full_like(tangent_rank, math.nan)
    out["residual_tangent_rank"][mask] = torch.where(known, torch.sqrt(tangent_rank), nan).cpu().numpy()
    out["residual_normal_rank"][mask] = torch.where(known, torch.sqrt(normal_rank), nan).cpu().numpy()


def batch_scaled(values: np.ndarray) -> np.ndarray:
    """``values`` (B, n) divided by each row's maximum over its finite entries (the authors' normalisation
    of the ridge residual by the batch maximum); rows with no finite positive maximum stay NaN.

    Examples
    --------
    >>> batch_scaled(np.array([[1.0, 4.0, np.nan], [0.0, 0.0, 0.0]])).tolist()
    [[0.25, 1.0, nan], [nan, nan, nan]]
    """
    v = np.asarray(values, dtype=np.float64)
    top = np.max(np.where(np.isfinite(v), v, -np.inf), axis=-1, keepdims=True)
    ok = np.isfinite(top) & (top > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, v / np.where(ok, top, 1.0), np.nan)


def unobserved_step(x: torch.Tensor, bound: float = math.inf) -> dict:
    """The per-step variables of a block of states ``x`` (B, n, d) that is not observed (``ridge.observe:
    false``): ``trajectory`` and ``finite`` (finite and within ``bound``, data units); every other per-step
    variable of the store at its fill value (NaN, False, -1), ``dropped_mass`` NaN.

    >>> q = unobserved_step(torch.tensor([[[0.0, 1.0], [float("nan"), 0.0]]]))
    >>> q["finite"].tolist(), bool(np.isnan(q["ridge_distance"]).all())
    ([[True, False]], True)
    """
    B, n, _ = x.shape
    out = empty_step_values(B, n, x.shape[-1])
    out |= {"trajectory": x.detach().cpu().numpy().astype(np.float64), "finite": within_bound(x, bound).cpu().numpy(),
            "dropped_mass": np.full((B, n), np.nan)}
    return out


def _with_scaled(out: dict) -> dict:
    for name in ("projected_gradient", "projected_gradient_tmin"):
        out[f"{name}_scaled"] = batch_scaled(out[name])
    return out
