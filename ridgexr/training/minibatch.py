"""Training neural denoisers by minibatch denoising score matching, with resumable checkpoints.

The loss is the package's one definition (:mod:`ridgexr.training`), estimated by Monte Carlo:

    L(f) = int_{t_min}^{T} E_{x0, z} w(t) |s_f(x_t, t) + z / sqrt(h_t)|^2 dt
         ~ mean_rows w(t) |s_f(x_t, t) + z / sqrt(h_t)|^2 / q(t),   t ~ q,

x0 a training point, z ~ N(0, I), one (t, z) draw per point per epoch
(:func:`ridgexr.parametrization.dsm_row_loss` writes the per-row term for each parametrization).
The time proposal q (``time_proposal``, :class:`ridgexr.training.proposal.TimeProposal`) is uniform on
[t_min, T] by default (1 / q = T - t_min: the Monte-Carlo counterpart of the random-feature fit's
quadrature in t, so the two losses estimate the same number, tested on a shared sample), or
proportional to w(t) / h_t (``"weight"``), which gives every row the same weight and keeps the
estimator's variance bounded where w spans orders of magnitude (w = 1 at t_min = 1e-3: 1 / h ~ 500).

**Weight averaging** (``ema``): :class:`ridgexr.training.ema.WeightEMA`, diffusers' warm-up rule
(decay min(ema, k / (9 + k)) at step k >= 2; the first step copies the weights).  Both the averaged and
the optimizer's own (raw) weights are kept at every saved epoch (``NeuralFit.snapshots`` and
``raw_snapshots``); the returned model carries the averaged ones.

**A scheduler's time convention** (``timesteps``: the OU times t_k of a diffusers scheduler's
integer timesteps k = 0 .. K-1, alpha_bar_k = e^{-2 t_k}): each row's timestep is drawn
uniformly, k ~ U{0, ..., K-1}, as diffusers' training loop does (``torch.randint``), with the
same row term and weight w(t_k), and the loss is their plain mean

    L_K(f) = E_k E_{x0, z} w(t_k) |s_f(x_{t_k}, t_k) + z / sqrt(h_{t_k})|^2 ~ mean_rows (...),

an average over the scheduler's timesteps rather than an integral over OU time (no (T - t_min)
factor; t_min and T do not enter), so its values are not comparable with the OU convention's.

**Mixed precision** (``mixed_precision``): the model's forward pass runs under
``torch.autocast`` (float16 or bfloat16) and its output is cast back to the parameters' dtype
before the row term, which is computed there; float16 scales the loss with a
``torch.amp.GradScaler`` (CUDA only, whose state the checkpoint keeps).  bfloat16 needs no scaler
and works on CPU too.

**Reproducibility.**  Epoch k's shuffling, times and noise come from a CPU generator seeded
by (seed, k), so they depend on nothing but the seed and the epoch; with the model,
optimizer and EMA state of a checkpoint a resumed run continues exactly where the first one
stopped (bit for bit on CPU with the same torch thread count).

**Checkpoints.**  ``checkpoint_dir/checkpoint.pt`` holds the model, optimizer and EMA
states, the epoch, the losses so far, the kept snapshots and the configuration; it is written
to a temporary file, flushed to disk and renamed over the old one, so a kill at any instant
leaves either the previous or the new checkpoint, never a torn one.  A later call with the
same configuration (hyperparameters, training data and the model's initial weights) resumes
from it; a different configuration is refused.
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .. import defaults
from ..choices import KEEP_EPOCHS, MIXED_PRECISIONS, OPTIMIZERS, TIME_PROPOSALS, TRAINED_WEIGHTS
from .._backend import callable_digest, load_plain, save_atomic
from .._validation import check_float, check_int, check_option
from ..parametrization import PARAMETRIZATIONS, dsm_row_loss
from ..process import OU
from .ema import WeightEMA
from .proposal import TimeProposal
from .schedules import schedule_name, schedule_weight

__all__ = ["OPTIMIZERS", "NeuralFit", "fit_neural", "dsm_loss_rows", "resolve_device"]

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = 3  # 2: minibatch losses and the kept (best) weights; 3: EMA with warm-up, raw snapshots


def resolve_device(device: Any) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; anything else through ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"`device` must be 'auto', 'cpu', 'cuda' or 'cuda:N'; got {device!r}") from None


def dsm_loss_rows(model: Callable, x0: torch.Tensor, t: torch.Tensor, z: torch.Tensor, w: torch.Tensor,
                  parametrization: str, process: OU | None = None) -> torch.Tensor:
    """Per-row loss ``w(t) norm(s(x_t, t) + z / sqrt(h_t))^2`` (B,) of ``model`` at x_t = alpha_t x0 + sqrt(h_t) z.

    x0, z (B, d), t, w (B,) in the model's dtype; the row term of :func:`fit_neural`'s loss
    (:func:`ridgexr.parametrization.dsm_row_loss` on the model's output).
    """
    process = process or OU()
    xt = process.alpha(t)[:, None] * x0 + torch.sqrt(process.h(t))[:, None] * z
    return dsm_row_loss(model(xt, t), x0, z, t, w, parametrization, process)


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    state = np.random.SeedSequence([seed, epoch]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def _train_digest(train: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(train, dtype=np.float64).tobytes()).hexdigest()[:16]


@dataclass
class NeuralFit:
    """A neural denoiser trained by :func:`fit_neural`.

    Attributes
    ----------
    model : torch.nn.Module
        The trained network on its device, in eval mode; with ``ema`` the EMA weights.
    schedule : str
        The loss-weight schedule's name.
    epochs : int
        Epochs trained in total.
    losses : (epochs,) ndarray
        Mean training loss of each epoch (paper units: the time integral, summed over coordinates).
    snapshots : dict epoch -> state dict
        The model's weights (EMA weights with ``ema``) after each epoch in ``save_epochs``, on CPU;
        with ``keep="best"`` the weights of the best epoch up to that one (``kept``).
    raw_snapshots : dict epoch -> state dict
        The optimizer's own weights at the same epochs (the same dict as ``snapshots`` without ``ema``).
    minibatch_losses : (epochs,) ndarray
        Mean of each epoch's minibatch losses (the quantity ``keep="best"`` minimises; equal to
        ``losses`` when every minibatch is full).
    kept : dict epoch -> int
        For each saved epoch (and for ``epochs``, the returned model) the epoch whose weights are kept:
        itself with ``keep="last"``, the epoch of smallest ``minibatch_losses`` up to it with ``"best"``.
    seconds : float
        Wall time of this call's training (a resumed call counts only its own epochs).
    resumed_from : int
        Epoch of the checkpoint this call started from (0: a fresh start).
    config : dict
        Everything that determines the weights (the checkpoint's identity).
    """

    model: torch.nn.Module
    schedule: str
    epochs: int
    losses: np.ndarray
    snapshots: dict[int, dict] = field(default_factory=dict)
    raw_snapshots: dict[int, dict] = field(default_factory=dict)
    minibatch_losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    kept: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    resumed_from: int = 0
    config: dict = field(default_factory=dict)

    def weights_at(self, epoch: int, weights: str = "ema") -> dict:
        """The state dict saved after ``epoch``: the averaged weights (``"ema"``; the only ones without
        ``ema``) or the optimizer's own (``"raw"``)."""
        if epoch not in self.snapshots:
            raise ValueError(f"`epoch` must be one of the saved epochs {sorted(self.snapshots)}; got {epoch!r}")
        check_option(weights, "weights", TRAINED_WEIGHTS)
        return (self.raw_snapshots or self.snapshots)[epoch] if weights == "raw" else self.snapshots[epoch]

    def at_epoch(self, epoch: int, weights: str = "ema") -> torch.nn.Module:
        """A copy of the model carrying the weights saved after ``epoch`` (one of ``save_epochs``);
        ``weights`` as in :meth:`weights_at`."""
        m = copy.deepcopy(self.model)
        m.load_state_dict(self.weights_at(epoch, weights))
        return m.eval()


def _make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


def _rich_progress(total: int, start: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
                   TimeRemainingColumn(), transient=True)
    task = bar.add_task("fit", total=total, completed=start, loss="-")
    return bar, (lambda epoch, n, loss: bar.update(task, completed=epoch, loss=f"{loss:.4g}"))


def fit_neural(model: torch.nn.Module, train: Any, *, schedule: str | Callable = "1",
               epochs: int = defaults.MLP_EPOCHS, batch_size: int = defaults.MLP_BATCH_SIZE, lr: float = defaults.MLP_LR,
               optimizer: str = defaults.MLP_OPTIMIZER, ema: float | None = None,
               t_min: float = defaults.T_MIN, T: float = defaults.T, seed: int = 0, device: Any = "auto",
               parametrization: str | None = None, checkpoint_dir: str | Path | None = None,
               checkpoint_every: int | None = None, save_epochs: Sequence[int] = (), keep: str = "last",
               progress: bool | Callable[[int, int, float], None] = False,
               process: OU | None = None,
               export: Callable[[torch.nn.Module, int], None] | None = None,
               timesteps: Sequence[float] | None = None, mixed_precision: str = "none",
               time_proposal: str = "uniform") -> NeuralFit:
    """Train ``model`` by minibatch denoising score matching (the package's loss; module doc).

    Parameters
    ----------
    model : torch.nn.Module
        ``model(x_t, t) -> output`` (B, d) for x_t (B, d) and t (B,) in its parameters' dtype
        (float32 by default: networks train in float32), e.g. :class:`ridgexr.MLPDenoiser`.
        Trained in place.
    train : (N, d) array
        Training points (data units).
    schedule : {"1", "h", "h2"} or callable
        Loss weight w(t) of the score-matching loss.
    epochs : int
        Passes over the training set (the paper's MNIST network: 150).
    batch_size : int
        Training points per optimizer step (one (t, z) draw each).
    lr : float
        Learning rate (default 1e-3, ours; the authors' MNIST notebook trains its score network with Adam at 1e-4).
    optimizer : {"adam", "adamw", "sgd"}
    ema : float, optional
        Largest decay of an exponential moving average of the weights (e.g. 0.999) with diffusers'
        warm-up (module doc); the EMA weights are the returned model's and ``snapshots``', the raw ones
        ``raw_snapshots``'.  None: no averaging.
    t_min, T : float
        Time range of the loss (OU time).
    seed : int
        Seed of every epoch's shuffling, times and noise (the model's own seed sets its init).
    device : "auto", "cpu", "cuda", ...
        Where to train ("auto": CUDA when available).
    parametrization : str, optional
        How the output is read (default: ``model.parametrization``).
    checkpoint_dir : path, optional
        Folder of the resumable checkpoint (module doc); resumed when it holds one of the
        same configuration.
    checkpoint_every : int, optional
        Write the checkpoint every this many epochs (and after the last); default: every epoch
        when ``checkpoint_dir`` is set.
    save_epochs : sequence of int
        Epochs (1..epochs) after which the weights are kept as snapshots (an ``epoch`` dimension).
    keep : {"last", "best"}
        Which weights training stopped at an epoch returns: that epoch's ("last"), or those of the
        epoch with the smallest mean minibatch loss so far ("best": the authors' MNIST notebook keeps
        the best epoch so). Applies to the returned model and to every snapshot.
    progress : bool or callable(epoch, epochs, loss)
        True: a rich progress bar with the loss.
    process : OU, optional
    export : callable(models, epoch), optional
        Called at each checkpoint, before the side file ``checkpoint.pt`` is written, with
        ``{"ema": averaged model, "raw": trained model}`` (only ``"raw"`` without ``ema``) and the
        epoch: e.g. diffusers ``save_pretrained`` folders (:mod:`ridgexr.models.unet`).  Resuming
        reads only the side file.
    timesteps : (K,) array, optional
        OU times t_k (> 0, finite) of a scheduler's integer timesteps: each row's time is t_k with
        k ~ U{0, ..., K-1} and the loss is the plain mean over rows (module doc); ``t_min`` and
        ``T`` are then not used by the loss.  None: t ~ U(t_min, T) (the OU convention).
    mixed_precision : {"none", "fp16", "bf16"}
        Forward pass under ``torch.autocast`` in float16 (with a GradScaler; CUDA only) or
        bfloat16 (CPU or CUDA); "none": the parameters' dtype (module doc).
    time_proposal : {"uniform", "weight"}
        How each row's time is drawn: uniformly (on [t_min, T], or over ``timesteps``), or with density
        proportional to w(t) / h_t with importance weights (:class:`ridgexr.training.proposal.TimeProposal`).

    Returns
    -------
    NeuralFit

    Raises
    ------
    ValueError
        For a bad argument (named), non-finite training data, a diverging loss, or a checkpoint
        of another configuration in ``checkpoint_dir``.

    Examples
    --------
    >>> import numpy as np
    >>> from ridgexr import MLPDenoiser
    >>> net = MLPDenoiser(2, hidden=(32, 32), embed_dim=16)
    >>> fit = fit_neural(net, np.array([[-1.0, 0.0], [1.0, 0.0]]), epochs=3, batch_size=2, device="cpu")
    >>> fit.losses.shape
    (3,)
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}")
    parametrization = parametrization or getattr(model, "parametrization", None)
    if parametrization is None:
        raise ValueError("`parametrization` must be given for a model without a `parametrization` attribute")
    check_option(parametrization, "parametrization", PARAMETRIZATIONS)
    arr = np.asarray(train, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or not np.isfinite(arr).all():
        raise ValueError(f"`train` must be a finite (N, d) array; got shape {arr.shape}")
    epochs = check_int(epochs, "epochs", min_val=1)
    batch_size = check_int(batch_size, "batch_size", min_val=1)
    lr = check_float(lr, "lr", min_val=0, include_boundaries="neither")
    check_option(optimizer, "optimizer", OPTIMIZERS)
    if ema is not None:
        ema = check_float(ema, "ema", min_val=0, max_val=1, include_boundaries="left")
    t_min = check_float(t_min, "t_min", min_val=0, include_boundaries="neither")
    T = check_float(T, "T", min_val=t_min, include_boundaries="neither")
    seed = check_int(seed, "seed", min_val=0)
    keep = check_option(keep, "keep", KEEP_EPOCHS)
    save_epochs = sorted({check_int(e, "save_epochs[i]", min_val=1, max_val=epochs) for e in save_epochs})
    if checkpoint_every is not None:
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", min_val=1)
    dev = resolve_device(device)
    check_option(mixed_precision, "mixed_precision", MIXED_PRECISIONS)
    check_option(time_proposal, "time_proposal", TIME_PROPOSALS)
    if mixed_precision == "fp16" and dev.type != "cuda":
        raise ValueError(f"`mixed_precision` 'fp16' needs a CUDA device (torch's GradScaler); got device "
                         f"{str(dev)!r}: use 'bf16' or 'none'")
    t_k = None
    if timesteps is not None:
        t_k = np.asarray(timesteps, dtype=np.float64)
        if t_k.ndim != 1 or t_k.size < 1 or not np.isfinite(t_k).all() or (t_k <= 0).any():
            raise ValueError(f"`timesteps` must be a non-empty 1-d array of finite OU times > 0; got shape "
                             f"{t_k.shape}")
    process = process or OU()
    schedule_weight(schedule, np.array([t_min, T]), process)  # validates the schedule
    proposal = TimeProposal(schedule, t_min, T, time_proposal, process=process, timesteps=t_k)
    n, d = arr.shape

    model.to(dev).train()
    dtype = next(model.parameters()).dtype
    opt = _make_optimizer(optimizer, model.parameters(), lr)
    averaged = None if ema is None else WeightEMA(model, ema)
    config = dict(format=CHECKPOINT_FORMAT, model=type(model).__name__, initial_weights=callable_digest(model),
                  n_parameters=int(sum(p.numel() for p in model.parameters())), parametrization=parametrization,
                  schedule=schedule_name(schedule), epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer,
                  ema=ema, t_min=t_min, T=T, seed=seed, train=_train_digest(arr), save_epochs=save_epochs,
                  dtype=str(dtype), **({"keep": keep} if keep != "last" else {}),
                  **({} if t_k is None else {"timesteps": hashlib.sha256(t_k.tobytes()).hexdigest()[:16]}),
                  **({"mixed_precision": mixed_precision} if mixed_precision != "none" else {}),
                  **({"time_proposal": time_proposal} if time_proposal != "uniform" else {}))
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(mixed_precision)
    scaler = torch.amp.GradScaler(dev.type) if mixed_precision == "fp16" else None

    def forward(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:  # the autocast region: the model alone
        if amp is None:
            return model(x, t)
        with torch.autocast(device_type=dev.type, dtype=amp):
            out = model(x, t)
        return out.to(dtype)
    losses: list[float] = []
    batch_losses: list[float] = []
    snapshots: dict[int, dict] = {}
    raw_snapshots: dict[int, dict] = {} if averaged is not None else snapshots
    kept: dict[int, int] = {}
    # keep="best": the best epoch so far and its weights (published and raw)
    best = dict(loss=math.inf, epoch=0, state=None, raw=None)
    start = 0
    ckpt = None
    if checkpoint_dir is not None:
        ckpt_dir = Path(checkpoint_dir)
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        ckpt = ckpt_dir / CHECKPOINT_NAME
        if ckpt.exists():
            state = load_plain(ckpt, map_location=dev)  # plain state: a pickled callable is refused, never run
            if state["config"] != config:
                diff = sorted(k for k in set(config) | set(state["config"]) if config.get(k) != state["config"].get(k))
                raise ValueError(f"`checkpoint_dir` {str(ckpt_dir)!r} holds a checkpoint of another configuration "
                                 f"(differs in {diff}); use another folder or delete it")
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            if averaged is not None:
                averaged.load_state_dict(state["ema"])
            losses, snapshots, start = list(state["losses"]), dict(state["snapshots"]), int(state["epoch"])
            raw_snapshots = dict(state["raw_snapshots"]) if averaged is not None else snapshots
            batch_losses, kept = list(state["batch_losses"]), dict(state["kept"])
            if scaler is not None:
                scaler.load_state_dict(state["scaler"])
            best = dict(state["best"])
        every = checkpoint_every or 1

    x_all = torch.as_tensor(arr, dtype=dtype, device=dev)
    # the uniform proposal's weight is one number (T - t_min, or 1 over timesteps): kept as a scalar factor,
    # so its losses are the same floating-point numbers as before proposals existed
    scale = (T - t_min if t_k is None else 1.0) if time_proposal == "uniform" else None
    bar, report = (None, progress) if callable(progress) else (_rich_progress(epochs, start) if progress else (None, None))
    t0 = time.perf_counter()
    if bar is not None:
        bar.start()
    try:
        for epoch in range(start + 1, epochs + 1):
            g = _epoch_generator(seed, epoch)
            perm = torch.randperm(n, generator=g)
            t, iw = proposal.draw(n, g)  # times and importance weights 1 / q(t)
            z = torch.randn(n, d, generator=g, dtype=torch.float64)
            w = torch.as_tensor(schedule_weight(schedule, t.numpy(), process))
            if scale is None:  # the weight proposal: each row's importance weight folded into its loss weight
                w = w * iw
            t_d, z_d, w_d = t.to(dtype).to(dev), z.to(dtype).to(dev), w.to(dtype).to(dev)
            total = 0.0
            batch_sum = 0.0
            for lo in range(0, n, batch_size):  # minibatch steps: the optimizer's loop
                idx = perm[lo:lo + batch_size].to(dev)
                rows = dsm_loss_rows(forward, x_all[idx], t_d[idx], z_d[idx], w_d[idx], parametrization, process)
                loss = rows.mean() if scale is None else scale * rows.mean()
                opt.zero_grad(set_to_none=True)
                if scaler is None:
                    loss.backward()
                    opt.step()
                else:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                if averaged is not None:
                    averaged.update(model)
                total += float(rows.detach().sum())
                batch_sum += float(loss.detach())
            mean = (1.0 if scale is None else scale) * total / n
            if not math.isfinite(mean):
                raise ValueError(f"training diverged at epoch {epoch} (loss {mean}); lower `lr`")
            losses.append(mean)
            batch_losses.append(batch_sum / math.ceil(n / batch_size))
            src = averaged.module if averaged is not None else model
            if keep == "best" and batch_losses[-1] < best["loss"]:
                best = dict(loss=batch_losses[-1], epoch=epoch, state=_cpu_state(src),
                            raw=None if averaged is None else _cpu_state(model))
            if epoch in save_epochs:
                if keep == "best":
                    snapshots[epoch], kept[epoch] = best["state"], best["epoch"]
                    if averaged is not None:
                        raw_snapshots[epoch] = best["raw"]
                else:
                    snapshots[epoch] = _cpu_state(src)
                    if averaged is not None:
                        raw_snapshots[epoch] = _cpu_state(model)
                    kept[epoch] = epoch
            if ckpt is not None and (epoch % every == 0 or epoch == epochs):
                if export is not None:
                    export({"raw": model} if averaged is None else {"ema": averaged.module, "raw": model}, epoch)
                save_atomic(dict(config=config, epoch=epoch, model=model.state_dict(), optimizer=opt.state_dict(),
                                  ema=None if averaged is None else averaged.state_dict(), losses=losses,
                                  snapshots=snapshots, batch_losses=batch_losses, kept=kept, best=best,
                                  raw_snapshots=None if averaged is None else raw_snapshots,
                                  **({} if scaler is None else {"scaler": scaler.state_dict()})), ckpt)
            if report is not None:
                report(epoch, epochs, mean)
    finally:
        if bar is not None:
            bar.stop()
    final = averaged.module if averaged is not None else model
    if keep == "best":
        final.load_state_dict(best["state"])
    kept[epochs] = best["epoch"] if keep == "best" else epochs
    return NeuralFit(model=final.eval(), schedule=schedule_name(schedule), epochs=epochs, losses=np.array(losses),
                     snapshots=snapshots, raw_snapshots=raw_snapshots, minibatch_losses=np.array(batch_losses),
                     kept=kept, seconds=time.perf_counter() - t0, resumed_from=start, config=config)


def _cpu_state(module: torch.nn.Module) -> dict:
    """A detached CPU copy of ``module``'s state dict (a snapshot)."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
