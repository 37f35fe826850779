"""The SCMS kernel (ridgexr.scms): the default loop against the plain loop it replaced, bit for bit, and
``accelerate=True`` against the plain iteration (same points within the plain iteration's own accuracy,
same flags, fewer iterations)."""

import math
import time

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, SmoothedEmpirical, project_to_ridge
from ridgexr.datasets import point_set
from ridgexr.scms import default_tol, frame_from_moments, project_onto, scms

FIELDS = ("point", "converged", "iterations", "residual", "normal_curvature", "eigengap", "degenerate",
          "dropped_mass")


def plain_loop(density, xf, tf, d_star, kind="log", tol=None, max_iter=500, top_k=None, stop_degenerate=None):
    """The SCMS loop as it was before the lean bookkeeping (ridgexr 0.4.0.dev0): the whole frame at every
    iteration, the projection by einsum, the stopping rule and the active set in torch."""
    if tol is None:
        tol = default_tol(xf.dtype, density.radius)
    q = xf.shape[0]
    out = {name: torch.zeros(q, dtype=xf.dtype) for name in FIELDS}
    out["point"] = xf.clone()
    out["converged"] = torch.zeros(q, dtype=torch.bool)
    out["degenerate"] = torch.zeros(q, dtype=torch.bool)
    out["iterations"] = torch.zeros(q, dtype=torch.int64)
    active, xa, ta = torch.arange(q), xf, tf
    run = torch.zeros(q, dtype=torch.int64)
    first = None
    for it in range(max_iter + 1):
        mom = density.moments_flat(xa, ta, cov=True, top_k=top_k)
        fr = frame_from_moments(mom, xa, d_star, kind, signs=first is None)
        first = fr if first is None else first
        coef = torch.einsum("qdk,qd->qk", fr.normal, fr.step)
        nstep = torch.einsum("qdk,qk->qd", fr.normal, coef)
        norm = nstep.norm(dim=-1)
        small = norm < tol
        stop = small.clone() if it < max_iter else torch.ones_like(small)
        if stop_degenerate is not None:
            run = torch.where(fr.degenerate, run + 1, 0)
            stop |= run >= stop_degenerate
        if bool(stop.any()):
            done = active[stop]
            for name, value in (("point", xa), ("residual", norm / fr.h), ("normal_curvature", fr.normal_curvature),
                                ("eigengap", fr.eigengap), ("degenerate", fr.degenerate),
                                ("dropped_mass", fr.dropped_mass), ("converged", small)):
                out[name][done] = value[stop]
            out["iterations"][done] = it
            keep = ~stop
            if not bool(keep.any()):
                break
            active, xa, ta, nstep, run = active[keep], xa[keep], ta[keep], nstep[keep], run[keep]
        xa = xa + nstep
    return out, first


def near_data(train, t, q, seed):
    rng = np.random.default_rng(seed)
    ou = OU()
    return ou.alpha(t) * train[rng.integers(0, len(train), q)] + math.sqrt(ou.h(t)) * rng.normal(size=(q, train.shape[1]))


CASES = [  # (training set, t, d*, kind, options): both moment paths, both kinds, d* = 0, top-k, stop_degenerate
    (point_set("three-points"), 0.7, 1, "log", {}),
    (point_set("grid-3x3"), 0.2, 1, "log", dict(stop_degenerate=5, max_iter=300)),
    (np.random.default_rng(1).normal(size=(60, 3)) * 2, 0.3, 1, "log", {}),
    (np.random.default_rng(2).normal(size=(60, 4)), 0.4, 2, "log", dict(top_k=8)),
    (np.random.default_rng(3).normal(size=(40, 3)) * 2, 0.3, 1, "density", {}),
    (np.random.default_rng(4).normal(size=(30, 3)) * 2, 0.5, 0, "log", dict(tol=1e-7)),
]


