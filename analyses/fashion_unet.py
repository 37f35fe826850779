"""The U-Net claims table: `fashion-unet-16` (or `fashion-unet`) at image scale (docs/images.md).

Three tables over the trajectories of every cell (the U-Net for schedules 1 and h^2 after 5 and 20
epochs, the exact denoiser stepped by the same DDIM scheduler):

1. per observed t (the rows of ``analyses/fashion_latent.py``): reach (median distance to the d* = 10
   ridge over the states whose frame is not degenerate, 95 % bootstrap interval; the degenerate share
   with its Wilson interval), align (median norms of the normal and tangent parts of the model's error
   at the state, and their ratio per dimension: (|tangent| / sqrt(d*)) / (|normal| / sqrt(d - d*)), 1 for
   an isotropic error), d*(t) (median ``resolved_rank``) and memorization at the state (nearest scaled
   training image, d1/d2 < 1/3);
2. the scheduler's output at t = 0 (``final_sample``, read by ``ds.ridge.final_state()``): the median
   distance to the nearest training image and the share with d1/d2 < 1/3 (Wilson);
3. the held-out diagnostics per cell: the excess loss over the exact denoiser with its Monte-Carlo
   standard error, and its tangent and normal parts (ridge frame at x_t);
4. the sample quality of every cell (``ds.ridge.sample_quality()``: nearest ratio, Frechet distance in the
   classifier's features with its floor and ceiling, class share, the gate's verdict; docs/quality.md);
5. the scheduler's x0 clipping (``clip_shift``) per observed t;
6. the claims, each with the criterion written in docs/images.md before the rerun, its interval and verdict;
   a claim about a U-Net cell whose samples fail the quality gate reads "untestable: the network does not
   generate" (``ridgexr.quality.gated_verdict``).

Run:  python analyses/fashion_unet.py [--entry fashion-unet-16] [--data DIR] [--store PATH]
      [--t 4.1 2.5 1.28 0.82 0.47 0.21 0.055 5e-05]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from _common import complete_cells, markdown_table, median_ci, median_ci_text, parser, share, store_for
from fashion_latent import step_rows

import ridgexr
from ridgexr.nearest import nearest_training
from ridgexr.quality import gated_verdict

T_DEFAULT = [4.1, 2.5, 1.28, 0.82, 0.47, 0.21, 0.055, 5e-05]


def final_table(ds) -> pd.DataFrame:
    """Nearest training image (d1) and d1/d2 < 1/3 of the scheduler's output at t = 0, per cell
    (``ridgexr.nearest.nearest_training``; the share and its interval from ``memorization_fraction``)."""
    at0 = ds.ridge.final_state()
    memo = ridgexr.analysis.memorization_fraction(at0).compute()
    train = torch.as_tensor(ds["train_data"].values)
    rows = []
    for label, cell in complete_cells(at0[["trajectory", "cell_applies", "cell_complete"]].compute()):
        d1, d2, _ = nearest_training(torch.as_tensor(cell.trajectory.transpose("sample", "dim").values), train)
        m = memo.sel(label)
        rows.append(label | {"nearest training image at t = 0 (median)": median_ci_text(d1.numpy()),
                             "median d1/d2": f"{float(np.median((d1 / d2).numpy())):.3g}",
                             "d1/d2 < 1/3 (memorized)": f"{float(m.memorized):.2f} [{float(m.memorized_low):.2f}, "
                                                        f"{float(m.memorized_high):.2f}]"})
    return pd.DataFrame(rows)


def diagnostics_table(ds) -> pd.DataFrame:
    """Held-out excess loss (and its standard error) and its tangent / normal parts, per cell."""
    names = ["excess_loss", "excess_loss_se", "excess_tangent", "excess_normal"]
    sub = ds[[n for n in names if n in ds] + ["cell_applies", "cell_complete"]].compute()
    rows = []
    for label, cell in complete_cells(sub):
        rows.append(label | {n: f"{float(cell[n]):.4g}" for n in names if n in cell})
    return pd.DataFrame(rows)


def quality_table(ds) -> pd.DataFrame:
    """The stored sample quality of every complete cell and the gate's verdict (``ds.ridge.sample_quality()``)."""
    q = ds.ridge.sample_quality()
    rows = []
    for label, cell in complete_cells(q.assign(cell_applies=ds.cell_applies, cell_complete=ds.cell_complete)):
        v = {k: float(cell[f"quality_{k}"]) for k in ("nearest_ratio", "nearest_ratio_lower", "nearest_ratio_upper",
                                                       "frechet", "frechet_floor", "frechet_ceiling", "class_share",
                                                       "class_share_lower", "class_share_upper")}
        rows.append(label | {
            "nearest ratio [95 %]": f"{v['nearest_ratio']:.3g} [{v['nearest_ratio_lower']:.3g}, {v['nearest_ratio_upper']:.3g}]",
            "Frechet (floor / ceiling)": f"{v['frechet']:.3g} ({v['frechet_floor']:.3g} / {v['frechet_ceiling']:.3g})",
            "class share [95 %]": f"{v['class_share']:.2f} [{v['class_share_lower']:.2f}, {v['class_share_upper']:.2f}]",
            "gate": str(cell.gate.item())})
    return pd.DataFrame(rows)


