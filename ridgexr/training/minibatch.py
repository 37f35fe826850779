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

**The trainer.**  :func:`fit_neural` checks its arguments into a :class:`TrainingOptions` and drives a
:class:`MinibatchTrainer`: setup (``__init__``), :meth:`~MinibatchTrainer.resume`, then per epoch
:meth:`~MinibatchTrainer.train_epoch`, :meth:`~MinibatchTrainer.keep_weights` and
:meth:`~MinibatchTrainer.checkpoint` (the export hook, then the side file), and :meth:`~MinibatchTrainer.result`.
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

__all__ = ["OPTIMIZERS", "NeuralFit", "fit_neural", "MinibatchTrainer", "TrainingOptions", "dsm_loss_rows",
           "resolve_device"]

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
    arr, opts = _validated_options(model, train, schedule=schedule, epochs=epochs, batch_size=batch_size, lr=lr,
                                   optimizer=optimizer, ema=ema, t_min=t_min, T=T, seed=seed, device=device,
                                   parametrization=parametrization, checkpoint_every=checkpoint_every,
                                   save_epochs=save_epochs, keep=keep, process=process, timesteps=timesteps,
                                   mixed_precision=mixed_precision, time_proposal=time_proposal)
    run = MinibatchTrainer(model, arr, opts)
    if checkpoint_dir is not None:
        run.resume(checkpoint_dir)
    bar, report = (None, progress) if callable(progress) else (_rich_progress(opts.epochs, run.start) if progress
                                                                else (None, None))
    t0 = time.perf_counter()
    if bar is not None:
        bar.start()
    try:
        for epoch in range(run.start + 1, opts.epochs + 1):
            mean = run.train_epoch(epoch)
            run.keep_weights(epoch)
            run.checkpoint(epoch, export)
            if report is not None:
                report(epoch, opts.epochs, mean)
    finally:
        if bar is not None:
            bar.stop()
    return run.result(seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class TrainingOptions:
    """:func:`fit_neural`'s arguments, validated (its docstring says what each one is).

    ``device`` is a ``torch.device``; ``save_epochs`` sorted and distinct; ``timesteps`` a float64 array or None;
    ``proposal`` the :class:`ridgexr.training.proposal.TimeProposal` of the rows' times.
    """

    schedule: Any
    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    ema: float | None
    t_min: float
    T: float
    seed: int
    device: torch.device
    parametrization: str
    checkpoint_every: int | None
    save_epochs: list
    keep: str
    process: OU
    timesteps: np.ndarray | None
    mixed_precision: str
    time_proposal: str
    proposal: TimeProposal


def _validated_options(model: Any, train: Any, *, schedule, epochs, batch_size, lr, optimizer, ema, t_min, T,
                       seed, device, parametrization, checkpoint_every, save_epochs, keep, process, timesteps,
                       mixed_precision, time_proposal) -> tuple[np.ndarray, TrainingOptions]:
    """:func:`fit_neural`'s arguments checked (``TypeError`` / ``ValueError`` naming the argument) and resolved:
    the training points as a float64 (N, d) array and the options."""
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
    return arr, TrainingOptions(schedule=schedule, epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer,
                                ema=ema, t_min=t_min, T=T, seed=seed, device=dev,
                                parametrization=parametrization, checkpoint_every=checkpoint_every,
                                save_epochs=save_epochs, keep=keep, process=process, timesteps=t_k,
                                mixed_precision=mixed_precision, time_proposal=time_proposal, proposal=proposal)


class MinibatchTrainer:
    """One :func:`fit_neural` run: its state and its four steps.

    Setup (``__init__``: the model on its device in train mode, the optimizer, the EMA, the checkpoint's
    identity ``config``), :meth:`resume` (from a checkpoint of the same ``config``), :meth:`train_epoch` (one
    epoch's draws and minibatch steps), :meth:`keep_weights` (the snapshots and, with ``keep="best"``, the best
    epoch so far), :meth:`checkpoint` (the export hook, then the side file) and :meth:`result` (the
    :class:`NeuralFit`).  Epoch k's draws come from its own generator (:func:`_epoch_generator`), so the steps
    can be called in any process that holds the state.

    Parameters
    ----------
    model : torch.nn.Module
        Trained in place.
    train : (N, d) float64 ndarray
        The training points, finite (:func:`fit_neural` checks them).
    opts : TrainingOptions
    """

    def __init__(self, model: torch.nn.Module, train: np.ndarray, opts: TrainingOptions):
        self.model, self.opts, self.train = model, opts, train
        dev = opts.device
        model.to(dev).train()
        self.dtype = next(model.parameters()).dtype
        self.optimizer = _make_optimizer(opts.optimizer, model.parameters(), opts.lr)
        self.averaged = None if opts.ema is None else WeightEMA(model, opts.ema)
        self.config = _checkpoint_config(model, train, opts, self.dtype)
        self.amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(opts.mixed_precision)
        self.scaler = torch.amp.GradScaler(dev.type) if opts.mixed_precision == "fp16" else None
        self.losses: list[float] = []
        self.batch_losses: list[float] = []
        self.snapshots: dict[int, dict] = {}
        self.raw_snapshots: dict[int, dict] = {} if self.averaged is not None else self.snapshots
        self.kept: dict[int, int] = {}
        # keep="best": the best epoch so far and its weights (published and raw)
        self.best = dict(loss=math.inf, epoch=0, state=None, raw=None)
        self.start = 0
        self.ckpt: Path | None = None
        self.every = 1
        self.x_all = torch.as_tensor(train, dtype=self.dtype, device=dev)
        # the uniform proposal's weight is one number (T - t_min, or 1 over timesteps): kept as a scalar factor,
        # so its losses are the same floating-point numbers as before proposals existed
        self.scale = ((opts.T - opts.t_min if opts.timesteps is None else 1.0) if opts.time_proposal == "uniform"
                      else None)

    @property
    def published(self) -> torch.nn.Module:
        """The weights a caller samples with: the EMA's with ``ema``, else the trained model's."""
        return self.averaged.module if self.averaged is not None else self.model

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The model's output; under ``mixed_precision`` the autocast region is the model alone."""
        if self.amp is None:
            return self.model(x, t)
        with torch.autocast(device_type=self.opts.device.type, dtype=self.amp):
            out = self.model(x, t)
        return out.to(self.dtype)

    def resume(self, checkpoint_dir: str | Path) -> None:
        """Use ``checkpoint_dir`` for checkpoints; continue from the one it holds (same ``config`` only).

        Raises
        ------
        ValueError
            When the folder holds a checkpoint of another configuration (naming the fields that differ).
        """
        ckpt_dir = Path(checkpoint_dir)
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt = ckpt_dir / CHECKPOINT_NAME
        self.every = self.opts.checkpoint_every or 1
        if not self.ckpt.exists():
            return
        state = load_plain(self.ckpt, map_location=self.opts.device)  # plain state: a pickled callable is refused
        config = self.config
        if state["config"] != config:
            diff = sorted(k for k in set(config) | set(state["config"]) if config.get(k) != state["config"].get(k))
            raise ValueError(f"`checkpoint_dir` {str(ckpt_dir)!r} holds a checkpoint of another configuration "
                             f"(differs in {diff}); use another folder or delete it")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.averaged is not None:
            self.averaged.load_state_dict(state["ema"])
        self.losses, self.snapshots, self.start = list(state["losses"]), dict(state["snapshots"]), int(state["epoch"])
        self.raw_snapshots = dict(state["raw_snapshots"]) if self.averaged is not None else self.snapshots
        self.batch_losses, self.kept = list(state["batch_losses"]), dict(state["kept"])
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.best = dict(state["best"])

    def train_epoch(self, epoch: int) -> float:
        """Epoch ``epoch``: its shuffle, times and noise, one optimizer step per minibatch; its mean loss.

        Appends the mean loss (paper units) to ``losses`` and the mean minibatch loss to ``batch_losses``.

        Raises
        ------
        ValueError
            When the epoch's loss is not finite (training diverged).
        """
        opts, n, d = self.opts, self.train.shape[0], self.train.shape[1]
        dev, dtype, scale = opts.device, self.dtype, self.scale
        g = _epoch_generator(opts.seed, epoch)
        perm = torch.randperm(n, generator=g)
        t, iw = opts.proposal.draw(n, g)  # times and importance weights 1 / q(t)
        z = torch.randn(n, d, generator=g, dtype=torch.float64)
        w = torch.as_tensor(schedule_weight(opts.schedule, t.numpy(), opts.process))
        if scale is None:  # the weight proposal: each row's importance weight folded into its loss weight
            w = w * iw
        t_d, z_d, w_d = t.to(dtype).to(dev), z.to(dtype).to(dev), w.to(dtype).to(dev)
        total = 0.0
        batch_sum = 0.0
        for lo in range(0, n, opts.batch_size):  # minibatch steps: the optimizer's loop
            idx = perm[lo:lo + opts.batch_size].to(dev)
            rows = dsm_loss_rows(self.forward, self.x_all[idx], t_d[idx], z_d[idx], w_d[idx], opts.parametrization,
                                 opts.process)
            loss = rows.mean() if scale is None else scale * rows.mean()
            self._step(loss)
            total += float(rows.detach().sum())
            batch_sum += float(loss.detach())
        mean = (1.0 if scale is None else scale) * total / n
        if not math.isfinite(mean):
            raise ValueError(f"training diverged at epoch {epoch} (loss {mean}); lower `lr`")
        self.losses.append(mean)
        self.batch_losses.append(batch_sum / math.ceil(n / opts.batch_size))
        return mean

    def _step(self, loss: torch.Tensor) -> None:
        """One optimizer step on ``loss`` (through the GradScaler under fp16), then the EMA's update."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        if self.averaged is not None:
            self.averaged.update(self.model)

    def keep_weights(self, epoch: int) -> None:
        """After ``epoch``: the best epoch so far (``keep="best"``) and, at a saved epoch, its snapshots."""
        src = self.published
        if self.opts.keep == "best" and self.batch_losses[-1] < self.best["loss"]:
            self.best = dict(loss=self.batch_losses[-1], epoch=epoch, state=_cpu_state(src),
                             raw=None if self.averaged is None else _cpu_state(self.model))
        if epoch not in self.opts.save_epochs:
            return
        if self.opts.keep == "best":
            self.snapshots[epoch], self.kept[epoch] = self.best["state"], self.best["epoch"]
            if self.averaged is not None:
                self.raw_snapshots[epoch] = self.best["raw"]
        else:
            self.snapshots[epoch] = _cpu_state(src)
            if self.averaged is not None:
                self.raw_snapshots[epoch] = _cpu_state(self.model)
            self.kept[epoch] = epoch

    def checkpoint(self, epoch: int, export: Callable[[dict, int], None] | None = None) -> None:
        """At a checkpoint epoch (every ``checkpoint_every`` and the last; none without a folder): ``export``
        with the models (``{"ema": ..., "raw": ...}``, only ``"raw"`` without EMA), then the side file written
        atomically (:func:`ridgexr._backend.save_atomic`)."""
        if self.ckpt is None or not (epoch % self.every == 0 or epoch == self.opts.epochs):
            return
        averaged = self.averaged
        if export is not None:
            export({"raw": self.model} if averaged is None else {"ema": averaged.module, "raw": self.model}, epoch)
        save_atomic(dict(config=self.config, epoch=epoch, model=self.model.state_dict(),
                         optimizer=self.optimizer.state_dict(),
                         ema=None if averaged is None else averaged.state_dict(), losses=self.losses,
                         snapshots=self.snapshots, batch_losses=self.batch_losses, kept=self.kept, best=self.best,
                         raw_snapshots=None if averaged is None else self.raw_snapshots,
                         **({} if self.scaler is None else {"scaler": self.scaler.state_dict()})), self.ckpt)

    def result(self, seconds: float = 0.0) -> NeuralFit:
        """The :class:`NeuralFit` after the last epoch: the published weights (the best epoch's with
        ``keep="best"``) in eval mode, the losses, snapshots and ``kept`` epochs; ``seconds`` of training."""
        opts = self.opts
        final = self.published
        if opts.keep == "best":
            final.load_state_dict(self.best["state"])
        self.kept[opts.epochs] = self.best["epoch"] if opts.keep == "best" else opts.epochs
        return NeuralFit(model=final.eval(), schedule=schedule_name(opts.schedule), epochs=opts.epochs,
                         losses=np.array(self.losses), snapshots=self.snapshots, raw_snapshots=self.raw_snapshots,
                         minibatch_losses=np.array(self.batch_losses), kept=self.kept, seconds=seconds,
                         resumed_from=self.start, config=self.config)


def _checkpoint_config(model: torch.nn.Module, train: np.ndarray, opts: TrainingOptions, dtype) -> dict:
    """Everything that determines a run's weights: a checkpoint's identity (a resumed run must match it)."""
    t_k = opts.timesteps
    return dict(format=CHECKPOINT_FORMAT, model=type(model).__name__, initial_weights=callable_digest(model),
                n_parameters=int(sum(p.numel() for p in model.parameters())), parametrization=opts.parametrization,
                schedule=schedule_name(opts.schedule), epochs=opts.epochs, batch_size=opts.batch_size, lr=opts.lr,
                optimizer=opts.optimizer, ema=opts.ema, t_min=opts.t_min, T=opts.T, seed=opts.seed,
                train=_train_digest(train), save_epochs=opts.save_epochs, dtype=str(dtype),
                **({"keep": opts.keep} if opts.keep != "last" else {}),
                **({} if t_k is None else {"timesteps": hashlib.sha256(t_k.tobytes()).hexdigest()[:16]}),
                **({"mixed_precision": opts.mixed_precision} if opts.mixed_precision != "none" else {}),
                **({"time_proposal": opts.time_proposal} if opts.time_proposal != "uniform" else {}))


def _cpu_state(module: torch.nn.Module) -> dict:
    """A detached CPU copy of ``module``'s state dict (a snapshot)."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
