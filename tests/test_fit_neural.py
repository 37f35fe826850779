"""fit_neural: one loss definition with the random-feature fit, reproducibility, checkpoints, kill -9 resume."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import OU, ExactDenoiser, MLPDenoiser, RandomFeatureDenoiser
from ridgexr.parametrization import PARAMETRIZATIONS, dsm_row_loss, output_from_denoised
from ridgexr.training import (draw_training_sample, evaluate_denoiser, fit_neural, fit_random_features,
                              schedule_weight)
from ridgexr.training.minibatch import dsm_loss_rows
from ridgexr.training.proposal import TimeProposal

TWO = np.array([[-1.0, 0.0], [1.0, 0.0]])
THREE = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])


@given(t=st.floats(0.005, 3.0), seed=st.integers(0, 1000), par=st.sampled_from(PARAMETRIZATIONS),
       sched=st.sampled_from(["1", "h", "h2"]))
def test_row_loss_is_lambda_times_squared_error_of_alpha_m_in_every_parametrization(t, seed, par, sched):
    """dsm_row_loss(f) = (w / h^2) |alpha m - alpha x0|^2 for the m that f encodes, whatever the parametrization."""
    rng = np.random.default_rng(seed)
    x0, z, m = (torch.tensor(rng.normal(size=(6, 3))) for _ in range(3))
    tt = torch.full((6,), t, dtype=torch.float64)
    proc = OU()
    a, h = proc.alpha(tt)[:, None], proc.h(tt)[:, None]
    xt = a * x0 + torch.sqrt(h) * z
    f = output_from_denoised(m, xt, tt, par)
    w = torch.as_tensor(schedule_weight(sched, tt.numpy()))
    direct = w / h[:, 0] ** 2 * ((a * m - a * x0) ** 2).sum(-1)
    np.testing.assert_allclose(dsm_row_loss(f, x0, z, tt, w, par).numpy(), direct.numpy(), rtol=1e-9)


def test_evaluate_denoiser_equals_the_quadratic_form_and_zero_excess_for_the_exact_denoiser():
    """The direct loss of a random-feature model on its training sample equals tr(AUA^T) - 2tr(VA^T) + C;
    the exact denoiser's excess is 0 and its loss L*."""
    m = RandomFeatureDenoiser(2, 12, n_frequencies=3, seed=1, dtype=torch.float64)
    fit = fit_random_features(m, TWO, schedule="h", taus=[3.0], t_min=0.02, T=2.0, n_time=5, n_noise=4, seed=0)
    model = fit.denoiser(3.0)
    got = evaluate_denoiser(model.denoise, fit.sample, schedule="h", d_star=1)
    assert got["loss"] == pytest.approx(fit.loss(3.0), rel=1e-9)
    assert got["excess_loss"] == pytest.approx(fit.loss(3.0) - fit.optimal_loss, rel=1e-7, abs=1e-10)
    assert got["excess_tangent"] > 0 and got["excess_normal"] > 0  # the split of sum c lambda |f - f*|^2
    exact = evaluate_denoiser(ExactDenoiser(TWO).denoise, fit.sample, schedule="h", d_star=1)
    assert exact["excess_loss"] == pytest.approx(0.0, abs=1e-12)
    assert abs(exact["excess_tangent"]) < 1e-12 and abs(exact["excess_normal"]) < 1e-12
    assert exact["loss"] == pytest.approx(fit.optimal_loss, rel=1e-9)


@pytest.mark.parametrize("par", ["score", "epsilon", "posterior_mean"])
def test_fit_neural_row_loss_is_the_random_feature_loss_on_a_shared_sample(par):
    """On one TrainingSample, sum_s c_s * (fit_neural's row loss) = evaluate_denoiser's loss = the RF definition."""
    net = MLPDenoiser(2, hidden=(16, 16), embed_dim=8, parametrization=par, seed=3, dtype=torch.float64)
    s = draw_training_sample(THREE, t_min=0.02, T=2.0, n_time=5, n_noise=3, seed=1)
    w = schedule_weight("h", s.t)
    rows = dsm_loss_rows(net, torch.as_tensor(s.x0), torch.as_tensor(s.t), torch.as_tensor(s.z), torch.as_tensor(w), par)
    by_rows = float(rows.detach().numpy() @ s.weight)
    direct = evaluate_denoiser(net.denoise, s, schedule="h")["loss"]
    assert by_rows == pytest.approx(direct, rel=1e-9)


