"""The quality gate's decision size and power with the cached Fashion-MNIST classifier (docs/quality.md).

1. Per class (a one-class cell): the classifier's recall r on the 750 held-out reals outside the gate's reference,
   the most confusable other class and the rate f at which it puts that class's test images in the cell's class,
   the decision size (``ridgexr.quality.gate_design``: the least number of draws at which one bound on the class
   share fails a perfect sampler at most 4 % of the time and passes a sampler with 20 % of its draws from that
   class at most 5 %, exact binomial sums over the draws and the held-out reals) and the bound.
2. By simulation (``ridgexr.quality.gate_power``, 400 replicates per control, the whole gate: class share, nearest
   ratio, coverage) for the classes given with ``--simulate`` (default: T-shirt/top, Shirt and every class at once),
   at the decision size and at the run's 320 draws: how often held-out reals pass, a sampler with 20 % of its draws
   from the most confusable class (or from the other classes at random) passes, and copies of the training mean and
   class-mean-plus-noise images pass; Wilson 95 % intervals.  The training set of a one-class cell is the class's
   6 000 training images (fashion-unet's), of the all-class cell the first 6 000 training images.

3. With ``--stores NAME ...``: each store's gate table (``ds.ridge.sample_quality()``): per cell the measures of
   its 320 gate draws, the class share's bound and the decision size, and the verdict.

``--out FILE`` writes tables 1 and 2 to FILE (docs/quality_tables/gate-power.md), ``--out-dir DIR`` each store's
table to DIR/NAME.md (docs/quality_tables/); both are included by docs/quality.md and docs/images.md.

Run:  python analyses/gate_power.py [--simulate 0 6 all] [--n-rep 400] [--out FILE]
      [--stores fashion-unet-16 ...] [--data DIR] [--out-dir DIR]
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from _common import markdown_table, parser

import ridgexr
from ridgexr.analysis.arrays import proportion_ci
from ridgexr.datasets import IMAGE_SETS, load_images
from ridgexr.quality import (GATE_DRAWS, cached_classifier, decision_size, gate_design, gate_power, gate_reference,
                             heldout_reals)
from ridgexr.quality.gate import GATE_KEYS, gate_slack

NAMES = IMAGE_SETS["fashion-mnist"]["classes"]


def design_table(classifier, x, y) -> pd.DataFrame:
    """Table 1: one row per class."""
    rows = []
    pred = classifier.predict(x)
    for c in range(10):
        ref = gate_reference(classifier, x, y, [c])
        worst = max((k for k in range(10) if k != c), key=lambda k: np.mean(pred[y == k] == c))
        d = gate_design(ref.recall, ref.offclass, ref.n_heldout)
        rows.append({"class": f"{c} {NAMES[c]}", "recall r (750 reals)": f"{ref.recall:.3f}",
                     "most confusable (f)": f"{NAMES[worst]} ({ref.offclass:.3f})",
                     "share term's n": d.n, "decision size": decision_size(ref.recall, ref.offclass, ref.n_heldout),
                     "bound on the share": f"{d.share_min:.3f}",
                     "perfect fails / 20 % off passes (exact)": f"{d.false_fail:.3f} / {d.false_pass:.3f}"})
    return pd.DataFrame(rows)


def rate(k: int, n: int) -> str:
    lo, hi = proportion_ci(k, n, 0.95, "wilson")
    return f"{k / n:.3f} [{float(lo):.3f}, {float(hi):.3f}]"


def power_table(classifier, x, y, which: list[str], n_rep: int) -> pd.DataFrame:
    """Table 2: one row per simulated class and size."""
    rows = []
    for w in which:
        classes = None if w == "all" else [int(w)]
        train, _, _, _ = load_images("fashion-mnist", classes=classes, n=6000, scale="symmetric")
        ref = gate_reference(classifier, x, y, classes)
        size = decision_size(ref.recall, ref.offclass, ref.n_heldout)
        for n in dict.fromkeys([size, GATE_DRAWS]):
            t0 = time.perf_counter()
            p = gate_power(ref, train, x, y, n=n, n_rep=n_rep, seed=1)
            row = {"cell": "every class" if classes is None else NAMES[classes[0]], "draws": n,
                   "held-out reals pass": rate(p["perfect"], p["perfect_reps"])}
            for key, label in (("off_class", "20 % most confusable passes"),
                               ("off_class_mixed", "20 % other classes passes")):
                row[label] = rate(p[key], p[f"{key}_reps"]) if key in p else "-"
            for key, label in (("mean_copies", "copies of the mean"), ("crude", "class mean + noise")):
                m = p[f"{key}_measures"]
                row[f"{label}: share, ratio, coverage / null"] = (
                    f"{m['class_share']:.2f}, {m['nearest_ratio']:.2f}, {m['coverage'] / m['coverage_null']:.3f}: "
                    + ("passes" if p[key] else "fails"))
            rows.append(row)
            print(f"  {row['cell']} at {n}: {time.perf_counter() - t0:.0f} s", flush=True)
    return pd.DataFrame(rows)


def _value(cell, key: str) -> float | None:
    """A stored gate measure of one cell, None where it is missing or NaN."""
    name = f"quality_{key}"
    if name not in cell:
        return None
    v = float(cell[name])
    return None if np.isnan(v) else v


def store_table(ds) -> pd.DataFrame:
    """Table 3: the gate of every complete cell of a store, from its stored measures, with its slack (each term over
    its bound, the least: the number the verdict reads, ``ridgexr.quality.gate_slack``)."""
    q = ds.ridge.sample_quality()
    dims = [d for d in q.gate.dims]
    rows = []
    for idx in np.ndindex(*q.gate.shape):
        c = q.isel(dict(zip(dims, idx)))
        if str(c.gate.values) == "not run":
            continue
        v = {k: float(c[f"quality_{k}"]) for k in ("class_share", "class_share_lower", "class_share_upper",
                                                   "nearest_ratio", "nearest_ratio_lower", "nearest_ratio_upper",
                                                   "coverage", "coverage_null", "frechet", "frechet_floor",
                                                   "frechet_ceiling", "n_draws", "n_finite")}
        row = {d: str(c[d].values) for d in dims}
        row |= {"draws (finite)": f"{v['n_draws']:.0f} ({v['n_finite']:.0f})",
                "class share [95 %] (bound)": f"{v['class_share']:.3f} [{v['class_share_lower']:.3f}, "
                                              f"{v['class_share_upper']:.3f}] ({float(c.class_share_min):.3f})",
                "nearest ratio [95 %]": f"{v['nearest_ratio']:.3g} [{v['nearest_ratio_lower']:.3g}, "
                                        f"{v['nearest_ratio_upper']:.3g}]",
                "coverage / perfect sampler's": f"{v['coverage'] / v['coverage_null']:.3f}",
                "Frechet (floor / ceiling)": (f"{v['frechet']:.3g} ({v['frechet_floor']:.3g} / "
                                              f"{v['frechet_ceiling']:.3g})"),
                "decision size": f"{float(c.gate_size):.0f}",
                "slack": f"{gate_slack(**{k: _value(c, k) for k in GATE_KEYS}):.3f}", "gate": str(c.gate.values)}
        rows.append(row)
    return pd.DataFrame(rows)


def main():
    ap = parser(__doc__)
    ap.add_argument("--simulate", nargs="*", default=["0", "6", "all"], help="classes to simulate ('all': every class)")
    ap.add_argument("--n-rep", type=int, default=400, help="replicates per control")
    ap.add_argument("--out", default=None, help="write tables 1 and 2 to this Markdown file")
    ap.add_argument("--stores", nargs="*", default=[], help="stores (names or paths) whose gate tables to print")
    ap.add_argument("--out-dir", default=None, help="write each store's gate table to DIR/NAME.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.simulate is not None and (args.out or not args.stores):
        classifier = cached_classifier()
        x, y = heldout_reals()
        text = [f"Generated by `python analyses/gate_power.py --simulate {' '.join(args.simulate)} --n-rep "
                f"{args.n_rep}` with the cached classifier (test accuracy {classifier.test_accuracy:.4f}); the run "
                f"draws {GATE_DRAWS} per cell.", "", "**Decision size per class** (a one-class cell):", "",
                markdown_table(design_table(classifier, x, y))]
        if args.simulate:
            text += ["", f"**The gate's controls by simulation** ({args.n_rep} replicates each; rates with Wilson 95 % "
                         "intervals):", "", markdown_table(power_table(classifier, x, y, args.simulate, args.n_rep))]
        print("\n".join(text))
        if args.out:
            Path(args.out).write_text("\n".join(text) + "\n")
    for name in args.stores:
        ds = ridgexr.open_dataset(name, data_dir=args.data)
        text = "\n".join([f"Gate of '{ds.attrs.get('experiment', name)}' (store config hash "
                          f"{str(ds.attrs.get('config_hash'))[:12]}, schema {ds.attrs.get('schema_version')}): "
                          f"generated by `python analyses/gate_power.py --stores {name} --out-dir DIR` from the store.",
                          "",
                          markdown_table(store_table(ds))])
        print("\n" + text)
        if args.out_dir:
            Path(args.out_dir).mkdir(parents=True, exist_ok=True)
            (Path(args.out_dir) / f"{ds.attrs.get('experiment', name)}.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
