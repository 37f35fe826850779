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
6. the claims the entry declares (catalog ``claims:``, written in docs/images.md before the rerun), evaluated by
   the claims engine (``ridgexr.claims.claims_table``, the same table ``ridgexr claims fashion-unet-16``
   prints): each with its criterion, interval, null, excluded draws and verdict; a claim about a U-Net cell
   whose samples fail the quality gate reads "untestable: the network does not generate".

Run:  python analyses/fashion_unet.py [--entry fashion-unet-16] [--data DIR] [--store PATH]
      [--t 4.1 2.5 1.28 0.82 0.47 0.21 0.055 5e-05]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from _common import complete_cells, markdown_table, median_ci_text, parser, store_for
from fashion_latent import step_rows

import ridgexr
from ridgexr.nearest import nearest_training
from ridgexr.claims import claims_table

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
            "class share bound": f"{float(cell.class_share_min):.3f}",
            "coverage / perfect sampler's": (f"{float(cell.quality_coverage) / float(cell.quality_coverage_null):.3f}"
                                             if "quality_coverage" in cell else "-"),
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
    print("\n## sample quality (the gate: docs/quality.md)\n")
    print(markdown_table(quality_table(ds)))
    if "clip_shift" in ds:
        print("\n## clip_shift: median / max over the samples, every 4th observed t\n")
        print(markdown_table(clip_table(ds)))
    print("\n## claims\n")
    print(claims_table(ds))


if __name__ == "__main__":
    main()