def _small_fit(**kw):
    net = MLPDenoiser(2, hidden=(32, 32), embed_dim=16, seed=kw.pop("model_seed", 0))
    args = dict(epochs=4, batch_size=4, device="cpu", t_min=0.01, T=2.0, seed=0) | kw
    return fit_neural(net, np.repeat(THREE, 4, axis=0), **args)


def test_same_seed_same_weights_and_another_seed_differs():
    a, b, c = _small_fit(), _small_fit(), _small_fit(seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert np.array_equal(a.losses, b.losses)
    assert not all(torch.equal(p, q) for p, q in zip(a.model.parameters(), c.model.parameters()))


def test_training_lowers_the_heldout_excess_loss():
    s = draw_training_sample(THREE, t_min=0.01, T=2.0, n_time=9, n_noise=16, seed=5)
    before = evaluate_denoiser(MLPDenoiser(2, hidden=(32, 32), embed_dim=16, seed=0).denoise, s, schedule="h")
    fit = _small_fit(epochs=60, batch_size=12, schedule="h", model_seed=0, lr=3e-3)
    after = evaluate_denoiser(fit.model.denoise, s, schedule="h")
    assert after["excess_loss"] < 0.5 * before["excess_loss"], (before, after)
    assert fit.losses[-10:].mean() < fit.losses[:5].mean()


def test_snapshots_ema_and_checkpoint_of_another_configuration(tmp_path):
    fit = _small_fit(save_epochs=[2, 4], ema=0.9, checkpoint_dir=tmp_path / "ck")
    assert sorted(fit.snapshots) == [2, 4]
    last = fit.at_epoch(4)
    assert all(torch.equal(p, q) for p, q in zip(last.parameters(), fit.model.parameters()))  # EMA weights
    assert not all(torch.equal(p, q) for p, q in zip(fit.at_epoch(2).parameters(), last.parameters()))
    with pytest.raises(ValueError, match="epoch"):
        fit.at_epoch(3)
    again = _small_fit(save_epochs=[2, 4], ema=0.9, checkpoint_dir=tmp_path / "ck")  # complete: nothing to train
    assert again.resumed_from == 4 and np.array_equal(again.losses, fit.losses)
    with pytest.raises(ValueError, match=r"another configuration .*lr"):
        _small_fit(save_epochs=[2, 4], ema=0.9, checkpoint_dir=tmp_path / "ck", lr=5e-4)
    with pytest.raises(ValueError, match=r"another configuration .*initial_weights"):  # another model's weights
        _small_fit(save_epochs=[2, 4], ema=0.9, checkpoint_dir=tmp_path / "ck", model_seed=1)


@pytest.mark.parametrize("kwargs, name", [(dict(epochs=0), "epochs"), (dict(batch_size=0), "batch_size"),
                                          (dict(lr=0.0), "lr"), (dict(optimizer="lbfgs"), "optimizer"),
                                          (dict(ema=1.5), "ema"), (dict(device="tpu"), "device"),
                                          (dict(save_epochs=[9]), "save_epochs"), (dict(schedule="h3"), "schedule")])
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        _small_fit(**kwargs)


SCRIPT = textwrap.dedent("""
    import sys, numpy as np, torch
    torch.set_num_threads(1)
    from ridgexr import MLPDenoiser, fit_neural
    ck, out, wait = sys.argv[1], sys.argv[2], sys.argv[3] == "wait"

    def report(epoch, epochs, loss):  # with "wait": the epoch (its checkpoint written) on stdout, then a line from stdin
        if wait:
            print(epoch, flush=True)
            sys.stdin.readline()

    train = np.random.default_rng(0).normal(size=(64, 2))
    net = MLPDenoiser(2, hidden=(32, 32), embed_dim=16, seed=1)
    fit = fit_neural(net, train, epochs=12, batch_size=8, device="cpu", ema=0.95, seed=3, save_epochs=[6, 12],
                     checkpoint_dir=None if ck == "-" else ck, progress=report)
    torch.save({"state": fit.model.state_dict(), "losses": fit.losses, "snap": fit.snapshots,
                "resumed": fit.resumed_from}, out)
""")


@pytest.mark.slow
def test_kill_9_then_resume_gives_the_weights_of_an_uninterrupted_run(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, str(script), "-", str(tmp_path / "ref.pt"), "go"], check=True, env=env)
    ck = tmp_path / "ck"
    # the kill point is the training's own progress, not a clock: the child reports each epoch once its checkpoint
    # is written and waits for a line; after epoch 4 it is let go and killed at once, somewhere in epoch 5 (its
    # steps or its checkpoint's write), and it cannot pass epoch 5, which waits for a line again
    proc = subprocess.Popen([sys.executable, str(script), str(ck), str(tmp_path / "x.pt"), "wait"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        proc.stdin.write("\n")
        proc.stdin.flush()
        if int(line) == 4:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = torch.load(ck / "checkpoint.pt", weights_only=False)["epoch"]
    assert done in (4, 5) and not (tmp_path / "x.pt").exists()  # killed mid-run
    subprocess.run([sys.executable, str(script), str(ck), str(tmp_path / "res.pt"), "go"], check=True, env=env)
    ref, res = torch.load(tmp_path / "ref.pt", weights_only=False), torch.load(tmp_path / "res.pt", weights_only=False)
    assert res["resumed"] == done
    assert all(torch.equal(ref["state"][k], res["state"][k]) for k in ref["state"])
    assert np.array_equal(ref["losses"], res["losses"])
    assert all(torch.equal(ref["snap"][e][k], res["snap"][e][k]) for e in (6, 12) for k in ref["snap"][e])


def test_keep_best_picks_the_epoch_an_independent_scan_of_a_last_run_picks(tmp_path):
    """keep="best" returns (and snapshots) the weights of the epoch with the smallest mean minibatch loss so far:
    the epoch that a scan of a keep="last" run's per-epoch losses picks, with that run's weights at that epoch."""
    rng = np.random.default_rng(3)
    train = rng.normal(size=(16, 2)) * 2  # 16 points in minibatches of 8: every minibatch full
    kw = dict(epochs=14, batch_size=8, lr=3e-2, device="cpu", seed=2)
    last = fit_neural(MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1), train, save_epochs=range(1, 15), **kw)
    best = fit_neural(MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1), train, save_epochs=[3, 9, 14],
                      keep="best", checkpoint_dir=tmp_path / "ck", checkpoint_every=7, **kw)
    np.testing.assert_allclose(last.minibatch_losses, last.losses, rtol=1e-5)  # full minibatches: the same mean
    np.testing.assert_array_equal(best.losses, last.losses)  # the same training, only the kept weights differ
    for e in (3, 9, 14):
        scan = int(np.argmin([float(v) for v in last.losses[:e]])) + 1  # the first smallest loss up to e
        assert best.kept[e] == scan
        for k, v in best.snapshots[e].items():
            torch.testing.assert_close(v, last.snapshots[scan][k], rtol=0, atol=0)
    assert any(best.kept[e] != e for e in (3, 9, 14))  # a real choice (fails if keep were ignored)
    x, t = torch.tensor(train[:4]), torch.full((4,), 0.3, dtype=torch.float64)
    torch.testing.assert_close(best.model.denoise(x, t), last.at_epoch(best.kept[14]).denoise(x, t))
    # a resumed best run keeps the same choice
    again = fit_neural(MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1), train, save_epochs=[3, 9, 14],
                       keep="best", checkpoint_dir=tmp_path / "ck", checkpoint_every=7, **kw)
    assert again.kept == best.kept and again.resumed_from == 14


