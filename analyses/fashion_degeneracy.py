"""The N dependence of the d* = 25 frame's degeneracy, on Fashion-MNIST latents (`fashion-latent-degeneracy`,
docs/mnist.md).

For each training-set size N (nested subsets of the 60 000 latents) and a few observed times t, prints:

- the share of states whose d* = 25 frame (at the state) is degenerate under our floor sqrt(eps) = 1.5e-8
  (the stored ``frame_degenerate``) and under a float64-level floor 1e-13 (``frame_gap_relative <= 1e-13``),
  with Wilson 95 % intervals over the trajectories;
- the median resolved dimension d*(t) (``resolved_rank``);
- tangential motion as a level (:func:`ridgexr.analysis.tangential_distance`): the median distance along the
  ridge from the projection to the nearest scaled training latent over the non-degenerate projections, with a
  95 % bootstrap interval, and the share of projections left out as degenerate.

Run:  python analyses/fashion_degeneracy.py [--data DIR] [--store PATH] [--t 0.1 0.055 0.04 0.02 0.0063 0.0025 0.001]
(``--store``: read that store instead of running or resuming the entry)
"""

from __future__ import annotations

import math

import numpy as np

from _common import markdown_table, median_ci_text, parser, share, store_for

import pandas as pd

import ridgexr
from ridgexr import analysis as an

ENTRY = "fashion-latent-degeneracy"
FLOORS = {"sqrt(eps)": math.sqrt(np.finfo(float).eps), "1e-13": 1e-13}


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--t", type=float, nargs="+", default=[0.1, 0.055, 0.04, 0.02, 0.0063, 0.0025, 0.001])
    ap.add_argument("--store", default=None, help="an existing store of the entry (read only)")
    args = ap.parse_args(argv)
    ds = ridgexr.open_dataset(args.store) if args.store else store_for(ENTRY, args.data)
    cell = {d: 0 for d in ("model", "schedule", "width", "epoch") if d in ds.dims}
    ds = ds.isel(cell)
    steps = sorted({int(np.argmin(np.abs(ds.t.values - t))) for t in args.t})
    sel = ds.isel(step=steps)
    tang = an.tangential_distance(sel).compute()
    rows = []
    for n in ds.n_train.values:
        at_n = sel.sel(n_train=n)
        for j, k in enumerate(steps):
            at = at_n.isel(step=j)
            gap = at.frame_gap_relative.values
            observed = np.isfinite(gap)
            row = {"N": int(n), "t": f"{float(at.t):.3g}"}
            for name, floor in FLOORS.items():
                row[f"degenerate ({name})"] = share(gap[observed] <= floor)
            flag = at.frame_degenerate.values[observed]
            assert (flag == (gap[observed] <= FLOORS["sqrt(eps)"])).all(), "stored flag != its floor"
            row["median d*(t)"] = float(np.median(at.resolved_rank.values[observed]))
            tn = tang.sel(n_train=n).isel(step=j)
            row["tangential distance (median)"] = median_ci_text(tn.tangential_distance.values)
            row["normal offset (median)"] = median_ci_text(tn.normal_offset.values)
            row["masked"] = f"{float(tn.masked_share):.2f}"
            rows.append(row)
    print(markdown_table(pd.DataFrame(rows)))


if __name__ == "__main__":
    main()
