"""Reach / align / slide at image scale: the `fashion-latent` claims table (docs/images.md).

For every model cell of the entry (the MLP, random features at widths 256 and 2048, the exact denoiser;
schedules 1, h, h^2) and a few observed times t, prints, over the 64 trajectories:

- reach: the median distance to the d* = 25 ridge (``ridge_distance``, states whose frame is degenerate
  masked) with a 95 % bootstrap interval, and the share of masked (degenerate) states with its Wilson
  interval;
- align: the median norm of the normal and tangent parts of the model's error at the state
  (``residual_normal``, ``residual_tangent``);
- the resolved dimension d*(t) (median ``resolved_rank``);
- memorization: the median distance to the nearest training latent (``nearest_distance``) and the
  share with d1/d2 < 1/3 (Wilson interval).

Run:  python analyses/fashion_latent.py [--data DIR] [--store PATH] [--t 1.0 0.3 0.1 0.03 0.01 0.001]
(``--store``: read that store instead of running or resuming the entry)
"""

from __future__ import annotations

import numpy as np

from _common import complete_cells, markdown_table, median_ci_text, parser, share, store_for

import pandas as pd

import ridgexr
from ridgexr.defaults import MEMORIZED_RATIO

ENTRY = "fashion-latent"


def norm_median(v: np.ndarray, masked: np.ndarray) -> float:
    """Median norm of the (sample, dim) residuals over the states not masked."""
    norms = np.linalg.norm(v, axis=-1)
    return float(np.nanmedian(np.where(masked, np.nan, norms))) if (~masked).any() else float("nan")


def step_rows(ds, times) -> pd.DataFrame:
    """One row per (complete cell, observed step nearest each of ``times``): the columns described above."""
    steps = sorted({int(np.argmin(np.abs(ds.t.values - t))) for t in times})
    sel = ds.isel(step=steps)[["ridge_distance", "ridge_degenerate", "frame_degenerate", "residual_normal",
                               "residual_tangent",
                               "resolved_rank", "nearest_distance", "nearest_ratio", "cell_applies",
                               "cell_complete"]].compute()
    rows = []
    for label, cell in complete_cells(sel):
        for j in range(len(steps)):
            at = cell.isel(step=j)
            degenerate = at.ridge_degenerate.values.astype(bool)
            dist = np.where(degenerate, np.nan, at.ridge_distance.values)
            # the residual split is undetermined where the frame at the state is (schema.DEGENERATE_FLAGS)
            frame = at.frame_degenerate.values.astype(bool)
            rows.append(label | {
                "t": f"{float(at.t):.3g}",
                "ridge distance (median)": median_ci_text(dist),
                "degenerate": share(degenerate),
                "|residual normal|": f"{norm_median(at.residual_normal.values, frame):.3g}",
                "|residual tangent|": f"{norm_median(at.residual_tangent.values, frame):.3g}",
                "d*(t)": float(np.nanmedian(at.resolved_rank.values)),
                "nearest (median)": median_ci_text(at.nearest_distance.values),
                "d1/d2 < 1/3": share(at.nearest_ratio.values < MEMORIZED_RATIO),
            })
    return pd.DataFrame(rows)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--t", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03, 0.01, 0.001])
    ap.add_argument("--store", default=None, help="an existing store of the entry (read only)")
    args = ap.parse_args(argv)
    ds = ridgexr.open_dataset(args.store) if args.store else store_for(ENTRY, args.data)
    print(markdown_table(step_rows(ds, args.t)))


if __name__ == "__main__":
    main()
