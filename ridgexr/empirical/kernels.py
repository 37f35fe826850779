"""Kernels of the smoothed empirical density: the moments of one chunk of queries, on tensors.

Plain functions on already validated torch tensors of one dtype and device; the chunk sizes
and the tuning constants (``small_n``, ``refine_k``, ``drop_tol``, ``memory_budget``) come in
as arguments from :class:`ridgexr.empirical.SmoothedEmpirical`, which plans the chunks within
its memory budget and assembles :class:`~ridgexr.empirical.Moments`.

Inputs shared by the kernels:

- ``tr``: the training set prepared by :func:`prepare_training_set` for this dtype/device
  (points centred at their weighted mean, and the logits' right factor);
- ``yaug`` (q, d + 2): the queries' left factor of the logits, so that
  ``yaug @ tr["aug_t"]`` gives l_i = log w_i - |x - alpha_t x_i|^2 / (2 h_t) up to a
  per-query constant (built by :func:`chunk_moments`);
- ``nc``: the number of training points per chunk of the streamed passes.

Call graph (each function calls only those below it):

- :func:`chunk_moments` -- one query chunk: exact, or top-k with an exact recomputation of the
  queries whose dropped mass exceeds ``drop_tol``;
- :func:`exact_moments` -- no truncation: :func:`small_moments` for N <= ``small_n``, else
  :func:`streamed_moments` and, for concentrated posteriors, :func:`resolved_cov`;
- :func:`resolved_cov` -- the covariance of concentrated posteriors from the top ``refine_k``
  components;
- :func:`topk_moments` -- moments over the k most responsible components, from
  :func:`topk_logits` (the k largest logits, streamed over training chunks);
- :func:`small_moments`, :func:`streamed_moments` -- all N components, cancellation-free or by
  an online log-sum-exp.

The cancellation-free formula itself is :func:`ridgexr.empirical.moments.scaled_form`.

Float32 logits (``logits="float32"`` in :func:`prepare_training_set`).  The streamed pass of
:func:`topk_logits` -- every one of the N logits, 2 N d flops per query, the cost floor of a
top-k query -- may form its products in float32 and accumulate the log-sum-exp in float64.  Each
float32 logit is within :func:`logit_error_bound`'s eps of the float64 one (a rounding bound, derived
there); the k kept logits are recomputed in float64, and the dropped posterior mass is bounded from
above with every dropped logit raised by eps.  So the moments over the kept points are those of the
float64 path, the certificate ``dropped_mass <= drop_tol`` stays an upper bound, and a query that the
certificate does not cover falls back to the exact float64 path as before.  The exact paths (small N,
streamed moments, the randomized low-rank operator) stay float64: there every logit's rounding
enters the weights, a relative error e^(2 eps) - 1 of 1e-4 to 1e-1 at d = 784 (see
:func:`logit_error_bound`).
"""

from __future__ import annotations

import math

import torch

from .moments import scaled_form

__all__ = ["prepare_training_set", "upper_pair_count", "upper_pairs", "outer_upper", "symmetric_from_upper",
           "chunk_moments", "exact_moments", "small_moments", "streamed_moments", "resolved_cov", "topk_logits", "topk_moments",
           "logit_error_bound", "matmul_unit_roundoff", "CONCENTRATED_RTOL", "ROUNDING_FACTOR", "UNRESOLVED_RATIO",
           "concentrated", "rounding_error", "unresolved", "default_gap_floor", "degenerate_floor"]

#: the numerical thresholds of the exact paths, shared by the dense kernels below and the low-rank paths of
#: :mod:`ridgexr.empirical.lowrank` (which follow the dense path's decisions):
#: a posterior is concentrated where 1 - r_max < CONCENTRATED_RTOL (r_max its largest responsibility)
CONCENTRATED_RTOL = 1e-6
#: the rounding of the covariance E[x x^T] - m m^T: ROUNDING_FACTOR eps x the trace of the second moment it
#: started from
ROUNDING_FACTOR = 64
#: a covariance is unresolved where its trace is below UNRESOLVED_RATIO x that rounding
UNRESOLVED_RATIO = 1e6


def concentrated(s0: torch.Tensor) -> torch.Tensor:
    """Whether each posterior is concentrated, 1 - r_max < :data:`CONCENTRATED_RTOL`, from the sum s0 (Q,) of
    its weights relative to the largest (s0 = 1 / r_max >= 1).  Returns a bool tensor (Q,)."""
    return (s0 - 1) < CONCENTRATED_RTOL * s0


