"""The `-large` training-time entries on one CUDA GPU: U-Nets on 32 to 2 048 T-shirts over three seeds.

Run on a machine with a CUDA GPU (Fashion-MNIST found as for any image entry):

    python benchmarks/gpu_timescales.py [--data DIR] [--seeds 0 1 2] [--minutes 170]

1. Runs ``timescales-unet-large`` (catalogs/timescales.yaml: the U-Net of timescales-fashion, n 32, 128, 512,
   2 048, full batch to 1e5 Adam steps, 8 checkpoints per decade, 1 024 final samples per checkpoint, no ridge
   observation) with ``--device cuda`` once per seed (seed k > 0: the entry's seeds set to k, its store
   ``timescales-unet-large-seed<k>.zarr``), each for at most ``--minutes`` (stopped with SIGINT past it: a rerun
   resumes training from its last checkpoint and sampling at the next incomplete cell), and prints the wall time of
   each.
2. Prints the tables of ``analyses/timescales_unet.py`` over the complete stores: tau_gen and tau_mem per (n, seed)
   with their checkpoint intervals, the laws by the interval-censored fit over the seeds, the collapse of
   f_mem(tau / n^b).

Exits 2 without a GPU.  ``--dry-run`` plans the entries on the CPU instead (the planner's estimate; nothing runs).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ENTRY = "timescales-unet-large"


def seeded_catalog(seed: int, folder: Path) -> tuple[str, Path]:
    """A one-entry catalog file: the large entry on ``seed`` (its name and store suffixed unless seed 0)."""
    import ridgexr

    exp = ridgexr.open_catalog()[ENTRY]
    entry = exp.model_dump(mode="json", exclude={"name", "source"})
    name = ENTRY if seed == 0 else f"{ENTRY}-seed{seed}"
    if seed:
        entry["seeds"] = {"features": seed, "training": seed, "sampler": seed, "init": seed}
        entry["store"] = f"{name}.zarr"
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"experiments": {name: entry}}, sort_keys=False))
    return name, path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--minutes", type=float, default=170.0, help="wall-time limit of each seed's run")
    ap.add_argument("--dry-run", action="store_true", help="print the planner's estimates on the CPU and exit")
    args = ap.parse_args(argv)
    import torch

    folder = Path(tempfile.mkdtemp())
    data = Path(args.data or folder / "data")
    catalogs = [seeded_catalog(s, folder) for s in args.seeds]
    if args.dry_run:
        for name, path in catalogs:
            subprocess.run([sys.executable, "-m", "ridgexr.cli", "run", str(path), "--data-dir", str(data), "--plan"],
                           check=True)
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 2
    names = []
    for name, path in catalogs:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "ridgexr.cli", "run", str(path), "--data-dir", str(data),
                                 "--device", "cuda"])
        try:
            rc = proc.wait(timeout=60 * args.minutes)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            rc = proc.wait()
        print(f"{name} on {torch.cuda.get_device_name(0)}: exit {rc} after {time.perf_counter() - t0:.0f} s",
              flush=True)
        names.append(name)
    analyses = Path(__file__).resolve().parents[1] / "analyses" / "timescales_unet.py"
    extra = [arg for _, path in catalogs for arg in ("--catalog", str(path))]
    return subprocess.run([sys.executable, str(analyses), "--data", str(data), "--entries", *names, *extra]).returncode


if __name__ == "__main__":
    sys.exit(main())
