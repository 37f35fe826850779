"""Training entry point of unet blocks: one :func:`ridgexr.fit_neural` run per (schedule, n_train).

Checkpoints live under the store's checkpoint folder, one per run
(``<label>/<schedule>-n<n_train>/``): ``checkpoint.pt``, the side file that resuming reads
(model, optimizer and EMA states, the epoch, the losses, the epoch snapshots; written
atomically, so a kill -9 at any instant leaves a resumable file), and diffusers folders written
just before it -- ``unet/`` + ``scheduler/`` (the latest weights, EMA ones with ``ema``) and
``epoch-<e>/unet`` + ``epoch-<e>/scheduler`` for every listed epoch -- which
``UNet2DModel.from_pretrained`` / ``DDPMPipeline`` and ``kind: diffusers`` load as they are.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from ...training import fit_neural
from ...training.heldout import heldout_diagnostics, heldout_sample
from ..kind import FittedCell
from ..diffusers.denoiser import scheduler_times
from .denoiser import UNetDenoiser, make_scheduler, make_unet

__all__ = ["fit", "check", "unet_state", "save_folder"]


def unet_state(state: dict) -> dict:
    """The ``UNet2DModel`` state dict inside a :class:`UNetDenoiser` state dict (keys ``unet.*``)."""
    return {k[len("unet."):]: v for k, v in state.items() if k.startswith("unet.")}


def save_folder(unet, scheduler, folder: Path) -> None:
    """``folder/unet`` and ``folder/scheduler`` by ``save_pretrained``, written beside and renamed in (a kill
    leaves the old folder, the new one, or none -- never a torn one; the side file holds the weights anyway)."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    unet.save_pretrained(tmp / "unet")
    scheduler.save_pretrained(tmp / "scheduler")
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def _progress(ctx, label: str):
    """``progress(epoch, epochs, loss)`` of :func:`ridgexr.fit_neural`: the run's progress line with the loss
    and the remaining time estimated from this call's epochs so far."""
    start, first = time.perf_counter(), []

    def report(epoch: int, epochs: int, loss: float) -> None:
        first.append(epoch)  # the first reported epoch (a resumed run starts past 1)
        done = epoch - first[0] + 1
        eta = (time.perf_counter() - start) / done * (epochs - epoch)
        ctx.say(f"{label} epoch {epoch}/{epochs} loss {loss:.4g}, ETA {eta:.0f} s")

    return report


def check(exp, block, train) -> None:
    """Before the lock: the training set's d is the images' in_channels x height x width, and
    ``process.T`` lies within the OU times of the block's scheduler."""
    where = f"{exp.source}: entry {exp.name!r}" if exp.source else f"entry {exp.name!r}"
    if train.shape[1] != block.d:
        raise ValueError(f"{where}: model {block.label!r}: images of {block.in_channels} x {block.sample_size[0]} x "
                         f"{block.sample_size[1]} (d = {block.d}) do not fit the training set's d = {train.shape[1]}")
    t_k = scheduler_times(make_scheduler(block))
    if not t_k[0] <= exp.loss_t_min < exp.process.T <= t_k[-1]:
        raise ValueError(f"{where}: model {block.label!r}: the loss's times {exp.loss_t_min:g} .. `process.T` "
                         f"{exp.process.T:g} must lie within the OU times {t_k[0]:.6g} .. {t_k[-1]:.6g} of its "
                         f"scheduler ({block.beta_schedule}, {block.num_train_timesteps} timesteps)")


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Train a unet block for its cells; ``{cell index: FittedCell}`` (state: the UNet2DModel's weights
    at the cell's epoch, EMA ones with ``ema``).  One run per (schedule, n_train) to the largest listed
    epoch; checkpoints (module doc) under ``ctx.checkpoint_root`` resume on a rerun."""
    exp, train = ctx.exp, ctx.train
    n_trains = exp.dataset.n_trains
    prefix = ctx.prefix(block)
    out = {}
    def run_key(lab):  # (schedule, n_train, data_draw): one run per training set
        return lab["schedule"], lab.get("n_train", n_trains[0]), lab.get("data_draw")

    runs = sorted({run_key(lab) for _, lab in cells}, key=str)
    for s, n_train, data_draw in runs:
        rows = exp.dataset.rows({"n_train": n_train} | ({} if data_draw is None else {"data_draw": data_draw}))
        scheduler = make_scheduler(block)
        net = UNetDenoiser(make_unet(block, exp.seeds.init), scheduler)
        tail = "" if data_draw is None else f"-d{data_draw}"  # a manifold's independent training set
        ck = (None if ctx.checkpoint_root is None else
              ctx.checkpoint_root / block.label / f"{s}-n{'all' if n_train is None else n_train}{tail}")

        def export(model, epoch, ck=ck, scheduler=scheduler):
            save_folder(model.unet, scheduler, ck / "latest")
            if epoch in block.epoch_list:
                save_folder(model.unet, scheduler, ck / f"epoch-{epoch}")

        fitted = fit_neural(
            net, train[rows], schedule=s, epochs=max(block.epoch_list), batch_size=block.batch_size, lr=block.lr,
            optimizer=block.optimizer, ema=block.ema, t_min=exp.loss_t_min, T=exp.process.T,
            seed=exp.seeds.training, device=ctx.device, checkpoint_dir=ck, save_epochs=block.epoch_list,
            export=None if ck is None else export,
            progress=_progress(ctx, f"{prefix}{s}"), mixed_precision=block.mixed_precision,
            timesteps=scheduler_times(scheduler) if block.time_convention == "scheduler" else None)
        for idx, lab in cells:
            if run_key(lab) != (s, n_train, data_draw):
                continue
            epoch = lab.get("epoch", max(block.epoch_list))
            model = fitted.at_epoch(epoch)
            ctx.say(f"{prefix}{s} epoch {epoch}: held-out diagnostics")
            values = heldout_diagnostics(model.denoise, heldout_sample(ctx, rows, block.diagnostics), s,
                                         exp.d_star, loss=float(fitted.losses[epoch - 1]),
                                         progress=ctx.node_bar(f"{prefix}held-out diagnostics (time nodes)"))
            out[idx] = FittedCell(unet_state(fitted.snapshots[epoch]), values)
    return out
