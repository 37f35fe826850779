"""The V-kernel of a random-feature readout in closed form: the DSM target's covariance through the fit.

Generalization through variance (Vastola) attributes what a denoiser learns between training points to the
covariance of its DSM target around the target's mean, carried through the fit.  For a random-feature readout
that covariance has a closed form once the rows (x_t, t) of the loss are fixed:

- **The target's covariance per row.**  Given x_t, the DSM target's only randomness is x0, distributed by its
  posterior given x_t, P(x0 = x_i | x_t) proportional to exp(-|x_t - alpha_t x_i|^2 / (2 h_t)) for a point set.
  The target y = alpha_t x0 (``posterior_mean`` outputs) has covariance alpha_t^2 Cov[x0 | x_t]; the target
  y = -z / sqrt(h_t) = (alpha_t x0 - x_t) / h_t (``score`` outputs) has alpha_t^2 / h_t^2 Cov[x0 | x_t]
  (:func:`dsm_target_covariance`).  Its mean is the exact denoiser's output, the ``ideal`` target.
- **The readout's covariance.**  The closed-form flow's readout is linear in the targets:
  A(tau) = Y^T Lambda Phi G + A(0) R, with Phi (S, p) the features of the rows, Lambda = diag(c_s lambda_s) the
  row weights of :mod:`ridgexr.training.quadratic`, G = Q g(mu) Q^T the flow's gain on the (penalized) form
  U = Phi^T Lambda Phi = Q diag(mu) Q^T (g(mu) = 1 / mu at tau = inf, (1 - exp(-2 tau mu)) / mu before; 0 on
  the null space) and R its A(0) part (:func:`readout_gain`).  With independent rows,
  Cov(A[a], A[b]) = G Phi^T Lambda C_ab Lambda Phi G, C_ab = diag_s Cov(y_sa, y_sb) (:func:`readout_kernel`);
  G = U^+ at tau = inf without penalty gives (Phi^T Lambda Phi)^+ Phi^T Lambda Cov(y) Lambda Phi
  (Phi^T Lambda Phi)^+.
- **The V-kernel** of the learned output is psi(x, t)^T Cov(A[a], A[b]) psi(x', t'), and of the score that
  divided by h_t h_t' (``posterior_mean`` outputs) (:meth:`ReadoutKernel.output_covariance`).

The design: the rows are fixed and each row's x0 is redrawn from its posterior (``training.redraw:
targets``, :class:`ridgexr.training.TrainingSample`'s ``target_seed``); then the rows are independent given the
design, the readout's mean is exactly the ``ideal`` fit on the same rows and its covariance exactly the kernel
above.  (Redrawing the rows too, ``training.redraw: noise``, adds the covariance over designs of that mean; it is
not computed here.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._validation import check_int, check_option
from ..choices import NULL_CUTOFFS
from ..empirical import SmoothedEmpirical
from ..features import RandomFeatureDenoiser
from ..process import OU
from .dynamics import GradientFlow
from .fit import RandomFeatureFit, penalized_form
from .sample import MOMENT_PAIRS, TrainingSample

__all__ = ["dsm_target_covariance", "sample_target_covariance", "readout_gain", "ReadoutKernel", "readout_kernel"]


def dsm_target_covariance(train: np.ndarray, xt: np.ndarray, t: np.ndarray, parametrization: str = "posterior_mean",
                          process: OU | None = None) -> np.ndarray:
    """Covariance of the DSM target given x_t for a point set: alpha_t^2 Cov[x0 | x_t], or that / h_t^2.

    ``posterior_mean`` outputs fit y = alpha_t x0, whose covariance given x_t is alpha_t^2 Cov[x0 | x_t];
    ``score`` outputs fit y = -z / sqrt(h_t) = (alpha_t x0 - x_t) / h_t, covariance alpha_t^2 / h_t^2
    Cov[x0 | x_t].  Cov[x0 | x_t] is the posterior covariance of the smoothed empirical law of ``train``
    (:class:`ridgexr.SmoothedEmpirical`), computed in chunks of rows.

    Parameters
    ----------
    train : (N, d) training points (data units)
    xt : (B, d) noisy points
    t : (B,) their diffusion times (OU time, > 0)
    parametrization : {"posterior_mean", "score"}
    process : OU, optional

    Returns
    -------
    (B, d, d) covariance, data units^2 (``posterior_mean``) or 1 / data units^2 (``score``)

    Examples
    --------
    >>> train = np.array([[-1.0], [1.0]])
    >>> c = dsm_target_covariance(train, np.zeros((1, 1)), np.array([0.5]))  # the midpoint: x0 = +-1, even odds
    >>> bool(np.isclose(c[0, 0, 0], OU().alpha(np.array(0.5)) ** 2))
    True
    """
    check_option(parametrization, "parametrization", ("posterior_mean", "score"))
    process = process or OU()
    train = np.asarray(train, dtype=np.float64)
    xt = np.asarray(xt, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    if xt.ndim != 2 or xt.shape[1] != train.shape[1] or t.shape != xt.shape[:1]:
        raise ValueError(f"`xt` must have shape (B, {train.shape[1]}) and `t` shape (B,); got {xt.shape} and "
                         f"{t.shape}")
    out = np.empty((xt.shape[0], xt.shape[1], xt.shape[1]))
    step = max(64, MOMENT_PAIRS // max(train.shape[0], 1))
    dens = SmoothedEmpirical(train, t[: max(1, min(step, t.size))], process=process)
    for s in range(0, xt.shape[0], step):
        rows = slice(s, s + step)
        mom = dens.moments_flat(torch.as_tensor(xt[rows]), torch.as_tensor(t[rows]), cov=True)
        out[rows] = mom.cov.cpu().numpy()
    scale = process.alpha(t) ** 2
    if parametrization == "score":
        scale = scale / process.h(t) ** 2
    return out * scale[:, None, None]


def sample_target_covariance(sample: TrainingSample, parametrization: str = "posterior_mean") -> np.ndarray:
    """:func:`dsm_target_covariance` at every row of ``sample`` (S, d, d) (materialises the sample's rows)."""
    return dsm_target_covariance(sample.train, sample.xt, sample.t, parametrization, sample.process)


def readout_gain(U: torch.Tensor, *, penalty: float = 0.0, tau: float = math.inf,
                 null_cutoff: str = "relative") -> tuple[torch.Tensor, torch.Tensor]:
    """The closed-form flow's readout as a linear map: A(tau) = V G + A(0) R, (G, R) each (p, p).

    The same eigendecomposition and null space as :class:`ridgexr.training.GradientFlow` on the penalized form
    (:func:`ridgexr.training.fit.penalized_form`): with U = Q diag(mu) Q^T, G = Q diag(g) Q^T with
    g = (1 - exp(-2 tau mu)) / mu (1 / mu at tau = inf) on the range and 0 on the null space, and
    R = Q diag(r) Q^T with r = exp(-2 tau mu) on the range and 1 on the null space.  Computed by running that
    flow on V = I, A(0) = 0 (for G) and V = 0, A(0) = I (for R), so it is the fit's own map.

    Parameters
    ----------
    U : (p, p) symmetric positive semi-definite tensor, the loss form's quadratic part
    penalty : float >= 0, relative L2 penalty (the fit's)
    tau : float >= 0, training time (inf: converged)
    null_cutoff : {"relative", "absolute"}

    Returns
    -------
    (G, R), (p, p) tensors of U's dtype

    Examples
    --------
    >>> U = torch.diag(torch.tensor([2.0, 0.5], dtype=torch.float64))
    >>> G, R = readout_gain(U)
    >>> G.diagonal().tolist(), R.abs().max().item()
    ([0.5, 2.0], 0.0)
    """
    check_option(null_cutoff, "null_cutoff", NULL_CUTOFFS)
    Up = penalized_form(U, penalty)
    p = Up.shape[0]
    eye = torch.eye(p, dtype=Up.dtype, device=Up.device)
    zero = torch.zeros_like(eye)
    G = GradientFlow(Up, eye, zero, null_cutoff=null_cutoff).path([tau]).A[0]
    R = GradientFlow(Up, zero, eye, null_cutoff=null_cutoff).path([tau]).A[0]
    return 0.5 * (G + G.T), 0.5 * (R + R.T)


@dataclass
class ReadoutKernel:
    """A readout's mean and its covariance over the DSM target's noise, the rows fixed.

    Attributes
    ----------
    model : RandomFeatureDenoiser carrying the mean readout (the ``ideal`` fit on the same rows)
    cov : (d, p, d, p) ndarray, Cov(A[a, i], A[b, j]) (data units^2 for ``posterior_mean`` outputs)
    """

    model: RandomFeatureDenoiser
    cov: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        """(d, p) the mean readout."""
        return self.model.A.detach().cpu().numpy()

    def matrix(self) -> np.ndarray:
        """(d p, d p) covariance of the flattened readout A.reshape(-1)."""
        d, p = self.mean.shape
        return self.cov.reshape(d * p, d * p)

    def output_covariance(self, x: Any, t: float, x2: Any = None, t2: float | None = None) -> np.ndarray:
        """Cov(f(x, t), f(x2, t2)) of the model's output over the target noise, (n, m, d, d).

        Parameters
        ----------
        x : (n, d) points;  t : float, their time
        x2 : (m, d) points (default ``x``);  t2 : float (default ``t``)
        """
        x = np.asarray(x, dtype=np.float64)
        x2 = x if x2 is None else np.asarray(x2, dtype=np.float64)
        t2 = t if t2 is None else t2
        feats = []
        for pts, tt in ((x, t), (x2, t2)):
            tv = torch.full((pts.shape[0],), float(tt), dtype=self.model.A.dtype)
            with torch.no_grad():
                feats.append(self.model.features(torch.as_tensor(pts, dtype=self.model.A.dtype), tv).cpu().numpy())
        return np.einsum("ni,aibj,mj->nmab", feats[0], self.cov, feats[1], optimize=True)

    def score_covariance(self, x: Any, t: float, x2: Any = None, t2: float | None = None) -> np.ndarray:
        """The V-kernel: Cov(s(x, t), s(x2, t2)) of the learned score over the target noise, (n, m, d, d);
        1 / data units^2.  For ``posterior_mean`` outputs s = (f - x) / h_t, so it is
        :meth:`output_covariance` / (h_t h_t2); for ``score`` outputs it is :meth:`output_covariance`."""
        out = self.output_covariance(x, t, x2, t2)
        if self.model.parametrization == "posterior_mean":
            h = self.model.process.h
            out = out / (float(h(np.array(t))) * float(h(np.array(t if t2 is None else t2))))
        return out

    def sample_readouts(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` readouts of the Gaussian with this mean and covariance, (n, d, p): mean + L xi with
        L = E diag(sqrt(max(e, 0))) (the covariance's eigenpairs), xi ~ N(0, I) from ``default_rng(seed)``."""
        n = check_int(n, "n", min_val=1)
        d, p = self.mean.shape
        e, E = np.linalg.eigh(0.5 * (self.matrix() + self.matrix().T))
        L = E * np.sqrt(np.clip(e, 0.0, None))[None, :]
        xi = np.random.default_rng(seed).standard_normal((n, d * p))
        return self.mean[None] + (xi @ L.T).reshape(n, d, p)


def readout_kernel(fit: RandomFeatureFit, *, tau: float = math.inf, null_cutoff: str = "relative",
                   batch_size: int = 8192) -> ReadoutKernel:
    """The readout's covariance over the DSM target's noise on the rows of ``fit`` (module docstring).

    ``fit`` is the ``ideal`` fit on the rows (its readout at ``tau`` is the DSM readouts' mean): its form U,
    row weights c_s lambda_s, penalty and A(0) are the DSM fits' too.  Streamed by time node:
    M_ab = sum_s (c_s lambda_s)^2 Cov(y_sa, y_sb) psi_s psi_s^T, then Cov(A[a], A[b]) = G M_ab G.

    Parameters
    ----------
    fit : RandomFeatureFit of method "flow" and target "ideal"
    tau : one of ``fit.taus``
    null_cutoff : the fit's (:class:`ridgexr.training.GradientFlow`)
    batch_size : rows per block

    Returns
    -------
    ReadoutKernel

    Raises
    ------
    ValueError
        For a fit by gradient descent, of the DSM target, or without ``tau`` among its training times.
    """
    if fit.method != "flow":
        raise ValueError(f"`fit` must be fitted by the closed-form flow (method 'flow'); got {fit.method!r}")
    quad = fit.quadratic
    if quad.target != "ideal":
        raise ValueError(f"`fit` must be the ideal-target fit on the rows (its readout is the mean); got target "
                         f"{quad.target!r}")
    i = fit.tau_index(tau)
    model, sample = fit.model, quad.sample
    dev, dt = model.A.device, model.A.dtype
    G, _ = readout_gain(quad.U, penalty=fit.penalty, tau=float(fit.taus[i]), null_cutoff=null_cutoff)
    d, p = model.d, model.width
    lam_nodes = np.asarray(_loss_weights(quad, sample.t_nodes), dtype=np.float64)
    M = torch.zeros(d, d, p, p, dtype=dt, device=dev)
    with torch.no_grad():
        for block in sample.blocks(batch_size, by_node=True):
            j = block.node
            psi = model.features(torch.as_tensor(block.xt, dtype=dt, device=dev),
                                 torch.tensor(float(sample.t_nodes[j]), dtype=dt, device=dev))
            cov = dsm_target_covariance(sample.train, block.xt, block.t, model.parametrization, sample.process)
            w = (block.weight * lam_nodes[j]) ** 2  # (c_s lambda_s)^2
            for a in range(d):
                for b in range(a, d):
                    wc = torch.as_tensor(w * cov[:, a, b], dtype=dt, device=dev)
                    M[a, b].addmm_(psi.T, psi * wc[:, None])
    cov = torch.zeros(d, p, d, p, dtype=dt, device=dev)
    for a in range(d):
        for b in range(a, d):
            K = G @ M[a, b] @ G
            cov[a, :, b, :] = K
            cov[b, :, a, :] = K.T
    mean = model.with_A(fit.A[i])
    return ReadoutKernel(model=mean, cov=cov.cpu().numpy())


def _loss_weights(quad, t_nodes: np.ndarray) -> np.ndarray:
    """lambda(t_j) of the fit's schedule and output at the sample's nodes."""
    from .quadratic import loss_weight

    return loss_weight(quad.schedule, t_nodes, quad.parametrization, quad.sample.process)