@pytest.mark.parametrize("train, t, d_star, kind, options", CASES)
def test_default_loop_is_the_plain_loop_bit_for_bit(train, t, d_star, kind, options):
    """Skipping the diagnostics where no point stops, numpy bookkeeping and matmul projections change no bit."""
    dens = SmoothedEmpirical(train, t)
    xf = torch.from_numpy(near_data(train, t, 120, 0))
    tf = torch.full((120,), t, dtype=torch.float64)
    res, first = scms(dens, xf, tf, d_star, kind, **options)
    ref, ref_first = plain_loop(dens, xf, tf, d_star, kind, **options)
    assert int(ref["iterations"].max()) > 2  # the comparison covers a real loop
    for name in FIELDS:
        assert torch.equal(getattr(res, name), ref[name]), name
    for name in ("step", "normal", "tangent", "eigenvalues", "normal_curvature", "eigengap", "degenerate",
                 "resolved_rank", "dropped_mass"):
        assert torch.equal(getattr(first, name), getattr(ref_first, name)), name


@given(q=st.integers(1, 40), d=st.integers(2, 17), k=st.integers(0, 17), seed=st.integers(0, 10_000))
def test_project_onto_is_the_einsum_projection_bit_for_bit(q, d, k, seed):
    k = min(k, d)
    g = torch.Generator().manual_seed(seed)
    basis = torch.flip(torch.linalg.qr(torch.randn(q, d, d, generator=g, dtype=torch.float64))[0], (-1,))[..., d - k:]
    v = torch.randn(q, d, generator=g, dtype=torch.float64) * 10
    ref = torch.einsum("qdk,qk->qd", basis, torch.einsum("qdk,qd->qk", basis, v))
    assert torch.equal(project_onto(basis, v), ref)


def _plain_step_ratio(dens, point, t):
    """|f(x1)| / |f(x0)| at a plain end point x0, x1 = x0 + f(x0): the contraction ratio there."""
    one = project_to_ridge(dens, point, 1, tol=1e-300, max_iter=1)
    f0 = np.linalg.norm(one.point - point, axis=1)
    f1 = one.residual * OU().h(t)
    return np.where(f0 > 0, f1 / np.maximum(f0, 1e-300), 0.0)


@given(n=st.integers(2, 6), d=st.integers(2, 3), t=st.floats(0.05, 1.5), seed=st.integers(0, 10_000),
       rel_tol=st.sampled_from([1e-9, 1e-6]))
def test_accelerated_points_and_flags_are_the_plain_ones(n, d, t, seed, rel_tol):
    """accelerate=True on random mixtures: it converges wherever the plain iteration does, never in more
    iterations in all, and to the plain points within the plain iteration's own accuracy: 2 tol (1 + 1/(1 - r)),
    r the contraction ratio at the plain end point (a plain end point is ~ tol r / (1 - r) from its limit),
    or, where the plain end point itself moves more when its start moves by tol (a path that crawls past an
    unstable region), 5 x that move; on_ridge and degenerate agree wherever they are stable under that move."""
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(n, d)) * 3
    dens = SmoothedEmpirical(train, t)
    tol = rel_tol * (1 + dens.radius)
    x = near_data(train, t, 32, seed)
    plain = project_to_ridge(dens, x, 1, tol=tol, max_iter=3000)
    fast = project_to_ridge(dens, x, 1, tol=tol, max_iter=3000, accelerate=True)
    assert not (plain.converged & ~fast.converged).any()
    assert fast.iterations.sum() <= plain.iterations.sum()
    both = plain.converged & fast.converged
    r = _plain_step_ratio(dens, plain.point, t)
    spread = np.zeros(len(x))
    stable = np.ones(len(x), dtype=bool)
    for _ in range(2):
        u = rng.normal(size=x.shape)
        moved = project_to_ridge(dens, x + tol * u / np.linalg.norm(u, axis=1, keepdims=True), 1, tol=tol,
                                 max_iter=3000)
        spread = np.maximum(spread, np.linalg.norm(moved.point - plain.point, axis=1))
        stable &= (moved.on_ridge == plain.on_ridge) & (moved.degenerate == plain.degenerate) & moved.converged
    bound = np.maximum(2 * tol * (1 + 1 / np.maximum(1 - r, 1e-3)), 5 * spread)
    dist = np.linalg.norm(fast.point - plain.point, axis=1)
    assert np.all(dist[both] <= bound[both]), (dist[both] / bound[both]).max()
    check = both & stable
    np.testing.assert_array_equal(fast.on_ridge[check], plain.on_ridge[check])
    np.testing.assert_array_equal(fast.degenerate[check], plain.degenerate[check])


