"""Compare two ridgexr stores array by array, bit for bit.

Usage: ``python benchmarks/compare_stores.py OLD.zarr NEW.zarr``

Prints one line per array (identical / differs, with the number of differing elements and
the largest difference) and the root attributes that differ; exits 1 when any array differs
or is missing on one side.  Used to show that a refactoring leaves every number unchanged
(the closing note of the "House II" issue reports its output for two-points, three-points
and mnist48 written before and after the move).
"""

from __future__ import annotations

import sys

import numpy as np
import zarr


def arrays(group: zarr.Group, prefix: str = "") -> dict[str, zarr.Array]:
    out = {}
    for name, node in group.members():
        if isinstance(node, zarr.Group):
            out |= arrays(node, f"{prefix}{name}/")
        else:
            out[f"{prefix}{name}"] = node
    return out


def same_bits(a: np.ndarray, b: np.ndarray) -> tuple[bool, int, float]:
    """(identical bytes, number of differing elements, largest absolute difference)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, -1, float("nan")
    if a.dtype.kind in "fc":
        diff = ~((a == b) | (np.isnan(a) & np.isnan(b)))
        same = a.tobytes() == b.tobytes()
        big = float(np.nanmax(np.abs(a - b)[diff])) if diff.any() else 0.0
        return same, int(diff.sum()), big
    diff = a != b
    return a.tobytes() == b.tobytes(), int(np.sum(diff)), float("nan")


def main(old: str, new: str) -> int:
    g_old, g_new = zarr.open_group(old, mode="r"), zarr.open_group(new, mode="r")
    a_old, a_new = arrays(g_old), arrays(g_new)
    bad = 0
    for name in sorted(set(a_old) | set(a_new)):
        if name not in a_old or name not in a_new:
            print(f"{name:32s} only in {'new' if name in a_new else 'old'}")
            bad += 1
            continue
        same, n, big = same_bits(a_old[name][...], a_new[name][...])
        print(f"{name:32s} {'identical' if same else f'DIFFERS ({n} elements, max |diff| {big:.3g})'}")
        bad += not same
    attrs_old, attrs_new = dict(g_old.attrs), dict(g_new.attrs)
    changed = sorted(k for k in set(attrs_old) | set(attrs_new) if attrs_old.get(k) != attrs_new.get(k))
    print(f"root attributes that differ: {', '.join(changed) or 'none'}")
    print(f"{len(set(a_old) | set(a_new)) - bad} of {len(set(a_old) | set(a_new))} arrays bit-identical")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
