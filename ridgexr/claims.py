"""The claims a store's entry makes, evaluated from the store: ``ridgexr claims NAME`` and the report's table.

An entry lists its claims in the catalog (``claims:``, :class:`ridgexr.catalog.ClaimSpec`), committed
before the run; each kind below fixes its measure and its criterion (:data:`CRITERIA`, one place), so a
claim's verdict is never chosen after the numbers are seen.  :func:`store_claims` builds one
:class:`ridgexr.analysis.claims.Claim` per (claim, cell it applies to) from the store's numbers: the table
changes when the store does, and no verdict is pasted.

Kinds (docs/claims.md):

``memorizes`` / ``does-not-memorize``
    The share of the cell's final samples with d1/d2 < 1/3 (nearest over second-nearest training point),
    Wilson 95 %.  Null: the same share for fresh draws of the law against the same training set
    (:func:`ridgexr.quality.reference_draws`; "not computed" where the dataset has none).
``reach-falls``
    ``t: [t_early, t_late]``: the median ridge distance at t_late minus that at t_early, over the states
    whose ridge frame is resolved (paired percentile bootstrap over trajectories).  Null: the exact
    denoiser's value of the same difference, when the store has an exact cell.
``reach-as-exact``
    ``t: [t]``: the model's median ridge distance at t over the exact denoiser's (bootstrap of the ratio).
``slide-slower``
    ``t: [t_early, t_late]``: the tangential motion is slower than the normal one.  Measure:
    log(T(t_late) / T(t_early)) - log(R(t_late) / R(t_early)), T the median distance along the ridge to the
    nearest training point (:func:`ridgexr.analysis.tangential_distance`), R the median ridge distance, both
    over the trajectories whose frames are resolved at both times (paired percentile bootstrap): > 0 when the
    tangential distance falls by a smaller factor than the ridge distance.  Null: the exact denoiser's value,
    when the store has an exact cell.
``align-tangent``
    ``t: [t, ...]``: the per-dimension ratio of the model error's tangent to normal part,
    (|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)), median over the resolved states at those t.  Null: an
    isotropic error scores 1.

A claim about a network (any model but ``exact``) whose samples fail the quality gate reads "untestable:
the network does not generate" (docs/quality.md).
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from .analysis import arrays
from .analysis._helpers import cell_train, step_index
from .analysis.claims import Claim, Criterion, Null, claims_markdown, median_interval
from .choices import CLAIM_KINDS
from .store import complete_cells, is_exact_cell

if TYPE_CHECKING:
    from .catalog import TimescaleSpec

__all__ = ["store_claims", "CRITERIA", "claims_table", "claim_specs", "timescale_rule", "with_timescale_quality"]

#: the criterion of each claim kind (regions of its measure), fixed before any run that uses it
CRITERIA: dict[str, Criterion] = {
    "memorizes": Criterion.above(0.8, disagree_below=0.5, text="Wilson lower bound > 0.8 agrees; upper bound < 0.5 "
                                 "disagrees"),
    "does-not-memorize": Criterion.below(0.35, disagree_above=0.5, text="Wilson upper bound < 0.35 agrees; lower "
                                         "bound > 0.5 disagrees"),
    "reach-falls": Criterion.below(0.0, text="interval of median(late) - median(early) below 0 agrees; above 0 "
                                   "disagrees"),
    "reach-as-exact": Criterion.within(0.9, 1.1, text="ratio of medians' interval inside [0.9, 1.1] agrees; wholly "
                                       "outside it disagrees"),
    "align-tangent": Criterion.above(1.0, text="median (|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)): interval above 1 "
                                     "agrees; below 1 disagrees"),
    "slide-slower": Criterion.above(0.0, text="log fall of the median tangential distance minus that of the median "
                                    "ridge distance: interval above 0 agrees; below 0 disagrees"),
}
assert set(CRITERIA) == set(CLAIM_KINDS), "every claim kind has one criterion"

STATEMENTS = {
    "memorizes": "the {model} memorizes: its final samples are training points",
    "does-not-memorize": "the {model} does not memorize",
    "reach-falls": "reach: the ridge distance falls from t = {t0:.3g} to t = {t1:.3g}",
    "reach-as-exact": "reach: at t = {t0:.3g} the {model}'s states are as far from the ridge as the exact denoiser's",
    "align-tangent": "align: per dimension the {model}'s error is more tangent than normal (t = {ts})",
    "slide-slower": "slide: from t = {t0:.3g} to t = {t1:.3g} the {model}'s distance along the ridge to the nearest "
                    "training point falls more slowly than its ridge distance",
}
N_BOOT = 2000


def _written(ds: xr.Dataset, field: str) -> tuple[object, str, str]:
    """A field written before the run (not hashed: ``claims``, ``timescales``) as the store's configuration
    records it, else as the catalog entry the store records has it: (value or None, where: "store", "catalog"
    or "", the entry's name)."""
    from .catalog import Experiment, open_catalog

    exp = Experiment.model_validate_json(ds.attrs["config"])
    if getattr(exp, field):
        return getattr(exp, field), "store", exp.name
    try:
        entry = open_catalog()[exp.name]
    except KeyError:  # no such entry in the default catalogs
        return None, "", exp.name
    return (getattr(entry, field), "catalog", exp.name) if getattr(entry, field) else (None, "", exp.name)


def claim_specs(ds: xr.Dataset) -> tuple[list, str]:
    """The claims recorded with the store (its configuration's ``claims``), or, for a store written before
    its entry declared any, those of the catalog entry it records; and a sentence saying which."""
    claims, where, name = _written(ds, "claims")
    if where == "store":
        return list(claims), "criteria recorded in the store's configuration"
    if where == "catalog":
        return list(claims), (f"criteria from catalog entry {name!r} (not recorded in this store, "
                              "which predates them; see the entry's history)")
    return [], f"entry {name!r} declares no claims"


def timescale_rule(ds: xr.Dataset) -> tuple[TimescaleSpec, str]:
    """How tau_gen is read from the store (:class:`ridgexr.catalog.TimescaleSpec`: quality, rule, factor, the
    quality's null): as its configuration records it, else as its catalog entry has it (a store written before
    the field existed), else the defaults; and a sentence saying which.

    >>> import json, xarray as xr
    >>> from ridgexr.catalog import Experiment
    >>> exp = Experiment(name="x", dataset={"points": "two-points"}, model={"kind": "exact"}, store="x.zarr",
    ...                  timescales={"quality": "quality_frechet", "rule": "null"})
    >>> spec, how = timescale_rule(xr.Dataset(attrs={"config": exp.model_dump_json()}))
    >>> spec.quality, spec.rule, spec.factor, how
    ('quality_frechet', 'null', 2.0, "tau_gen's rule recorded in the store's configuration")
    """
    from .catalog import TimescaleSpec

    spec, where, name = _written(ds, "timescales")
    if where == "store":
        return spec, "tau_gen's rule recorded in the store's configuration"
    if where == "catalog":
        return spec, (f"tau_gen's rule from catalog entry {name!r} (not recorded in this store, which predates "
                      "the field; see the entry's history)")
    return TimescaleSpec(), f"entry {name!r} writes no tau_gen rule: the defaults"


def with_timescale_quality(ds: xr.Dataset, spec) -> xr.Dataset:
    """``ds`` with the quality ``spec`` (a :class:`ridgexr.catalog.TimescaleSpec`) reads: as stored, or for the
    distance along the law's axis computed lazily from the stored samples (:func:`ridgexr.quality.axis_quality`)."""
    from .quality import AXIS_QUALITY, axis_quality

    if spec.quality == AXIS_QUALITY and AXIS_QUALITY not in ds:
        return ds.merge(axis_quality(ds))
    return ds


def _model_name(label: dict) -> str:
    return str(label.get("model", ""))


def _applies(spec, label: dict) -> bool:
    if spec.models is not None:
        return _model_name(label) in spec.models
    return is_exact_cell(label) if spec.kind == "memorizes" else not is_exact_cell(label)


def _gates(ds: xr.Dataset):
    if not any(str(v).startswith("quality_") for v in ds.data_vars):
        return None
    from .quality import sample_quality

    return sample_quality(ds)["gate"]


def _final_samples(cell: xr.Dataset) -> np.ndarray:
    """One cell's final samples (sample, dim), as its quality chose them (:func:`ridgexr.quality.stored_final_samples`:
    a scheduler's output, else Tweedie's ``denoised``, else the last state over alpha)."""
    from .quality import stored_final_samples

    return stored_final_samples(cell).transpose("sample", "dim").values.astype(np.float64)


def _train(cell: xr.Dataset) -> np.ndarray:
    tr = cell_train(cell).values.astype(np.float64)
    return tr[np.isfinite(tr).all(1)]


def _share(flags: np.ndarray) -> tuple[float, float, float, int, int]:
    ok = np.isfinite(flags)
    k, n = int(flags[ok].sum()), int(ok.sum())
    lo, hi = arrays.proportion_ci(k, n)
    return (k / n if n else math.nan), float(lo), float(hi), n, int((~ok).sum())


def _resolved(at: xr.Dataset, name: str) -> np.ndarray:
    from .analysis import resolved

    return resolved(at, name).values


def _align(at: xr.Dataset, d_star: int) -> np.ndarray:
    """Per-sample (|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)) at one step, NaN where the frame is degenerate."""
    d = at.sizes["dim"]
    tan = np.linalg.norm(np.moveaxis(_resolved(at, "residual_tangent"), at["residual_tangent"].dims.index("dim"), -1),
                         axis=-1) / math.sqrt(d_star)
    nor = np.linalg.norm(np.moveaxis(_resolved(at, "residual_normal"), at["residual_normal"].dims.index("dim"), -1),
                         axis=-1) / math.sqrt(d - d_star)
    with np.errstate(invalid="ignore", divide="ignore"):
        return tan / nor


def _paired_fall(early: np.ndarray, late: np.ndarray, seed: int = 0) -> tuple[float, float, float, int, int]:
    """median(late) - median(early) over the resolved states, with a paired percentile bootstrap over the
    trajectories (one (N_BOOT, n) resample); n: trajectories resolved at both; excluded: the others."""
    both = np.isfinite(early) & np.isfinite(late)
    n = int(both.sum())
    if n < 2:
        return math.nan, math.nan, math.nan, n, int(early.size - n)
    est = float(np.nanmedian(late) - np.nanmedian(early))
    idx = np.random.default_rng(seed).integers(0, early.size, size=(N_BOOT, early.size))
    with warnings.catch_warnings():  # a resample with no resolved state: NaN, dropped below
        warnings.simplefilter("ignore", RuntimeWarning)
        diff = np.nanmedian(late[idx], axis=1) - np.nanmedian(early[idx], axis=1)
    diff = diff[np.isfinite(diff)]
    return est, float(np.quantile(diff, 0.025)), float(np.quantile(diff, 0.975)), n, int(early.size - n)


def _relative_fall_contrast(tan: tuple[np.ndarray, np.ndarray], ridge: tuple[np.ndarray, np.ndarray],
                            seed: int = 0) -> tuple[float, float, float, int, int]:
    """log(median T_late / median T_early) - log(median R_late / median R_early) over the trajectories where all
    four values are finite, with a paired percentile bootstrap over those trajectories; n: those trajectories;
    excluded: the others.  A resample with a median <= 0 is dropped (no log)."""
    stack = np.stack([tan[0], tan[1], ridge[0], ridge[1]])  # (4, samples)
    ok = np.isfinite(stack).all(0)
    n = int(ok.sum())
    if n < 2:
        return math.nan, math.nan, math.nan, n, int(stack.shape[1] - n)
    x = stack[:, ok]

    def contrast(med):  # med: (4, ...) medians
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(med[1] / med[0]) - np.log(med[3] / med[2])

    est = float(contrast(np.median(x, axis=1)))
    idx = np.random.default_rng(seed).integers(0, n, size=(N_BOOT, n))
    boot = contrast(np.median(x[:, idx], axis=2))
    boot = boot[np.isfinite(boot)]
    if not np.isfinite(est) or boot.size == 0:
        return math.nan, math.nan, math.nan, n, int(stack.shape[1] - n)
    return est, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975)), n, int(stack.shape[1] - n)


