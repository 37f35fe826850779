"""The paper's 2-D results table, from a store.

Run:  python analyses/paper_figures.py [--entry two-points-paper] [--data DIR]
Runs (or resumes) the entry and prints the
per-cell table used by docs/findings.md (near-mode share and d1/d2 memorized share with
Wilson intervals, the median |x1| of the final samples, normal / tangent residuals, excess
loss and its split).  Its figures (samples over the training points with near-mode counts,
the density along the ridge, the normal/tangent split of the excess loss against training
time tau) are drawn by analyses/figures.py from summaries of the same store.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from _common import markdown_table, parser, store_for

from ridgexr import analysis
from ridgexr.schema import CELL_DIMS


def cell_table(ds: xr.Dataset) -> "pandas.DataFrame":  # noqa: F821
    last = ds.isel(step=-1)
    near = analysis.near_mode_fraction(ds, r=0.5)
    memo = analysis.memorization_fraction(ds)
    rms = lambda v: np.sqrt((v**2).sum("dim").mean("sample"))  # noqa: E731
    phases = analysis.phase_summary(analysis.phase_times(ds, r=0.5))
    out = xr.Dataset({
        "reach_t": phases.reach_time_median, "align_t": phases.align_time_median,
        "near_mode": near.near_mode, "near_low": near.near_mode_low, "near_high": near.near_mode_high,
        "memorized": memo.memorized, "memo_low": memo.memorized_low, "memo_high": memo.memorized_high,
        "median_abs_x1": np.abs(last.trajectory.isel(dim=0)).median("sample"),
        "rms_normal": rms(last.residual_normal), "rms_tangent": rms(last.residual_tangent),
        "excess_loss": ds.excess_loss, "excess_normal": ds.excess_normal, "excess_tangent": ds.excess_tangent,
    }).compute()
    out = out.drop_vars([c for c in out.coords if c not in CELL_DIMS])
    return out.to_dataframe().reset_index()


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entry", default="two-points-paper", help="catalog entry (a 2-D point set)")
    args = ap.parse_args(argv)
    ds = store_for(args.entry, args.data)
    table = cell_table(ds)
    print(f"## {args.entry}: final step (t = {float(ds.t[-1]):g}), {ds.sizes['sample']} samples per cell\n")
    print(markdown_table(table))


if __name__ == "__main__":
    main()
