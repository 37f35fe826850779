"""Training entry point of unet blocks: one :func:`ridgexr.fit_neural` run per (schedule, n_train).

Checkpoints live under the store's checkpoint folder, one per run
(``<label>/<schedule>-n<n_train>/``): ``checkpoint.pt``, the side file that resuming reads
(model, optimizer and EMA states, the epoch, the losses, the epoch snapshots; written
atomically, so a kill -9 at any instant leaves a resumable file), and diffusers folders written
just before it -- ``latest/unet`` + ``latest/scheduler`` (the latest weights, EMA ones with ``ema``) and
``epoch-<e>/unet`` + ``epoch-<e>/scheduler`` for every listed epoch; with ``ema`` the raw weights beside
them as ``latest-raw/`` and ``epoch-<e>-raw/`` -- which ``UNet2DModel.from_pretrained`` /
``DDPMPipeline`` and ``kind: diffusers`` load as they are.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..diffusers.denoiser import scheduler_times
from ..trained import fit_epoch_block
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
    """Train a unet block for its cells; ``{cell index: FittedCell}`` (state: the UNet2DModel's weights at the
    cell's epoch, the block's ``weights``: EMA or raw).  One run per (schedule, n_train) to the largest listed
    epoch through the neural kinds' one loop (:func:`ridgexr.models.trained.fit_epoch_block`); checkpoints
    (module doc) under ``ctx.checkpoint_root`` resume on a rerun."""
    def make_net(lab: dict) -> UNetDenoiser:
        return UNetDenoiser(make_unet(block, ctx.exp.seeds.init), make_scheduler(block))

    def export(ck: Path, models: dict, epoch: int) -> None:
        scheduler = make_scheduler(block)
        for which, model in models.items():  # "ema" (with ema) and "raw"
            tail = "" if which == "ema" or len(models) == 1 else "-raw"
            save_folder(model.unet, scheduler, ck / f"latest{tail}")
            if epoch in block.epoch_list:
                save_folder(model.unet, scheduler, ck / f"epoch-{epoch}{tail}")

    def fit_options(net) -> dict:
        times = scheduler_times(net.scheduler) if block.time_convention == "scheduler" else None
        return dict(timesteps=times, mixed_precision=block.mixed_precision)

    return fit_epoch_block(ctx, block, cells, make_net=make_net, export=export, state=unet_state,
                           fit_options=fit_options)
