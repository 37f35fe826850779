"""Manifold generalization precedes memorization: distance to the data manifold, novelty and
distribution match of generated samples against the training-set size N.

Run:  python analyses/manifold.py [--data DIR] [--figures DIR] [--entries manifold-circle ...]
Runs (or resumes) the manifold entries, prints per cell (schedule, tau, N) the mean distance
of the final samples to the manifold, their novelty (nearest-training distance over the
training set's nearest-neighbour spacing), the d1/d2 memorized share, the density ratio on
the manifold (8 bins, inside a tube of 0.1 radius), the sliced Wasserstein distance and MMD to a fresh
population sample with bootstrap intervals, and the Hausdorff distance between the ridge
projections and the manifold; then the log-log rates against N with bootstrap intervals.
Writes the figure of each entry that has one (docs/figures/manifold_<entry>.png and its summary in
docs/figures/data/, drawn by analyses/figures.py) and docs/claims_tables/<entry>.md for the coverage entries.
manifold-coverage and manifold-coverage-circle (the fair test of issue 27): per (model, N) the coverage
delta_N of the denoised outputs, distance to M, novelty and the distance to the smoothed-and-projected
target, their slopes against N next to -1/k, and the criteria M1, M2, M3 of docs/manifold.md as the claims
registry's kinds (``ridgexr.claims``: one row per stopped model and criterion, with its interval, independent
training draws, nulls and verdict; :func:`coverage_claims`), then the entry's verdict derived from those rows by
the rule of :func:`coverage_overall`.  Every verdict word printed is the kernel's.
Run the coverage entries of this checkout's catalog with
``--catalog catalogs/theories.yaml --entries manifold-coverage manifold-coverage-circle``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import xarray as xr

import figures as _figures
from _common import markdown_table, parser, store_for

from ridgexr import analysis
from ridgexr.defaults import MEMORIZED_RATIO
from ridgexr.claims import ENTRIES_SEEN, KINDS
from ridgexr.verdicts import NO_STATE, VERDICTS, Claim, Criterion, Null, claims_markdown, median_ci, mean_t_ci

ENTRIES = ["manifold-circle", "manifold-circle-8d", "manifold-sphere", "manifold-sphere-16d"]


def cell_metrics(ds: xr.Dataset) -> xr.Dataset:
    last = ds.isel(step=-1)
    dist = analysis.manifold_distance(ds).isel(step=-1)
    dens = analysis.manifold_density(ds, bins=8)  # ~16 samples per bin at 128 samples
    dd = analysis.distribution_distance(ds, n_boot=100)
    memo = analysis.memorization_fraction(ds)
    out = xr.Dataset({
        "manifold_dist": dist.mean("sample"),
        "novelty_median": analysis.novelty(ds).median("sample"),
        "memorized": memo.memorized,
        "in_tube": dens.in_tube, "ratio_max": dens.ratio_max, "ratio_min": dens.ratio_min,
        "sliced_w2": dd.sliced_w2, "w2_low": dd.sliced_w2_low, "w2_high": dd.sliced_w2_high,
        "mmd2": dd.mmd2, "mmd2_low": dd.mmd2_low, "mmd2_high": dd.mmd2_high,
        "ridge_hausdorff": analysis.ridge_vs_manifold(ds).hausdorff,
    }).compute()
    out.attrs["t_min"] = float(last.t)
    return out


def rates(m: xr.Dataset) -> "pandas.DataFrame":  # noqa: F821
    rows = []
    for name in ("manifold_dist", "sliced_w2", "ridge_hausdorff"):
        fit = analysis.rate_fit(m[name], dim="n_train").compute()
        fit = fit.drop_vars([c for c in fit.coords if c not in fit.dims])
        df = fit.to_dataframe().reset_index()
        df.insert(0, "metric", name)
        rows.append(df)
    import pandas as pd

    return pd.concat(rows, ignore_index=True)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entries", nargs="+", default=ENTRIES + ["manifold-coverage"])
    ap.add_argument("--catalog", default=None, help="a catalog file holding the entries (default: the built-in ones)")
    ap.add_argument("--claims-tables", default=str(Path(__file__).resolve().parent.parent / "docs" / "claims_tables"),
                    help="where the coverage entries' claims tables go (NAME.md, included by docs/manifold.md)")
    args = ap.parse_args(argv)
    figs = Path(args.figures)
    for name in args.entries:
        ds = store_for(name, args.data, args.catalog)
        if "denoised" in ds:  # a store with stopped scores: the coverage test
            coverage_main(name, ds, figs, Path(args.claims_tables))
            continue
        m = cell_metrics(ds)
        df = m.drop_vars([c for c in m.coords if c not in m.dims]).to_dataframe().reset_index()
        print(f"## {name}: final step (t = {m.attrs['t_min']:g}), {ds.sizes['sample']} samples per cell\n")
        print(markdown_table(df))
        print(f"\n### {name}: log-log rate against N (slope, 95% bootstrap interval)\n")
        print(markdown_table(rates(m)))
        print()
        fig = _figures.REGISTRY.get(f"manifold_{name.replace('-', '_')}")
        if fig is not None:  # the committed figures' summary and drawing (analyses/figures.py)
            print(f"wrote {_figures.write(fig, _figures.manifold_noise_summary_of(m, ds), figs)}\n")



# ---------------------------------------------------------------------------------------------------------
# The fair test (issue 27): coarse (stopped) exact scores, Tweedie outputs, delta-coverage against N.

#: columns of coverage_table read by the claims, left out of the printed table
CLAIM_COLUMNS = ("novelty low", "novelty high", "outputs", "excluded outputs")


def coverage_table(ds, c: float = 0.5):
    """Per (model, data_draw, N) (draw 0 only without independent training sets): t_stop, coverage delta_N
    (c x population mass) with the mass ratios at delta, mean distance of the denoised outputs to M, their
    median novelty with its exact 95 % interval over the outputs (novelty low, novelty high) and memorized
    share (novelty < 1/3), the sliced W2 to the smoothed-and-projected population, and the outputs used and
    those left out for not being finite (outputs, excluded outputs).  :data:`CLAIM_COLUMNS` are for the claims,
    not the printed table."""
    import pandas as pd

    from ridgexr.analysis import arrays
    from ridgexr.analysis.manifold import store_manifold

    m = store_manifold(ds)
    cov = analysis.coverage(ds, c=c)
    target = analysis.smoothed_target_distance(ds)
    train = ds.train_data.values
    draws = ds.sizes.get("data_draw", 1)
    per_draw = train.shape[0] // draws  # draw j: rows j n .. (j + 1) n (DatasetSpec.rows)
    rows = []
    for model, j, n in itertools.product(ds.model.values, range(draws), ds.n_train.values):
        at = dict(model=model, n_train=n) | ({"data_draw": j} if "data_draw" in ds.dims else {})
        x = ds.denoised.sel(at).values
        finite = np.isfinite(x).all(-1)
        x = x[finite]
        nov = arrays.novelty(x, train[j * per_draw:j * per_draw + int(n)])
        med, low, high, _ = median_ci(nov)
        cv = cov.sel(at)
        rows.append({"model": str(model), "draw": j, "N": int(n), "t_stop": float(ds.denoise_t.sel(at)),
                     "delta_N": float(cv.coverage_delta), "ratio min": float(cv.mass_ratio_min),
                     "ratio max": float(cv.mass_ratio_max), "dist to M": float(np.mean(m.distance(x))),
                     "novelty (median)": med, "memorized share": float(np.mean(nov < MEMORIZED_RATIO)),
                     "W2 to smoothed target": float(target.sel(at)), "novelty low": low, "novelty high": high,
                     "outputs": int(finite.sum()), "excluded outputs": int((~finite).sum())})
    return pd.DataFrame(rows), m.k


def coverage_floor(ds, c: float = 0.5, n_reps: int = 5) -> Null:
    """delta_N of an ideal sampler: fresh samples of the data law itself, as many as a cell has (seeds 100..):
    the smallest coverage radius the generated sample's size can resolve.  The null of delta_N: its median over
    ``n_reps`` reps, with the smallest and largest as ``low`` and ``high``."""
    import json

    from ridgexr.analysis.manifold import store_manifold

    m = store_manifold(ds)
    cfg = json.loads(ds.attrs["config"])["dataset"]["manifold"]
    reps = np.stack([m.sample(ds.sizes["sample"], density=cfg["density"], kappa=cfg.get("kappa", 1.0),
                              seed=100 + i)[0] for i in range(n_reps)])
    fake = xr.Dataset({"ideal": (("rep", "sample", "dim"), reps)}, attrs=ds.attrs)
    d = analysis.coverage(fake, c=c, variable="ideal").coverage_delta.values
    return Null(float(np.median(d)), float(np.min(d)), float(np.max(d)),
                how=f"delta_N of {ds.sizes['sample']} fresh samples of the law (an ideal sampler): median [min, max] "
                    f"of {n_reps} reps")


def novelty_null(ds) -> Null:
    """Median novelty of fresh draws of the law (as many as a cell has, seeds 200 + draw) against the training
    set at the largest N, and their share below 1/3: what a perfect sampler scores on M2.  Several training
    draws: the mean of the per-draw medians with their min and max as ``low``, ``high``; one draw: the median
    with its exact 95 % interval."""
    import json

    from ridgexr.analysis import arrays
    from ridgexr.analysis.manifold import store_manifold

    m = store_manifold(ds)
    cfg = json.loads(ds.attrs["config"])["dataset"]["manifold"]
    train = ds.train_data.values
    draws = ds.sizes.get("data_draw", 1)
    per_draw, n, size = train.shape[0] // draws, int(ds.n_train.max()), ds.sizes["sample"]
    novs = [arrays.novelty(m.sample(size, density=cfg["density"], kappa=cfg.get("kappa", 1.0), seed=200 + j)[0],
                           train[j * per_draw:j * per_draw + n]) for j in range(draws)]
    meds = [float(np.median(v)) for v in novs]
    shares = [float(np.mean(v < MEMORIZED_RATIO)) for v in novs]
    what = f"{size} fresh draws of the law against the training set at N = {n}"
    if draws > 1:
        return Null(float(np.mean(meds)), min(meds), max(meds),
                    how=f"{what} (each of {draws} draws): mean [min, max] of the medians; share below 1/3 "
                        f"{min(shares):.1%}-{max(shares):.1%}")
    med, low, high, _ = median_ci(novs[0])
    return Null(med, low, high, how=f"{what}: median [exact 95 %]; share below 1/3 {shares[0]:.1%}")


def target_null(ds) -> dict[str, Null]:
    """Per model, the log-log slope against N of the W2 to the smoothed-and-projected target
    (``analysis.smoothed_target_distance``) of a perfect sampler of that target: fresh draws of the law (seed
    300), smoothed at the cell's noise level (seed 301) and projected to M, as many as a cell has; with its 95 %
    pairs-bootstrap interval (the training draws do not enter the target)."""
    import json

    from ridgexr.analysis.manifold import store_manifold
    from ridgexr.process import OU

    m = store_manifold(ds)
    cfg = json.loads(ds.attrs["config"])["dataset"]["manifold"]
    fresh = m.sample(ds.sizes["sample"], density=cfg["density"], kappa=cfg.get("kappa", 1.0), seed=300)[0]
    z = np.random.default_rng(301).standard_normal(fresh.shape)
    t = ds.denoise_t.isel(data_draw=0, drop=True) if "data_draw" in ds.denoise_t.dims else ds.denoise_t
    t = t.transpose("model", "n_train").compute()
    proc = OU()
    sigma = np.sqrt(proc.h(t.values)) / proc.alpha(t.values)
    out = {}
    for i, model in enumerate(ds.model.values):  # one model's cells at a time: (n_train, samples, dim) in memory
        ideal = m.project(fresh[None] + sigma[i, :, None, None] * z[None])
        fake = xr.Dataset({"ideal": (("n_train", "sample", "dim"), ideal), "denoise_t": t.isel(model=i, drop=True),
                           "population_data": ds.population_data}, attrs=ds.attrs)
        w2 = analysis.smoothed_target_distance(fake, variable="ideal")
        fit = analysis.rate_fit(w2).compute()
        out[str(model)] = Null(float(fit.slope), float(fit.slope_low), float(fit.slope_high),
                               how=f"{ds.sizes['sample']} fresh draws of the law smoothed at the cell's sigma and "
                                   "projected (a perfect sampler of the target): slope [95 % pairs bootstrap]")
    return out


def coverage_rates(df, k: int):
    """Log-log slopes against N next to -1/k.  One training draw: 95 % pairs-bootstrap intervals (low, high).
    Several independent draws: the mean of the per-draw slopes with a 95 % Student-t interval over the draws
    (low, high; ``analysis.rate_fit(draw_dim="data_draw")``), and beside it the pairs bootstrap over every
    (draw, N) point pooled (boot low, boot high)."""
    import pandas as pd

    rows = []
    n_draws = df["draw"].nunique() if "draw" in df else 1
    for model, g in df.groupby("model", sort=False):
        for metric in ("delta_N", "dist to M", "W2 to smoothed target"):
            v = g[metric].to_numpy(float)
            row = {"model": model, "metric": metric, "slope": np.nan, "low": np.nan, "high": np.nan}
            if np.isfinite(np.log(np.where(v > 0, v, np.nan))).sum() < 3:
                rows.append(row)
                continue
            boot = analysis.rate_fit(xr.DataArray(v, dims=("n_train",), coords={"n_train": g["N"].to_numpy()}))
            if n_draws > 1:
                grid = g.pivot(index="draw", columns="N", values=metric)
                fit = analysis.rate_fit(xr.DataArray(grid.to_numpy(float), dims=("data_draw", "n_train"),
                                                     coords={"n_train": grid.columns.to_numpy()}),
                                        draw_dim="data_draw")
                row |= {"slope": float(fit.slope), "low": float(fit.slope_low), "high": float(fit.slope_high),
                        "boot low": float(boot.slope_low), "boot high": float(boot.slope_high),
                        "draws": int(fit.n_draws)}
            else:
                row |= {"slope": float(boot.slope), "low": float(boot.slope_low), "high": float(boot.slope_high)}
            rows.append(row)
    out = pd.DataFrame(rows)
    out["-1/k"] = -1.0 / k
    return out


def draw_means(df):
    """The per-(model, N) means over the training draws of the coverage table (the table itself with one draw)."""
    if "draw" not in df or df["draw"].nunique() == 1:
        return df
    return df.drop(columns="draw").groupby(["model", "N"], sort=False).mean().reset_index()


# The criteria of docs/manifold.md are the claims registry's kinds (ridgexr.claims), one per criterion: rows per
# (model, criterion) with their intervals over independent training draws and nulls; the entry's overall verdict
# is derived from the rows' verdicts by coverage_overall.  No verdict word is made here.

#: the registry kind of each criterion of the page
CRITERION_KINDS = {"M1": "coverage-faster", "R": "coverage-resolved", "M2 novelty": "outputs-novel",
                   "M2 distance": "distance-falls", "M3": "target-rate", "reference": "memorizer-rate"}
#: the memorizing reference (the exact score to t_min, no coarsening)
REFERENCE = "memorize"
#: the criteria every stopped model is read against, in the order of the page
CRITERIA_ROWS = ("M1", "R", "M2 novelty", "M2 distance", "M3")
AGREES, DISAGREES, INCONCLUSIVE = VERDICTS[:3]


def coverage_criteria(k: int, floor: Null | None = None) -> dict[str, Criterion]:
    """The page's criteria, as the registry's kinds state them for a manifold of dimension ``k``
    (:data:`CRITERION_KINDS`); R only with ``floor`` (the ideal sampler's delta_N, :func:`coverage_floor`)."""
    out = {name: KINDS[kind].criterion(k=k) for name, kind in CRITERION_KINDS.items() if name != "R"}
    if floor is not None and np.isfinite(floor.value):
        out["R"] = KINDS["coverage-resolved"].criterion(floor=floor)
    return out


def _mean_t(values, ci: float = 0.95) -> tuple[float, float, float, int]:
    """Mean of the finite ``values`` with a Student-t ``ci`` interval over them (:func:`ridgexr.verdicts.mean_t_ci`)."""
    return mean_t_ci(values, ci)


_METRICS = {"M1": "delta_N", "reference": "delta_N", "M2 distance": "dist to M", "M3": "W2 to smoothed target"}


def coverage_claims(df, rates, k: int, *, floor: Null | None = None, novelty_null: Null | None = None,
                    target_null: dict | None = None, post_hoc: bool = False) -> list[Claim]:
    """The criteria M1, M2, M3 of docs/manifold.md as claims, per stopped model, and the memorizer's reference.

    Per stopped model (every model but ``REFERENCE``): M1, R, M2 novelty, M2 distance and M3
    (:func:`coverage_criteria`); for the memorizer, its reference claim.  A slope claim's interval is the one
    :func:`coverage_rates` gives; its ``n`` counts independent training draws (several: Student-t over the
    per-draw slopes, ``n`` the draws with a slope; one: the pairs bootstrap over the N of that draw, ``n`` = 1,
    below every kind's minimum: "untestable: too few resolved draws").  R and M2 novelty read the largest N:
    several draws, the mean over draws with a Student-t interval; one draw, R is the value itself and M2 novelty
    the median with its exact interval over the outputs (``n`` the finite outputs, ``excluded`` the others).

    Parameters
    ----------
    df : pandas.DataFrame
        :func:`coverage_table` (columns model, draw, N, delta_N, dist to M, novelty (median), novelty low,
        novelty high, outputs, excluded outputs, W2 to smoothed target).
    rates : pandas.DataFrame
        :func:`coverage_rates` of ``df``.
    k : int
        The manifold's dimension (the reference slope is -1/k).
    floor : Null, optional
        The ideal sampler's delta_N (:func:`coverage_floor`): R's criterion and null; without it no R row.
    novelty_null : Null, optional
        Median novelty of fresh draws of the law against the training set at the largest N (:func:`novelty_null`).
    target_null : dict of str to Null, optional
        Per model, the W2-to-target slope of a perfect sampler of the smoothed target (:func:`target_null`).
    post_hoc : bool
        The entry's numbers were seen before the kinds' margins were written (its rows say so).

    Returns
    -------
    list of Claim
        Labelled ``model`` and ``criterion``.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"model": ["gamma-0"] * 3, "draw": 0, "N": [100, 1000, 10000], "delta_N": [1.0, 0.5, 0.25],
    ...                    "dist to M": 0.01, "novelty (median)": [0.5, 1.5, 2.5], "novelty low": [0.4, 1.4, 2.4],
    ...                    "novelty high": [0.6, 1.6, 2.6], "outputs": 2000, "excluded outputs": 0,
    ...                    "W2 to smoothed target": [0.2, 0.1, 0.05]})
    >>> rates = pd.DataFrame({"model": "gamma-0", "metric": ["delta_N", "dist to M", "W2 to smoothed target"],
    ...                       "slope": [-0.3, 0.0, -0.5], "low": [-0.4, -0.1, -0.6], "high": [-0.2, 0.1, -0.4]})
    >>> [(c.labels["criterion"], c.verdict) for c in coverage_claims(df, rates, k=1)]  # doctest: +NORMALIZE_WHITESPACE
    [('M1', 'untestable: too few resolved draws (1 of 1)'), ('M2 novelty', 'agrees'),
     ('M2 distance', 'untestable: too few resolved draws (1 of 1)'),
     ('M3', 'untestable: too few resolved draws (1 of 1)')]
    """
    crit = coverage_criteria(k, floor)
    n_draws = int(df["draw"].nunique()) if "draw" in df else 1
    target_null = target_null or {}
    claims = []
    for model in df.model.unique():
        g = df[df.model == model]
        r = rates[rates.model == model].set_index("metric")
        largest = g[g.N == g.N.max()]
        names = ("reference",) if model == REFERENCE else tuple(c for c in CRITERIA_ROWS if c in crit)
        for name in names:
            kind = KINDS[CRITERION_KINDS[name]]
            context = {"k": k, "floor": floor, "labels": {"model": str(model), "criterion": name}, "post_hoc": post_hoc}
            if name in _METRICS:
                metric = _METRICS[name]
                row = r.loc[metric] if metric in r.index else {}
                if n_draws > 1:  # the independent draws: the training draws with a slope
                    n = int(row.get("draws", 0)) if np.isfinite(row.get("draws", np.nan)) else 0
                    how = (f"mean of the per-draw slopes, 95 % Student-t interval over the {n_draws} independent "
                           "training draws")
                else:  # the N of one training draw are not independent draws of the slope
                    n = 1 if np.isfinite(row.get("slope", np.nan)) else 0
                    how = (f"95 % pairs bootstrap over the {g.N.nunique()} values of N of one training draw (not "
                           "independent draws)")
                if name == "M1":
                    null = Null(-1.0 / k, how="the memorizer's spacing: slope -1/k")
                elif name == "M2 distance":
                    null = Null(0.0, how="a sampler at a constant distance from M (fresh draws of the law lie on M)")
                elif name == "M3":
                    null = target_null.get(str(model), Null(np.nan, how="not computed"))
                else:
                    null = None
                claims.append(kind.claim(float(row.get("slope", np.nan)), float(row.get("low", np.nan)),
                                         float(row.get("high", np.nan)), n, excluded=n_draws - n if n_draws > 1 else 0,
                                         null=null, measure=f"log-log slope of {metric} against N; {how}", **context))
            elif name == "R":
                est, lo, hi, n = _mean_t(largest["delta_N"])
                how = (f"mean over the {n_draws} training draws, 95 % Student-t" if n_draws > 1 else
                       "one training draw: the value itself, no interval")
                claims.append(kind.claim(est, lo, hi, n, excluded=len(largest) - n, null=floor,
                                         measure=f"delta_N at N = {int(largest.N.iloc[0])}; {how}", **context))
            else:  # M2 novelty
                used, dropped = int(largest["outputs"].sum()), int(largest["excluded outputs"].sum())
                if n_draws > 1:
                    est, lo, hi, n = _mean_t(largest["novelty (median)"])
                    excluded = len(largest) - n
                    min_n = KINDS["coverage-faster"].min_draws  # independent training draws, as the slopes'
                    how = (f"mean of the {n_draws} training draws' medians, 95 % Student-t; {dropped} of "
                           f"{used + dropped} outputs not finite, left out")
                else:
                    est, lo, hi = (float(largest[c].iloc[0]) for c in ("novelty (median)", "novelty low",
                                                                        "novelty high"))
                    n, excluded, min_n = used, dropped, None
                    how = "median over the outputs, exact 95 % interval; outputs not finite are excluded"
                claims.append(kind.claim(est, lo, hi, n, excluded=excluded, null=novelty_null, min_n=min_n,
                                         measure=f"median novelty at N = {int(largest.N.iloc[0])}; {how}", **context))
    return claims


def coverage_overall(claims: list[Claim]) -> tuple[str, str]:
    """The entry's verdict, derived from its claims' verdicts (one of the engine's), and why.

    The rule (docs/manifold.md, "The verdict, from the claims engine"; the page's confirm / refute clauses
    read on the engine's verdicts):

    - "agrees" when, for some stopped model, M1, M2 novelty, M2 distance and M3 all agree, and the memorizer's
      reference claim does not disagree (an interval across -1/k is "consistent with -1/k");
    - "disagrees" when M1 disagrees for every stopped model *and* R agrees for every stopped model (delta_N
      resolved above its floor: the page's "otherwise" clause puts an M1 read at the floor in inconclusive), or
      when M2 novelty disagrees for every stopped model (the page's "not novel"; its "while covering" is not
      tested);
    - "inconclusive" otherwise, with the claims that stand in the way and what would settle them.

    Returns
    -------
    (verdict, reason) : tuple of str
    """
    by = {(c.labels["model"], c.labels["criterion"]): c for c in claims}
    models = list(dict.fromkeys(c.labels["model"] for c in claims if c.labels["model"] != REFERENCE))
    if not models:
        return NO_STATE, "no stopped model"

    def verdict(m, name):
        return by[(m, name)].verdict if (m, name) in by else NO_STATE

    ref = by.get((REFERENCE, "reference"))
    needed = ("M1", "M2 novelty", "M2 distance", "M3")
    agreeing = [m for m in models if all(verdict(m, c) == AGREES for c in needed)]
    if agreeing and (ref is None or ref.verdict != DISAGREES):
        return AGREES, f"M1, M2 and M3 all agree for {', '.join(agreeing)}"
    m1_all = all(verdict(m, "M1") == DISAGREES for m in models)
    resolved = all(verdict(m, "R") == AGREES for m in models)
    if m1_all and resolved:
        return DISAGREES, "M1 disagrees for every stopped model, with delta_N resolved above its floor (R agrees)"
    if all(verdict(m, "M2 novelty") == DISAGREES for m in models):
        return DISAGREES, "M2 novelty disagrees for every stopped model (the outputs are not novel)"
    why = []
    if agreeing:
        why.append(f"every criterion agrees for {', '.join(agreeing)}, but the memorizer's reference disagrees")
    if m1_all:
        why.append("M1 disagrees for every stopped model, but delta_N is not resolved above its floor for "
                   + ", ".join(f"{m} (R {verdict(m, 'R')})" for m in models if verdict(m, "R") != AGREES)
                   + ": more samples per cell lower the floor (about samples^-1/2), larger N lowers delta_N")
    for m in models:
        parts = []
        for name in needed:
            v = verdict(m, name)
            if v != AGREES:
                note = by[(m, name)].note if (m, name) in by else ""
                parts.append(f"{name} {v}" + (f" ({note})" if note else ""))
        if parts:
            why.append(f"{m}: " + "; ".join(parts))
    return INCONCLUSIVE, " | ".join(why)

def coverage_main(name: str, ds, figures: Path | None = None, claims_tables: Path | None = None) -> None:
    """Print the coverage tables, slopes and claims of a store with stopped scores; write its figure to
    ``figures`` and its claims table (with the overall verdict) to ``claims_tables``/NAME.md."""
    df, k = coverage_table(ds)
    floor = coverage_floor(ds)
    fig = _figures.REGISTRY.get(f"manifold_{name.replace('-', '_')}")
    if figures is not None and fig is not None:  # the committed figure's summary and drawing (analyses/figures.py)
        print(f"wrote {_figures.write(fig, _figures.coverage_summary_of(df, k, floor, ds.sizes['sample']), figures)}")
    draws = ds.sizes.get("data_draw", 1)
    shown = df.drop(columns=list(CLAIM_COLUMNS))
    print(f"## {name}: denoised outputs, {ds.sizes['sample']} samples per cell, c = 0.5, {draws} training draw(s)\n")
    print(markdown_table(shown))
    if draws > 1:
        print(f"\n### {name}: means over the {draws} training draws\n")
        print(markdown_table(draw_means(shown)))
    rates = coverage_rates(df, k)
    how = (f"mean of the per-draw slopes, 95% Student-t interval over the {draws} independent training draws; "
           "boot: 95% pairs bootstrap over every (draw, N)" if draws > 1 else "95% pairs-bootstrap interval")
    print(f"\n### {name}: log-log slopes against N ({how})\n")
    print(markdown_table(rates))
    print()
    claims = coverage_claims(df, rates, k, floor=floor, novelty_null=novelty_null(ds),
                             target_null=target_null(ds), post_hoc=name in ENTRIES_SEEN)
    verdict, why = coverage_overall(claims)
    text = (f"Claims of {name!r} (store config hash {ds.attrs.get('config_hash', '?')}): the criteria M1-M3 and R of "
            "docs/manifold.md as the claims registry's kinds (docs/claims.md), by analyses/manifold.py\n\n"
            f"{claims_markdown(claims, drop=('gate',))}\n\n"
            f"Overall, by the rule of coverage_overall (docs/manifold.md): **{verdict}** -- {why}\n")
    print(f"### {name}: the criteria of docs/manifold.md as the claims registry's kinds (ridgexr.claims)\n")
    print(text)
    if claims_tables is not None:
        claims_tables.mkdir(parents=True, exist_ok=True)
        (claims_tables / f"{name}.md").write_text(text)


if __name__ == "__main__":
    main()