def _states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_trainers_steps_are_fit_neural_and_a_hand_written_loop(tmp_path):
    """MinibatchTrainer's steps driven by hand -- setup, epochs 1-3 and their checkpoint, then a new trainer on a
    fresh model resumed from it for epochs 4-6 -- give fit_neural's losses, kept epochs, snapshots (EMA and raw)
    and weights bit for bit; and the first epoch is the module doc's loop written out here: the shuffle, the times
    and the noise drawn in that order from a generator seeded by (seed, epoch), then one Adam step per minibatch on
    (T - t_min) times the mean of w(t) |s(x_t, t) + z / sqrt(h_t)|^2."""
    from ridgexr.training.minibatch import MinibatchTrainer, TrainingOptions

    train = np.random.default_rng(4).normal(size=(10, 2))
    kw = dict(schedule="h", epochs=6, batch_size=4, lr=1e-2, ema=0.9, t_min=0.01, T=2.0, seed=3, device="cpu",
              save_epochs=[2, 5, 6], keep="best")
    ref = fit_neural(MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1), train, **kw)

    proposal = TimeProposal("h", 0.01, 2.0)
    fields = {k: v for k, v in kw.items() if k not in ("device", "save_epochs")}
    opts = TrainingOptions(**fields, optimizer="adam", device=torch.device("cpu"), save_epochs=[2, 5, 6],
                           parametrization="score",
                           checkpoint_every=3, process=OU(), timesteps=None, mixed_precision="none",
                           time_proposal="uniform", proposal=proposal)
    first = MinibatchTrainer(MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1), train, opts)
    first.resume(tmp_path / "ck")  # an empty folder: a fresh start
    for epoch in (1, 2, 3):
        first.train_epoch(epoch)
        first.keep_weights(epoch)
        first.checkpoint(epoch)
    second = MinibatchTrainer(MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1), train, opts)
    second.resume(tmp_path / "ck")
    assert second.start == 3
    for epoch in (4, 5, 6):
        second.train_epoch(epoch)
        second.keep_weights(epoch)
        second.checkpoint(epoch)
    out = second.result()
    assert np.array_equal(out.losses, ref.losses) and np.array_equal(out.minibatch_losses, ref.minibatch_losses)
    assert out.kept == ref.kept and out.config == ref.config
    for e in (2, 5, 6):
        assert _states_equal(out.snapshots[e], ref.snapshots[e]) and _states_equal(out.raw_snapshots[e],
                                                                                   ref.raw_snapshots[e])
    assert _states_equal(out.model.state_dict(), ref.model.state_dict())

    net = MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1)
    hand = fit_neural(MLPDenoiser(2, hidden=(16,), embed_dim=8, seed=1), train, **(kw | dict(epochs=1, ema=None,
                                                                                            save_epochs=[1])))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    state = np.random.SeedSequence([3, 1]).generate_state(2, np.uint32)
    g = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
    perm = torch.randperm(10, generator=g)
    t = 0.01 + (2.0 - 0.01) * torch.rand(10, generator=g, dtype=torch.float64)
    z = torch.randn(10, 2, generator=g, dtype=torch.float64)
    proc = OU()
    h = proc.h(t)
    xt = (proc.alpha(t)[:, None] * torch.as_tensor(train) + torch.sqrt(h)[:, None] * z).float()
    total = 0.0
    for lo in (0, 4, 8):
        i = perm[lo:lo + 4]
        f = net(xt[i], t[i].float())
        rows = h[i].float() * ((f + z[i].float() / torch.sqrt(h[i]).float()[:, None]) ** 2).sum(-1)
        loss = (2.0 - 0.01) * rows.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += float(rows.detach().sum())
    np.testing.assert_allclose(hand.losses[0], (2.0 - 0.01) * total / 10, rtol=1e-5)
    for p, q in zip(net.parameters(), hand.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


class _Touch:
    """Pickles as a call of ``Path.touch`` on ``marker``: what a checkpoint carrying a pickled callable runs when
    it is unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return Path.touch, (Path(self.marker),)


def test_a_checkpoint_carrying_a_pickled_callable_is_refused_and_never_run(tmp_path):
    """Issue 59, item 9: checkpoints were read with ``torch.load(..., weights_only=False)``: resuming from a data
    folder someone else wrote ran whatever it held.  A checkpoint whose state is plain (a real one, resumed
    bit for bit) loads; one that carries a callable is refused naming the file, and the callable never runs."""
    from ridgexr.training.minibatch import CHECKPOINT_NAME

    fit = _small_fit(checkpoint_dir=tmp_path / "ck")
    again = _small_fit(checkpoint_dir=tmp_path / "ck")  # plain state: resumed, nothing to train
    assert again.resumed_from == 4 and np.array_equal(again.losses, fit.losses)
    ckpt = tmp_path / "ck" / CHECKPOINT_NAME
    state = torch.load(ckpt, weights_only=True)
    marker = tmp_path / "ran"
    state["losses"] = [_Touch(marker)]
    torch.save(state, ckpt)
    with pytest.raises(ValueError, match=rf"{CHECKPOINT_NAME}' holds pickled Python objects"):
        _small_fit(checkpoint_dir=tmp_path / "ck")
    assert not marker.exists()
    torch.load(ckpt, weights_only=False)  # what loading it as before did: the callable runs
    assert marker.exists()
