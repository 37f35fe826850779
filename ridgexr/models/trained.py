"""The one training loop of the kinds trained here by minibatch DSM (mlp, unet, and any after them).

A kind's ``fit`` calls :func:`fit_epoch_block` with what differs between kinds -- how to build the
network, what it exports; which cell labels make separate runs, and their checkpoint folders' names, are
the spec's (``run_tags``, :meth:`ridgexr.models.model_spec.EpochTrainedSpec.training_runs`) -- and gets
the same behaviour for everything else: one :func:`ridgexr.fit_neural` run per (run labels, n_train,
data_draw) to the largest listed epoch, ``training.keep``, ``ema`` and the block's ``weights`` (which of
the averaged or raw weights the cells sample with), ``time_proposal``, resumable checkpoints, a progress
line with the remaining time, and the held-out diagnostics of every cell at the loss of the epoch whose
weights it keeps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import torch

from ..training import fit_neural
from ..training.heldout import heldout_diagnostics, heldout_sample, no_diagnostics
from .kind import FittedCell

__all__ = ["fit_epoch_block", "progress_line", "checkpoint_every", "CHECKPOINTS_PER_RUN"]

#: at most about this many resumable checkpoints per training run: a run of E epochs writes one every
#: max(1, E // CHECKPOINTS_PER_RUN) epochs (and after the last).  Each write holds every snapshot so far,
#: so writing after each of thousands of one-step epochs (timescales-gmm) cost more than the training
CHECKPOINTS_PER_RUN = 100


def checkpoint_every(block) -> int:
    """Epochs between a run's checkpoint writes: every epoch up to :data:`CHECKPOINTS_PER_RUN` epochs (the
    behaviour before), else max(epochs) // CHECKPOINTS_PER_RUN.

    >>> from types import SimpleNamespace
    >>> checkpoint_every(SimpleNamespace(epoch_list=[10, 150])), checkpoint_every(SimpleNamespace(epoch_list=[30000]))
    (1, 300)
    """
    return max(1, max(block.epoch_list) // CHECKPOINTS_PER_RUN)


def progress_line(ctx, label: str) -> Callable[[int, int, float], None]:
    """``progress(epoch, epochs, loss)`` of :func:`ridgexr.fit_neural`: the run's progress line with the loss
    and the remaining time estimated from this call's epochs so far (a resumed run starts past epoch 1)."""
    start, first = time.perf_counter(), []

    def report(epoch: int, epochs: int, loss: float) -> None:
        first.append(epoch)
        done = epoch - first[0] + 1
        eta = (time.perf_counter() - start) / done * (epochs - epoch)
        ctx.say(f"{label} epoch {epoch}/{epochs} loss {loss:.4g}, ETA {eta:.0f} s")

    return report


def fit_epoch_block(ctx, block, cells: list[tuple[tuple, dict]], *, make_net: Callable[[dict], torch.nn.Module],
                    export: Callable[[Path, dict, int], None] | None = None,
                    state: Callable[[dict], object] = lambda s: s, fit_options: Callable[[torch.nn.Module], dict] | None = None
                    ) -> dict:
    """Train an epoch-trained block for its cells; ``{cell index: FittedCell}``.

    Parameters
    ----------
    ctx : ridgexr.models.kind.FitContext
    block : the kind's spec (an :class:`ridgexr.models.model_spec.EpochTrainedSpec`): its ``run_dims`` are the cell
        labels that make separate training runs besides ``n_train`` and ``data_draw``, and ``run_folder`` names a
        run's checkpoint folder under ``ctx.checkpoint_root / block.label``
    cells : list of (index, labels)
    make_net : callable(labels) -> torch.nn.Module
        A fresh network for a run (``labels``: the run's labels by name).
    export : callable(folder, models, epoch), optional
        Publishes the weights at each checkpoint (``models``: {"ema": ..., "raw": ...}, as
        :func:`ridgexr.fit_neural` passes them).
    state : callable(state dict) -> object
        What a cell's builder reads, from the weights the cell samples with.
    fit_options : callable(net) -> dict, optional
        Further keyword arguments of :func:`ridgexr.fit_neural` for a run (e.g. a scheduler's timesteps).
    """
    exp, train = ctx.exp, ctx.train
    n_trains = exp.dataset.n_trains
    prefix = ctx.prefix(block)

    def run_of(lab: dict) -> str:
        return block.run_folder(lab | {"n_train": lab.get("n_train", n_trains[0])})

    out = {}
    for folder, labels in block.training_runs([lab for _, lab in cells], n_trains[0]).items():
        n_train, data_draw = labels["n_train"], labels["data_draw"]
        rows = exp.dataset.rows({"n_train": n_train} | ({} if data_draw is None else {"data_draw": data_draw}))
        net = make_net(labels)
        ck = None if ctx.checkpoint_root is None else ctx.checkpoint_root / block.label / folder
        name = "/".join(str(labels[dim]) for dim in block.run_dims)
        fitted = fit_neural(
            net, train[rows], schedule=labels["schedule"], epochs=max(block.epoch_list), batch_size=block.batch_size,
            lr=block.lr, optimizer=block.optimizer, ema=block.ema, t_min=exp.loss_t_min, T=exp.process.T,
            seed=exp.seeds.training, device=ctx.device, checkpoint_dir=ck, save_epochs=block.epoch_list,
            keep=exp.training.keep, time_proposal=block.time_proposal, checkpoint_every=checkpoint_every(block),
            export=None if ck is None or export is None else (lambda models, epoch, ck=ck: export(ck, models, epoch)),
            progress=progress_line(ctx, f"{prefix}{name}"), **(fit_options(net) if fit_options else {}))
        for idx, lab in cells:
            if run_of(lab) != folder:
                continue
            epoch = lab.get("epoch", max(block.epoch_list))
            model = fitted.at_epoch(epoch, block.weights)
            loss = float(fitted.losses[fitted.kept[epoch] - 1])
            if getattr(block, "diagnostics", None) is None:  # not asked for (the image-scale kinds' default)
                out[idx] = FittedCell(state(fitted.weights_at(epoch, block.weights)), no_diagnostics(loss))
                continue
            ctx.say(f"{prefix}{name} epoch {epoch}: held-out diagnostics")
            values = heldout_diagnostics(model.denoise, heldout_sample(ctx, rows, block.diagnostics), labels["schedule"],
                                         exp.d_star, loss=loss,
                                         progress=ctx.node_bar(f"{prefix}{name} epoch {epoch}: held-out diagnostics"
                                                               " (time nodes)"))
            out[idx] = FittedCell(state(fitted.weights_at(epoch, block.weights)), values)
    return out
