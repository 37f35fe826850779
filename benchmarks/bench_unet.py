"""Benchmark: training throughput of the `unet` kind's U-Net on 28 x 28 x 1 images, and what it implies.

Run:  python benchmarks/bench_unet.py [--quick] [--threads N]
      python benchmarks/bench_unet.py --full-batch [--sizes 128 256] [--threads N]
      python benchmarks/bench_unet.py --heldout [--points P] [--n-train N] [--threads N]

``--full-batch`` instead times one full-batch Adam step (forward, backward, update; random timesteps) of
``timescales-unet``'s U-Net ([8, 16, 16]) and ``timescales-fashion``'s ([16, 32, 32]) at 128 and 256 images (``--sizes``),
the two measured in turn after a warm-up so that the machine's load falls on both alike; the ratio is the
number to read.

``--heldout`` times ``fashion-unet``'s held-out diagnostics (``evaluate_denoiser``, d* = 10, 8 Gauss-Legendre
times x 1 draw for P of N class-0 images) of its four models -- three U-Nets (at their initial weights: the
diagnostics' cost does not depend on the weights) and the exact denoiser -- evaluated each on its own copy of
the held-out sample (every model pays the exact posterior means and ridge frames, as before they were kept) and
all on one shared sample (one moments pass, ``TrainingSample.block_moments``), the two in turn; it checks that
both give the same numbers and prints the ratio.

Trains the default `kind: unet` network (UNet2DModel, block_out_channels [16, 32, 32], one ResNet
layer per block, mid-block attention; ~0.27 M parameters) by :func:`ridgexr.fit_neural` -- the
package's DSM loss, batch 128, Adam, EMA 0.999, float32 -- on Fashion-MNIST class 0 scaled to
[-1, 1] (Debian's IDX files; random images of the same shape when absent), and prints images/s
(one epoch after a warm-up epoch), the same for a wider U-Net, and the training time of the
`fashion-unet` entry (6 000 images, two schedules, the largest epoch count) at this rate.
Timing is noisy on a shared machine: the load average is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from ridgexr.models.unet import UNetSpec  # noqa: E402
from ridgexr.models.unet.denoiser import UNetDenoiser, make_scheduler, make_unet  # noqa: E402
from ridgexr.training import fit_neural  # noqa: E402

IDX = Path("/usr/share/datasets/fashion-mnist")


def images(n: int) -> tuple[np.ndarray, str]:
    """n images (n, 784) of class 0 in [-1, 1], and where they came from."""
    img, lab = IDX / "train-images-idx3-ubyte.gz", IDX / "train-labels-idx1-ubyte.gz"
    if img.is_file() and lab.is_file():
        x = np.frombuffer(gzip.open(img).read(), np.uint8, offset=16).reshape(-1, 784)
        y = np.frombuffer(gzip.open(lab).read(), np.uint8, offset=8)
        return x[y == 0][:n].astype(np.float64) / 127.5 - 1.0, "Fashion-MNIST class 0"
    return np.random.default_rng(0).uniform(-1, 1, size=(n, 784)), "random images (Fashion-MNIST IDX files absent)"


def throughput(block: UNetSpec, train: np.ndarray) -> tuple[int, float]:
    """(parameters, images/s of one epoch after a warm-up epoch)."""
    net = UNetDenoiser(make_unet(block, 0), make_scheduler(block))
    n_par = sum(p.numel() for p in net.parameters())
    fit_neural(net, train[: block.batch_size], epochs=1, batch_size=block.batch_size, ema=block.ema, T=5.0,
               device="cpu")  # warm-up
    t0 = time.perf_counter()
    fit_neural(net, train, epochs=1, batch_size=block.batch_size, ema=block.ema, T=5.0, device="cpu")
    return n_par, len(train) / (time.perf_counter() - t0)


def full_batch_steps(sizes=(128, 256), repeats: int = 4) -> None:
    """Seconds per full-batch Adam step of the two timescale U-Nets, and their ratio, at each batch size."""
    blocks = {label: UNetSpec(kind="unet", sample_size=[28, 28], block_out_channels=channels)
              for label, channels in (("[8, 16, 16]", [8, 16, 16]), ("[16, 32, 32]", [16, 32, 32]))}
    nets = {label: make_unet(block, 0) for label, block in blocks.items()}
    print("| images | U-Net | parameters | s per step |")
    print("|---|---|---|---|")
    for size in sizes:
        x = torch.randn(size, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        t = torch.randint(0, 1000, (size,), generator=torch.Generator().manual_seed(1))
        per_step = {}
        for label, net in nets.items():
            opt = torch.optim.Adam(net.parameters(), 1e-3)

            def step():
                opt.zero_grad()
                (net(x, t).sample ** 2).mean().backward()
                opt.step()

            step()  # warm-up
            t0 = time.perf_counter()
            for _ in range(repeats):
                step()
            per_step[label] = (time.perf_counter() - t0) / repeats
            print(f"| {size} | {label} | {sum(p.numel() for p in net.parameters()):,} | {per_step[label]:.3f} |")
        a, b = per_step.values()
        print(f"| {size} | ratio | | {b / a:.2f} |")


def heldout_shared(n_points: int, n_train: int) -> None:
    """Seconds of fashion-unet's four models' held-out diagnostics, each on its own sample and on one shared one."""
    from ridgexr import ExactDenoiser
    from ridgexr.training import draw_training_sample, evaluate_denoiser

    train, source = images(n_train)
    block = UNetSpec(kind="unet", sample_size=[28, 28])
    dens = [UNetDenoiser(make_unet(block, seed), make_scheduler(block)).denoise for seed in range(3)]
    dens.append(ExactDenoiser(train).denoise)
    points = np.random.default_rng(1).choice(len(train), n_points, replace=False)
    draw = dict(t_min=1e-3, T=5.0, n_time=8, n_noise=1, seed=1, quadrature="gauss-legendre-log-t", points=points)
    print(f"held-out diagnostics of 4 models (3 U-Nets, exact): N = {len(train):,} images ({source}), "
          f"{n_points} points x 8 times x 1 draw, d* = 10")
    t0 = time.perf_counter()
    alone = [evaluate_denoiser(den, draw_training_sample(train, **draw), schedule="h", d_star=10) for den in dens]
    t_alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    shared = draw_training_sample(train, **draw)
    together = [evaluate_denoiser(den, shared, schedule="h", d_star=10) for den in dens]
    t_shared = time.perf_counter() - t0
    print("| held-out sample | s (4 models) |")
    print("|---|---|")
    print(f"| one per model | {t_alone:.1f} |")
    print(f"| shared | {t_shared:.1f} |")
    print(f"| ratio | {t_alone / t_shared:.2f} |")
    print(f"same numbers: {together == alone}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="256 images instead of 1024")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--full-batch", action="store_true", help="time full-batch steps of the two timescale U-Nets")
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256], help="--full-batch: the batch sizes (images)")
    ap.add_argument("--heldout", action="store_true", help="time fashion-unet's held-out diagnostics, per model "
                                                           "and on one shared sample")
    ap.add_argument("--points", type=int, default=16, help="--heldout: held-out points (fashion-unet: 256)")
    ap.add_argument("--n-train", type=int, default=6000, help="--heldout: class-0 images (fashion-unet: 6 000)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.heldout and not 1 <= args.points <= args.n_train:
        ap.error(f"--points must be between 1 and --n-train ({args.n_train}); got {args.points}")
    timed = (lambda: heldout_shared(args.points, args.n_train)) if args.heldout else (
        (lambda: full_batch_steps(tuple(args.sizes))) if args.full_batch else None)
    if timed is not None:
        print(f"# {machine()}; load average {os.getloadavg()[0]:.2f}; {args.threads} thread(s)")
        timed()
        print(f"# load average after: {os.getloadavg()[0]:.2f}")
        return
    train, source = images(256 if args.quick else 1024)
    print(f"# {machine()}; load average {os.getloadavg()[0]:.2f}; {len(train)} images: {source}")
    print("| U-Net | parameters | images/s |")
    print("|---|---|---|")
    rates = {}
    for label, extra in (("default [16, 32, 32]", {}), ("wider [32, 64, 64]", {"block_out_channels": [32, 64, 64]})):
        block = UNetSpec(kind="unet", sample_size=[28, 28], **extra)
        n_par, rate = throughput(block, train)
        rates[label] = rate
        print(f"| {label} | {n_par:,} | {rate:.1f} |")
    rate = rates["default [16, 32, 32]"]
    for epochs in (10, 40):
        hours = 2 * 6000 * epochs / rate / 3600
        print(f"fashion-unet training at {rate:.1f} images/s: 6 000 images x {epochs} epochs x 2 schedules = "
              f"{hours:.2f} h")
    print(f"# load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
