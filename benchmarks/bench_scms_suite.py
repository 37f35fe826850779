"""Benchmark: SCMS time to solution on problems with straggler tails, before and after.

Run:  python benchmarks/bench_scms_suite.py [--quick] [--before REV] [--repeats R] [--sconce K]

Problems (d* = 1, float64, tolerance 1e-6 on the normal step, ``max_iter`` 2000 so no count
is capped):

- ``spread d=16``: N = 1 000 standard-normal points in d = 16 at the t where the bandwidth
  sqrt(h_t) / alpha_t is 0.8 (a spread posterior), 300 queries near the data
  x = alpha_t x_i + sqrt(h_t) z (the speed issue's straggler problem; with its seed one point
  iterates ~530 times);
- ``near-degenerate d=8``: N = 500 points of a Gaussian with variances (1, 0.97, 0.3, 0.3, 0.2,
  0.2, 0.1, 0.1) at t = 0.1: the top two posterior directions nearly tie, so frames rotate
  fast and some points crawl;
- ``grid-3x3 umbilics``: the 3 x 3 grid (``POINT_SETS['grid-3x3']``) at t = 0.2, 1 000
  queries: every query crawls to a point where the frame is degenerate (``bench_scms_iterations``);
- ``grid-3x3, t = 0.05``; ``three-points, t = 1``; ``two-points, t = 1`` (the 2-D point sets).

Variants, alternated in every repeat of one run: ``before`` = ``ridgexr/scms.py`` at ``--before``
(default: the commit this suite was written against, loaded from git), ``plain`` = today's
default, ``accelerated`` = ``accelerate=True``.  Per problem and variant it prints the time to
solution (median of the repeats) and its ratio to ``before``, point-iterations per second,
iterations per point (median, p99, max), the share converged and the **tail share**: the wall
time from the first iteration in which no more than ceil(Q / 100) points are still active (only
the slowest 1 % remain) to the end, over the whole wall time (median of the repeats; measured by
timing each of the density's moment calls, one per iteration).  For ``accelerated`` it also
prints the largest distance of its points from the plain ones and how many flags
(converged, on_ridge, degenerate) differ.  ``--sconce K`` also times sconce-scms' ``SCMSLog``
(the same iteration and stopping rule, see ``bench_ridge.py``), ``plain`` and ``accelerated`` on the
first K queries of each problem (``--sconce 1000``: every query of every problem, the time to
solution of the whole problem that the speed issue's targets compare).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

import ridgexr  # noqa: E402
from ridgexr.datasets import POINT_SETS  # noqa: E402
from ridgexr.scms import scms  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: the code before the straggler work (ridgexr/scms.py at this commit) is the ``before`` column
BEFORE_REV = "89a0b35"
TOL = 1e-6
MAX_ITER = 2000
TAIL = 0.01


def near_data(train: np.ndarray, t: float, q: int, rng: np.random.Generator) -> np.ndarray:
    """Queries x = alpha_t x_i + sqrt(h_t) z at random training points (the sampler's view near the data)."""
    ou = ridgexr.OU()
    idx = rng.integers(0, len(train), q)
    return ou.alpha(t) * train[idx] + math.sqrt(ou.h(t)) * rng.standard_normal((q, train.shape[1]))


def problems(quick: bool) -> list[tuple[str, np.ndarray, float, np.ndarray]]:
    """(name, train (N, d), t, queries (Q, d)); ``quick`` shrinks N and Q (same kinds of problem)."""
    s = 5 if quick else 1
    out = []
    rng = np.random.default_rng(1)
    t = 0.5 * math.log1p(0.8 ** 2)  # h_t / alpha_t^2 = e^{2t} - 1 = 0.8^2
    train = rng.standard_normal((1000 // s, 16))
    out.append(("spread d=16", train, t, near_data(train, t, 300 // s, rng)))
    rng = np.random.default_rng(0)
    train = rng.standard_normal((500 // s, 8)) * np.sqrt([1, 0.97, 0.3, 0.3, 0.2, 0.2, 0.1, 0.1])
    out.append(("near-degenerate d=8", train, 0.1, near_data(train, 0.1, 300 // s, np.random.default_rng(2))))
    for name, t in (("grid-3x3", 0.2), ("grid-3x3", 0.05), ("three-points", 1.0), ("two-points", 1.0)):
        label = "grid-3x3 umbilics, t=0.2" if t == 0.2 else f"{name}, t={t:g}"
        train = POINT_SETS[name]
        out.append((label, train, t, near_data(train, t, 1000 // s, np.random.default_rng(3))))
    return out


def load_before(rev: str):
    """``scms`` of ``ridgexr/scms.py`` at git revision ``rev`` (run against today's package), or None."""
    try:
        src = subprocess.run(["git", "show", f"{rev}:ridgexr/scms.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    mod = types.ModuleType("ridgexr._scms_before")
    mod.__package__ = "ridgexr"  # its relative imports resolve against today's package
    exec(compile(src, f"{rev}:ridgexr/scms.py", "exec"), mod.__dict__)
    return mod.scms


def timed(fn, density, xf, tf, **kwargs):
    """(result, seconds, tail share): the moment calls (one per SCMS iteration) are timed with the active count."""
    calls = []
    inner = type(density).moments_flat.__get__(density)

    def moments_flat(x, t, **kw):
        calls.append((time.perf_counter(), x.shape[0]))
        return inner(x, t, **kw)

    density.moments_flat = moments_flat
    try:
        t0 = time.perf_counter()
        res, _ = fn(density, xf, tf, 1, tol=TOL, max_iter=MAX_ITER, **kwargs)
        t1 = time.perf_counter()
    finally:
        del density.moments_flat
    k = math.ceil(TAIL * xf.shape[0])
    tail_start = next((c for c, n in calls if n <= k), t1)
    return res, t1 - t0, (t1 - tail_start) / (t1 - t0)


def run_problem(name, train, t, x, variants, repeats, min_time):
    """Alternate the variants, round after round, for at least ``repeats`` rounds and until each has run
    ``min_time`` seconds in all (at most 50 rounds): short problems get more rounds, as their times are noisier."""
    dens = ridgexr.SmoothedEmpirical(train, t)
    xf = torch.from_numpy(x)
    tf = torch.full((x.shape[0],), t, dtype=torch.float64)
    for fn, kw in variants.values():  # warm-up (caches, thread pools)
        fn(dens, xf[:8], tf[:8], 1, tol=TOL, max_iter=MAX_ITER, **kw)
    runs = {v: [] for v in variants}
    while (len(runs["plain"]) < repeats or min(sum(r[1] for r in rs) for rs in runs.values()) < min_time) \
            and len(runs["plain"]) < 50:
        for v, (fn, kw) in variants.items():
            runs[v].append(timed(fn, dens, xf, tf, **kw))
    rows = {}
    for v, rs in runs.items():
        res = rs[0][0]
        it = res.iterations.numpy()
        sec = float(np.median([r[1] for r in rs]))
        rows[v] = dict(res=res, sec=sec, best=min(r[1] for r in rs), rounds=len(rs), tail=float(np.median([r[2] for r in rs])), it=it,
                       pit=float((it + 1).sum()) / sec, conv=float(res.converged.double().mean()))
    return rows


def iteration_cost(fn, density, xf, tf, rounds, **kwargs):
    """Seconds per iteration (the gaps between consecutive moment calls) of SCMS from xf, which never stops."""
    gaps = []
    inner = type(density).moments_flat.__get__(density)
    for _ in range(rounds):
        calls = []

        def moments_flat(x, t, **kw):
            calls.append(time.perf_counter())
            return inner(x, t, **kw)

        density.moments_flat = moments_flat
        try:
            fn(density, xf, tf, 1, tol=1e-300, max_iter=100, **kwargs)
        finally:
            del density.moments_flat
        gaps.extend(np.diff(calls))
    return gaps


def fixed_costs(problems_, variants, rounds=5):
    """Per-iteration cost with the 1 and the 3 slowest points of each problem active (median of all gaps,
    variants alternated round by round): the fixed cost that a straggler tail pays per iteration."""
    print("\nper-iteration cost of a small active set (the slowest points of the problem), us, median of "
          f"{rounds} x 100 iterations per variant, alternated")
    print("| problem | active points | " + " | ".join(variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for name, train, t, x in problems_:
        dens = ridgexr.SmoothedEmpirical(train, t)
        xf = torch.from_numpy(x)
        tf = torch.full((x.shape[0],), t, dtype=torch.float64)
        res, _ = scms(dens, xf, tf, 1, tol=TOL, max_iter=MAX_ITER)
        order = torch.argsort(res.iterations, descending=True)
        for k in (1, 3):
            rows = order[:k]
            gaps = {v: [] for v in variants}
            for _ in range(rounds):
                for v, (fn, kw) in variants.items():
                    gaps[v].extend(iteration_cost(fn, dens, xf[rows], tf[rows], 1, **kw))
            print(f"| {name} | {k} | " + " | ".join(f"{np.median(g) * 1e6:.0f}" for g in gaps.values()) + " |")


def sconce_time(train, t, x):
    """Seconds of sconce-scms' SCMSLog on queries x (same iteration and stopping rule), or None."""
    try:
        from sconce.EucSCMS import SCMSLog
    except ImportError:
        return None
    import contextlib
    import io

    a, h = math.exp(-t), -math.expm1(-2 * t)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        SCMSLog(x, a * train, d=1, h=math.sqrt(h), eps=TOL, max_iter=MAX_ITER + 1, stop_cri="pts_diff")
    return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller problems (smoke test)")
    ap.add_argument("--before", default=BEFORE_REV, help="git revision of the 'before' column")
    ap.add_argument("--repeats", type=int, default=3, help="at least this many alternated rounds per problem")
    ap.add_argument("--min-time", type=float, default=None,
                    help="... and until each variant ran this many seconds (default 3, --quick 0.3)")
    ap.add_argument("--sconce", type=int, default=0, metavar="K", help="also time sconce-scms on K queries")
    args = ap.parse_args(argv)
    min_time = args.min_time if args.min_time is not None else (0.3 if args.quick else 3.0)
    variants = {}
    before = load_before(args.before)
    if before is not None:
        variants["before"] = (before, {})
    variants["plain"] = (scms, {})
    variants["accelerated"] = (scms, dict(accelerate=True))
    print(f"# SCMS problem suite ({machine()}), tol {TOL:g}, d* = 1, medians over alternated rounds "
          f"(>= {args.repeats}, until each variant ran {min_time:g} s)")
    if before is None:
        print(f"(no 'before' column: git revision {args.before} not found)")
    print("| problem | Q | d | variant | time to solution s (median, best) | vs before (median, best) | point-it/s "
          "| iterations median / p99 / max | converged | slowest 1 % share of wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    table = []
    for name, train, t, x in problems(args.quick):
        rows = run_problem(name, train, t, x, variants, args.repeats, min_time)
        base = rows.get("before", rows["plain"])
        for v, r in rows.items():
            it = r["it"]
            print(f"| {name} | {x.shape[0]} | {x.shape[1]} | {v} | {r['sec']:.3f}, {r['best']:.3f} | "
                  f"{base['sec'] / r['sec']:.2f}x, {base['best'] / r['best']:.2f}x | "
                  f"{r['pit']:,.0f} | {np.median(it):.0f} / {np.quantile(it, 0.99):.0f} / {it.max()} | "
                  f"{r['conv']:.1%} | {r['tail']:.1%} |")
            table.append((name, v, r["sec"], r["tail"]))
        a, p = rows["accelerated"]["res"], rows["plain"]["res"]
        dx = float((a.point - p.point).norm(dim=-1).max())
        flags = {k: int((getattr(a, k) != getattr(p, k)).sum()) for k in ("converged", "on_ridge", "degenerate")}
        print(f"|  |  |  | accelerated vs plain ({rows['plain']['rounds']} rounds): max distance {dx:.1e}, flags differing "
              f"{', '.join(f'{k} {n}' for k, n in flags.items())} |  |  |  |  |  |  |")
    print()
    for v in variants:
        worst = max(table, key=lambda r: r[3] if r[1] == v else -1)
        met = all(r[3] <= 0.2 for r in table if r[1] == v)
        print(f"target (slowest 1 % <= 20 % of wall time on every problem), {v}: "
              f"{'met' if met else 'not met'} (largest {worst[3]:.1%}, {worst[0]})")
    fixed_costs([p for p in problems(args.quick) if p[0] in ("spread d=16", "grid-3x3 umbilics, t=0.2")], variants)
    if args.sconce:
        print(f"\ntime to solution on the first {args.sconce} queries, tol {TOL:g}: sconce-scms SCMSLog vs ridgexr "
              f"(median of {args.repeats} runs each)")
        print("| problem | Q | sconce-scms s | plain s | accelerated s | sconce / plain | sconce / accelerated |")
        print("|---|---|---|---|---|---|---|")
        for name, train, t, x in problems(args.quick):
            xs = x[:args.sconce]
            sc = sconce_time(train, t, xs)
            if sc is None:
                print("sconce-scms not installed (pip install --no-deps sconce-scms)")
                break
            dens = ridgexr.SmoothedEmpirical(train, t)
            xf = torch.from_numpy(xs)
            tf = torch.full((xs.shape[0],), t, dtype=torch.float64)
            sec = {acc: float(np.median([timed(scms, dens, xf, tf, accelerate=acc)[1] for _ in range(args.repeats)]))
                   for acc in (False, True)}
            print(f"| {name} | {xs.shape[0]} | {sc:.3f} | {sec[False]:.3f} | {sec[True]:.3f} | {sc / sec[False]:.1f}x | "
                  f"{sc / sec[True]:.1f}x |")
    return table


if __name__ == "__main__":
    main()