def rounding_error(second_trace: torch.Tensor, eps: float) -> torch.Tensor:
    """The entry error bound (Q,) of a covariance formed as E[x x^T] - m m^T: :data:`ROUNDING_FACTOR` eps x the
    trace (Q,) of the second moment it started from (squared data units, or the scaled form's units)."""
    return ROUNDING_FACTOR * eps * second_trace


def unresolved(cov_trace: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
    """Whether each covariance is unresolved: its trace (Q,) below :data:`UNRESOLVED_RATIO` x its rounding
    ``err`` (Q,) (:func:`rounding_error`).  Returns a bool tensor (Q,)."""
    return cov_trace < UNRESOLVED_RATIO * err


def default_gap_floor(dtype: torch.dtype) -> float:
    """sqrt(eps) of ``dtype`` (1.5e-8 in float64): the default relative floor c of the ridge frame's eigengap
    (``ridge.gap_floor``).

    >>> default_gap_floor(torch.float64) == 2.0 ** -26
    True
    """
    return math.sqrt(torch.finfo(dtype).eps)


def degenerate_floor(values: torch.Tensor, cov_error: torch.Tensor, d: int, gap_floor: float) -> torch.Tensor:
    """The numerical floor (Q,) of the eigenvalues (Q, m) of an O(1)-scaled posterior covariance of dimension
    ``d`` whose entries are within ``cov_error`` (Q,): 2 d cov_error (Weyl) + ``gap_floor`` x the largest
    |eigenvalue| (rounding).  An eigenvalue above it is resolved (``resolved_rank``); a tangent/normal gap
    below it (plus any eigenvalue error) is degenerate (:mod:`ridgexr.scms`)."""
    return 2 * d * cov_error + gap_floor * values.abs().amax(-1)


def matmul_unit_roundoff(device: torch.device) -> float:
    """Unit roundoff u of a float32 matrix product on ``device`` under torch's current settings.

    2^-24 (IEEE single) unless torch may use a shorter mantissa: TF32 (10 bits, u = 2^-11) when
    ``torch.get_float32_matmul_precision()`` is ``"high"`` or, on CUDA,
    ``torch.backends.cuda.matmul.allow_tf32`` is set; bfloat16 (7 bits, u = 2^-8) at ``"medium"``.

    Examples
    --------
    >>> import torch
    >>> matmul_unit_roundoff(torch.device("cpu")) == 2.0 ** -24  # torch's default precision "highest"
    True
    """
    precision = torch.get_float32_matmul_precision()
    if precision == "medium":
        return 2.0**-8
    if precision == "high" or (device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32):
        return 2.0**-11
    return 2.0**-24


def logit_error_bound(yaug: torch.Tensor, tr: dict, unit: float) -> torch.Tensor:
    """Bound eps (q,) on |l32_i - l_i| for every training point i: the logits' float32 rounding.

    The logit l_i = yaug . aug_i is a dot product of n = d + 2 terms.  Rounding both factors to
    float32 (relative error <= u each) and summing the n products in float32 in any order (any
    BLAS blocking, with or without FMA) gives, by the standard bound (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2nd ed., eq. 3.5, with the two input roundings as two more
    factors (1 + delta)),

        |l32_i - l_i| <= gamma_(n+2) sum_j |yaug_j| |aug_ij|,   gamma_m = m u / (1 - m u),

    and sum_j |yaug_j| |aug_ij| = sum_k |yaug_k| |x_ik| + |yaug_d+1| |x_i|^2 + |log w_i|
    <= |yaug_{1..d}| R + |yaug_d+1| R^2 + max |log w| (Cauchy-Schwarz; R the largest |x_c|).
    Products that underflow add at most (n + 2) 2^-126 (counted).  The converted logits are
    exact in float64, so this eps bounds the float32 logit's error; the caller adds nothing.

    Of the two terms at image scale (pixels in [-1, 1], d = 784, |y| ~ R ~ 20-30) the first,
    (alpha_t / h_t) |y| R, dominates: eps ~ 22 at t = 1e-3, 2.2 at 1e-2, 0.23 at 0.1, 0.05 at 0.5.
    The observed maximum over 60 000 points is 300-1 700 x smaller (the bound's factor n against the
    ~sqrt(n) of rounding errors that do not all align, and the Cauchy-Schwarz step): a worst-case
    bound, tight only in its scaling with alpha_t / h_t.

    Parameters
    ----------
    yaug : tensor (q, d + 2)
        The queries' left factor of the logits (float64).
    tr : dict
        From :func:`prepare_training_set` (uses ``radius2`` and ``abs_log_w``).
    unit : float
        Unit roundoff of the float32 products (:func:`matmul_unit_roundoff`).

    Returns
    -------
    tensor (q,), logit units (natural log).
    """
    d = yaug.shape[1] - 2
    m = d + 4
    gamma = m * unit / (1 - m * unit)
    radius = math.sqrt(tr["radius2"])
    total = torch.linalg.vector_norm(yaug[:, :d], dim=1) * radius + yaug[:, d].abs() * tr["radius2"] + tr["abs_log_w"]
    return gamma * total + m * 2.0**-126


def prepare_training_set(train: torch.Tensor, weights: torch.Tensor, dtype: torch.dtype, device: torch.device,
                         memory_budget: int, logits: str = "float64") -> dict:
    """The training set in the form the kernels use, for one dtype and device.

    Points with zero weight are dropped (they carry no mass); the rest are centred at their
    weighted mean (in float64, then cast).  ``aug`` = [x_c, |x_c|^2, log w] lets one matrix
    product give every logit.

    Parameters
    ----------
    train : tensor (N, d)
        Training points, finite, data units.
    weights : tensor (N,)
        Mixture weights, float64, non-negative, summing to 1.
    dtype, device
        Of the kernels' computation.
    memory_budget : int
        Bytes; the outer products ``xx`` are precomputed when they take at most a quarter of it.
    logits : {"float64", "float32"}
        ``"float32"`` (with a float64 ``dtype``) also keeps ``aug32_t``, the float32 copy of the logits'
        right factor that :func:`topk_logits` streams against (module docstring).

    Returns
    -------
    dict with
        ``xc`` (N', d) centred points (N' = number of positive weights), data units;
        ``center`` (d,) their weighted mean;
        ``aug_t`` (d + 2, N') aug transposed, stored contiguous;
        ``xx`` (N', P) the upper triangles of the outer products x_c x_c^T (:func:`outer_upper`), or None;
        ``pairs`` (2, P) and ``unpack`` (d * d,), from :func:`upper_pairs`;
        ``radius2`` float, the largest |x_c|^2, squared data units;
        ``abs_log_w`` float, the largest |log w_i|;
        ``aug32_t`` (d + 2, N') float32, or None (float64 logits).

    Examples
    --------
    >>> import torch
    >>> tr = prepare_training_set(torch.tensor([[0.0], [2.0]]), torch.tensor([0.5, 0.5], dtype=torch.float64),
    ...                           torch.float64, torch.device("cpu"), 1 << 20)
    >>> tr["xc"].ravel().tolist(), tr["center"].tolist(), tr["radius2"]
    ([-1.0, 1.0], [1.0], 1.0)
    """
    keep = weights > 0
    w = weights[keep].to(device=device, dtype=torch.float64)
    x64 = train[keep.to(train.device)].to(device=device, dtype=torch.float64)
    center = (w[:, None] * x64).sum(0)
    xc64 = x64 - center
    sq64 = (xc64 * xc64).sum(1)
    aug = torch.cat([xc64, sq64[:, None], torch.log(w)[:, None]], 1).to(dtype)
    xc = xc64.to(dtype)
    n, d = xc.shape
    pairs, unpack = upper_pairs(d, device)
    xx = None
    if n * pairs.shape[1] * xc.element_size() <= memory_budget // 4:
        xx = outer_upper(xc, pairs)
    # aug_t: the logits' right factor stored contiguous (a product with the transposed view
    # aug.T ran 6x slower: 5.8 vs 0.9 ms for 2000 queries x 1000 points)
    aug_t = aug.T.contiguous()
    aug32_t = aug_t.to(torch.float32) if logits == "float32" and dtype == torch.float64 else None
    return dict(xc=xc, center=center.to(dtype), aug_t=aug_t, xx=xx, pairs=pairs, unpack=unpack,
                radius2=float(sq64.max()), abs_log_w=float(torch.log(w).abs().max()), aug32_t=aug32_t)


def upper_pair_count(d: int) -> int:
    """P = d (d + 1) / 2: the distinct entries of a symmetric d x d matrix, the columns of the second-moment
    product (:func:`outer_upper`)."""
    return d * (d + 1) // 2


def upper_pairs(d: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The upper triangle of a d x d matrix as P = d (d + 1) / 2 index pairs, and the gather index back.

    Returns ``pairs`` (2, P), the (row, column) of each entry with row <= column (``torch.triu_indices``
    order), and ``unpack`` (d * d,), the pair index of each entry of the flattened symmetric matrix, so
    that ``s[..., unpack].reshape(..., d, d)`` is the symmetric matrix whose upper triangle is ``s``
    (:func:`symmetric_from_upper`).
    """
    pairs = torch.triu_indices(d, d, device=device)
    index = torch.empty(d, d, dtype=torch.int64, device=device)
    p = torch.arange(pairs.shape[1], device=device)
    index[pairs[0], pairs[1]] = p
    index[pairs[1], pairs[0]] = p
    return pairs, index.reshape(d * d)


def outer_upper(x: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """The upper triangles of the outer products x_i x_i^T, (n, d) -> (n, P) (:func:`upper_pairs`).

    The second-moment product ``weights @ outer_upper(x)`` forms each distinct entry of
    E[x x^T] once: P = d (d + 1) / 2 columns instead of d^2, ~1.4-1.9x less time at d = 8-32.
    """
    return x[:, pairs[0]] * x[:, pairs[1]]


def symmetric_from_upper(s: torch.Tensor, unpack: torch.Tensor, d: int) -> torch.Tensor:
    """(q, P) upper triangles -> (q, d, d) symmetric matrices (exactly symmetric: both halves are one number)."""
    return s[:, unpack].reshape(-1, d, d)


def chunk_moments(x: torch.Tensor, a: torch.Tensor, h: torch.Tensor, tr: dict, nc: int, cov: bool,
                  top_k: int | None, eps: float, *, drop_tol: float, small_n: int, refine_k: int,
                  memory_budget: int, nc_exact: int | None = None) -> dict:
    """The fields of :class:`~ridgexr.empirical.Moments` (but alpha and h) for one chunk of queries.

    Parameters
    ----------
    x : tensor (q, d)
        Queries, data units.
    a, h : tensor (q,)
        alpha_t and h_t at each query.
    tr : dict
        From :func:`prepare_training_set`.
    nc : int
        Training points per streamed chunk.
    cov : bool
        Also compute ``cov_unit``, ``log_cov_scale`` and ``cov_error``.
    top_k : int or None
        Keep the k most responsible points; queries whose dropped mass exceeds ``drop_tol``
        are recomputed exactly (dropped mass 0).
    eps : float
        Machine epsilon of the dtype.
    drop_tol, small_n, refine_k, memory_budget
        The density's settings (see :class:`~ridgexr.empirical.SmoothedEmpirical`).
    nc_exact : int, optional
        Training points per chunk of the exact paths (default ``nc``); with ``top_k`` the
        caller passes the exact path's own, smaller chunk (the top-k chunk is sized for
        (q, nc) logits, not for (nc, d^2) outer products).

    Returns
    -------
    dict with ``mean`` (q, d), ``log_prob`` (q,), ``dropped_mass`` (q,) and, with ``cov``,
    ``cov_unit`` (q, d, d), ``log_cov_scale`` (q,), ``cov_error`` (q,).
    """
    d = x.shape[1]
    y = x - a[:, None] * tr["center"]  # query relative to the scaled centre
    # logits = [y a/h, -a^2/(2h), 1] . [x_c, |x_c|^2, log w]
    yaug = torch.cat([y * (a / h)[:, None], (-0.5 * a * a / h)[:, None], torch.ones_like(h)[:, None]], 1)
    drop = None
    exact = dict(small_n=small_n, refine_k=refine_k, memory_budget=memory_budget)
    nc_exact = nc if nc_exact is None else nc_exact
    if top_k is None:
        lse, m1, cu = exact_moments(yaug, tr, nc, cov, eps, **exact)
    else:
        ref = topk_moments(yaug, tr, nc, top_k, cov)
        lse, m1 = ref["lse"], ref["mean"]
        drop = ref["dropped_mass"]
        cu = (ref["cov_unit"], ref["log_cov_scale"], ref["cov_error"]) if cov else None
        # truncation is used only where its certified dropped mass is <= drop_tol;
        # the other queries are recomputed exactly (dropped mass 0)
        bad = drop > drop_tol
        if bool(bad.any()):
            lse_b, m1_b, cu_b = exact_moments(yaug[bad], tr, nc_exact, cov, eps, **exact)
            lse, m1, drop = lse.clone(), m1.clone(), drop.clone()
            lse[bad], m1[bad], drop[bad] = lse_b, m1_b, 0.0
            if cov:
                for part, part_b in zip(cu, cu_b):
                    part[bad] = part_b
    out = dict(mean=m1 + tr["center"],
               log_prob=lse - (y * y).sum(1) / (2 * h) - 0.5 * d * (math.log(2 * math.pi) + torch.log(h)),
               dropped_mass=torch.zeros_like(h) if drop is None else drop)
    if cov:
        out["cov_unit"], out["log_cov_scale"], out["cov_error"] = cu
    return out


def exact_moments(yaug: torch.Tensor, tr: dict, nc: int, cov: bool, eps: float, *, small_n: int, refine_k: int,
                  memory_budget: int):
    """Exact moments of a query chunk: lse, mean (centred) and (cov_unit, log_cov_scale, cov_error).

    Training sets of at most ``small_n`` points take :func:`small_moments`; larger ones
    :func:`streamed_moments`, with the covariance of concentrated or unresolved posteriors
    from :func:`resolved_cov` (``refine_k`` components, sub-chunks within ``memory_budget``).
    The covariance triple is None without ``cov``.
    """
    if tr["xc"].shape[0] <= small_n:
        return small_moments(yaug, tr, cov, eps)
    lse, m1, second, conc, shifted = streamed_moments(yaug, tr, nc, cov)
    if not cov:
        return lse, m1, None
    # E[xx^T] - mm^T cancels when the posterior is concentrated on one point: its
    # rounding error is ~ eps E|x|^2.  Such queries (flagged before the product, or found
    # unresolved to 1e-6 relative after it: the trace of the difference, the diagonal of c
    # below) get their covariance in the shifted, scaled form of topk_moments instead, first, so
    # that the one-pass logits they reuse are freed before c is formed
    diag = torch.diagonal(second, dim1=1, dim2=2)
    err = rounding_error(diag.sum(-1), eps)
    ill = conc | unresolved((diag - m1 * m1).sum(-1), err)
    resolved = None
    if bool(ill.any()):
        rows = torch.nonzero(ill).squeeze(1)
        resolved = resolved_cov(yaug[rows], tr, nc, None if shifted is None else (*shifted, rows),
                                refine_k=refine_k, memory_budget=memory_budget)
    del shifted
    c = second - m1[:, :, None] * m1[:, None, :]  # exactly symmetric: both terms are (symmetric_from_upper)
    ls = torch.zeros_like(err)
    if resolved is not None:
        c[ill], ls[ill], err[ill] = resolved
    return lse, m1, (c, ls, err)


def small_moments(yaug: torch.Tensor, tr: dict, cov: bool, eps: float):
    """Exact moments for a small training set, every query in the cancellation-free form of
    :func:`topk_moments` with k = N.

    :func:`~ridgexr.empirical.moments.scaled_form` over all N points (l_1 the largest logit, at
    x_1; l_2 the second largest; v = exp(l_i - l_2), 0 at x_1), as :func:`topk_moments` with
    nothing dropped, but without its selection, sort and gathers, and without the
    concentrated/non-concentrated split of :func:`streamed_moments` (a handful of passes over
    (Q, N, d) arrays instead of two paths and their merge).  Returns lse, mean (centred) and,
    with ``cov``, (cov_unit, log_cov_scale, cov_error) (else None).
    """
    xc = tr["xc"]
    n, d = xc.shape
    logits = yaug @ tr["aug_t"]  # (q, n)
    if n == 1:
        q = logits.shape[0]
        zeros = torch.zeros(q, dtype=yaug.dtype, device=yaug.device)
        mean = xc.expand(q, d)
        cu = (torch.zeros(q, d, d, dtype=yaug.dtype, device=yaug.device), zeros, zeros) if cov else None
        return logits[:, 0], mean, cu
    top2, idx2 = torch.topk(logits, 2, dim=1)
    l1, l2 = top2[:, 0], top2[:, 1]
    first = torch.nn.functional.one_hot(idx2[:, 0], n).bool()
    v = torch.where(first, 0.0, torch.exp(logits - l2[:, None]))  # (q, n), <= 1; 0 at x_1
    x1 = xc[idx2[:, 0]]  # (q, d)
    delta = xc[None] - x1[:, None]  # (q, n, d)
    mean, log_s, cu, sec = scaled_form(x1, delta, v, l2 - l1, cov)
    lse = l2 - log_s  # = l_1 + log(1 + sum_{i != 1} exp(l_i - l_1))
    if not cov:
        return lse, mean, None
    # the subtraction's rounding, as in exact_moments: relative to the second moment it started from
    err = rounding_error(torch.diagonal(sec, dim1=1, dim2=2).sum(-1), eps)
    return lse, mean, (cu, log_s, err)


def streamed_moments(yaug: torch.Tensor, tr: dict, nc: int, cov: bool):
    """Online log-sum-exp pass over training chunks.

    Returns lse (up to the per-query constant), mean and E[x x^T] of the centred data,
    a mask of queries whose posterior is concentrated (1 - r_max < 1e-6), for which
    the second moment is not formed when the training set fits one chunk, and in that case
    the logits (Q, N) and their log-sum-exp (Q,), both less each query's largest logit
    (None when the training set was streamed in several chunks).  Without ``cov`` the second
    moment and the mask are None.
    """
    xc, xx_all = tr["xc"], tr["xx"]
    n, d = xc.shape
    qn = yaug.shape[0]
    dtype, device = yaug.dtype, yaug.device
    if nc >= n:  # one chunk: decide concentration before the O(N d^2) product
        logits = yaug @ tr["aug_t"]
        m_run = logits.max(1).values
        e = torch.exp(logits.sub_(m_run[:, None]))
        s0 = e.sum(1)
        s1 = e @ xc
        second = conc = None
        if cov:
            conc = concentrated(s0)
            xx = xx_all if xx_all is not None else outer_upper(xc, tr["pairs"])
            n_conc = int(conc.sum())
            if 2 * n_conc <= qn:  # concentrated rows get their covariance elsewhere; a few of them
                s2 = e @ xx       # cost less in the one product than gathering the others would
            else:  # mostly concentrated: skip their product
                s2 = torch.zeros(qn, xx.shape[1], dtype=dtype, device=device)
                rows = ~conc
                if n_conc < qn:
                    s2[rows] = e[rows] @ xx
            second = symmetric_from_upper(s2 / s0[:, None], tr["unpack"], d)
        return m_run + torch.log(s0), s1 / s0[:, None], second, conc, (logits, torch.log(s0))
    m_run = torch.full((qn,), -math.inf, dtype=dtype, device=device)
    s0 = torch.zeros(qn, dtype=dtype, device=device)
    s1 = torch.zeros(qn, d, dtype=dtype, device=device)
    s2 = torch.zeros(qn, tr["pairs"].shape[1], dtype=dtype, device=device) if cov else None
    for n0 in range(0, n, nc):
        n1 = min(n, n0 + nc)
        xcn = xc[n0:n1]
        logits = yaug @ tr["aug_t"][:, n0:n1]
        m_new = torch.maximum(m_run, logits.max(1).values)
        scale = torch.exp(m_run - m_new)
        e = torch.exp(logits.sub_(m_new[:, None]))
        s0 = s0 * scale + e.sum(1)
        s1 = s1 * scale[:, None] + e @ xcn
        if cov:
            xxn = xx_all[n0:n1] if xx_all is not None else outer_upper(xcn, tr["pairs"])
            s2 = s2 * scale[:, None] + e @ xxn
        m_run = m_new
    second = symmetric_from_upper(s2 / s0[:, None], tr["unpack"], d) if cov else None
    conc = concentrated(s0) if cov else None
    return m_run + torch.log(s0), s1 / s0[:, None], second, conc, None


def resolved_cov(yaug: torch.Tensor, tr: dict, nc: int, shifted=None, *, refine_k: int, memory_budget: int):
    """Covariance of concentrated posteriors in the shifted, scaled top-k form.

    k = min(N, refine_k).  The certified truncation error goes into ``cov_error``, so
    an eigengap it cannot resolve is reported as degenerate rather than trusted.
    ``shifted`` = (logits (Q', N), log-sum-exp (Q',), rows (q,)): the one-pass logits of
    :func:`streamed_moments` and the rows of them that ``yaug`` holds, when it has them (then they
    are not computed again; the rows are gathered a sub-chunk at a time, within ``memory_budget``
    bytes).  Returns (cov_unit, log_cov_scale, cov_error).
    """
    n, d = tr["xc"].shape
    if n <= refine_k:  # nothing to truncate: the same form without top-k selection
        return small_moments(yaug, tr, True, torch.finfo(yaug.dtype).eps)[2]
    k = min(n, refine_k)
    elems = max(memory_budget // yaug.element_size(), 1024)
    sub = max(1, elems // (4 * k * (d + 2) + (n if shifted is not None else 0)))
    parts = []
    for i in range(0, yaug.shape[0], sub):
        given = (None, None)
        if shifted is not None:
            logits, lse, rows = shifted
            given = (logits[rows[i:i + sub]], lse[rows[i:i + sub]])
        parts.append(topk_moments(yaug[i:i + sub], tr, nc, k, True, *given))
    return tuple(torch.cat([p[key] for p in parts]) for key in ("cov_unit", "log_cov_scale", "cov_error"))


def topk_logits(yaug: torch.Tensor, tr: dict, nc: int, k: int, logits=None, lse=None):
    """The k largest logits of each query, their training indices, and the log-sum-exp of all N.

    The logits are computed chunk by chunk over the training set (``nc`` points at a time),
    keeping the k best of the chunk merged with the best so far, unless the caller passes
    ``logits`` (q, N) of these queries and their log-sum-exp ``lse`` (q,), both relative to
    the same per-query constant.

    With ``tr["aug32_t"]`` (float32 logits, k < N) the streamed products are float32, the
    log-sum-exp is accumulated in float64, and the k points so selected get their logits again in
    float64.  With eps = :func:`logit_error_bound` and S_out = the streamed sum of exp over the points
    not kept, the returned log-sum-exp is log(sum_kept exp(l_i) + e^eps S_out) -- an upper bound, so
    the dropped mass the callers form from it is an upper bound too -- and ``dropped_max`` = the
    smallest kept float32 logit + eps bounds every dropped logit.

    Returns
    -------
    best_val : tensor (q, k')
        The kept logits (float64), sorted descending (k' = k, or N if smaller).
    best_idx : tensor (q, k')
        Their rows in ``tr["xc"]``.
    lse_rel : tensor (q,)
        The log-sum-exp of all N logits less ``shift`` (the caller's ``lse`` when given).
    shift : tensor (q,) or None
        Each query's largest streamed logit, or None when the caller gave the logits (the values
        are then relative to the caller's constant).
    dropped_max : tensor (q,)
        An upper bound on every logit that was not kept (same constant as ``best_val``).
    """
    if logits is not None:  # the caller's logits of these queries (one chunk of all N points)
        best_val, best_idx = torch.topk(logits, k, dim=1)  # sorted, descending
        return best_val, best_idx, lse, None, best_val[:, -1]
    n = tr["xc"].shape[0]
    qn = yaug.shape[0]
    dtype, device = yaug.dtype, yaug.device
    low = tr.get("aug32_t") is not None and k < n
    aug_t = tr["aug32_t"] if low else tr["aug_t"]
    ylow = yaug.to(torch.float32) if low else yaug
    best_val = best_idx = None
    m_run = torch.full((qn,), -math.inf, dtype=dtype, device=device)
    s0 = torch.zeros(qn, dtype=dtype, device=device)
    for n0 in range(0, n, nc):
        n1 = min(n, n0 + nc)
        chunk = (ylow @ aug_t[:, n0:n1]).to(dtype)  # float32 products: exact in float64 from here
        m_new = torch.maximum(m_run, chunk.max(1).values)
        s0 = s0 * torch.exp(m_run - m_new) + torch.exp(chunk - m_new[:, None]).sum(1)
        m_run = m_new
        # the chunk's own top k, merged with the best so far (sorted, descending)
        val, idx = torch.topk(chunk, min(k, n1 - n0), dim=1)
        idx = idx + n0
        if best_val is not None:
            both = torch.cat([best_val, val], 1)
            val, pos = torch.topk(both, min(k, both.shape[1]), dim=1)
            idx = torch.gather(torch.cat([best_idx, idx], 1), 1, pos)
        best_val, best_idx = val, idx
    if not low:
        return best_val, best_idx, torch.log(s0), m_run, best_val[:, -1]
    eps = logit_error_bound(yaug, tr, matmul_unit_roundoff(device))
    # the streamed sum over the dropped points, from the same float32-derived terms as s0
    s_out = (s0 - torch.exp(best_val - m_run[:, None]).sum(1)).clamp_min(0.0)
    dropped_max = best_val[:, -1] + eps
    # the kept points' logits in float64, from rows of xc (a gather of aug_t's columns is strided: 7x slower)
    d = tr["xc"].shape[1]
    exact = (torch.einsum("qd,qkd->qk", yaug[:, :d], tr["xc"][best_idx]) + yaug[:, d, None] * tr["aug_t"][d][best_idx]
             + tr["aug_t"][d + 1][best_idx])
    exact, order = torch.sort(exact, 1, descending=True)
    best_idx = torch.gather(best_idx, 1, order)
    s_kept = torch.exp(exact - m_run[:, None]).sum(1)
    return exact, best_idx, torch.log(s_kept + torch.exp(eps) * s_out), m_run, dropped_max


def topk_moments(yaug: torch.Tensor, tr: dict, nc: int, k: int, cov: bool, logits=None, lse=None) -> dict:
    """Moments over the k most responsible components, without cancellation.

    With kept logits l_1 >= l_2 >= ... and Delta_i = x_i - x_1, the covariance is
    C = s [sum_{i>=2} v_i Delta_i Delta_i^T - s w w^T] with v_i = exp(l_i - l_2),
    w = sum v_i Delta_i and s = exp(l_2 - l_1) / U, U = sum_i exp(l_i - l_1).  The
    bracket (``cov_unit``) is O(1) even when C underflows; ``log_cov_scale`` = log s.
    ``cov_error`` bounds the truncation error of cov_unit's entries with the certified
    dropped mass (every dropped logit is <= the smallest kept one; with float32 logits, <= the
    smallest kept float32 logit plus its rounding bound).

    The k components come from :func:`topk_logits` (``logits`` and ``lse`` as there; the
    returned ``lse`` is then relative to the caller's constant).  Returns a dict with ``lse``
    (q,), ``dropped_mass`` (q,), ``mean`` (q, d) (centred) and, with ``cov``, ``cov_unit``
    (q, d, d), ``log_cov_scale`` (q,) and ``cov_error`` (q,).
    """
    xc = tr["xc"]
    n, d = xc.shape
    qn = yaug.shape[0]
    dtype, device = yaug.dtype, yaug.device
    best_val, best_idx, lse_rel, shift, dropped_max = topk_logits(yaug, tr, nc, k, logits, lse)
    k = best_val.shape[1]
    # the dropped mass from logits relative to the largest (lse_rel): the absolute ones can be
    # ~1e5 at small t, whose rounding would swamp a small difference lse_kept - lse_all
    rel = best_val if shift is None else best_val - shift[:, None]
    lse_kept_rel = torch.logsumexp(rel, 1)
    out = dict(lse=lse_rel if shift is None else shift + lse_rel,
               dropped_mass=(-torch.expm1(lse_kept_rel - lse_rel)).clamp_min(0.0))
    xk = xc[best_idx]  # (q, k, d)
    x1 = xk[:, 0]
    diam2 = 4.0 * tr["radius2"]
    top_drop = dropped_max if shift is None else dropped_max - shift  # every dropped logit is <= this
    log_drop = (math.log(n - k) + top_drop - lse_rel) if n > k else None
    if k == 1:
        out["mean"] = x1
        if cov:
            out["cov_unit"] = torch.zeros(qn, d, d, dtype=dtype, device=device)
            out["log_cov_scale"] = torch.zeros(qn, dtype=dtype, device=device)
            out["cov_error"] = torch.zeros(qn, dtype=dtype, device=device) if log_drop is None \
                else torch.exp(log_drop) * diam2
        return out
    l1, l2 = best_val[:, 0], best_val[:, 1]
    v = torch.exp(best_val[:, 1:] - l2[:, None])  # (q, k-1), <= 1
    delta = xk[:, 1:] - x1[:, None, :]  # (q, k-1, d)
    out["mean"], log_s, cu, _ = scaled_form(x1, delta, v, l2 - l1, cov)
    if cov:
        err = rounding_error(torch.diagonal(cu, dim1=1, dim2=2).sum(-1), torch.finfo(dtype).eps)
        if log_drop is not None:
            err = err + torch.exp(log_drop - log_s) * diam2
        out["cov_unit"], out["log_cov_scale"], out["cov_error"] = cu, log_s, err
    return out
