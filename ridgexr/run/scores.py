"""Bonnaire et al.'s score errors of a stored run's networks: their measure, beside ridgexr's sample measures.

Bonnaire, Urfin, Biroli & Mezard's code (tbonnair/Why-Diffusion-Models-Don-t-Memorize,
``Experiments/src/Utils/GMM_data_scores.py``) judges a network trained on their Gaussian mixture by its
*score*, not its samples: at a diffusion time t it compares the network's score s_theta with the population
score s_pop of the mixture (closed form, :func:`ridgexr.datasets.mixture_score`) and with the empirical score
s_emp of its training set (the smoothed empirical density p_t of the paper,
:class:`ridgexr.empirical.SmoothedEmpirical`), as mean Euclidean norms over points
(:func:`ridgexr.analysis.arrays.score_errors`): ``compute_ratio_gen_mem`` = e_gen / e_mem and
``compute_ratio_gen_mem2`` = (e_emp - e_gen) / e_mem.  ridgexr judges the same networks by their final samples
(f_mem from d1/d2, the Wasserstein distances, the ridge account); this module stores theirs beside ours.

Their scripts that call those functions are not in the repository, so two choices are ours and are fields
here: the points (x_t = alpha_t x0 + sqrt(h_t) z with x0 fresh draws of the law,
:func:`ridgexr.datasets.fresh_law_draws`, independent of every training set) and the times
(:data:`ridgexr.defaults.SCORE_ERROR_TIMES`).  Their process is the same OU process (alpha_t = e^-t).

The networks are the run's own: :func:`score_errors` replans the run from the store's configuration and its
checkpoints (:func:`ridgexr.run.plan_tasks` resumes every training run at its last epoch, so nothing is
retrained) and builds each cell's model as the sampler did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import xarray as xr

from .. import defaults
from .._validation import check_int
from ..analysis.arrays import score_errors as score_error_kernel
from ..catalog import Experiment
from ..datasets import fresh_law_draws, load_training_set, mixture_score
from ..empirical import SmoothedEmpirical
from ..models import model_kind
from ..models.model_spec import EpochTrainedSpec
from ..reader import open_dataset, store_path
from ..schema import CELL_DIMS
from .runner import checkpoint_root
from .plan import plan_layout, plan_tasks, resolve_d_star
from .split import density_settings

__all__ = ["score_errors", "SCORE_ERROR_VARIABLES"]

#: the variables of :func:`score_errors`: the kernel's key -> (name, long name)
SCORE_ERROR_VARIABLES = {
    "e_gen": ("score_error_population", "mean |s_theta - s_pop|: the network against the population score"),
    "e_emp": ("score_error_empirical", "mean |s_theta - s_emp|: the network against the empirical score"),
    "e_mem": ("score_gap", "mean |s_pop - s_emp|: the population score against the empirical score"),
    "ratio": ("score_ratio", "e_gen / e_mem (Bonnaire et al.'s compute_ratio_gen_mem; 0: the population score)"),
    "signed": ("score_ratio_signed", "(e_emp - e_gen) / e_mem (their compute_ratio_gen_mem2; +1: the population "
                                     "score, -1: the empirical score)"),
}


def score_errors(store: str | Path, *, times: tuple[float, ...] = defaults.SCORE_ERROR_TIMES,
                 n_points: int = defaults.SCORE_ERROR_POINTS, seed: int = 0, data_dir: str | Path | None = None,
                 progress: Callable[[str], None] | None = None) -> xr.Dataset:
    """Bonnaire et al.'s score errors of every cell's network of a Gaussian-mixture run, at diffusion times.

    Parameters
    ----------
    store : str or path
        A store (or a catalog entry's name) whose dataset is ``mixture``; its training checkpoints must be
        beside it (``<store>.checkpoints``, kept by ``ridgexr run``).
    times : tuple of float > 0
        Diffusion times t (OU units) at which the scores are compared.
    n_points : int >= 2
        Evaluation points per time: x_t = alpha_t x0 + sqrt(h_t) z, x0 the first ``n_points`` fresh draws of the
        law, z seeded by ``seed`` (the same points for every cell).
    seed : int >= 0
    data_dir : path, optional
        The data folder (a store given by name).
    progress : callable(str), optional
        Told what is being done (replanning, each cell).

    Returns
    -------
    xarray.Dataset over the store's cell dimensions and ``score_t``: :data:`SCORE_ERROR_VARIABLES` (NaN for a
    cell the run masks), with the points and their seed in the attributes.

    Raises
    ------
    ValueError
        A store of another dataset (no population score), missing checkpoints, or a bad argument.
    """
    times = tuple(float(t) for t in np.atleast_1d(np.asarray(times, dtype=float)))
    if not times or not all(np.isfinite(t) and t > 0 for t in times):
        raise ValueError(f"`times` must be diffusion times > 0; got {times}")
    n_points = check_int(n_points, "n_points", min_val=2)
    seed = check_int(seed, "seed", min_val=0)
    path = store_path(store, data_dir=data_dir)
    ds = open_dataset(path)
    exp = Experiment.model_validate_json(ds.attrs["config"])
    mix = exp.dataset.mixture
    if mix is None:
        raise ValueError(f"`store` {str(store)!r} is not a Gaussian-mixture run: its population score is not known "
                         "in closed form")
    ckpt = checkpoint_root(path, ds.attrs["config_hash"])
    if any(isinstance(b, EpochTrainedSpec) for b in exp.blocks) and not ckpt.is_dir():
        raise ValueError(f"the training checkpoints of {str(path)!r} are gone (no {str(ckpt)!r}): score_errors "
                         "reads the run's networks from them and does not retrain them")
    say = progress or (lambda msg: None)
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    exp, _ = resolve_d_star(exp, train)
    layout = plan_layout(exp, train)
    say("replanning the run from its checkpoints")
    tasks = plan_tasks(exp, train, layout, checkpoint_root=ckpt)

    x0 = fresh_law_draws(exp.dataset, n_points)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((len(times),) + x0.shape)
    xt = np.stack([np.exp(-t) * x0 + np.sqrt(-np.expm1(-2 * t)) * z[i] for i, t in enumerate(times)])  # (T, P, d)
    pop = np.stack([mixture_score(xt[i], t, mean=mix.mean, sigma=mix.sigma) for i, t in enumerate(times)])
    empirical: dict[tuple, np.ndarray] = {}  # per training set (its rows)

    dims = [d for d in CELL_DIMS if d in ds.dims]
    sizes = [ds.sizes[d] for d in dims]
    out = {key: np.full(sizes + [len(times)], np.nan) for key in SCORE_ERROR_VARIABLES}
    applies = ds["cell_applies"].transpose(*dims).values if "cell_applies" in ds else np.ones(sizes, dtype=bool)
    for task in tasks:
        at = tuple(int(np.flatnonzero(ds[d].values == task.labels[d])[0]) for d in dims)
        if not applies[at]:
            continue
        rows = exp.dataset.rows(task.labels)
        key = (rows.start, rows.stop)
        if key not in empirical:
            density = SmoothedEmpirical(train[rows], 1.0, **density_settings(exp))
            empirical[key] = np.stack([np.asarray(density.with_time(t).score(xt[i])) for i, t in enumerate(times)])
        say(f"cell {task.labels}")
        spec = exp.blocks[task.block]
        model = model_kind(spec.kind).builder()(exp, spec, task, train[rows], "cpu")
        theta = np.stack([np.asarray(model.score(xt[i], np.full(n_points, t)), dtype=np.float64)
                          for i, t in enumerate(times)])
        for name, value in score_error_kernel(theta, pop, empirical[key]).items():
            out[name][at] = value
    coords = {d: ds[d].values for d in dims} | {"score_t": np.asarray(times)}
    res = xr.Dataset({SCORE_ERROR_VARIABLES[k][0]: (dims + ["score_t"], v) for k, v in out.items()}, coords=coords)
    for key, (name, long_name) in SCORE_ERROR_VARIABLES.items():
        res[name].attrs.update(long_name=long_name, units="1" if key in ("ratio", "signed") else "1/data")
    res["score_t"].attrs.update(long_name="diffusion time of the comparison", units="OU time")
    res.attrs.update(points=f"x_t = alpha_t x0 + sqrt(h_t) z at each score_t: x0 the first {n_points} fresh draws of "
                            f"the law (mixture seed + 2), z seeded {seed}",
                     source="Bonnaire et al., GMM_data_scores.compute_ratio_gen_mem / compute_ratio_gen_mem2")
    return res
