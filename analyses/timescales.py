"""Training time scales and the ridge account of the window: the `timescales-*` tables (docs/timescales.md).

Prints, from the store of the entry (by default ``timescales-gmm``):

- the quality curve of every n along the checkpoints, and for a mixture store the share of final samples
  between its two modes (a look at the samples behind the curve);
- per n: tau_gen and tau_mem with their intervals (``ridgexr.analysis.training_timescales``), the slopes of
  their laws in n and the verdicts, by the tau_gen quality and rule written before the entry ran
  (the entry's ``timescales`` field, ``ridgexr.claims.timescale_rule``: the sliced Wasserstein distance by 'gap'
  for timescales-gmm and by 'best' for timescales-gmm-seed1; the distance along the law's principal axis by
  'null' for timescales-gmm-long; the Frechet distance against its floor by 'null' for timescales-fashion), and
  tau_gen by the other rules beside it;
- for a store with fresh draws of its law, the Wasserstein distance along the law's first principal axis
  (``ridgexr.quality.axis_quality``) per n and checkpoint with its interval and null;
- for a Gaussian-mixture store, Bonnaire et al.'s own measure beside ours: the score ratio e_gen / e_mem of each
  checkpoint's network (``ridgexr.run.score_errors``, read back from the run's checkpoints);
- for a store of images, the image quality per n and checkpoint (Frechet distance and its floor, class share,
  nearest ratio, the gate's verdict);
- the window table (``ridgexr.analysis.training_window``): at a few checkpoints, the window each lies in and
  the median ridge distance, the median tangential distance to the nearest training point, the near-mode
  share and f_mem of the final samples, beside the same measures of the null (fresh draws of the law, or
  held-out real images, observed by the store's own code), for the smallest and the largest n.

Run:  python analyses/timescales.py [--entry timescales-gmm] [--data DIR] [--store PATH] [--epochs 48 127 1438 10000]
(``--store``: read that store instead of running or resuming the entry)
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from _common import markdown_table, parser, store_for

import ridgexr
from ridgexr.analysis import training_timescales, training_window
from ridgexr.choices import QUALITY_LABELS
from ridgexr.claims import timescale_rule
from ridgexr.claims.timescale_slope import slope_claims
from ridgexr.quality import AXIS_QUALITY, axis_quality, sample_quality
from ridgexr.run import score_errors, store_path


SW, AXIS, FRECHET = "quality_sliced_wasserstein", AXIS_QUALITY, "quality_frechet"


def measured(ds, quality: str) -> bool:
    """Whether the store has ``quality`` with a finite value in some cell (a mixture's store keeps the image
    measures as NaN, and the reverse)."""
    return quality in ds and bool(np.isfinite(ds[quality].values).any())


def rule_rows(ds) -> pd.DataFrame:
    """tau_gen per n under every rule on each quality the store measures (the sliced Wasserstein distance, the
    Frechet distance; defaults.TIMESCALE_GEN_FACTOR, TIMESCALE_QUALITY_TOL) and, where the store has it merged,
    rule 'null' on the distance along the law's axis."""
    from ridgexr.choices import QUALITY_RULES

    cols = {}
    pairs = [(q, rule) for q in (SW, FRECHET) if measured(ds, q) for rule in QUALITY_RULES]
    pairs += [(AXIS, "null")] if AXIS in ds else []
    for quality, rule in pairs:
        tt = training_timescales(ds, quality=quality, rule=rule).compute()
        cols[f"tau_gen ({QUALITY_LABELS[quality]}, {rule})"] = [_tau(tt.sel(n_train=n).squeeze(), "tau_gen") for n in tt.n_train.values]
    return pd.DataFrame({"n": [int(n) for n in ds.n_train.values], **cols})


