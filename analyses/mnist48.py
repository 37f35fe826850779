"""MNIST digits 4 and 8 in the 32-d VAE latent: the paper's MNIST claims, per model.

Run:  python analyses/mnist48.py [--entry mnist48] [--data DIR]

Per run cell (model, schedule, width, epoch) prints, at a few sampler steps: the mean ridge
distance (d* = 25) with degenerate projections masked / kept, and the share of degenerate
frames, the median time-dependent ridge dimension d*(t) (resolved posterior-covariance
directions), the mean motion along the ridge per recorded step (``ridge_motion``: successive
ridge projections, divided by alpha_t; degenerate projections kept, there is nothing else
late in inference) early and late in inference; at the end the memorized
share (d1/d2 < 1/3), the share within 0.5 of a scaled training latent, the mean distance to
the nearest training latent, and the mean pixel distance of the decoded samples to their
nearest training image (nearest over all training images, in pixels); the held-out excess
loss and its normal part; the rms normal error at the state's own ridge dimension d*(t)
(``residual_normal_rank``) late in inference.  Its figures (docs/figures/mnist_*.png) are drawn by
analyses/figures.py from summaries of the same store.
"""

from __future__ import annotations

import json

import numpy as np

from _common import markdown_table, parser, store_for

from ridgexr import analysis
from ridgexr.autoencoder import load_vae
from ridgexr.catalog import Experiment
from ridgexr.datasets.training_set import mnist_images
from ridgexr.store import cells


def decoded_nearest_image(ds, z: np.ndarray, images: np.ndarray) -> np.ndarray:
    """Pixel distance of decode(z) (n, 32) to the nearest training image (N, 784), per sample."""
    import torch

    vae = load_vae(json.loads(ds.attrs["dataset_provenance"])["vae_cache"])
    with torch.no_grad():
        gen = vae.decode(torch.tensor(z, dtype=torch.float32)).numpy().reshape(len(z), -1)
    imgs = images.reshape(len(images), -1).astype(np.float64)
    d2 = (gen**2).sum(1)[:, None] - 2 * gen @ imgs.T + (imgs**2).sum(1)[None]
    return np.sqrt(np.maximum(d2.min(1), 0.0))


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--entry", default="mnist48")
    args = ap.parse_args(argv)
    ds = store_for(args.entry, args.data)
    exp = Experiment.model_validate_json(ds.attrs["config"])
    info = json.loads(ds.attrs["d_star_info"])
    prov = json.loads(ds.attrs["dataset_provenance"])
    print(f"d* = {info['d_star']} ({info['source']}); auto would choose {info.get('auto_d_star')}; VAE reconstruction "
          f"MSE {prov['recon_mse']:.4f}; max dropped mass {float(ds.max_dropped_mass.max()):.2e}\n")
    images = mnist_images(exp.dataset.mnist)[0]
    dist = analysis.distance_curves(ds).compute()
    raw = analysis.distance_curves(ds, mask_degenerate=False).compute()  # for comparison: degenerate states kept
    dims = analysis.ridge_dimension(ds).compute()
    motion = analysis.ridge_motion(ds, mask_degenerate=False).compute()
    memo = analysis.memorization_fraction(ds).compute()
    near = analysis.near_mode_fraction(ds, r=0.5).compute()
    train = ds["train_data"].values
    steps = ds["sampler_step"].values
    probe = [int(np.searchsorted(steps, s)) for s in (100, 500, 800, 900, steps[-1])]
    early, late = (steps >= 100) & (steps < 500), steps >= 900
    rows = []
    for c in cells(ds):
        if not bool(ds["cell_complete"].sel(c)):
            continue
        row = {k: v for k, v in c.items() if k in ("model", "schedule")}
        model = c.get("model", "random_features")
        row["width"] = c["width"] if model != "exact" else "-"
        row["epoch"] = c.get("epoch", "-") if model == "mlp" else "-"
        curve, degen = dist["distance_mean"].sel(c).values, dist["degenerate_share"].sel(c).values
        unmasked = raw["distance_mean"].sel(c).values
        row.update({f"dist@{steps[k]}": f"{curve[k]:.3g} / {unmasked[k]:.3g} ({degen[k]:.0%})" for k in probe})
        row.update({f"d*(t)@{steps[k]}": float(dims["d_star_median"].sel(c).values[k]) for k in probe[1:]})
        m = motion["ridge_step_mean"].sel(c).values
        row["motion 100-500"] = float(np.nanmean(m[early]))
        row["motion 900-1000"] = float(np.nanmean(m[late]))
        for k in probe[2:]:  # the error split at the state's own ridge dimension d*(t) (never degenerate)
            part = ds["residual_normal_rank"].sel(c).isel(step=k).values
            row[f"e_N(d*(t))@{steps[k]}"] = float(np.sqrt(np.nanmean(part**2)))
        last = ds.sel(c).isel(step=-1)
        z = last["trajectory"].values / float(last["alpha"])
        d1, _, _ = analysis.arrays.nearest_two(z, train)
        row["memorized"] = float(memo["memorized"].sel(c))
        row["near (r=0.5)"] = float(near["near_mode"].sel(c))
        row["latent dist"] = float(np.nanmean(d1))
        ok = np.isfinite(z).all(1)
        row["pixel dist"] = float(decoded_nearest_image(ds, z[ok], images).mean()) if ok.any() else float("nan")
        row["excess"] = float(ds["excess_loss"].sel(c))
        row["excess_N"] = float(ds["excess_normal"].sel(c))
        rows.append(row)
    import pandas as pd

    print(markdown_table(pd.DataFrame(rows)))


if __name__ == "__main__":
    main()
