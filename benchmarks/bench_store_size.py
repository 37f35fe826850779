"""The run's up-front store-size estimate against the disk use of the stores it wrote.

Usage: ``python benchmarks/bench_store_size.py DATA_DIR`` after ``ridgexr run NAME --data-dir
DATA_DIR`` for the entries to check.  Prints, per store of DATA_DIR that is a catalog entry,
``estimate_resources(...)["store_size"]``, the disk use (``du``, whole blocks) and their ratio,
which must lie in [1, 4] (issue 29: an upper bound at most 4x the real size).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ridgexr
from ridgexr.datasets import load_training_set
from ridgexr.run.plan import estimate_resources, resolve_d_star


def main(data_dir: str) -> int:
    cat = ridgexr.open_catalog()
    bad = 0
    for store in sorted(Path(data_dir).glob("*.zarr")):
        if store.stem not in cat.experiments:
            continue
        exp = cat[store.stem]
        train = load_training_set(exp.dataset, base_dir=exp.base_dir)
        exp, _ = resolve_d_star(exp, train)
        est = estimate_resources(exp, train)["store_size"]
        disk = int(subprocess.run(["du", "-sk", str(store)], capture_output=True, text=True,
                                  check=True).stdout.split()[0]) * 1024
        ok = 1 <= est / disk <= 4
        bad += not ok
        print(f"{store.stem:24s} estimate {est / 1e6:9.2f} MB   disk {disk / 1e6:9.2f} MB   "
              f"ratio {est / disk:5.2f}{'' if ok else '   OUT OF [1, 4]'}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
