"""ridgexr: where diffusion samples go when they do not memorize.

Array layer (numpy/torch in, same out): :class:`OU`, :func:`time_grid`,
:class:`SmoothedEmpirical`, :func:`ridge_frame`, :func:`ridge_residual`,
:func:`project_to_ridge`.  Labelled layer: :mod:`ridgexr.labelled`.  Accessor:
``DataArray.ridge``.
"""

from importlib.metadata import PackageNotFoundError, version

from .process import OU, time_grid
from .empirical import SmoothedEmpirical, Moments
from .ridge import RidgeFrame, RidgeProjection, ridge_frame, ridge_residual, project_to_ridge
from .models import RandomFeatureDenoiser, ExactDenoiser
from .training import RandomFeatureFit, fit_random_features, fit_sweep, fits_to_dataset
from .catalog import open_catalog, Experiment, Catalog
from .reader import open_dataset
from .run import run_experiment
from . import labelled
from . import accessor  # noqa: F401  (registers the .ridge accessor)

try:
    __version__ = version("ridgexr")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0+unknown"

__all__ = [
    "OU", "time_grid", "SmoothedEmpirical", "Moments", "RidgeFrame", "RidgeProjection",
    "ridge_frame", "ridge_residual", "project_to_ridge", "labelled", "__version__",
    "RandomFeatureDenoiser", "ExactDenoiser", "RandomFeatureFit", "fit_random_features", "fit_sweep",
    "fits_to_dataset", "open_catalog", "open_dataset", "run_experiment", "Experiment", "Catalog",
]