def _slide_inputs(cell: xr.Dataset, steps: list[int]) -> tuple[tuple, tuple]:
    """(tangential distances, resolved ridge distances) per trajectory at the two steps."""
    from .analysis import tangential_distance

    tang = tangential_distance(cell.isel(step=steps))["tangential_distance"].transpose("step", "sample").values
    ridge = [_resolved(cell.isel(step=s), "ridge_distance") for s in steps]
    return (tang[0], tang[1]), (ridge[0], ridge[1])


def _ratio_of_medians(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float, float, int, int]:
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return math.nan, math.nan, math.nan, int(a.size), 0
    rng = np.random.default_rng(seed)
    ra = np.median(a[rng.integers(0, a.size, size=(N_BOOT, a.size))], axis=1)
    rb = np.median(b[rng.integers(0, b.size, size=(N_BOOT, b.size))], axis=1)
    r = ra / rb
    return float(np.median(a) / np.median(b)), float(np.quantile(r, 0.025)), float(np.quantile(r, 0.975)), int(a.size), 0


def _null_memorized(ds: xr.Dataset, train: np.ndarray, cache: dict) -> Null:
    key = train.shape
    if key not in cache:
        from .catalog import Experiment
        from .quality import reference_draws

        exp = Experiment.model_validate_json(ds.attrs["config"])
        try:
            draws, how = reference_draws(exp.dataset)
        except Exception as err:  # a dataset whose reference cannot be loaded here: said, not hidden
            draws, how = None, f"reference draws unavailable: {err}"
        if draws is None or draws.shape[1] != train.shape[1]:
            cache[key] = Null(math.nan, how=how)
        else:
            est, lo, hi, n, _ = _share(arrays.memorized(draws, train))
            cache[key] = Null(est, lo, hi, how=f"{how}, d1/d2 < 1/3 against the same training set")
    return cache[key]


