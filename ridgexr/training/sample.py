"""The fixed Monte-Carlo/quadrature sample over which the loss is computed, streamed by time node.

A sample is (training point i, time node j, noise draw k) for every i, j and k: S = N n_time
n_noise points with x_t = alpha_t x0 + sqrt(h_t) z.  Nothing of size S is held: the noise of
node j is drawn from its own stream (``numpy.random.default_rng([seed, j])``) whenever the
node is visited, so the paper's 8 M-point sample (2 points x 2001 nodes x 2000 draws) is
accumulated in bounded memory, and any block can be regenerated bit for bit.

With a ``target_seed`` the rows (x_t, t) stay those of ``seed`` and each row's x0 is redrawn from
its posterior given x_t, P(x0 = x_i | x_t) proportional to exp(-|x_t - alpha_t x_i|^2 / (2 h_t)),
from the stream ``default_rng([target_seed, j, TARGET_STREAM])`` (one uniform per row of node j):
the DSM target's noise redrawn with the design fixed (:data:`TARGET_STREAM`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Iterator

import numpy as np
import torch

from .._backend import as_tensor
from .._validation import check_int
from ..empirical import Moments, SmoothedEmpirical
from ..process import OU
from ..ridge import ridge_frame
from ..scms import frame_flat, frame_from_moments, use_lowrank
from .quadrature import DEFAULT_QUADRATURE, time_nodes

__all__ = ["SampleBlock", "TrainingSample", "draw_training_sample", "draw_seed", "batches", "block_mean_and_tangent",
           "posterior_index", "TARGET_STREAM", "keeps_moments", "MOMENT_CACHE_BYTES"]


@dataclass
class SampleBlock:
    """Consecutive rows of a :class:`TrainingSample` (numpy float64).

    x0, z, xt : (B, d);  t, weight : (B,);  group : (B,) (point, node) cell of each row
    (noise draws of one cell are consecutive and never split between blocks);
    node : the time node's index when every row shares it, else None.
    """

    x0: np.ndarray
    t: np.ndarray
    z: np.ndarray
    xt: np.ndarray
    weight: np.ndarray
    group: np.ndarray
    node: int | None

    @property
    def size(self) -> int:
        return int(self.t.shape[0])


@dataclass(eq=False)
class TrainingSample:
    """The sample of (x0, t, z) that defines the loss as a quadrature over t and an average over z.

    Attributes
    ----------
    train : (N, d) training data (the density p_t of the posterior means and frames)
    points : (n,) indices of the training points the rows' x0 are drawn from (None: all N)
    t_nodes, t_weights : (n_time,) quadrature nodes and weights, int f dt ~ sum w_j f(t_j)
    n_noise : noise draws per (point, node)
    seed : seed of the noise (node j draws from ``default_rng([seed, j])``)
    t_min, T : the time range;  quadrature : the rule's name
    process : the OU process
    key : unique per drawn sample (a cache key that outlives ``id()``)
    cache : per-sample results that do not depend on the model, shared by every fit
    target_seed : None, or the seed of the rows' redrawn x0 (module docstring): the rows x_t stay
        those of ``seed``; x0 (and z = (x_t - alpha_t x0) / sqrt(h_t)) are a draw of the posterior
        given x_t over all N training points

    Each row's measure weight is c_s = w_j / (n n_noise) (n = N without ``points``), so sum_s c_s g(s) estimates
    int_{t_min}^T E_{x0, z} g dt.  :meth:`blocks` streams the rows; the whole-sample arrays
    (``x0``, ``t``, ``z``, ``xt``, ``weight``, ``group``) are built on first access, for
    small samples only.
    """

    train: np.ndarray
    t_nodes: np.ndarray
    t_weights: np.ndarray
    n_noise: int
    seed: int
    t_min: float
    T: float
    quadrature: str = DEFAULT_QUADRATURE
    process: OU = field(default_factory=OU)
    key: str = field(default_factory=lambda: uuid.uuid4().hex, compare=False)
    cache: dict = field(default_factory=dict, repr=False, compare=False)
    points: np.ndarray | None = None
    target_seed: int | None = None

    @property
    def n_train(self) -> int:
        return int(self.train.shape[0])

    @property
    def n_points(self) -> int:
        """Training points the rows' x0 are drawn from (``len(points)``, or N)."""
        return self.n_train if self.points is None else int(len(self.points))

    @property
    def n_time(self) -> int:
        return int(self.t_nodes.shape[0])

    @property
    def size(self) -> int:
        """Number of sample points S = n n_time n_noise (n = :attr:`n_points`)."""
        return self.n_points * self.n_time * self.n_noise

    def node_blocks(self, j: int, points_per_block: int | None = None) -> Iterator[SampleBlock]:
        """Rows of time node ``j``, all draws of ``points_per_block`` training points per block
        (default: the whole node in one block)."""
        src = self.train if self.points is None else self.train[self.points]
        n, d = src.shape
        z_all = np.random.default_rng([self.seed, j]).standard_normal((n, self.n_noise, d))
        tj = np.array(float(self.t_nodes[j]))
        a, sh = float(self.process.alpha(tj)), float(np.sqrt(self.process.h(tj)))
        step = n if points_per_block is None else max(1, int(points_per_block))
        u_all = (None if self.target_seed is None else
                 np.random.default_rng([self.target_seed, j, TARGET_STREAM]).random((n, self.n_noise)))
        for s in range(0, n, step):  # a few point chunks of one node, each one vectorised block
            pts = slice(s, min(n, s + step))
            z = z_all[pts].reshape(-1, d)
            x0 = np.repeat(src[pts], self.n_noise, axis=0)
            rows = x0.shape[0]
            xt = a * x0 + sh * z
            if u_all is not None:  # the design stays; x0 (and with it z) is a draw of its posterior given x_t
                x0 = self.train[posterior_index(self.train, xt, a, sh * sh, u_all[pts].reshape(-1))]
                z = (xt - a * x0) / sh
            yield SampleBlock(x0=x0, t=np.full(rows, float(tj)), z=z, xt=xt,
                              weight=np.full(rows, self.t_weights[j] / (n * self.n_noise)),
                              group=np.repeat(np.arange(pts.start, pts.stop) * self.n_time + j, self.n_noise),
                              node=j)

    def blocks(self, max_rows: int = 8192, *, by_node: bool = True) -> Iterator[SampleBlock]:
        """Stream the sample in blocks of at most ``max_rows`` rows (at least one point's draws).

        ``by_node=True``: each block holds rows of one time node (a node with more rows is
        split over its points).  ``by_node=False``: consecutive small nodes are merged.
        """
        max_rows = check_int(max_rows, "max_rows", min_val=1)
        per_node = self.n_points * self.n_noise
        split = per_node > max_rows
        pts = max(1, max_rows // self.n_noise) if split else None
        pending: list[SampleBlock] = []
        rows = 0
        for j in range(self.n_time):  # one vectorised block per node (or per point chunk of a node)
            if by_node or split:
                yield from self.node_blocks(j, pts)
                continue
            if rows + per_node > max_rows and pending:
                yield _concat(pending)
                pending, rows = [], 0
            pending.extend(self.node_blocks(j))
            rows += per_node
        if pending:
            yield _concat(pending)

    # -------------------------------------------------------------- whole-sample arrays (small samples)
    @cached_property
    def _whole(self) -> SampleBlock:
        return _concat(list(self.blocks(max(self.size, 1), by_node=False)))

    x0 = property(lambda self: self._whole.x0, doc="(S, d) training point of each row (materialised)")
    t = property(lambda self: self._whole.t, doc="(S,) time of each row (materialised)")
    z = property(lambda self: self._whole.z, doc="(S, d) noise (materialised)")
    xt = property(lambda self: self._whole.xt, doc="(S, d) noisy point (materialised)")
    weight = property(lambda self: self._whole.weight, doc="(S,) measure weight c_s (materialised)")
    group = property(lambda self: self._whole.group, doc="(S,) (point, node) cell (materialised)")

    def posterior_mean(self, train: np.ndarray | None = None, process: OU | None = None) -> np.ndarray:
        """E[x0 | x_t] of the training set's p_t at every row (S, d), cached (materialises the sample)."""
        if "posterior_mean" not in self.cache:
            self.cache["posterior_mean"] = block_posterior_mean(self, self._whole)
        return self.cache["posterior_mean"]

    def tangent_frames(self, train: np.ndarray | None, d_star: int, process: OU | None = None) -> np.ndarray:
        """Tangent bases (S, d, d*) of the ridge frame at every row, cached per d* (materialises)."""
        key = ("tangent", int(d_star))
        if key not in self.cache:
            self.cache[key] = block_tangent_frames(self, self._whole, d_star)
        return self.cache[key]

    def block_moments(self, block: SampleBlock, index: int, max_rows: int,
                      d_star: int | None) -> tuple[np.ndarray, np.ndarray | None]:
        """:func:`block_mean_and_tangent` at ``block``, the ``index``-th of ``blocks(max_rows, by_node=False)``,
        computed once per sample: kept in :attr:`cache` (read-only arrays) when the whole sample's means and
        frames fit :data:`MOMENT_CACHE_BYTES`, else computed at each call.  They depend on the training set
        and the rows only, so every model evaluated on this sample (:func:`ridgexr.training.evaluate_denoiser`)
        reuses them: the same numbers, one moments pass instead of one per model."""
        key = ("moments", int(max_rows), None if d_star is None else int(d_star), int(index))
        if key in self.cache:
            return self.cache[key]
        mean, tang = block_mean_and_tangent(self, block, d_star)
        if keeps_moments(self.size, self.train.shape[1], d_star):
            for a in (mean, tang):
                if a is not None:
                    a.setflags(write=False)
            self.cache[key] = (mean, tang)
        return mean, tang

    def with_seed(self, seed: int) -> "TrainingSample":
        """The same nodes, weights and sizes with the noise of another seed (e.g. held out)."""
        return TrainingSample(train=self.train, t_nodes=self.t_nodes, t_weights=self.t_weights,
                              n_noise=self.n_noise, seed=int(seed), t_min=self.t_min, T=self.T,
                              quadrature=self.quadrature, process=self.process, points=self.points)

    def with_target_seed(self, target_seed: int | None) -> "TrainingSample":
        """The same rows (nodes, weights, sizes and ``seed``) with each row's x0 redrawn from its posterior
        given x_t by ``target_seed`` (None: the rows' own x0)."""
        return TrainingSample(train=self.train, t_nodes=self.t_nodes, t_weights=self.t_weights,
                              n_noise=self.n_noise, seed=self.seed, t_min=self.t_min, T=self.T,
                              quadrature=self.quadrature, process=self.process, points=self.points,
                              target_seed=None if target_seed is None else check_int(target_seed, "target_seed",
                                                                                     min_val=0))


#: the third key of a redrawn target's stream, ``default_rng([target_seed, node, TARGET_STREAM])`` ("tgts"): never
#: the two-key stream of a sample's noise, ``default_rng([seed, node])``
TARGET_STREAM = 0x74677473


def posterior_index(train: np.ndarray, xt: np.ndarray, alpha: float, h: float, u: np.ndarray) -> np.ndarray:
    """Index of x0 drawn from its posterior given x_t at each row, by inversion of the posterior's CDF.

    P(x0 = x_i | x_t) = exp(l_i) / sum_k exp(l_k) with l_i = -|x_t - alpha x_i|^2 / (2 h) (uniform prior over the
    N training points); row r takes the first i whose cumulative probability exceeds ``u[r]``.  Rows are taken
    in chunks of :data:`MOMENT_PAIRS` (row, point) pairs.

    Parameters
    ----------
    train : (N, d) training points
    xt : (B, d) noisy points
    alpha, h : float, alpha_t and h_t of the rows' time
    u : (B,) uniforms in [0, 1)

    Returns
    -------
    (B,) int array of indices into ``train``

    Examples
    --------
    >>> train = np.array([[-3.0], [3.0]])
    >>> posterior_index(train, np.array([[-2.9], [2.9]]), 1.0, 0.01, np.array([0.5, 0.5])).tolist()
    [0, 1]
    """
    out = np.empty(xt.shape[0], dtype=np.int64)
    sq = (train * train).sum(1)
    for rows in _row_chunks(xt.shape[0], train.shape[0]):
        x = xt[rows]
        logit = (alpha * (x @ train.T) - 0.5 * alpha * alpha * sq[None, :]) / h  # |x|^2 cancels in the softmax
        prob = np.exp(logit - logit.max(1, keepdims=True))
        cdf = np.cumsum(prob, axis=1)
        cdf /= cdf[:, -1:]
        out[rows] = np.minimum((cdf <= u[rows, None]).sum(1), train.shape[0] - 1)
    return out


#: (query, training point) pairs per call of the posterior moments in :func:`block_posterior_mean` and
#: :func:`block_mean_and_tangent`: their (rows, N) temporaries stay at 2 MB, which the allocator reuses,
#: instead of fresh, page-faulted arrays per block (2^13 rows x 1024 points = 64 MB each: manifold-circle's
#: N = 1024 mean + frames 1.92 -> 1.09 CPU s, the mean alone 1.72 -> 0.87 s, minor page faults
#: 1 050 000 -> 8 700).  Each row's moments are those of one call over the block up to float64 rounding
#: (BLAS picks its kernels by the number of rows: bit for bit on manifold-circle's blocks, ~1e-14 on
#: small ones).  Training sets of at most 32 points (every two-/three-point entry) are not split:
#: their 8 192-row blocks fit
MOMENT_PAIRS = 1 << 18
#: low-rank held-out frames go through in chunks of max(64, MOMENT_PAIRS // max(N, this)) rows, i.e. 64 rows
#: per call: the Gram / subspace-iteration buffers are (rows, N) and (rows, d, k)
LOWRANK_ROWS_DIVISOR = 4096
#: :meth:`TrainingSample.block_moments` keeps a sample's exact posterior means and ridge frames (float64,
#: S x d x (1 + d*) values) when they take at most this many bytes, so every model evaluated on one held-out
#: sample shares one moments pass (fashion-unet's four models: 2 048 rows x 784 x 11, 141 MB)
MOMENT_CACHE_BYTES = 1 << 29


def keeps_moments(rows: int, d: int, d_star: int | None) -> bool:
    """Whether a sample of ``rows`` rows in dimension ``d`` keeps its means and d*-frames
    (:meth:`TrainingSample.block_moments`): they fit :data:`MOMENT_CACHE_BYTES`."""
    return rows * d * (1 + (d_star or 0)) * 8 <= MOMENT_CACHE_BYTES


def _row_chunks(n_rows: int, n_train: int) -> list[slice]:
    """Slices of at most ``MOMENT_PAIRS // n_train`` rows (at least 64) covering ``n_rows``."""
    step = max(64, MOMENT_PAIRS // max(n_train, 1))
    return [slice(i, i + step) for i in range(0, max(n_rows, 1), step)]


def _block_moments(sample: TrainingSample, block: SampleBlock, cov: bool, d_star: int | None = None):
    """(mean (B, d), tangent (B, d, d*) or None) at the rows of ``block``: the moments in row chunks
    (:data:`MOMENT_PAIRS`), the frames of the whole block in one call."""
    dens = SmoothedEmpirical(sample.train, block.t, process=sample.process)
    xt = torch.as_tensor(block.xt, dtype=torch.float64)
    tt = torch.as_tensor(block.t, dtype=torch.float64)
    if d_star is not None and use_lowrank("auto", "log", xt.shape[-1], int(d_star)):
        # above d = 128 no (B, d, d) covariance: the mean in row chunks, the tangent from the observation's
        # low-rank frames (top d* + 1 + OVERSAMPLE eigenpairs; equal to the dense frame where both run)
        chunks = _row_chunks(xt.shape[0], dens.n_train)
        mean = torch.cat([dens.moments_flat(xt[rows], tt[rows], cov=False).mean for rows in chunks])
        tangent = torch.cat([frame_flat(dens, xt[rows], tt[rows], int(d_star), "log", top_k=None).tangent
                             for rows in _row_chunks(xt.shape[0], max(dens.n_train, LOWRANK_ROWS_DIVISOR))])
        return mean.cpu().numpy(), tangent.cpu().numpy()
    parts = [dens.moments_flat(xt[rows], tt[rows], cov=cov) for rows in _row_chunks(xt.shape[0], dens.n_train)]
    mom = parts[0] if len(parts) == 1 else Moments(**{
        f.name: None if getattr(parts[0], f.name) is None else torch.cat([getattr(m, f.name) for m in parts])
        for f in fields(Moments)})
    tangent = None if d_star is None else frame_from_moments(mom, xt, int(d_star), "log").tangent.cpu().numpy()
    return mom.mean.cpu().numpy(), tangent


def block_posterior_mean(sample: TrainingSample, block: SampleBlock) -> np.ndarray:
    """E[x0 | x_t] (B, d) of the sample's training set at the rows of ``block``.

    Computed in chunks of rows (:data:`MOMENT_PAIRS`); the numbers of
    ``SmoothedEmpirical(train, block.t).posterior_mean(block.xt)`` up to float64 rounding
    (``tests/test_heldout.py``).
    """
    return _block_moments(sample, block, cov=False)[0]


def block_tangent_frames(sample: TrainingSample, block: SampleBlock, d_star: int) -> np.ndarray:
    """Ridge tangent bases (B, d, d*) at the rows of ``block``."""
    dens = SmoothedEmpirical(sample.train, block.t, process=sample.process)
    return ridge_frame(dens, block.xt, int(d_star)).tangent


def block_mean_and_tangent(sample: TrainingSample, block: SampleBlock,
                           d_star: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """E[x0 | x_t] (B, d) and, with ``d_star``, the ridge tangent bases (B, d, d*) at the rows of ``block``,
    from one pass of the posterior moments (the frame's covariance pass also gives the mean).

    The same numbers as :func:`block_posterior_mean` and :func:`block_tangent_frames` (bit for bit on
    the problems of ``tests/test_heldout.py``) at about half their cost, in chunks of rows
    (:data:`MOMENT_PAIRS`).
    """
    if d_star is None:
        return block_posterior_mean(sample, block), None
    return _block_moments(sample, block, cov=True, d_star=d_star)


def _concat(blocks: list[SampleBlock]) -> SampleBlock:
    if len(blocks) == 1:
        return blocks[0]
    cat = lambda name: np.concatenate([getattr(b, name) for b in blocks])  # noqa: E731
    nodes = {b.node for b in blocks}
    return SampleBlock(x0=cat("x0"), t=cat("t"), z=cat("z"), xt=cat("xt"), weight=cat("weight"),
                       group=cat("group"), node=nodes.pop() if len(nodes) == 1 else None)


def draw_training_sample(train: Any, *, t_min: float, T: float, n_time: int, n_noise: int, seed: int,
                         process: OU | None = None, quadrature: str = DEFAULT_QUADRATURE,
                         points: Any = None, target_seed: int | None = None) -> TrainingSample:
    """Define the sample over which U, V, C and the losses are computed (nothing is drawn yet).

    Time: ``n_time`` nodes of ``quadrature`` on [t_min, T] (:func:`ridgexr.training.time_nodes`;
    weights integrate, they do not average).  Noise: ``n_noise`` draws per (training point,
    time node), node j from ``numpy.random.default_rng([seed, j])``.

    Parameters
    ----------
    train : array (N, d), finite
    t_min, T : float, 0 < t_min < T (OU time)
    n_time, n_noise : int >= 1 (``n_time`` odd and >= 3 for Simpson's rule)
    seed : int >= 0
    process : OU, optional
    quadrature : {"simpson-t", "trapezoid-log-t", "gauss-legendre-log-t"}
    points : array of int (n,), optional
        Distinct indices of the training points the x0 are drawn from (a held-out subset,
        :meth:`ridgexr.models.model_spec.DiagnosticsSpec.point_subset`); the posterior means and frames
        still use all N points.  Default: every point.
    target_seed : int >= 0, optional
        Redraw each row's x0 from its posterior given x_t with this seed, the rows x_t fixed by ``seed``
        (:class:`TrainingSample`); default: the rows' own x0.

    Returns
    -------
    TrainingSample with S = n n_time n_noise points (n = N, or ``len(points)``).
    """
    process = process or OU()
    x = np.asarray(as_tensor(train, name="train", dtype=torch.float64).cpu().numpy())
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"`train` must have shape (N, d) with N >= 1; got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("`train` contains non-finite values")
    n_noise = check_int(n_noise, "n_noise", min_val=1)
    seed = check_int(seed, "seed", min_val=0)
    if points is not None:
        points = np.asarray(points)
        if (points.ndim != 1 or points.size == 0 or not np.issubdtype(points.dtype, np.integer)
                or points.min() < 0 or points.max() >= x.shape[0] or np.unique(points).size != points.size):
            raise ValueError(f"`points` must be distinct integer indices into the {x.shape[0]} training points")
    if target_seed is not None:
        target_seed = check_int(target_seed, "target_seed", min_val=0)
    tn, tw = time_nodes(quadrature, n_time, t_min, T)
    return TrainingSample(train=x, t_nodes=tn, t_weights=tw, n_noise=n_noise, seed=seed, t_min=float(t_min),
                          T=float(T), quadrature=quadrature, process=process, points=points, target_seed=target_seed)


def draw_seed(seed: int, draw: int) -> int:
    """Seed of the training sample's noise for draw ``draw`` of ``training.draws`` (independent draws).

    Draw 0 is ``seed`` itself (the single fit's sample); draw m > 0 is the first 63 bits of
    ``numpy.random.SeedSequence([seed, 0x64726177, m])`` (``0x64726177`` spells "draw"), so no
    draw shares its noise with another draw or with the held-out sample (seed + 1) in practice.

    Parameters
    ----------
    seed : int >= 0, the training seed (``seeds.training``)
    draw : int >= 0

    Returns
    -------
    int in [0, 2**63)

    Examples
    --------
    >>> draw_seed(7, 0)
    7
    >>> draw_seed(7, 1) != draw_seed(7, 2)
    True
    """
    seed = check_int(seed, "seed", min_val=0)
    draw = check_int(draw, "draw", min_val=0)
    if draw == 0:
        return seed
    return int(np.random.SeedSequence([seed, 0x64726177, draw]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def batches(n: int, size: int):
    """Consecutive slices of ``size`` covering range(n)."""
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))