def image_rows(ds) -> pd.DataFrame:
    """For a store of images: per n and checkpoint the Frechet distance (its floor: held-out reals), the class
    share [Wilson interval], the nearest ratio and the quality gate's verdict (docs/quality.md)."""
    q = sample_quality(ds)
    rows = []
    for n in q.n_train.values:
        for e in q.epoch.values:
            c = q.sel(n_train=n, epoch=e).squeeze()
            rows.append({"n": int(n), "checkpoint": int(e),
                         "Frechet (floor)": f"{float(c[FRECHET]):.1f} ({float(c[FRECHET + '_floor']):.1f})",
                         "class share": f"{float(c.quality_class_share):.2f} [{float(c.quality_class_share_lower):.2f}, "
                                        f"{float(c.quality_class_share_upper):.2f}]",
                         "nearest ratio": f"{float(c.quality_nearest_ratio):.2f}", "gate": str(c.gate.values)})
    return pd.DataFrame(rows)


def score_rows(se) -> pd.DataFrame:
    """Bonnaire et al.'s score ratio e_gen / e_mem per n and checkpoint (columns), one block of rows per time."""
    rows = []
    for t in se.score_t.values:
        for n in se.n_train.values:
            c = se.sel(score_t=t, n_train=n).squeeze()
            rows.append({"t": f"{t:g}", "n": int(n), **{f"{int(e)}": f"{float(c.score_ratio.sel(epoch=e)):.3g}"
                                                         for e in se.epoch.values}})
    return pd.DataFrame(rows)


def score_last_rows(se) -> pd.DataFrame:
    """Both of Bonnaire et al.'s ratios at the last checkpoint per n (rows) and time (columns): R and the signed
    ratio (e_emp - e_gen) / e_mem (+1: the population score, -1: the empirical score)."""
    last = se.isel(epoch=-1)
    return pd.DataFrame([{"n": int(n), **{f"t = {t:g}": f"{float(c.score_ratio.sel(score_t=t)):.3g} / "
                                                      f"{float(c.score_ratio_signed.sel(score_t=t)):+.3f}"
                                          for t in se.score_t.values}}
                         for n in se.n_train.values for c in [last.sel(n_train=n).squeeze()]])


def null_reference(ds):
    """The draws the window's null observes: the store's ``population_data`` (fresh draws of a mixture's or a
    manifold's law), else the reference draws of its dataset (held-out real images, ``reference_draws``)."""
    if "population_data" in ds:
        return None
    from ridgexr.catalog import Experiment
    from ridgexr.quality import reference_draws

    draws, how = reference_draws(Experiment.model_validate_json(ds.attrs["config"]).dataset)
    if draws is None:
        raise SystemExit(f"no null for the window: {how}")
    print(f"null of the window: {how}")
    return draws


def axis_rows(q) -> pd.DataFrame:
    """The distance along the law's principal axis per n and checkpoint: value [lower, upper], and the null."""
    rows = []
    for n in q.n_train.values:
        c = q.sel(n_train=n).squeeze()
        rows.append({"n": int(n), **{f"{int(e)}": f"{float(c[AXIS].sel(epoch=e)):.3g} "
                                                  f"[{float(c[AXIS + '_lower'].sel(epoch=e)):.3g}, "
                                                  f"{float(c[AXIS + '_upper'].sel(epoch=e)):.3g}]"
                                     for e in q.epoch.values}})
    return pd.DataFrame(rows)


def _tau(c, name) -> str:
    """One tau with its interval, censoring said."""
    lo, hi = float(c[f"{name}_low"]), float(c[f"{name}_high"])
    if bool(c[f"{name}_censored"]):
        return f">= {float(c[name]):g} (censored)"
    return f"{float(c[name]):g} ({lo:g}, {hi:g}]"


def tau_rows(tt) -> pd.DataFrame:
    """One row per n: tau_gen and tau_mem with their intervals, censoring said."""
    rows = []
    for n in tt.n_train.values:
        c = tt.sel(n_train=n).squeeze()
        rows.append({"n": int(n), "tau_gen (interval)": _tau(c, "tau_gen"), "tau_mem (interval)": _tau(c, "tau_mem"),
                     "best quality": float(c["quality"].min()),
                     "quality at the last checkpoint": float(c["quality"].isel(epoch=-1))})
    return pd.DataFrame(rows)


def _cells(x):
    """``x`` without its length-1 dimensions other than n_train and epoch (an entry of one n keeps its n)."""
    return x.squeeze([d for d in x.dims if x.sizes[d] == 1 and d not in ("n_train", "epoch")])


