"""Point sets on known manifolds, with closed-form distances and manifold coordinates.

A k-dimensional manifold is built in the first k + 1 coordinates of R^D and then turned by a
random rotation R (``rotation_seed``): a point is ``R @ (p, 0, ..., 0)``.

- ``circle`` (k = 1): radius r in (y1, y2); coordinate: the angle theta in [-pi, pi).
- ``sphere`` (k = 2): radius r in (y1, y2, y3); coordinates: polar angle in [0, pi] from +y3 and
  azimuth in [-pi, pi).
- ``torus`` (k = 2): the standard torus in (y1, y2, y3) with major radius R0 = ``radius`` and
  minor radius ``minor_radius`` (< R0); coordinates: the angle around the y3 axis and the angle
  around the tube, both in [-pi, pi).

Densities (of the manifold coordinate, relative to the uniform *surface* measure):
``uniform``; ``von_mises`` with concentration ``kappa`` around angle 0 (circle: the angle;
sphere: the von Mises-Fisher law around +y3; torus: the angle around the y3 axis);
``piecewise``: twice the uniform density on the half theta in [0, pi) and the uniform density
on the other half (a non-smooth density).

Distances are exact: with y = R^T x split into the manifold's own coordinates and the rest,

- circle: d = sqrt((|y_12| - r)^2 + |y_rest|^2)
- sphere: d = sqrt((|y_123| - r)^2 + |y_rest|^2)
- torus:  d = sqrt((sqrt((|y_12| - R0)^2 + y3^2) - r)^2 + |y_rest|^2)

(the helix of the issue has no closed-form distance and is not offered here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._validation import check_float, check_int, check_option

__all__ = ["MANIFOLD_KINDS", "DENSITIES", "Manifold"]

MANIFOLD_KINDS = ("circle", "sphere", "torus")
DENSITIES = ("uniform", "von_mises", "piecewise")
_INTRINSIC = {"circle": 1, "sphere": 2, "torus": 2}


@dataclass(frozen=True)
class Manifold:
    """A circle, sphere or torus in R^D, rotated by a random orthogonal matrix.

    Parameters
    ----------
    kind : {"circle", "sphere", "torus"}
    ambient_dim : int
        D >= k + 1 (2 for a circle, 3 for a sphere or torus).
    radius : float
        r (circle, sphere) or the major radius R0 (torus), data units, > 0.
    minor_radius : float
        Tube radius of the torus, 0 < minor_radius < radius (ignored otherwise).
    rotation_seed : int
        Seed of R ~ Haar on SO(D) (``scipy.stats.special_ortho_group``); D = 1 is not allowed.

    Examples
    --------
    >>> m = Manifold("circle", ambient_dim=8, radius=2.0, rotation_seed=1)
    >>> x, theta = m.sample(5, seed=0)
    >>> bool(np.allclose(m.distance(x), 0.0, atol=1e-12)), x.shape
    (True, (5, 8))
    """

    kind: str
    ambient_dim: int
    radius: float = 1.0
    minor_radius: float = 0.3
    rotation_seed: int = 0
    rotation: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        check_option(self.kind, "kind", MANIFOLD_KINDS)
        k = _INTRINSIC[self.kind]
        check_int(self.ambient_dim, "ambient_dim", min_val=k + 1)
        check_float(self.radius, "radius", min_val=0, include_boundaries="neither")
        if self.kind == "torus":
            check_float(self.minor_radius, "minor_radius", min_val=0, max_val=self.radius,
                        include_boundaries="neither")
        check_int(self.rotation_seed, "rotation_seed", min_val=0, max_val=2**32 - 1)
        from scipy import stats  # imported on use: scipy.stats costs ~1 s of start-up
        rot = stats.special_ortho_group.rvs(self.ambient_dim, random_state=self.rotation_seed)
        object.__setattr__(self, "rotation", np.asarray(rot, dtype=np.float64))

    @property
    def k(self) -> int:
        """Intrinsic dimension."""
        return _INTRINSIC[self.kind]

    # ------------------------------------------------------------------ sampling
    def _angles(self, n: int, density: str, kappa: float, rng: np.random.Generator) -> np.ndarray:
        """Angles in [-pi, pi) with the given density relative to the uniform one."""
        if density == "uniform":
            return rng.uniform(-math.pi, math.pi, n)
        if density == "von_mises":
            from scipy import stats
            return stats.vonmises.rvs(kappa, size=n, random_state=rng)
        # piecewise: P(theta in [0, pi)) = 2/3, uniform within each half
        upper = rng.random(n) < 2 / 3
        return np.where(upper, rng.uniform(0, math.pi, n), rng.uniform(-math.pi, 0, n))

    def sample(self, n: int, *, density: str = "uniform", kappa: float = 2.0,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``n`` points (n, D) on the manifold and their manifold coordinates (n, k).

        ``density`` is relative to the uniform surface measure (see the module docstring).
        """
        n = check_int(n, "n", min_val=1)
        check_option(density, "density", DENSITIES)
        kappa = check_float(kappa, "kappa", min_val=0)
        rng = np.random.default_rng(check_int(seed, "seed", min_val=0))
        r = self.radius
        if self.kind == "circle":
            theta = self._angles(n, density, kappa, rng)
            local = np.c_[r * np.cos(theta), r * np.sin(theta)]
            coords = theta[:, None]
        elif self.kind == "sphere":
            if density == "von_mises":  # von Mises-Fisher around +y3
                from scipy import stats
                u = stats.vonmises_fisher(np.array([0.0, 0.0, 1.0]), kappa).rvs(n, random_state=rng)
            else:
                z = rng.uniform(-1, 1, n)  # Archimedes: uniform height <=> uniform area
                phi = self._angles(n, density, kappa, rng)
                s = np.sqrt(1 - z * z)
                u = np.c_[s * np.cos(phi), s * np.sin(phi), z]
            x = self._embed(r * u)
            return x, self.coordinates(x)
        else:  # torus: area element (R0 + a cos v) du dv; v drawn by rejection from it
            u = self._angles(n, density, kappa, rng)
            a, big = self.minor_radius, self.radius
            v = np.empty(0)
            while v.size < n:  # accept v with probability (R0 + a cos v) / (R0 + a): vectorised batches
                cand = rng.uniform(-math.pi, math.pi, 2 * n)
                keep = rng.random(2 * n) < (big + a * np.cos(cand)) / (big + a)
                v = np.concatenate([v, cand[keep]])
            v = v[:n]
            rho = big + a * np.cos(v)
            local = np.c_[rho * np.cos(u), rho * np.sin(u), a * np.sin(v)]
            coords = np.c_[u, v]
        return self._embed(local), coords

    def _embed(self, local: np.ndarray) -> np.ndarray:
        y = np.zeros((local.shape[0], self.ambient_dim))
        y[:, :local.shape[1]] = local
        return y @ self.rotation.T

    # ------------------------------------------------------------------ geometry
    def local(self, x: np.ndarray) -> np.ndarray:
        """Points ``x`` (..., D) in the manifold's own frame: y = R^T x (..., D), data units.

        The manifold lies in the first m = k + 1 coordinates of y (k its dimension), so y[..., m:] is a point's
        offset normal to the manifold's span.

        Raises
        ------
        ValueError
            When the last axis of ``x`` is not D (``ambient_dim``).

        Examples
        --------
        >>> m = Manifold("circle", ambient_dim=3, radius=2.0)
        >>> y = m.local(m.embed(np.array([[2.0, 0.0]])))
        >>> bool(np.allclose(y, [[2.0, 0.0, 0.0]]))
        True
        """
        x = np.asarray(x, dtype=np.float64)
        if x.shape[-1] != self.ambient_dim:
            raise ValueError(f"`x` must have shape (..., {self.ambient_dim}); got {x.shape}")
        return x @ self.rotation  # y = R^T x, row-wise

    def distance(self, x: np.ndarray) -> np.ndarray:
        """Euclidean distance of each point of ``x`` (..., D) to the manifold, (...), data units."""
        y = self.local(x)
        m = self.k + 1
        rest2 = (y[..., m:] ** 2).sum(-1)
        if self.kind == "circle":
            own = np.hypot(y[..., 0], y[..., 1]) - self.radius
        elif self.kind == "sphere":
            own = np.linalg.norm(y[..., :3], axis=-1) - self.radius
        else:
            tube = np.hypot(np.hypot(y[..., 0], y[..., 1]) - self.radius, y[..., 2])
            own = tube - self.minor_radius
        return np.sqrt(own * own + rest2)

    def embed(self, local: np.ndarray) -> np.ndarray:
        """Points (n, D) of R^D from points (n, m) of the manifold's own R^m (m <= D): R (local, 0, ..., 0)."""
        local = np.asarray(local, dtype=np.float64)
        if local.ndim != 2 or local.shape[1] > self.ambient_dim:
            raise ValueError(f"`local` must have shape (n, m) with m <= {self.ambient_dim}; got {local.shape}")
        return self._embed(local)

    def project(self, x: np.ndarray) -> np.ndarray:
        """The nearest manifold point of each point of ``x`` (..., D) (circle and sphere; NaN at the centre).

        >>> m = Manifold("circle", ambient_dim=2, radius=2.0)
        >>> bool(np.allclose(m.distance(m.project(np.array([[0.3, -5.0]]))), 0))
        True
        """
        if self.kind == "torus":
            raise ValueError("project: the torus has no closed form here; use a circle or sphere")
        y = self.local(x)
        m = self.k + 1
        out = np.zeros_like(y)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[..., :m] = self.radius * y[..., :m] / np.linalg.norm(y[..., :m], axis=-1, keepdims=True)
        return out @ self.rotation.T

    def geodesic_distance(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Geodesic distances (n, m) on M between the nearest manifold points of ``x`` (n, D) and ``y`` (m, D).

        Circle and sphere: r times the angle between the projections (radius r), in [0, pi r],
        data units.  Points at the centre (no nearest point) give NaN.

        Raises
        ------
        ValueError
            For a torus (no closed form here), or points of the wrong dimension.

        Examples
        --------
        >>> m = Manifold("circle", ambient_dim=2, radius=2.0)
        >>> x = m._embed(np.array([[2.0, 0.0]])); y = m._embed(np.array([[0.0, 3.0]]))
        >>> round(float(m.geodesic_distance(x, y)[0, 0]), 6)
        3.141593
        """
        if self.kind == "torus":
            raise ValueError("geodesic_distance: the torus has no closed form here; use a circle or sphere")
        m = self.k + 1

        def unit(z):
            u = self.local(z)[..., :m]
            with np.errstate(invalid="ignore", divide="ignore"):
                return u / np.linalg.norm(u, axis=-1, keepdims=True)

        cos = np.clip(unit(x) @ unit(y).T, -1.0, 1.0)
        return self.radius * np.arccos(cos)

    def coordinates(self, x: np.ndarray) -> np.ndarray:
        """Manifold coordinates (..., k) of the nearest manifold point (angles in radians)."""
        y = self.local(x)
        if self.kind == "circle":
            return np.arctan2(y[..., 1], y[..., 0])[..., None]
        if self.kind == "sphere":
            polar = np.arctan2(np.hypot(y[..., 0], y[..., 1]), y[..., 2])
            return np.stack([polar, np.arctan2(y[..., 1], y[..., 0])], -1)
        u = np.arctan2(y[..., 1], y[..., 0])
        v = np.arctan2(y[..., 2], np.hypot(y[..., 0], y[..., 1]) - self.radius)
        return np.stack([u, v], -1)
