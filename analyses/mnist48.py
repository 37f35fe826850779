"""MNIST digits 4 and 8 in the 32-d VAE latent: the high-dimensional experiment.

Run:  python analyses/mnist48.py [--entry mnist48] [--data DIR]

Prints, per (schedule, width): the mean ridge distance at a few steps, the step after
which it stays within 1.5x of its final value (its floor), the distance to the nearest
scaled training latent (tangential motion toward training examples) at the same steps,
the memorization fraction and mode counts in latent space, and the ridge residual at the
final step for the alternative ridge dimensions; writes docs/figures/mnist_*.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from _common import markdown_table, parser, save_png, store_for

from ridgexr import analysis, plot
from ridgexr.store import cells


def floor_step(curve: np.ndarray, steps: np.ndarray, factor: float = 1.5) -> int:
    """First sampler step from which ``curve`` stays <= factor x its final value."""
    inside = curve <= factor * curve[-1]
    bad = np.flatnonzero(~inside)
    k = 0 if bad.size == 0 else bad[-1] + 1
    return int(steps[min(k, len(steps) - 1)])


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entry", default="mnist48")
    args = ap.parse_args(argv)
    figs = Path(args.figures)
    ds = store_for(args.entry, args.data)
    info = json.loads(ds.attrs["d_star_info"])
    prov = json.loads(ds.attrs["dataset_provenance"])
    print(f"d* = {info['d_star']} ({info['source']}); VAE reconstruction MSE {prov['recon_mse']:.4f}, "
          f"BCE {prov['recon_bce']:.4f}; max dropped mass {float(ds.max_dropped_mass.max()):.2e}\n")
    dist = analysis.distance_curves(ds)["distance_mean"].compute()
    train = ds["train_data"].values
    x = ds["trajectory"].values / ds["alpha"].values[None, None, None, :, None]
    d1, _, _ = analysis.arrays.nearest_two(x, train)
    near = np.nanmean(d1 * ds["alpha"].values, axis=2)  # (schedule, width, step), scaled units
    memo = analysis.memorization_fraction(ds).compute()
    modes = analysis.mode_counts(ds, r=0.5).compute()
    alt = ds["final_ridge_residual_alt"].median("sample").compute()
    steps = ds["sampler_step"].values
    probe = [int(np.searchsorted(steps, s)) for s in (0, 500, 800, 900, steps[-1])]
    rows = []
    for i, s in enumerate(ds.schedule.values):
        for j, w in enumerate(ds.width.values):
            curve = dist.values[i, j]
            row = {"schedule": str(s), "width": int(w)}
            row.update({f"dist@{steps[k]}": float(curve[k]) for k in probe})
            row["floor step"] = floor_step(curve, steps)
            row.update({f"near@{steps[k]}": float(near[i, j, k]) for k in probe[1:]})
            row["memorized"] = float(memo.memorized.values[i, j])
            row["near a latent (r=0.5)"] = float(modes.share_any.values[i, j])
            row.update({f"res d*={d}": float(alt.values[i, j, n]) for n, d in enumerate(ds.d_star_alt.values)})
            rows.append(row)
    import pandas as pd

    print(markdown_table(pd.DataFrame(rows)))
    save_png(plot.distance_curves_plot(ds), figs / "mnist_distance.png", logy=True)
    picked = [c for c in cells(ds) if c["schedule"] == "h2"][:1] + \
        [c for c in cells(ds) if c["schedule"] == "exact"][:1]
    for c in picked:
        save_png(plot.decoded_samples(ds, **c), figs / f"mnist_samples_{c['schedule']}.png")
        save_png(plot.decoded_trajectories(ds, **c), figs / f"mnist_trajectories_{c['schedule']}.png")


if __name__ == "__main__":
    main()