def curve_rows(tt) -> pd.DataFrame:
    """The quality curve of every n along the checkpoints (one row per n), with its null at the last one."""
    q = _cells(tt["quality"])
    rows = [{"n": int(n), **{f"{int(e)}": f"{float(v):.3g}" for e, v in zip(q.epoch.values, q.sel(n_train=n).values)}}
            for n in q.n_train.values]
    return pd.DataFrame(rows)


def between_modes_rows(ds, epochs) -> pd.DataFrame | None:
    """For a two-component mixture store (means +-mean (1, ..., 1)): the share of final samples between the modes,
    |x . u| < mean sqrt(d) / 2 with u = (1, ..., 1) / sqrt(d) (half-way to a mean, in data units), per checkpoint
    in ``epochs`` (the nearest labels) and n, beside the same share of the law's fresh draws (``population_data``).
    A look at the samples that the sliced Wasserstein distance summarises: one blob at the origin scores a
    large share, the mixture a small one.  None for a store of another data set."""
    mix = json.loads(ds.attrs["config"])["dataset"].get("mixture")
    if not mix:
        return None
    d = int(mix["dim"])
    u = np.ones(d) / np.sqrt(d)
    half = float(mix["mean"]) * np.sqrt(d) / 2

    def share(x):
        p = np.asarray(x) @ u
        return float(np.mean(np.abs(p[np.isfinite(p)]) < half))

    last = ds.isel(step=-1)
    a = float(last["alpha"])
    rows = [{"checkpoint": "law (fresh draws)", **{f"n = {int(n)}": f"{share(ds['population_data'].values):.2f}"
                                                   for n in ds.n_train.values}}]
    for e in epochs:
        at = last.sel(epoch=e, method="nearest")
        rows.append({"checkpoint": int(at.epoch), **{
            f"n = {int(n)}": f"{share(at['trajectory'].sel(n_train=n).squeeze().values / a):.2f}"
            for n in ds.n_train.values}})
    return pd.DataFrame(rows)


def _ends(w) -> tuple[int, ...]:
    """The smallest and largest n of ``w`` (one n when the entry has one)."""
    return tuple(sorted({int(w.n_train.min()), int(w.n_train.max())}))


#: the window table's measures: (variable of training_window, column, format)
WINDOW_COLUMNS = (("ridge_distance", "ridge distance", "{:.3g}"),
                  ("tangential_distance", "tangential distance", "{:.3g}"),
                  ("nearest_distance", "nearest distance", "{:.3g}"),
                  ("near_mode", "near mode", "{:.3f}"), ("memorized", "f_mem", "{:.3f}"))


def window_rows(w, epochs) -> pd.DataFrame:
    """One row per checkpoint in ``epochs`` (the nearest labels), the smallest and largest n side by side."""
    ends = _ends(w)
    label = f"window (n = {' / '.join(map(str, ends))})"

    def pair(x, fmt="{}"):
        return " / ".join(fmt.format(x.sel(n_train=n).item()) for n in ends)

    rows = []
    for e in epochs:
        at = _cells(w.sel(epoch=e, method="nearest"))
        rows.append({"checkpoint": int(at.epoch), label: pair(at.window),
                     **{col: pair(at[name], fmt) for name, col, fmt in WINDOW_COLUMNS}})
    rows.append({"checkpoint": "null (reference draws)", label: "",
                 **{col: pair(w[f"null_{name}"], fmt) for name, col, fmt in WINDOW_COLUMNS}})
    return pd.DataFrame(rows)


