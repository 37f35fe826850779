"""Benchmark: batched SCMS ridge projection vs a per-point reference and a plain matmul.

Run:  python benchmarks/bench_ridge.py [--quick]

For each (N train, Q queries, d) it prints point-iterations per second of
``project_to_ridge`` (float64, d* = 1), the achieved GFLOP/s of the dominant work
(2 N d^2 flops per point-iteration: the second-moment matrix product), the GFLOP/s of a
plain 2000x2000 float64 matmul measured in the same run, their ratio, and the speed-up
over a straightforward per-point SCMS (numpy loop over points, one eigh per point) and over
sconce-scms' ``SCMSLog`` on identical inputs when it is installed
(``pip install --no-deps sconce-scms``).
All numbers in one table come from one run, so ratios are comparable; absolute times are not.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, machine, matmul_gflops  # noqa: E402

import ridgexr  # noqa: E402

T_QUERY = 0.5
CONFIGS = [(1000, 2000, 2), (1000, 2000, 16), (5000, 1000, 32)]


def make_problem(n, q, d, seed=0):
    rng = np.random.default_rng(seed)
    train = rng.standard_normal((n, d)) * 2.0
    ou = ridgexr.OU()
    idx = rng.integers(0, n, q)
    x = ou.alpha(T_QUERY) * train[idx] + math.sqrt(ou.h(T_QUERY)) * rng.standard_normal((q, d))
    return train, x


def reference_scms(train, x, t, d_star, tol, max_iter):
    """Per-point SCMS in numpy: the straightforward implementation. Returns evaluations."""
    a, h = math.exp(-t), -math.expm1(-2 * t)
    evals = 0
    for y0 in x:
        y = y0.copy()
        for _ in range(max_iter + 1):
            evals += 1
            l = -((y - a * train) ** 2).sum(1) / (2 * h)
            r = np.exp(l - l.max())
            r /= r.sum()
            m = r @ train
            dx = train - m
            c = dx.T @ (dx * r[:, None])
            _, v = np.linalg.eigh(c)
            e = v[:, : len(y) - d_star]
            step = e @ (e.T @ (a * m - y))
            if np.linalg.norm(step) < tol:
                break
            y = y + step
    return evals


def sconce_scms(train, x, t, d_star, tol, max_iter):
    """Point-iterations and seconds of sconce-scms' ``SCMSLog`` on the same problem, or None when it is not
    installed (``pip install --no-deps sconce-scms``: its ray dependency is only for its parallel variants).

    p_t is a Gaussian KDE of the data alpha_t x_i with bandwidth sqrt(h_t), so ``SCMSLog(x, alpha_t train,
    d=d_star, h=sqrt(h_t), eps=tol, stop_cri="pts_diff")`` runs the same iteration with the same stopping rule
    (the normal mean-shift step below ``tol``) as ``project_to_ridge``.
    """
    try:
        from sconce.EucSCMS import SCMSLog
    except ImportError:
        return None
    import contextlib
    import io

    a, h = math.exp(-t), -math.expm1(-2 * t)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress
        path = SCMSLog(x, a * train, d=d_star, h=math.sqrt(h), eps=tol, max_iter=max_iter + 1, stop_cri="pts_diff")
    sec = time.perf_counter() - t0
    moved = (np.abs(np.diff(path, axis=2)) > 0).any(1).sum(1)  # steps taken per point
    return int((moved + 1).sum()), sec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    ap.add_argument("--ref-points", type=int, default=40, help="queries timed in the per-point reference")
    args = ap.parse_args(argv)
    configs = [(n // 10, q // 10, d) for n, q, d in CONFIGS] if args.quick else CONFIGS
    print(f"# project_to_ridge benchmark  ({machine()})")
    mm = matmul_gflops()
    print(f"same-run float64 matmul (2000^3): {mm:.1f} GFLOP/s")
    print("| N | queries | d | point-it/s | GFLOP/s (2Nd^2) | % of matmul | ref point-it/s | speed-up | "
          "sconce-scms point-it/s | vs sconce |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n, q, d in configs:
        train, x = make_problem(n, q, d)
        p = ridgexr.SmoothedEmpirical(train, T_QUERY)
        tol = ridgexr.ridge.default_tol(torch.float64, p.radius)
        ridgexr.project_to_ridge(p, x[:50], 1)  # warm-up
        t0 = time.perf_counter()
        res = ridgexr.project_to_ridge(p, x, 1, tol=tol, max_iter=200)
        el = time.perf_counter() - t0
        evals = int((res.iterations + 1).sum())
        pit = evals / el
        gf = 2 * n * d * d * evals / el / 1e9
        xr_ = x[: args.ref_points]
        t0 = time.perf_counter()
        ref_evals = reference_scms(train, xr_, T_QUERY, 1, tol, 200)
        ref_pit = ref_evals / (time.perf_counter() - t0)
        sc = sconce_scms(train, x[: args.ref_points], T_QUERY, 1, tol, 200)
        sc_pit = math.nan if sc is None else sc[0] / sc[1]
        rows.append((n, q, d, pit, gf, 100 * gf / mm, ref_pit, pit / ref_pit, sc_pit, pit / sc_pit))
        sc_cols = "not installed | - |" if sc is None else f"{sc_pit:,.0f} | {pit / sc_pit:.1f}x |"
        print(f"| {n} | {q} | {d} | {pit:,.0f} | {gf:.1f} | {100 * gf / mm:.0f}% | {ref_pit:,.0f} | {pit / ref_pit:.0f}x |"
              f" {sc_cols}  (converged {res.converged.mean():.3f}, mean iterations {res.iterations.mean():.2f})")
    rows.append(three_point_block(20_000 if args.quick else 200_000))
    print_floors([(r[0], r[1], r[2], r[3], r[8]) for r in rows[:len(configs)] if r[2] >= 16], mm)
    return rows


def print_floors(problems, mm: float) -> None:
    """Per point-iteration, the costs no SCMS iteration avoids, measured in this run, beside the speed issue's
    budget: the second-moment GEMM (2 N d^2 flops) at the same-run matmul rate, exp of the N logits, and the
    threaded ``eigh`` of one d x d covariance (at the problems' starting points).  The budget is 40x sconce-scms
    (d < 32, when it ran) or 50 % of matmul (d = 32)."""
    from ridgexr.scms import batched_eigh

    print("\nper point-iteration, us (this run): what every SCMS iteration pays, against the target's budget")
    print("| d | N | GEMM at matmul rate | exp of N logits | eigh | sum | measured | target budget |")
    print("|---|---|---|---|---|---|---|---|")
    for n, q, d, pit, sc_pit in problems:
        train, x = make_problem(n, q, d)
        p = ridgexr.SmoothedEmpirical(train, T_QUERY)
        xf = torch.from_numpy(x)
        cov = p.moments_flat(xf, torch.full((q,), T_QUERY, dtype=torch.float64), cov=True).cov_unit
        logits = torch.randn(q, n, dtype=torch.float64)
        exp_us = best_time(lambda: torch.exp(logits)) / q * 1e6
        eigh_us = best_time(lambda: batched_eigh(cov)) / q * 1e6
        gemm_us = 2 * n * d * d / (mm * 1e9) * 1e6
        if d >= 32:
            budget = f"{2 * n * d * d / (0.5 * mm * 1e9) * 1e6:.1f} (50 % of matmul)"
        else:
            budget = "-" if math.isnan(sc_pit) else f"{1e6 / (40 * sc_pit):.1f} (40x sconce-scms)"
        total = gemm_us + exp_us + eigh_us
        print(f"| {d} | {n} | {gemm_us:.1f} | {exp_us:.1f} | {eigh_us:.1f} | {total:.1f} | {1e6 / pit:.1f} | {budget} |")


THREE_POINTS = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


def three_point_block(q, t=0.3, repeats=3):
    """The speed issue's d = 2 row: the three points (0,0), (5,0), (0,5) at t = 0.3, ``q`` noisy copies
    (one observed block of a 2-D run), d* = 1, default tolerance; best of ``repeats`` runs (point-it/s)."""
    ou = ridgexr.OU()
    rng = np.random.default_rng(0)
    x = ou.alpha(t) * THREE_POINTS[rng.integers(0, 3, q)] + math.sqrt(ou.h(t)) * rng.standard_normal((q, 2))
    p = ridgexr.SmoothedEmpirical(THREE_POINTS, t)
    xt = torch.from_numpy(x)
    ridgexr.project_to_ridge(p, xt[:1000], 1)  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = ridgexr.project_to_ridge(p, xt, 1)
        el = time.perf_counter() - t0
        rates.append(int((res.iterations + 1).sum()) / el)
    print(f"three points, t = {t}, {q:,} queries, d = 2: {max(rates):,.0f} point-it/s (best of {repeats}; runs: "
          f"{', '.join(f'{r / 1e6:.2f}M' for r in rates)}; target >= 2M; median iterations "
          f"{float(res.iterations.median()):.0f}, converged {float(res.converged.double().mean()):.3f})")
    return ("three-points", q, 2, max(rates))


if __name__ == "__main__":
    main()