def clip_table(ds) -> pd.DataFrame:
    """Median and maximum of ``clip_shift`` (how far the scheduler's x0 clipping moved each step) per cell and t."""
    sub = ds[["clip_shift", "cell_applies", "cell_complete"]].compute()
    rows = []
    for label, cell in complete_cells(sub):
        v = cell.clip_shift.transpose("step", "sample").values
        rows.append(label | {f"t = {t:.3g}": f"{np.nanmedian(r):.3g} / {np.nanmax(r):.3g}"
                             for t, r in zip(cell.t.values[::4], v[::4])})
    return pd.DataFrame(rows)


def interval_verdict(lo: float, hi: float, agrees, disagrees) -> str:
    """"agrees" when the interval [lo, hi] lies inside the region ``agrees(lo, hi)`` says, "disagrees" when inside
    ``disagrees``'s, "inconclusive" otherwise (a NaN interval is "untestable: no resolved state")."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "untestable: no resolved state"
    return "agrees" if agrees(lo, hi) else "disagrees" if disagrees(lo, hi) else "inconclusive"


def _states(cell, step):
    """Per-sample ridge distance and per-dimension tangent / normal error ratio at ``step``, each masked by its
    own degenerate flag (``ridgexr.analysis.resolved``: the distance by ``ridge_degenerate``, the residual split
    by ``frame_degenerate``; the rule the per-t table and every summary use)."""
    at = cell.isel(step=step)
    dist = ridgexr.analysis.resolved(at, "ridge_distance").values
    d, d_star = at.sizes["dim"], int(cell.attrs.get("d_star", 10))
    tan = np.linalg.norm(ridgexr.analysis.resolved(at, "residual_tangent").transpose("sample", "dim").values,
                         axis=-1) / np.sqrt(d_star)
    nor = np.linalg.norm(ridgexr.analysis.resolved(at, "residual_normal").transpose("sample", "dim").values,
                         axis=-1) / np.sqrt(d - d_star)
    return dist, tan / nor


def claims_table(ds, t_early: float = 1.28, t_late: float = 0.21) -> pd.DataFrame:
    """The rerun's claims (docs/images.md, criteria written before it finished), one row per claim and cell."""
    quality = ds.ridge.sample_quality()
    at0 = ds.ridge.final_state()
    memo = ridgexr.analysis.memorization_fraction(at0).compute()
    s_early, s_late = (int(np.argmin(np.abs(ds.t.values - t))) for t in (t_early, t_late))
    names = ["ridge_distance", "ridge_degenerate", "frame_degenerate", "residual_normal", "residual_tangent",
             "cell_applies", "cell_complete"]
    sub = ds[names].compute()
    sub.attrs["d_star"] = ds.attrs["d_star"]
    cells = list(complete_cells(sub))
    exact = next(((lab, c) for lab, c in cells if lab.get("model") == "exact"), None)
    rows = []

    def row(label, claim, criterion, measured, verdict):
        gate = str(quality.sel({k: v for k, v in label.items() if k in quality.dims}).gate.item())
        is_net = label.get("model") != "exact"
        rows.append(label | {"claim": claim, "criterion (before the run)": criterion, "measured": measured,
                             "gate": gate, "verdict": gated_verdict(verdict, gate) if is_net else verdict})

    for label, cell in cells:
        m = memo.sel({k: v for k, v in label.items() if k in memo.dims})
        n = ds.sizes["sample"]
        k = int(round(float(m.memorized) * n))
        lo, hi = float(m.memorized_low), float(m.memorized_high)
        if label.get("model") == "exact":
            row(label, "the exact denoiser memorizes", "Wilson lower bound of d1/d2 < 1/3 at t = 0 > 0.8 agrees; upper "
                "< 0.5 disagrees", f"{k}/{n} [{lo:.2f}, {hi:.2f}]",
                interval_verdict(lo, hi, lambda a, b: a > 0.8, lambda a, b: b < 0.5))
            continue
        row(label, "the U-Net does not memorize", "Wilson upper bound < 0.35 agrees; lower bound > 0.5 disagrees",
            f"{k}/{n} [{lo:.2f}, {hi:.2f}]", interval_verdict(lo, hi, lambda a, b: b < 0.35, lambda a, b: a > 0.5))
        d_early, _ = _states(cell, s_early)
        d_late, ratio_late = _states(cell, s_late)
        e, l_ = median_ci(d_early), median_ci(d_late)
        row(label, f"reach: the ridge distance falls from t = {float(ds.t[s_early]):.3g} to {float(ds.t[s_late]):.3g}",
            "the later interval lies below the earlier one: agrees; above it: disagrees",
            f"{e[0]:.3g} [{e[1]:.3g}, {e[2]:.3g}] -> {l_[0]:.3g} [{l_[1]:.3g}, {l_[2]:.3g}]",
            interval_verdict(min(e[1], l_[1]), max(e[2], l_[2]), lambda a, b: l_[2] < e[1], lambda a, b: l_[1] > e[2])
            if np.isfinite(l_[0]) and np.isfinite(e[0]) else "untestable: no resolved state")
        if exact is not None:
            x = median_ci(_states(exact[1], s_early)[0])
            lo_r, hi_r = e[1] / x[2], e[2] / x[1]
            row(label, f"reach: at t = {float(ds.t[s_early]):.3g} the U-Net's states are as far from the ridge as the "
                "exact denoiser's", "ratio of medians' interval inside [0.9, 1.1] agrees; outside it disagrees",
                f"{e[0] / x[0]:.3g} [{lo_r:.3g}, {hi_r:.3g}]",
                interval_verdict(lo_r, hi_r, lambda a, b: 0.9 <= a and b <= 1.1, lambda a, b: b < 0.9 or a > 1.1))
        _, ratio_early = _states(cell, s_early)
        r = median_ci(np.concatenate([ratio_early, ratio_late]))
        row(label, f"align: per dimension the model error is more tangent than normal (t = {float(ds.t[s_early]):.3g} "
            f"and {float(ds.t[s_late]):.3g})", "median (|e_T| / sqrt(d*)) / (|e_N| / sqrt(d - d*)) interval above 1 "
            "agrees; below 1 disagrees", f"{r[0]:.3g} [{r[1]:.3g}, {r[2]:.3g}]",
            interval_verdict(r[1], r[2], lambda a, b: a > 1, lambda a, b: b < 1))
    return pd.DataFrame(rows)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entry", default="fashion-unet-16")
    ap.add_argument("--store", default=None, help="an existing store of the entry (read only)")
    ap.add_argument("--t", type=float, nargs="+", default=T_DEFAULT)
    args = ap.parse_args(argv)
    ds = ridgexr.open_dataset(args.store) if args.store else store_for(args.entry, args.data)
    rows = step_rows(ds, args.t)
    # an isotropic error puts sqrt((d - d*) / d*) times more norm in the normal space than in the tangent
    # one: compare the parts per dimension
    d, d_star = ds.sizes["dim"], int(ds.attrs["d_star"])
    per_dim = (rows["|residual tangent|"].astype(float) / np.sqrt(d_star)) / (
        rows["|residual normal|"].astype(float) / np.sqrt(d - d_star))
    rows.insert(rows.columns.get_loc("|residual tangent|") + 1, "tangent / normal per dimension",
                [f"{v:.3g}" for v in per_dim])
    print("## per observed t\n")
    print(markdown_table(rows))
    print("\n## the scheduler's output at t = 0\n")
    print(markdown_table(final_table(ds)))
    print("\n## held-out diagnostics\n")
    print(markdown_table(diagnostics_table(ds)))
    print("\n## sample quality (the gate: class share >= 0.8 and nearest ratio <= 1.5)\n")
    print(markdown_table(quality_table(ds)))
    if "clip_shift" in ds:
        print("\n## clip_shift: median / max over the samples, every 4th observed t\n")
        print(markdown_table(clip_table(ds)))
    print("\n## claims\n")
    print(markdown_table(claims_table(ds)))


if __name__ == "__main__":
    main()