def difference_rows(w, epochs) -> pd.DataFrame:
    """Samples minus null per checkpoint and n (the smallest and largest), with the 95 % bootstrap intervals."""
    ends = _ends(w)
    rows = []
    for e in epochs:
        at = _cells(w.sel(epoch=e, method="nearest"))
        row = {"checkpoint": int(at.epoch)}
        for name, col, _ in WINDOW_COLUMNS[:3]:  # the distances
            for n in ends:
                v = [float(at[f"{name}_minus_null{k}"].sel(n_train=n)) for k in ("", "_low", "_high")]
                row[f"{col} - null (n = {n})"] = f"{v[0]:.3g} [{v[1]:.3g}, {v[2]:.3g}]"
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entry", default="timescales-gmm")
    ap.add_argument("--store", default=None, help="an existing store of the entry (read only)")
    ap.add_argument("--epochs", type=float, nargs="+", default=[48, 127, 1438, 10000])
    args = ap.parse_args(argv)
    ds = ridgexr.open_dataset(args.store) if args.store else store_for(args.entry, args.data)
    path = store_path(args.store or args.entry, data_dir=args.data)
    spec, how = timescale_rule(ds)  # tau_gen's quality and rule as the entry wrote them before it ran
    quality, rule = spec.quality, spec.rule
    if "population_data" in ds:  # a mixture or a manifold: the distance along the law's principal axis
        q = axis_quality(ds).compute()
        ds = ds.merge(q)
        print(f"W1 along the law's first principal axis [95 % bootstrap] (columns: checkpoints); null (fresh "
              f"draws): {float(q[AXIS + '_null']):.3g} [{float(q[AXIS + '_null_lower']):.3g}, "
              f"{float(q[AXIS + '_null_upper']):.3g}]\n" + markdown_table(axis_rows(q)) + "\n")
    if measured(ds, FRECHET):
        print("image quality per n and checkpoint:\n" + markdown_table(image_rows(ds)) + "\n")
    null = spec.quality_null
    if "population_data" in ds and json.loads(ds.attrs["config"])["dataset"].get("mixture"):
        se = score_errors(path)
        print("Bonnaire et al.'s score ratio e_gen / e_mem (their compute_ratio_gen_mem; 0: the population score, "
              "~1: the empirical score) per n and checkpoint (columns), at each diffusion time t; "
              f"{se.attrs['points']}:\n" + markdown_table(score_rows(se)) + "\n")
        print(f"both ratios at the last checkpoint ({int(se.epoch[-1])}), R / signed:\n"
              + markdown_table(score_last_rows(se)) + "\n")
    tt = training_timescales(ds, quality=quality, rule=rule, factor=spec.factor, quality_null=null).compute()
    print(f"{how}: {rule!r} on {quality}{'' if null is None else f' against {null}'}, factor {spec.factor:g} "
          f"({tt.tau_gen.attrs['long_name']}; written: {spec.written or 'not said'})")
    print(markdown_table(tau_rows(tt)))
    verdicts = {c.labels["time scale"]: c.verdict for c in slope_claims(tt)}
    for name in ("tau_gen", "tau_mem"):
        s = {k: tt[f"{name}_{k}"].squeeze() for k in ("slope", "slope_low", "slope_high", "slope_range_low",
                                                       "slope_range_high")}
        print(f"\n{name}: b = {float(s['slope']):.3g} [{float(s['slope_low']):.3g}, {float(s['slope_high']):.3g}], "
              f"verdict by the registry's timescale-slope: {verdicts[name]}; the lines through every {name}'s checkpoint "
              f"interval have b in [{float(s['slope_range_low']):.3g}, {float(s['slope_range_high']):.3g}]")
    print(f"tau_gen < tau_mem: {tt.tau_order_verdict.squeeze().item()}")
    print(f"\n{tt.attrs['quality']} along training (columns: checkpoints):\n" + markdown_table(curve_rows(tt)))
    modes = between_modes_rows(ds, sorted({int(ds.epoch.sel(epoch=e, method="nearest"))
                                           for e in (78, 127, 546, 1438, 3793, 10000, 36747, 100000)}))
    if modes is not None:
        print("\nshare of final samples between the mixture's modes (|x . u| < mean sqrt(d) / 2):\n"
              + markdown_table(modes))
    print("\ntau_gen by every rule (only the one above is a verdict):\n" + markdown_table(rule_rows(ds)))
    w = training_window(ds, tt, reference=null_reference(ds))
    print("\n" + markdown_table(window_rows(w, args.epochs)))
    print("\n" + markdown_table(difference_rows(w, args.epochs)))
    print(f"\nnull: {w.attrs['null']}")
    masked = np.isnan(w.ridge_distance).mean().item()
    print(f"checkpoints whose every final state is masked (degenerate frame): {masked:.0%}")


if __name__ == "__main__":
    main()
