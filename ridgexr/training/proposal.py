"""How minibatch training draws each row's time: the proposal of the loss's Monte-Carlo estimator.

The loss (:mod:`ridgexr.training`) is an integral over t of w(t) times a row term.  Every
parametrization's row term is the epsilon error scaled by 1 / h_t (:func:`ridgexr.parametrization.dsm_row_loss`):

    L = int_{t_min}^{T} lambda(t) m(t) dt,   lambda(t) = w(t) / h_t,   m(t) = E |eps_hat(x_t, t) - z|^2,

and m(t) is of order d at every t for any network worth sampling, while lambda spans orders of
magnitude (w = 1: 1 / h_t, ~500 at t_min = 1e-3 against ~1 at T; w = h^2: h_t, the other way).
A row drawn at t ~ q(t) enters the estimate with the importance weight 1 / q(t):

    L_hat = mean_rows  lambda(t_i) m_i / q(t_i),   E[L_hat] = L for any q > 0 on [t_min, T].

- ``"uniform"``: q = 1 / (T - t_min), so the weight is T - t_min (the estimator ridgexr has always
  used; the draws are the same numbers as before this module existed).
- ``"weight"``: q proportional to lambda, so lambda / q = Z = int lambda dt is the same for every
  row and L_hat = Z mean_rows m_i: rows carry equal weight and the estimator's variance is that of
  m alone, whatever the schedule.  q is sampled by inverting the cumulative integral of lambda
  tabulated by the trapezoid rule on ``n_table`` nodes geometric in t; within a table interval t is
  uniform, so the density actually drawn is piecewise constant and the weight uses *that* density
  (the estimator is exactly unbiased; the table only moves q away from lambda / Z by the
  interpolation error, which costs a little variance and no bias).  w = h gives lambda = 1 and the
  uniform proposal again (a different random stream).

With a scheduler's integer timesteps (``timesteps``: OU times t_k, k = 0..K-1) the loss is the plain
average over k (:func:`ridgexr.fit_neural`): ``"uniform"`` draws k uniformly with weight 1 (diffusers'
training loop); ``"weight"`` draws k with probability p_k proportional to lambda(t_k) and weight
1 / (K p_k).

The variance per row, measured for each schedule, is in docs/training.md ("Time proposals").
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..choices import TIME_PROPOSALS
from .._validation import check_int, check_option
from ..process import OU
from .schedules import schedule_name, schedule_weight

__all__ = ["TimeProposal"]


class TimeProposal:
    """Draws (t, importance weight) rows for the loss's Monte-Carlo estimate (module doc).

    Parameters
    ----------
    schedule : {"1", "h", "h2"} or callable
        The loss weight w(t).
    t_min, T : float
        The loss's time range (OU time); unused with ``timesteps``.
    kind : {"uniform", "weight"}
        The proposal (module doc).
    process : OU, optional
    timesteps : (K,) array, optional
        OU times of a scheduler's integer timesteps (the scheduler convention).
    n_table : int
        Nodes of the table that inverts the cumulative weight (``"weight"``, continuous t).

    Attributes
    ----------
    integral : float
        Z = int_{t_min}^{T} w / h dt as the table integrates it (the trapezoid rule), or
        mean_k w(t_k) / h(t_k) with timesteps.

    Raises
    ------
    ValueError
        For an unknown ``kind``, or a ``"weight"`` proposal whose w vanishes somewhere (q would be 0
        there and the estimate biased).

    Examples
    --------
    >>> prop = TimeProposal("1", 1e-3, 5.0, "weight")
    >>> t, iw = prop.draw(4, torch.Generator().manual_seed(0))
    >>> bool(((t >= 1e-3) & (t <= 5.0)).all()), tuple(iw.shape)
    (True, (4,))
    """

    def __init__(self, schedule: str | Callable, t_min: float, T: float, kind: str = "uniform", *,
                 process: OU | None = None, timesteps: np.ndarray | None = None, n_table: int = 4097):
        self.kind = check_option(kind, "time_proposal", TIME_PROPOSALS)
        self.process = process or OU()
        self.schedule = schedule
        self.t_min, self.T = float(t_min), float(T)
        self.t_k = None if timesteps is None else torch.as_tensor(np.asarray(timesteps, dtype=np.float64))
        if self.t_k is not None:
            lam = self._lam(self.t_k.numpy())
            self.integral = float(lam.mean())
            if self.kind == "weight":
                self._check_positive(lam)
                self.p_k = torch.as_tensor(lam / lam.sum())
                self.iw_k = torch.as_tensor(lam.mean() / lam)  # 1 / (K p_k)
            return
        if self.kind == "uniform":
            self.integral = float(np.trapezoid(self._lam(self._grid(n_table)), self._grid(n_table)))
            return
        grid = self._grid(check_int(n_table, "n_table", min_val=2))
        lam = self._lam(grid)
        self._check_positive(lam)
        mass = 0.5 * (lam[1:] + lam[:-1]) * np.diff(grid)  # trapezoid mass of each table interval
        self.grid = torch.as_tensor(grid)
        self.cum = torch.as_tensor(np.concatenate([[0.0], np.cumsum(mass)]))
        self.integral = float(self.cum[-1])
        self.mass = torch.as_tensor(mass)

    def _grid(self, n: int) -> np.ndarray:
        return np.geomspace(self.t_min, self.T, n)

    def _lam(self, t: np.ndarray) -> np.ndarray:
        return schedule_weight(self.schedule, t, self.process) / self.process.h(t)

    def _check_positive(self, lam: np.ndarray) -> None:
        if not (lam > 0).all():
            raise ValueError(f"`time_proposal` 'weight' needs w(t) > 0 on the loss's times; schedule "
                             f"{schedule_name(self.schedule)!r} vanishes there: use 'uniform'")

    def draw(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` rows: times t (n,) and importance weights 1 / q(t) (n,), float64 on CPU.

        The uniform proposal draws exactly the numbers of ridgexr's earlier training loop
        (``torch.rand`` or, with timesteps, ``torch.randint``) from ``generator``.
        """
        if self.t_k is not None:
            if self.kind == "uniform":
                k = torch.randint(0, self.t_k.numel(), (n,), generator=generator)
                return self.t_k[k], torch.ones(n, dtype=torch.float64)
            k = torch.multinomial(self.p_k, n, replacement=True, generator=generator)
            return self.t_k[k], self.iw_k[k]
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        if self.kind == "uniform":
            width = self.T - self.t_min
            return self.t_min + width * u, torch.full((n,), width, dtype=torch.float64)
        target = u * self.integral
        j = torch.searchsorted(self.cum, target, right=True).clamp(1, self.mass.numel()) - 1
        lo, hi = self.grid[j], self.grid[j + 1]
        frac = ((target - self.cum[j]) / self.mass[j]).clamp(0.0, 1.0)
        t = lo + frac * (hi - lo)
        return t, self.integral * (hi - lo) / self.mass[j]  # 1 / q(t), q = mass_j / (Z (hi - lo)) on interval j