def test_accelerated_cuts_the_slow_points_iterations():
    """The near-degenerate problem of benchmarks/bench_scms_suite.py at a reduced size: the slowest points
    need markedly fewer iterations, the same points within 20 tol, the same flags."""
    rng = np.random.default_rng(0)
    train = rng.normal(size=(100, 8)) * np.sqrt([1, 0.97, 0.3, 0.3, 0.2, 0.2, 0.1, 0.1])
    dens = SmoothedEmpirical(train, 0.1)
    x = near_data(train, 0.1, 60, 2)
    plain = project_to_ridge(dens, x, 1, tol=1e-6, max_iter=2000)
    fast = project_to_ridge(dens, x, 1, tol=1e-6, max_iter=2000, accelerate=True)
    assert plain.converged.all() and fast.converged.all()
    assert fast.iterations.max() <= 0.75 * plain.iterations.max()
    assert fast.iterations.sum() <= 0.85 * plain.iterations.sum()
    assert np.linalg.norm(fast.point - plain.point, axis=1).max() <= 20 * 1e-6
    np.testing.assert_array_equal(fast.on_ridge, plain.on_ridge)
    np.testing.assert_array_equal(fast.degenerate, plain.degenerate)


def test_accelerate_must_be_a_bool():
    dens = SmoothedEmpirical(point_set("two-points"), 0.5)
    with pytest.raises(TypeError, match="`accelerate` must be a bool"):
        project_to_ridge(dens, np.zeros((1, 2)), 1, accelerate=1)


def test_one_thread_blocks_in_several_threads_each_restore_their_own_thread_count():
    """``threads_for`` sets torch's thread count to 1 for small calls and restores it on exit.  With torch's
    OpenMP backend the count is per thread (each thread's own OpenMP setting): blocks that overlap in several
    Python threads, closing in any order, each get their own count back, and the main thread's never changes;
    large calls keep the count."""
    import threading

    from ridgexr._backend import SMALL_WORK_FLOPS, threads_for

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen, barrier = {}, threading.Barrier(4)

        def work(k):
            torch.set_num_threads(2)
            with threads_for(1e3):
                barrier.wait()  # all four blocks are open at once
                time.sleep(0.02 * k)  # they close in order 0, 1, 2, 3
                inside = torch.get_num_threads()
            seen[k] = (inside, torch.get_num_threads())

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == {k: (1, 2) for k in range(4)} and torch.get_num_threads() == 2
        with threads_for(SMALL_WORK_FLOPS):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [2, 3])
def test_batched_eigh_split_across_threads_gives_each_matrix_its_eigenpairs(threads):
    # the split path runs only with >= 2 torch threads and >= 256 matrices; the suite's workers run one thread
    # each (tests/conftest.py), so the split is set up here explicitly
    from ridgexr.scms import batched_eigh

    g = torch.Generator().manual_seed(5)
    a = torch.randn(301, 7, 7, dtype=torch.float64, generator=g)
    m = a @ a.transpose(1, 2)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        vals, vecs = batched_eigh(m)
    finally:
        torch.set_num_threads(before)
    ref_vals, _ = torch.linalg.eigh(m)
    assert vals.shape == (301, 7) and vecs.shape == (301, 7, 7)
    scale = ref_vals.abs().amax(-1, keepdim=True)
    assert float(((vals - ref_vals).abs() / scale).max()) < 1e-13  # every matrix in its place, ascending
    eye = torch.eye(7, dtype=torch.float64)
    assert float((vecs.transpose(1, 2) @ vecs - eye).abs().max()) < 1e-13
    rebuilt = vecs @ torch.diag_embed(vals) @ vecs.transpose(1, 2)
    assert float(((rebuilt - m).abs().amax((-2, -1)) / scale[:, 0]).max()) < 1e-13
