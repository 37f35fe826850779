"""Two points (-3,0),(3,0): the normal error stays tiny for every schedule while the
tangential spread depends on the weight schedule w(t) in {1, h, h^2}, across widths and tau.

Run:  python analyses/two_points_schedules.py [--data DIR]
Prints a markdown table (its figures are the report's: `ridgexr report two-points`).
"""

from __future__ import annotations

import numpy as np

from _common import markdown_table, parser, store_for

from ridgexr import analysis


def table(ds, label_dims):
    last = ds.isel(step=-1)
    rms_n = np.sqrt((last.residual_normal**2).sum("dim").mean("sample"))
    rms_t = np.sqrt((last.residual_tangent**2).sum("dim").mean("sample"))
    pos = analysis.ridge_position(ds).isel(step=-1)
    out = analysis.memorization_fraction(ds).compute()
    near = analysis.near_mode_fraction(ds).compute()
    df = (
        rms_n.rename("rms_normal_error").to_dataset()
        .assign(rms_tangent_error=rms_t,
                ridge_distance=last.ridge_distance.mean("sample"),
                spread_along_ridge=(np.abs(pos) - 3 * float(last.alpha)).pipe(abs).median("sample"),
                near_mode=near.near_mode, memorized=out.memorized)
        .compute().to_dataframe().reset_index()
    )
    keep = label_dims + ["rms_normal_error", "rms_tangent_error", "ridge_distance", "spread_along_ridge", "near_mode",
                         "memorized"]
    return df[[c for c in keep if c in df.columns]]


def main(argv=None):
    args = parser(__doc__).parse_args(argv)
    ds = store_for("two-points", args.data)
    print("## two-points (tau = inf): final step\n")
    print(markdown_table(table(ds, ["schedule", "width"])))
    dt = store_for("two-points-tau", args.data)
    print("\n## two-points-tau (width 256): final step\n")
    print(markdown_table(table(dt, ["schedule", "tau"])))


if __name__ == "__main__":
    main()
