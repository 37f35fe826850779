"""The top eigenpairs of the posterior covariance Cov[x0 | x_t = x] without forming it.

The ridge frame of the log density needs only the top d* + 1 eigenpairs of the posterior
covariance (the Hessian of log p_t is (alpha_t^2 Cov - h_t I) / h_t^2).  At image scale
(d = 784) the (d, d) covariance costs 2 N d^2 flops per query to form and 4.9 MB to hold; this
module gets the eigenpairs from the weighted training points instead, on two paths:

- **Gram path** -- where the posterior is carried by k points (the certified top-k support:
  dropped mass <= ``drop_tol``; concentrated posteriors; training sets of at most ``small_n``
  points), the O(1)-scaled covariance is cov_unit = A^T A with the k rows of A below, so its
  nonzero eigenpairs come from the k x k Gram matrix A A^T (O(k^2 d) flops, never a d x d
  matrix): eigenvalues are the Gram eigenvalues, eigenvectors A^T u / sqrt(mu).  Every
  eigenvalue is known, so ``resolved_rank`` is exact.
- **Support path** -- where the posterior is spread over many points and d is at most
  :data:`RANDOMIZED_MIN_D`, the covariance of each query formed over its own certified support: its
  most responsible points, sorted, until the responsibility left out, delta, satisfies
  delta diam^2 <= :data:`SUPPORT_RTOL` trace(Cov) (diam the training set's diameter; the dropped
  PSD term moves each eigenvalue by at most delta diam^2, which is ``eig_error``).  A support of at
  most d points gives its eigenpairs through the k x k Gram matrix of the centred, weighted rows
  sqrt(r_i) (x_i - mu); a larger one forms Sum r_i (x_i - mu)(x_i - mu)^T by GEMMs over chunks of
  the sorted support (2 k d^2 flops) and takes every eigenpair from one eigh.  Either way every
  eigenvalue is known, so ``resolved_rank`` is exact.  Measured at d = 784 on the 60 000
  Fashion-MNIST images (docs/performance.md), the randomized path below needed 50-70
  applications of its (d* + 11)-column block per query at t = 1.5 to reach its residual
  tolerance -- more flops than forming the covariance, which runs at the GEMM rate.
- **Randomized path** -- where the posterior is spread over many points and d is above
  :data:`RANDOMIZED_MIN_D` (or ``force="randomized"``), a block subspace
  iteration with Rayleigh-Ritz on Cov v = sum_i r_i (x_i - mu)((x_i - mu) . v) (the training
  set streamed in chunks against the block, the responsibilities r held for the query chunk),
  stopped by a residual-based certificate (:func:`certify_subspace`).  Only ``m`` eigenpairs are
  computed, so ``resolved_rank`` is censored at m (``rank_censored``).

The rows of A (the cancellation-free form of :func:`ridgexr.empirical.moments.scaled_form`):
with kept logits l_1 >= l_2 >= ..., v_i = exp(l_i - l_2), Delta_i = x_i - x_1, w = sum v_i
Delta_i and s = 1 / (exp(l_1 - l_2) + sum v_i),

    cu = sum_{i>=2} v_i Delta_i Delta_i^T - s w w^T
       = sum_{i>=2} v_i (Delta_i - s w)(Delta_i - s w)^T + exp(2 log s - (l_2 - l_1)) w w^T,

so the rows are sqrt(v_i) (Delta_i - s w) (i >= 2) and exp(log s - (l_2 - l_1) / 2) w: no
cancellation, and the first row's factor is O(1) even where exp(l_1 - l_2) overflows.

The certificate of the randomized path.  Let V (d, m) hold the Ritz vectors, Theta the Ritz
values (descending) and R = C V - V Theta the residuals (orthogonal to V).  For a split s
(d* + 1 <= s <= m) write C in the basis [V_s, W]: its off-diagonal block has norm <= |R_s|
(the first s residual columns) and the compression of C to W has largest eigenvalue
<= gamma_s = max(theta_{s+1}, beta) + |R_{>s}|, where beta bounds the largest eigenvalue of C
on the complement of all of V.  If theta_s > gamma_s, Weyl's inequality puts the top s
eigenvalues of C within |R_s| of theta_1..theta_s: the frame's eigenvalues are certified to
``eig_error`` = |R_s| (Frobenius bounds of the spectral norms), and the degenerate floor of the
frame adds 2 |R_s|.  beta is a probabilistic bound (Halko, Martinsson & Tropp 2011, lemma 4.1,
applied to B^p for the PSD compression B): with ``CERT_VECTORS`` Gaussian vectors w_i,
|B| <= (a sqrt(2 / pi) max_i |B^p w_i|)^(1/p) except with probability a^-CERT_VECTORS
(a = ``CERT_ALPHA``; 1e-12 with the defaults).  A subspace that misses a top eigenvector
fails it: beta then bounds the missed eigenvalue from above, which exceeds theta_s.  Where the
covariance has fewer than d* + 1 eigenvalues above the frame's numerical floor (a posterior on a few
points, seen by all N), the block is also certified when everything beyond the s0 Ritz values above
the floor is bounded by the floor (gamma_{s0} <= floor), with eig_error = max(|R_{s0}|, gamma_{s0}):
the unresolved eigenvalues then stay within the degenerate floor, as on the dense path.

Queries the randomized path cannot certify within ``max_iter`` iterations are recomputed by the
dense path (their covariance formed, one small sub-chunk at a time within the memory budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .kernels import (concentrated, default_gap_floor, degenerate_floor, exact_moments, rounding_error, topk_logits,
                      unresolved)

__all__ = ["LowRankSpectrum", "LOWRANK_MIN_D", "OVERSAMPLE", "RES_RTOL", "SUPPORT_TOL", "SUPPORT_RTOL", "RANDOMIZED_MIN_D", "CERT_VECTORS", "CERT_POWER",
           "CERT_ALPHA", "PATH_GRAM", "PATH_RANDOMIZED", "PATH_DENSE", "PATH_SUPPORT", "gram_rows",
           "support_path", "support_spectrum", "gram_spectrum",
           "subspace_iteration", "certify_subspace", "lowrank_chunk"]

#: ``frame="auto"`` diagonalises the dense (d, d) covariance where d is at most this (below it the
#: dense eigh is cheap and every eigenpair comes with it); above, the low-rank paths
LOWRANK_MIN_D = 128
#: extra columns of the randomized block beyond the d* + 1 eigenpairs the frame needs
OVERSAMPLE = 10
#: the randomized path iterates until the residuals of the needed Ritz pairs are below
#: RES_RTOL x the largest Ritz value (eigenvector error ~ residual / eigengap)
RES_RTOL = 1e-10
#: the certificate's Gaussian test vectors, power and confidence factor (failure probability
#: CERT_ALPHA^-CERT_VECTORS = 1e-12)
CERT_VECTORS = 6
CERT_POWER = 6
CERT_ALPHA = 100.0
#: the randomized path's operator leaves out the points whose responsibility is below SUPPORT_TOL / N
#: for every query of the chunk (their total weight delta <= SUPPORT_TOL moves each eigenvalue by at most
#: delta x diam^2, added to ``eig_error``: ~1e-16 of the top eigenvalue on Fashion-MNIST)
SUPPORT_TOL = 1e-22
#: the support path keeps each query's most responsible points until the responsibility left out,
#: delta, has delta diam^2 <= SUPPORT_RTOL trace(Cov): each eigenvalue moves by at most that
#: (<= SUPPORT_RTOL d of the top one: far below the frame's floor sqrt(eps) x the top one)
SUPPORT_RTOL = 1e-14
#: spread posteriors take the support path (covariance formed over the certified support) up to this
#: d and the randomized path above it: forming costs 2 k d^2 flops at the GEMM rate, the randomized
#: path 4 k d (d* + 11) per application and it needed 50-70 applications at d = 784 (module docstring)
RANDOMIZED_MIN_D = 2048
#: the support path's formed covariance Y^T Y is accumulated by this many strips of its upper triangle
#: (1 / 2 + 1 / (2 SUPPORT_STRIPS) of the full product's flops: 62.5 % with 4)
SUPPORT_STRIPS = 4
#: ``LowRankSpectrum.path`` codes
PATH_GRAM, PATH_RANDOMIZED, PATH_DENSE, PATH_SUPPORT = 0, 1, 2, 3


@dataclass
class LowRankSpectrum:
    """The top eigenpairs of the O(1)-scaled posterior covariance at Q flat queries (torch tensors).

    Attributes
    ----------
    log_prob : (Q,) log p_t(x)
    mean : (Q, d) E[x0 | x_t = x], data units
    alpha, h : (Q,) alpha_t and h_t
    dropped_mass : (Q,) posterior mass left out by top-k truncation (0 on exact paths)
    log_cov_scale : (Q,) Cov = exp(log_cov_scale) cov_unit (as :class:`~ridgexr.empirical.Moments`)
    cov_error : (Q,) bound on the entry error of cov_unit (as :class:`~ridgexr.empirical.Moments`)
    values : (Q, m) the top m eigenvalues of cov_unit, descending (squared data units / scale)
    vectors : (Q, d, m) their orthonormal eigenvectors (columns)
    eig_error : (Q,) certified bound on |computed - true| of each of the values (0 on the Gram and
        dense paths, where the values are those of the formed matrices; the dropped support's
        delta diam^2 on the support path)
    rank : (Q,) int64, eigenvalues of cov_unit above the floor 2 d cov_error + c values[:, 0] (c the
        frame's ``gap_floor``, default sqrt(eps); :func:`~ridgexr.empirical.kernels.degenerate_floor`)
        (exact on the Gram, dense and support paths; at least this many where ``rank_censored``)
    rank_censored : (Q,) bool, all m computed values are above the floor (randomized path)
    path : (Q,) int8, ``PATH_GRAM`` (0), ``PATH_RANDOMIZED`` (1), ``PATH_DENSE`` (2) or ``PATH_SUPPORT`` (3)
    """

    log_prob: torch.Tensor
    mean: torch.Tensor
    alpha: torch.Tensor
    h: torch.Tensor
    dropped_mass: torch.Tensor
    log_cov_scale: torch.Tensor
    cov_error: torch.Tensor
    values: torch.Tensor
    vectors: torch.Tensor
    eig_error: torch.Tensor
    rank: torch.Tensor
    rank_censored: torch.Tensor
    path: torch.Tensor


def _generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def gram_rows(best_val: torch.Tensor, best_idx: torch.Tensor, xc: torch.Tensor):
    """The rows A (q, k, d) with cov_unit = A^T A, from the kept logits (sorted, descending).

    Returns A, log s (q,), the mean (q, d) (centred data) and trace(sec) (q,), the trace of the
    second moment about x_1, sum v_i |Delta_i|^2 (the dense small-N path's rounding scale).
    """
    xk = xc[best_idx]  # (q, k, d)
    x1 = xk[:, 0]
    q, k, d = xk.shape
    if k == 1:
        zero = torch.zeros(q, dtype=xc.dtype, device=xc.device)
        return torch.zeros_like(xk), zero, x1, zero
    l1, l2 = best_val[:, 0], best_val[:, 1]
    gap = l2 - l1
    v = torch.exp(best_val[:, 1:] - l2[:, None])  # (q, k - 1), <= 1
    delta = xk[:, 1:] - x1[:, None, :]
    log_s = gap - torch.log1p(torch.exp(gap) * v.sum(1))
    s = torch.exp(log_s)
    w = torch.einsum("qk,qkd->qd", v, delta)
    centred = delta - s[:, None, None] * w[:, None, :]  # x_i - mu
    rows = torch.cat([(-torch.exp(log_s - 0.5 * gap))[:, None, None] * w[:, None, :],
                      torch.sqrt(v)[:, :, None] * centred], 1)
    sec_trace = (v * (delta * delta).sum(-1)).sum(1)
    return rows, log_s, x1 + s[:, None] * w, sec_trace


def _complete(vecs: torch.Tensor, good: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Orthonormal columns (q, d, m): the ``good`` leading columns kept (to rounding), the others
    completed by a QR of Gaussian columns against them (eigenvectors of a zero eigenvalue)."""
    if bool(good.all()):
        return vecs
    fill = torch.randn(vecs.shape, generator=generator, dtype=vecs.dtype, device=vecs.device)
    mat = torch.where(good[:, None, :], vecs, fill)
    qm, rm = torch.linalg.qr(mat)
    sign = torch.sign(torch.diagonal(rm, dim1=-2, dim2=-1))
    return qm * torch.where(sign == 0, torch.ones_like(sign), sign)[:, None, :]


def support_path(d: int, force: str | None = None, randomized_min_d: int = RANDOMIZED_MIN_D) -> bool:
    """Whether spread posteriors in dimension ``d`` take the support path (else the randomized one):
    d at most ``randomized_min_d`` and no ``force="randomized"``."""
    return force != "randomized" and d <= randomized_min_d


def svd_eigh(mat: torch.Tensor, upper: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenpairs of symmetric PSD matrices (..., n, n) by the SVD of the symmetric matrix read from
    one triangle (``upper``): values descending (the singular values: a PSD matrix's negative eigenvalues
    are rounding, below every floor of this module) and orthonormal vectors as columns."""
    full = mat.triu() + mat.triu(1).mT if upper else mat.tril() + mat.tril(-1).mT
    u, s, _ = torch.linalg.svd(full)
    return s, u


def psd_eigh(mat: torch.Tensor, upper: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenpairs of symmetric PSD matrices (..., n, n) read from one triangle, values descending:
    ``torch.linalg.eigh``, falling back to :func:`svd_eigh` where LAPACK's divide and conquer does not
    converge (it raised on a float32 Gram matrix whose eigenvalues spanned 1e2 to 1e-29)."""
    try:
        mu, u = torch.linalg.eigh(mat, UPLO="U" if upper else "L")
    except torch.linalg.LinAlgError:
        return svd_eigh(mat, upper)
    return torch.flip(mu, (-1,)), torch.flip(u, (-1,))


def gram_spectrum(rows: torch.Tensor, m: int, generator: torch.Generator):
    """The top m eigenpairs of A^T A from the Gram matrix A A^T (rows A (q, k, d)).

    Returns all k Gram eigenvalues (q, k), descending, and the top m eigenpairs of A^T A:
    values (q, m) (0 beyond k) and orthonormal vectors (q, d, m) (A^T u / sqrt(mu); where mu
    is at rounding level or beyond k, an orthonormal completion: those are eigenvectors of the
    zero eigenvalue).
    """
    q, k, d = rows.shape
    gram = rows @ rows.mT
    mu, u = psd_eigh(0.5 * (gram + gram.mT))
    kk = min(k, m)
    vec = rows.mT @ u[:, :, :kk]  # (q, d, kk), columns of norm sqrt(mu)
    top = mu[:, :1].clamp_min(0)
    eps = torch.finfo(rows.dtype).eps
    good = mu[:, :kk] > 100 * k * eps * top
    vec = vec / torch.where(good, mu[:, :kk], torch.ones_like(mu[:, :kk])).sqrt()[:, None, :]
    values = torch.zeros(q, m, dtype=rows.dtype, device=rows.device)
    values[:, :kk] = mu[:, :kk]
    if kk < m:
        vec = torch.cat([vec, torch.zeros(q, d, m - kk, dtype=rows.dtype, device=rows.device)], -1)
        good = torch.cat([good, torch.zeros(q, m - kk, dtype=torch.bool, device=rows.device)], -1)
    # a Gram-derived column is orthonormal to ~ eps mu_1 / mu_i: one QR restores it (and completes)
    qm, rm = torch.linalg.qr(torch.where(good[:, None, :], vec, torch.zeros_like(vec)))
    sign = torch.sign(torch.diagonal(rm, dim1=-2, dim2=-1))
    qm = qm * torch.where(sign == 0, torch.ones_like(sign), sign)[:, None, :]
    return mu, values, _complete(qm, good, generator)


def _ritz(vecs: torch.Tensor, cv: torch.Tensor):
    """Rayleigh-Ritz on the orthonormal block V (q, d, m) with C V: values (q, m) descending,
    Ritz vectors, C times them, and the residual column norms (q, m)."""
    hmat = vecs.mT @ cv
    theta, u = torch.linalg.eigh(0.5 * (hmat + hmat.mT))
    theta, u = torch.flip(theta, (-1,)), torch.flip(u, (-1,))
    y, cy = vecs @ u, cv @ u
    res = torch.linalg.vector_norm(cy - y * theta[:, None, :], dim=1)
    return theta, y, cy, res


def certify_subspace(apply, theta: torch.Tensor, vecs: torch.Tensor, res: torch.Tensor, need: int,
                     generator: torch.Generator, floor: torch.Tensor | None = None):
    """The certificate of a Ritz block (module docstring): (certified (q,) bool, eig_error (q,)).

    Parameters
    ----------
    apply : callable (rows (q',) int64, V (q', d, b)) -> C V (q', d, b)
        The covariance of each query applied to a block.
    theta : tensor (q, m)
        Ritz values, descending.
    vecs : tensor (q, d, m)
        Orthonormal Ritz vectors.
    res : tensor (q, m)
        Column norms of C V - V diag(theta).
    need : int
        The top ``need`` eigenpairs must be certified (d* + 1 for a frame).
    generator : torch.Generator
        Of the Gaussian test vectors.
    floor : tensor (q,), optional
        The frame's numerical floor (eigenvalues below it are unresolved).  Also certified: the
        s0 < need Ritz values above the floor, when everything else is bounded by the floor
        (gamma_{s0} <= floor); the error is then max(|R_{s0}|, gamma_{s0}), so that a gap
        involving the unresolved eigenvalues stays below the degenerate floor.

    Returns
    -------
    certified : (q,) bool
        Some split s in [need, m] has theta_s > max(theta_{s+1}, beta) + |R_{>s}| (or the floor
        case above).
    eig_error : (q,)
        |R_s| at the smallest such split (inf where not certified): every one of the top s
        eigenvalues of C is within it of its Ritz value.
    """
    q, d, m = vecs.shape
    dtype, device = vecs.dtype, vecs.device
    rows = torch.arange(q, device=device)
    z = torch.randn(q, d, CERT_VECTORS, generator=generator, dtype=dtype, device=device)
    z = z - vecs @ (vecs.mT @ z)
    norm = torch.linalg.vector_norm(z, dim=1).clamp_min(torch.finfo(dtype).tiny)
    log_norm = torch.log(norm)
    z = z / norm[:, None, :]
    for _ in range(CERT_POWER):
        z = apply(rows, z)
        z = z - vecs @ (vecs.mT @ z)
        norm = torch.linalg.vector_norm(z, dim=1).clamp_min(torch.finfo(dtype).tiny)
        log_norm = log_norm + torch.log(norm)
        z = z / norm[:, None, :]
    beta = torch.exp((math.log(CERT_ALPHA * math.sqrt(2 / math.pi)) + log_norm.amax(-1)) / CERT_POWER)
    r2 = res * res
    head = torch.sqrt(torch.cumsum(r2, -1))  # |R_s|, s = 1..m
    tail = torch.sqrt((r2.sum(-1, keepdim=True) - torch.cumsum(r2, -1)).clamp_min(0))  # |R_{>s}|
    nxt = torch.cat([theta[:, 1:], torch.full((q, 1), -math.inf, dtype=dtype, device=device)], -1)
    gamma = torch.maximum(nxt, beta[:, None]) + tail
    ok = theta > gamma
    ok[:, :need - 1] = False
    certified = ok.any(-1)
    first = torch.argmax(ok.to(torch.int8), -1)
    err = torch.where(certified, torch.gather(head, 1, first[:, None])[:, 0], torch.full_like(beta, math.inf))
    if floor is not None:  # the top s0 < need values above the floor, the rest bounded by it
        s0 = (theta > floor[:, None]).sum(-1)
        at = (s0 - 1).clamp_min(0)[:, None]
        gamma0 = torch.where(s0 > 0, torch.gather(gamma, 1, at)[:, 0], beta + tail[:, -1] + torch.sqrt(r2.sum(-1)))
        head0 = torch.where(s0 > 0, torch.gather(head, 1, at)[:, 0], torch.zeros_like(beta))
        low = ~certified & (s0 < need) & (gamma0 <= floor)
        certified = certified | low
        err = torch.where(low, torch.maximum(head0, gamma0), err)
    return certified, err


def subspace_iteration(apply, q: int, d: int, m: int, need: int, dtype: torch.dtype, device: torch.device,
                       generator: torch.Generator, max_iter: int, start: torch.Tensor | None = None,
                       floor_of=None):
    """Block subspace iteration with Rayleigh-Ritz for the top eigenpairs of q PSD operators.

    Each query iterates until the residuals of its top ``need`` Ritz pairs are at most
    ``RES_RTOL`` x its largest Ritz value and :func:`certify_subspace` certifies the block, or
    ``max_iter`` applications; converged queries leave the active set.

    ``floor_of(rows, theta)`` gives the frame's numerical floor of these queries (passed to the
    certificate).  Returns values (q, m) descending, vectors (q, d, m), eig_error (q,) and certified
    (q,) bool.
    """
    if start is None:
        start = torch.randn(q, d, m, generator=generator, dtype=dtype, device=device)
    vecs = torch.linalg.qr(start)[0]
    values = torch.zeros(q, m, dtype=dtype, device=device)
    out_vecs = vecs.clone()
    eig_error = torch.full((q,), math.inf, dtype=dtype, device=device)
    certified = torch.zeros(q, dtype=torch.bool, device=device)
    active = torch.arange(q, device=device)
    for it in range(max_iter):
        cv = apply(active, vecs)
        theta, y, cy, res = _ritz(vecs, cv)
        values[active], out_vecs[active] = theta, y
        small = (res[:, :need] <= RES_RTOL * theta[:, :1].abs()).all(-1)
        done = torch.zeros_like(small)
        if bool(small.any()):
            idx = torch.nonzero(small).squeeze(1)
            sel = active[idx]
            ok, err = certify_subspace(lambda rows, v: apply(sel[rows], v), theta[idx], y[idx], res[idx],
                                       need, generator, None if floor_of is None else floor_of(sel, theta[idx]))
            done[idx] = ok
            eig_error[active[idx]] = torch.where(ok, err, eig_error[active[idx]])
            certified[active[idx]] = ok
        if it == max_iter - 1 or bool(done.all()):
            break
        keep = ~done
        active, cy = active[keep], cy[keep]
        vecs = torch.linalg.qr(cy)[0]  # the next block: C times the Ritz vectors
    return values, out_vecs, eig_error, certified


def _floor_rank(values_all: torch.Tensor, cov_error: torch.Tensor, d: int, gap_floor: float):
    """The eigenvalues above the frame's floor (:func:`~ridgexr.empirical.kernels.degenerate_floor`), counted
    (Q,), and the floor (Q,)."""
    floor = degenerate_floor(values_all, cov_error, d, gap_floor)
    return (values_all > floor[:, None]).sum(-1), floor


def support_spectrum(resp: torch.Tensor, mean: torch.Tensor, xc: torch.Tensor, cov_error: torch.Tensor,
                     trace: torch.Tensor, m: int, diam2: float, memory_budget: int, generator: torch.Generator,
                     gap_floor: float | None = None):
    """The top m eigenpairs of spread posteriors' covariances, formed over each query's certified support.

    Parameters
    ----------
    resp : tensor (q, N)
        Responsibilities r_i (rows sum to 1).
    mean : tensor (q, d)
        The posterior means mu (same coordinates as ``xc``).
    xc : tensor (N, d)
        The training points.
    cov_error : tensor (q,)
        The covariance's entry error bound (its rank floor, as on the dense path).
    trace : tensor (q,)
        trace(Cov) (E|x|^2 - |mu|^2), the scale of the support tolerance.
    m : int
        Eigenpairs to return (m <= d).
    diam2 : float
        (2 R)^2, R the largest |x_i| (so |x_i - mu| <= 2 R).
    memory_budget : int
        Bytes for the gathered support chunks.
    generator : torch.Generator
        Of the orthonormal completion of zero eigenvalues (Gram form).
    gap_floor : float, optional
        Relative floor c of the rank count (``ridge.gap_floor``; default sqrt(eps) of the dtype).

    Returns
    -------
    values (q, m) descending, vectors (q, d, m), eig_error (q,) = delta diam^2 for the dropped
    responsibility delta, rank (q,) (exact: every eigenvalue is formed) and the support sizes k (q,).

    Each query keeps its k most responsible points, k the fewest with delta diam^2 <= SUPPORT_RTOL
    trace; k <= d takes the Gram form (eigh of the k x k matrix A A^T, A = sqrt(r_i)(x_i - mu)),
    k > d forms Sum_i r_i (x_i - mu)(x_i - mu)^T = Y^T Y (rows sqrt(r_i)(x_i - mu)) by GEMMs over chunks of
    the sorted support, only its upper triangle (:data:`SUPPORT_STRIPS` strips), which eigh reads.
    """
    q, n = resp.shape
    d = xc.shape[1]
    dtype, device = resp.dtype, resp.device
    c = default_gap_floor(dtype) if gap_floor is None else float(gap_floor)
    r_sorted, order = torch.sort(resp, 1, descending=True)
    tail = torch.flip(torch.cumsum(torch.flip(r_sorted, (1,)), 1), (1,))  # tail[:, j]: mass of ranks >= j
    allow = SUPPORT_RTOL * trace.clamp_min(0) / diam2
    k = (tail > allow[:, None]).sum(1).clamp(1, n)  # ranks >= k carry at most ``allow``
    delta = torch.where(k < n, torch.gather(torch.cat([tail, torch.zeros_like(tail[:, :1])], 1), 1, k[:, None])[:, 0],
                        torch.zeros_like(trace))
    values = torch.zeros(q, m, dtype=dtype, device=device)
    vectors = torch.zeros(q, d, m, dtype=dtype, device=device)
    rank = torch.zeros(q, dtype=torch.int64, device=device)
    elems = max(memory_budget // resp.element_size(), 1024)
    by_k = torch.argsort(k)
    k_host = k[by_k].tolist()
    n_small = sum(kk <= d for kk in k_host)
    # Gram form, queries in order of k, in groups within the budget (each padded to its largest k: zero
    # rows add zero eigenvalues)
    i = 0
    while i < n_small:
        j = i + 1
        while j < n_small and (j + 1 - i) * 3 * k_host[j] * (d + k_host[j]) <= elems:
            j += 1
        sel, kmax = by_k[i:j], k_host[j - 1]
        w = torch.where(torch.arange(kmax, device=device)[None] < k[sel][:, None], r_sorted[sel, :kmax], 0.0)
        rows = torch.sqrt(w)[:, :, None] * (xc[order[sel, :kmax]] - mean[sel][:, None, :])
        mu_all, vals, vecs = gram_spectrum(rows, m, generator)
        values[sel], vectors[sel] = vals, vecs
        rank[sel] = _floor_rank(mu_all, cov_error[sel], d, c)[0]
        i = j
    # formed covariance: the rest, all together, over chunks of their sorted supports
    big = by_k[n_small:]
    if big.numel():
        kb = k[big]
        cov = torch.zeros(big.numel(), d, d, dtype=dtype, device=device)  # its upper triangle
        step = max(1, elems // (2 * big.numel() * d))  # the gathered rows, and a strip copy of them
        strip = -(-d // SUPPORT_STRIPS)
        for j0 in range(0, int(kb.max()), step):
            act = torch.nonzero(kb > j0).squeeze(1)
            j1 = min(int(kb[act].max()), j0 + step)
            g = big[act]
            w = torch.where(torch.arange(j0, j1, device=device)[None] < kb[act][:, None], r_sorted[g, j0:j1], 0.0)
            y = xc[order[g, j0:j1]]  # (q', c, d): a gathered copy, so scaled in place
            y.sub_(mean[g][:, None, :]).mul_(torch.sqrt(w)[:, :, None])  # sqrt(r_i) (x_i - mu)
            sub = cov if act.numel() == big.numel() else cov[act]
            for i0 in range(0, d, strip):  # Y^T Y by strips of its upper triangle
                sub[:, i0:i0 + strip, i0:] += y[:, :, i0:i0 + strip].mT @ y[:, :, i0:]
            if sub is not cov:
                cov[act] = sub
        mu_all, vec_all = psd_eigh(cov, upper=True)
        del cov
        values[big], vectors[big] = mu_all[:, :m], vec_all[:, :, :m]
        rank[big] = _floor_rank(mu_all, cov_error[big], d, c)[0]
    return values, vectors, delta * diam2, rank, k


def lowrank_chunk(yaug: torch.Tensor, tr: dict, nc: int, m: int, need: int, top_k: int | None, *,
                  drop_tol: float, small_n: int, refine_k: int, memory_budget: int, nc_exact: int,
                  max_iter: int, seed: int, start: torch.Tensor | None = None, force: str | None = None,
                  randomized_min_d: int = RANDOMIZED_MIN_D, gap_floor: float | None = None) -> dict:
    """The fields of :class:`LowRankSpectrum` (but alpha, h and log_prob's constant) for one query chunk.

    The path of each query follows the dense path's own decisions, so that both give the same
    covariance: the Gram path where the dense path uses the shifted, scaled form (N <= ``small_n``;
    top-k with dropped mass <= ``drop_tol``; concentrated or unresolved posteriors, from the top
    ``refine_k`` points with the certified truncation in ``cov_error``), the randomized path on
    all N points elsewhere, and the dense path where the randomized one is not certified.

    ``force="randomized"`` sends every query that is not on the small-N path through the
    randomized path (tests); ``start`` (q, d, m) warm-starts it (the other paths ignore it).  ``gap_floor``: the
    relative floor c of the frame (``ridge.gap_floor``, default sqrt(eps)) in ``rank`` and in the randomized
    path's certificate, as on the dense path (:func:`~ridgexr.empirical.kernels.degenerate_floor`).  Returns a dict with ``lse`` (q,)
    (up to the chunk's per-query constant), ``mean`` (q, d) (centred) and the other fields.
    """
    xc = tr["xc"]
    n, d = xc.shape
    qn = yaug.shape[0]
    dtype, device = yaug.dtype, yaug.device
    eps = torch.finfo(dtype).eps
    floor_c = default_gap_floor(dtype) if gap_floor is None else float(gap_floor)  # the frame's relative floor
    gen = _generator(device, seed)
    diam2 = 4.0 * tr["radius2"]
    out = dict(lse=torch.empty(qn, dtype=dtype, device=device), mean=torch.empty(qn, d, dtype=dtype, device=device),
               dropped_mass=torch.zeros(qn, dtype=dtype, device=device),
               log_cov_scale=torch.zeros(qn, dtype=dtype, device=device),
               cov_error=torch.zeros(qn, dtype=dtype, device=device),
               values=torch.zeros(qn, m, dtype=dtype, device=device),
               vectors=torch.zeros(qn, d, m, dtype=dtype, device=device),
               eig_error=torch.zeros(qn, dtype=dtype, device=device),
               rank=torch.zeros(qn, dtype=torch.int64, device=device),
               rank_censored=torch.zeros(qn, dtype=torch.bool, device=device),
               path=torch.full((qn,), PATH_GRAM, dtype=torch.int8, device=device))

    def gram(rows, best_val, best_idx, lse_rel, shift, truncated: bool, small: bool, dropped_max=None):
        a, log_s, mean, sec_trace = gram_rows(best_val, best_idx, xc)
        mu_all, values, vectors = gram_spectrum(a, m, gen)
        k = best_val.shape[1]
        if small:  # the dense small-N path: rounding relative to the second moment about x_1
            err = rounding_error(sec_trace, eps)
        else:  # the dense top-k path: rounding, plus the certified truncation
            err = rounding_error((a * a).sum((1, 2)), eps)  # trace(cu)
            if truncated and n > k:
                # every dropped logit is <= the smallest kept one (float64), or <= dropped_max (float32 logits)
                top = best_val[:, -1] if dropped_max is None else dropped_max
                top = top if shift is None else top - shift
                err = err + torch.exp(math.log(n - k) + top - lse_rel - log_s) * diam2
        if k == 1:
            log_s = torch.zeros_like(log_s)
        rank, _ = _floor_rank(mu_all, err, d, floor_c)
        out["log_cov_scale"][rows], out["cov_error"][rows] = log_s, err
        out["values"][rows], out["vectors"][rows], out["rank"][rows] = values, vectors, rank
        return mean

    if n <= small_n:  # every query: the scaled form over all N points
        logits = yaug @ tr["aug_t"]
        best_val, best_idx = torch.sort(logits, 1, descending=True)
        rows = torch.arange(qn, device=device)
        out["mean"] = gram(rows, best_val, best_idx, None, None, False, True)
        out["lse"] = torch.logsumexp(logits, 1)
        return out

    exact = torch.ones(qn, dtype=torch.bool, device=device)
    if top_k is not None:
        best_val, best_idx, lse_rel, shift, dropped_max = topk_logits(yaug, tr, nc, top_k)
        rel = best_val - shift[:, None]
        drop = (-torch.expm1(torch.logsumexp(rel, 1) - lse_rel)).clamp_min(0.0)
        ok = drop <= drop_tol
        if force == "randomized":
            ok = torch.zeros_like(ok)
        if bool(ok.any()):
            rows = torch.nonzero(ok).squeeze(1)
            out["mean"][rows] = gram(rows, best_val[rows], best_idx[rows], lse_rel[rows], shift[rows], True, False,
                                     dropped_max[rows])
            out["lse"][rows] = shift[rows] + lse_rel[rows]
            out["dropped_mass"][rows] = drop[rows]
        exact = ~ok
    rows = torch.nonzero(exact).squeeze(1)
    if rows.numel() == 0:
        return out
    # the exact rows: one streamed pass keeps their logits (q', N) for the responsibilities
    ye = yaug[rows]
    logits = torch.empty(rows.numel(), n, dtype=dtype, device=device)
    for n0 in range(0, n, nc):
        logits[:, n0:n0 + nc] = ye @ tr["aug_t"][:, n0:n0 + nc]
    top = logits.max(1).values
    logits.sub_(top[:, None])
    resp = torch.exp(logits)  # relative to the largest: in (0, 1]
    s0 = resp.sum(1)
    lse_rel = torch.log(s0)
    resp.div_(s0[:, None])  # the responsibilities r_i
    mean = resp @ xc
    second_trace = resp @ (xc * xc).sum(1)
    out["lse"][rows], out["mean"][rows] = top + lse_rel, mean
    # the dense exact path's decisions (:func:`~ridgexr.empirical.kernels.exact_moments`): concentrated or
    # unresolved covariance -> the scaled form of the top refine_k points
    err_sub = rounding_error(second_trace, eps)
    ill = concentrated(s0) | unresolved(second_trace - (mean * mean).sum(1), err_sub)
    if force == "randomized":
        ill = torch.zeros_like(ill)
    if bool(ill.any()):
        sub = torch.nonzero(ill).squeeze(1)
        k = min(n, refine_k)
        val, idx = torch.topk(logits[sub], k, dim=1)  # sorted, descending
        truncated = n > k
        gram(rows[sub], val, idx, lse_rel[sub], None, truncated, not truncated)
        # (the mean stays the exact one of all N points, as on the dense path)
    del logits
    spread = torch.nonzero(~ill).squeeze(1)
    if spread.numel() == 0:
        return out
    r_sp, mu_sp = resp[spread], mean[spread]
    del resp
    if support_path(d, force, randomized_min_d):  # the covariance formed over each query's support
        g = rows[spread]
        err = err_sub[spread]
        values, vectors, eig_error, rank, _ = support_spectrum(
            r_sp, mu_sp, xc, err, second_trace[spread] - (mu_sp * mu_sp).sum(1), m, diam2, memory_budget, gen, floor_c)
        out["values"][g], out["vectors"][g], out["eig_error"][g] = values, vectors, eig_error
        out["cov_error"][g], out["rank"][g] = err, rank
        out["path"][g] = PATH_SUPPORT
        return out
    # the operator runs over the points some spread query weighs above SUPPORT_TOL / N: the rest
    # (total weight delta <= SUPPORT_TOL per query) moves each eigenvalue by at most delta x diam^2 (Weyl:
    # a PSD term of that norm), which enters eig_error
    keep = (r_sp >= SUPPORT_TOL / n).any(0)
    delta = torch.where(keep, torch.zeros_like(r_sp), r_sp).sum(1)
    xs = xc[keep] if not bool(keep.all()) else xc
    r_sp = r_sp[:, keep] if xs is not xc else r_sp
    n_op = xs.shape[0]
    # the streamed chunk of the randomized operator: (nc2, q' m) products within a quarter of the budget
    elems = max(memory_budget // yaug.element_size(), 1024)

    def apply(sel: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        qa, _, b = v.shape
        r, mu = r_sp[sel], mu_sp[sel]
        flat = v.permute(1, 0, 2).reshape(d, qa * b)
        mu_v = (mu[:, None, :] @ v)[:, 0]  # (qa, b)
        acc = torch.zeros(d, qa * b, dtype=dtype, device=device)
        wsum = torch.zeros(qa, b, dtype=dtype, device=device)
        step = max(1, min(n_op, elems // (4 * qa * b)))
        for n0 in range(0, n_op, step):
            xn = xs[n0:n0 + step]
            proj = (xn @ flat).reshape(-1, qa, b) - mu_v[None]  # (x_i - mu) . v
            proj.mul_(r[:, n0:n0 + step].T[:, :, None])
            wsum += proj.sum(0)
            acc += xn.T @ proj.reshape(-1, qa * b)
        return acc.reshape(d, qa, b).permute(1, 0, 2) - mu[:, :, None] * wsum[:, None, :]

    st = None if start is None else start[rows[spread]]
    err = err_sub[spread]

    def floor_of(sel, theta):  # the frame's floor (before the eigenvalue error)
        return degenerate_floor(theta, err[sel], d, floor_c)

    values, vectors, eig_error, certified = subspace_iteration(apply, spread.numel(), d, m, need, dtype, device,
                                                               gen, max_iter, st, floor_of)
    rank, _ = _floor_rank(values, err, d, floor_c)
    g = rows[spread]
    eig_error = eig_error + delta * diam2
    out["values"][g], out["vectors"][g], out["eig_error"][g] = values, vectors, eig_error
    out["cov_error"][g], out["rank"][g], out["rank_censored"][g] = err, rank, rank >= m
    out["path"][g] = PATH_RANDOMIZED
    bad = torch.nonzero(~certified).squeeze(1)
    if bad.numel():  # not certified: the dense path for these queries
        gb = g[bad]
        sub = max(1, elems // (4 * d * d))
        for i in range(0, gb.numel(), sub):
            gi = gb[i:i + sub]
            _, _, cu = exact_moments(yaug[gi], tr, nc_exact, True, eps, small_n=small_n, refine_k=refine_k,
                                     memory_budget=memory_budget)
            c, ls, ce = cu
            mu_all, vec_all = psd_eigh(c)
            out["values"][gi], out["vectors"][gi] = mu_all[:, :m], vec_all[:, :, :m]
            out["log_cov_scale"][gi], out["cov_error"][gi] = ls, ce
            out["eig_error"][gi] = 0.0
            out["rank"][gi] = _floor_rank(mu_all, ce, d, floor_c)[0]
            out["rank_censored"][gi] = False
            out["path"][gi] = PATH_DENSE
    return out
