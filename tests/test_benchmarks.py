"""The benchmark scripts run (``--quick``) and print their tables: a benchmark that no longer runs reports nothing."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


@pytest.mark.slow
@pytest.mark.parametrize("script, expected", [
    # the U/V table rows and the streamed fit line
    ("bench_training.py", [rf"\| 256 \| 8192 \| {NUMBER} \|", rf"streamed fit accumulation .* {NUMBER} s",
                           rf"two-points-paper stages \(p = 256, .* accumulate {NUMBER} s per node, held-out "
                           rf"evaluation {NUMBER} s per node, forward {NUMBER} ms per sampler step"]),
    # the ridge table rows at d = 2, 16, 32 and the three-point line
    ("bench_ridge.py", [rf"\| 100 \| 200 \| 2 \| {NUMBER} \|", rf"\| 500 \| 100 \| 32 \| {NUMBER} \|",
                        rf"three points, t = 0.3, 20,000 queries, d = 2: {NUMBER} point-it/s",
                        rf"\| 32 \| 500 \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \(50 % of matmul\) \|"]),
    # the suite's rows for the spread problem and the tail-share verdicts
    ("bench_scms_suite.py", [rf"\| spread d=16 \| 60 \| 16 \| plain \| {NUMBER}, {NUMBER} \| {NUMBER}x, {NUMBER}x \| {NUMBER} \| "
                             rf"{NUMBER} / {NUMBER} / {NUMBER} \| {NUMBER}% \| {NUMBER}% \|",
                             rf"\| spread d=16 \| 60 \| 16 \| accelerated \| {NUMBER}, {NUMBER} \|",
                             r"accelerated vs plain \([0-9]+ rounds\): max distance [0-9.e+-]+, flags differing converged 0, "
                             r"on_ridge 0, degenerate 0",
                             rf"\| spread d=16 \| 1 \| {NUMBER} \| {NUMBER} \|",
                             r"target \(slowest 1 % <= 20 % of wall time on every problem\), accelerated: (met|not met)"]),
    ("bench_run.py", [rf"one cell of two-points: .* = {NUMBER} sample-steps/s", rf"CellWriter \(thread\) +{NUMBER} MB/s",
                      rf"ridgexr run two-points \(quick: 32 samples x 60 steps\) end to end \(imports, fits, 12 cells, "
                      rf"summary\): {NUMBER} s = {NUMBER} "
                      rf"sample-steps/s, peak RSS {NUMBER} GB",
                      rf"one cell of two-points-paper \(p = 2000, 20 trajectories x 2000 steps, 101 recorded\): "
                      rf"{NUMBER} s = {NUMBER} sample-steps/s"]),
    # an image-scale row at t = 0.5, d* = 10 (whichever regime its queries fall in) and the observation line
    ("bench_images.py", [rf"\| 0.5 \| 10 \| (concentrated|spread|degenerate) \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| "
                         rf"{NUMBER}x \| {NUMBER} \|",
                         rf"observation \(float(64|32) logits, d\* = {NUMBER}\): {NUMBER} samples x {NUMBER} observed "
                         rf"steps, N = {NUMBER}, d = 784: {NUMBER} s measured; 50 such steps ~ {NUMBER} min"]),
])
def test_benchmark_runs_and_prints_its_numbers(script, expected):
    out = subprocess.run([sys.executable, str(BENCH / script), "--quick"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for pattern in expected:
        assert re.search(pattern, out.stdout), f"{script}: no line matching {pattern!r} in\n{out.stdout}"


@pytest.mark.slow
def test_the_unet_full_batch_benchmark_prints_both_unets_and_their_ratio_at_each_size():
    out = subprocess.run([sys.executable, str(BENCH / "bench_unet.py"), "--full-batch", "--threads", "1"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for size in (128, 256):
        assert re.search(rf"\| {size} \| \[8, 16, 16\] \| 67,673 \| {NUMBER} \|", out.stdout), out.stdout
        assert re.search(rf"\| {size} \| \[16, 32, 32\] \| 267,313 \| {NUMBER} \|", out.stdout), out.stdout
        assert re.search(rf"\| {size} \| ratio \| \| {NUMBER} \|", out.stdout), out.stdout


@pytest.mark.slow
def test_the_heldout_benchmark_times_both_ways_and_finds_the_same_numbers():
    out = subprocess.run([sys.executable, str(BENCH / "bench_unet.py"), "--heldout", "--points", "2", "--n-train", "500",
                          "--threads", "1"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for row in ("one per model", "shared", "ratio"):
        assert re.search(rf"\| {row} \| {NUMBER} \|", out.stdout), out.stdout
    assert "same numbers: True" in out.stdout, out.stdout


def test_a_childs_peak_is_its_own_not_its_large_parents():
    """CI failed twice on a child's peak: RUSAGE_CHILDREN is the largest child ever waited for, and a child forked
    from a large process keeps that process's RSS as its peak across exec.  ``run_with_peak`` starts the command
    from a fresh small launcher: from a parent holding ~800 MB, a child that holds ~0 and one that holds ~300 MB
    are measured as such."""
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    ballast = np.ones(100 * 2**20)  # 800 MB resident in this process
    rc, _, _, small = common.run_with_peak([sys.executable, "-c", "pass"])
    rc2, out, _, big = common.run_with_peak([sys.executable, "-c", "import numpy as np; a = np.ones(40 * 2**20); "
                                             "print(a.sum())"])
    assert rc == 0 and rc2 == 0 and out.strip() == str(float(40 * 2**20))
    assert small < 100e6, small / 1e6  # an interpreter, not this process's 800 MB
    assert 320e6 < big < 500e6, big / 1e6  # its own 320 MB array and an interpreter
    assert float(ballast[-1]) == 1.0