def store_claims(ds: xr.Dataset, specs=None) -> list[Claim]:
    """Every claim of the store's entry (or ``specs``), one per cell it applies to, evaluated on ``ds``.

    Parameters
    ----------
    ds : xarray.Dataset
        A ridgexr store (``ridgexr.open_dataset``).
    specs : list of ClaimSpec, optional
        Default: :func:`claim_specs` (the store's own, else its catalog entry's).

    Returns
    -------
    list of :class:`ridgexr.analysis.claims.Claim`, labelled by their cell (model, schedule, ...).
    """
    if specs is None:
        specs, _ = claim_specs(ds)
    if not specs:
        return []
    gates = _gates(ds)
    cells = complete_cells(ds)  # labels: ds.sel(label) is the cell
    d_star = int(ds.attrs.get("d_star", 1))
    exact = next((label for label in cells if is_exact_cell(label)), None)
    null_cache: dict = {}
    out = []
    for spec in specs:
        ts = list(spec.t or [])
        steps = [step_index(ds, t=t) for t in ts]
        t_obs = [float(ds["t"].values[s]) for s in steps]
        exact_null: list = []  # slide-slower's null, computed once per claim (it recomputes frames), not per cell
        for label in cells:
            if not _applies(spec, label):
                continue
            cell = ds.sel(label)
            model = "exact" if is_exact_cell(label) else _model_name(label) or "model"
            gate = None if model == "exact" or gates is None else str(gates.sel(label).item())
            fmt = dict(model={"unet": "U-Net", "exact": "exact denoiser"}.get(model, model),
                       t0=t_obs[0] if t_obs else math.nan, t1=t_obs[1] if len(t_obs) > 1 else math.nan,
                       ts=", ".join(f"{t:.3g}" for t in t_obs))
            null = None
            if spec.kind in ("memorizes", "does-not-memorize"):
                train = _train(cell.compute())
                est, lo, hi, n, excl = _share(arrays.memorized(_final_samples(cell), train))
                measure = "share of final samples with d1/d2 < 1/3 (Wilson 95 %)"
                null = _null_memorized(ds, train, null_cache)
            elif spec.kind == "reach-falls":
                at = [_resolved(cell.isel(step=s), "ridge_distance") for s in steps]
                est, lo, hi, n, excl = _paired_fall(at[0], at[1])
                measure = "median ridge distance at t_late - at t_early (resolved states, paired bootstrap 95 %)"
                if exact is not None:
                    ex = ds.sel(exact)
                    e_at = [_resolved(ex.isel(step=s), "ridge_distance") for s in steps]
                    ne, nlo, nhi, nn, _ = _paired_fall(e_at[0], e_at[1])
                    null = Null(ne, nlo, nhi, how=f"the exact denoiser: {nn} trajectories resolved at both times")
            elif spec.kind == "reach-as-exact":
                if exact is None:
                    continue
                a = _resolved(cell.isel(step=steps[0]), "ridge_distance")
                b = _resolved(ds.sel(exact).isel(step=steps[0]), "ridge_distance")
                est, lo, hi, n, _ = _ratio_of_medians(a, b)
                excl = int(a.size - n)
                measure = "median ridge distance, model / exact denoiser (bootstrap 95 %)"
            elif spec.kind == "slide-slower":
                est, lo, hi, n, excl = _relative_fall_contrast(*_slide_inputs(cell, steps))
                measure = ("log(T_late / T_early) - log(R_late / R_early), T: median distance along the ridge to the "
                           "nearest training point, R: median ridge distance (resolved at both times, paired "
                           "bootstrap 95 %)")
                if exact is not None:
                    if not exact_null:
                        ne, nlo, nhi, nn, _ = _relative_fall_contrast(*_slide_inputs(ds.sel(exact), steps))
                        exact_null.append(Null(ne, nlo, nhi, how=f"the exact denoiser: {nn} trajectories resolved "
                                               "at both times"))
                    null = exact_null[0]
            else:  # align-tangent
                ratios = np.concatenate([_align(cell.isel(step=s), d_star).ravel() for s in steps])
                est, lo, hi, n = median_interval(ratios, n_boot=N_BOOT)
                excl = int(ratios.size - n)
                measure = "median per-dimension tangent / normal error ratio over resolved states (bootstrap 95 %)"
                null = Null(1.0, how="an isotropic error, by construction")
            out.append(Claim(STATEMENTS[spec.kind].format(**fmt), measure, est, lo, hi, n, CRITERIA[spec.kind],
                             excluded=excl, null=null, gate=gate, labels=label))
    return out


def claims_table(ds: xr.Dataset, *, drop: tuple[str, ...] = ("measure",)) -> str:
    """The store's claims as Markdown, preceded by where their criteria come from."""
    specs, source = claim_specs(ds)
    claims = store_claims(ds, specs)
    written = sorted({s.written for s in specs if s.written})
    head = (f"Claims of {ds.attrs.get('experiment', 'this store')!r} (store config hash "
            f"{ds.attrs.get('config_hash', '?')}): {source}" + (f"; written {', '.join(written)}" if written else "")
            + ". Generated by `ridgexr claims NAME --markdown` from the store.\n\n")
    return head + (claims_markdown(claims, drop=drop) if claims else "(no claims)")

