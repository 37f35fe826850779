"""Training entry point of mlp blocks: one :func:`ridgexr.fit_neural` run per (schedule, width, n_train)."""

from __future__ import annotations

from ...training import fit_neural
from ...training.heldout import heldout_diagnostics, heldout_sample
from ..kind import FittedCell
from .denoiser import MLPDenoiser, mlp_kwargs

__all__ = ["fit"]


def fit(ctx, bi: int, block, cells: list[tuple[tuple, dict]]) -> dict:
    """Train an mlp block for its cells; ``{cell index: FittedCell}`` (state: the weights at the cell's epoch).

    One run per (schedule, width, n_train, data_draw) to the largest listed epoch, with snapshots at
    the listed epochs and checkpoints under ``ctx.checkpoint_root`` (a rerun resumes them).
    """
    exp, train = ctx.exp, ctx.train
    n_trains = exp.dataset.n_trains
    prefix = ctx.prefix(block)
    out = {}
    def run_key(lab):  # (schedule, width, n_train, data_draw): one run per training set
        return lab["schedule"], lab["width"], lab.get("n_train", n_trains[0]), lab.get("data_draw")

    runs = sorted({run_key(lab) for _, lab in cells}, key=str)
    for s, w, n_train, data_draw in runs:
        rows = exp.dataset.rows({"n_train": n_train} | ({} if data_draw is None else {"data_draw": data_draw}))
        net = MLPDenoiser(train.shape[1], **mlp_kwargs(exp, block, w))
        tail = "" if data_draw is None else f"-d{data_draw}"  # a manifold's independent training set
        ck = (None if ctx.checkpoint_root is None else
              ctx.checkpoint_root / block.label / f"{s}-w{w}-n{'all' if n_train is None else n_train}{tail}")
        fitted = fit_neural(
            net, train[rows], schedule=s, epochs=max(block.epoch_list), batch_size=block.batch_size, lr=block.lr,
            optimizer=block.optimizer, ema=block.ema, t_min=exp.loss_t_min, T=exp.process.T,
            seed=exp.seeds.training, device=ctx.device, checkpoint_dir=ck, save_epochs=block.epoch_list,
            keep=exp.training.keep,
            progress=lambda e, n, loss, c=(s, w): ctx.say(f"{prefix}{c[0]}/{c[1]} epoch {e}/{n} loss {loss:.4g}"))
        for idx, lab in cells:
            if run_key(lab) != (s, w, n_train, data_draw):
                continue
            epoch = lab.get("epoch", max(block.epoch_list))
            model = fitted.at_epoch(epoch)
            ctx.say(f"{prefix}{s}/{w} epoch {epoch}: held-out diagnostics")
            values = heldout_diagnostics(model.denoise, heldout_sample(ctx, rows, block.diagnostics), s,
                                         exp.d_star, loss=float(fitted.losses[fitted.kept[epoch] - 1]),
                                         progress=ctx.node_bar(f"{prefix}{s}/{w} epoch {epoch}: held-out diagnostics"
                                                               " (time nodes)"))
            out[idx] = FittedCell(fitted.snapshots[epoch], values)
    return out
