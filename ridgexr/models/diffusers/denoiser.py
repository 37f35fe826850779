"""A diffusers ``UNet2DModel`` + scheduler read as a denoiser in the package's OU convention.

**Time.**  A discrete-time scheduler (``DDPMScheduler``, ``DDIMScheduler``, ...) defines
alpha_bar_k = ``scheduler.alphas_cumprod[k]`` at the integer timesteps k = 0 .. K - 1 and the
forward law y_k = sqrt(alpha_bar_k) x0 + sqrt(1 - alpha_bar_k) z.  The OU law at time t is
x_t = e^{-t} x0 + sqrt(1 - e^{-2t}) z: the same law when alpha_bar = e^{-2t}.  So OU time t
maps to the (real) timestep s(t) with

    log alpha_bar(s) = -2 t,   log alpha_bar(s) linear in s between integers,

i.e. t_k = -log(alpha_bar_k) / 2 at the integers and s piecewise linear in t between them
(``np.interp`` of k against t_k).  The model's input is x itself (no rescaling) and its output is
read with a = e^{-t}, b = sqrt(1 - e^{-2t}) (= sqrt(alpha_bar(s)), sqrt(1 - alpha_bar(s))).
Times outside [t_0, t_{K-1}] are refused.

``timestep="continuous"`` (default for ``time_embedding_type="positional"``, whose sinusoidal
embedding takes any real s) calls the UNet once at the float timestep s.
``timestep="interpolate"`` (default for ``"learned"``, an embedding table of integers) calls it
at k = floor(s) and k + 1, reads each output as E[x0 | x] with that timestep's own
alpha_bar_k, and returns (1 - lam) m_k + lam m_{k+1}, lam = s - k.  Both are exact at integer
timesteps; between them the interpolation's error is at most the change of the model's
E[x0 | x] over one timestep (a denoiser read one timestep off its noise level).
``time_embedding_type="fourier"`` (score-SDE VE models, which take sigma) is refused.

**Output.**  ``prediction_type`` (the scheduler's config) is read in the frame y = x,
a = sqrt(alpha_bar), b = sqrt(1 - alpha_bar): ``epsilon`` f = E[z | x], m = (x - b f) / a;
``sample`` f = m; ``v_prediction`` f = a E[z|x] - b m, m = a x - b f (since a^2 + b^2 = 1).

**Shape and scaling.**  A point of the training set is an image flattened in (C, H, W) order
(d = ``in_channels`` x height x width from the UNet's ``sample_size``).  The geometry is computed
in the model's own coordinates: the training set enters as the dataset gives it, so an image
dataset must be scaled the way the model was trained (diffusers' convention is pixels in
[-1, 1], the image datasets' ``scale: symmetric``); changing the scale changes p_t itself.  The
block's ``data_range`` checks that the training set lies in the model's pixel range.

Folders are loaded with ``local_files_only=True``: nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..._backend import as_tensor, broadcast_time, check_positive_time
from ..._validation import check_option
from ...process import OU
from ..module.denoiser import ModelError, ModuleDenoiser
from . import TIMESTEP_MODES

__all__ = ["DiffusersDenoiser", "PREDICTION_TYPES", "SCHEDULER_CLASSES", "scheduler_times", "load_unet",
           "load_scheduler", "scheduler_folder", "denoiser_from_block", "denoised_from_prediction",
           "prediction_from_denoised", "block_scheduler", "entry_scheduler", "scheduler_predict", "build"]

#: the scheduler ``prediction_type`` values this wrapper reads
PREDICTION_TYPES = ("epsilon", "sample", "v_prediction")


def scheduler_times(scheduler) -> np.ndarray:
    """OU times t_k = -log(alpha_bar_k) / 2 of the integer timesteps k = 0 .. K - 1, (K,) float64."""
    acp = torch.as_tensor(scheduler.alphas_cumprod).to(torch.float64).cpu().numpy()
    return -0.5 * np.log(acp)


def denoised_from_prediction(f: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                             prediction_type: str) -> torch.Tensor:
    """E[x0 | x] (..., d) from a scheduler-convention output f (..., d); a, b (..., 1) (module doc)."""
    if prediction_type == "epsilon":
        return (x - b * f) / a
    if prediction_type == "sample":
        return f
    return a * x - b * f


def prediction_from_denoised(m: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                             prediction_type: str) -> torch.Tensor:
    """The output (..., d) that :func:`denoised_from_prediction` reads as E[x0 | x] = m (its inverse)."""
    if prediction_type == "epsilon":
        return (x - a * m) / b
    if prediction_type == "sample":
        return m
    return (a * x - m) / b


def _sample_shape(config) -> tuple[int, int, int]:
    size = config.sample_size
    if size is None:
        raise ModelError("the UNet's config has no `sample_size`: its image shape is unknown")
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    return int(config.in_channels), int(h), int(w)


class DiffusersDenoiser(ModuleDenoiser):
    """A diffusers ``UNet2DModel`` and its scheduler as a denoiser in OU time (module doc).

    Parameters
    ----------
    unet : diffusers.UNet2DModel
        ``unet(sample (B, C, H, W), timestep (B,), class_labels=...).sample`` -> (B, C, H, W).
    scheduler : diffusers scheduler
        With ``alphas_cumprod`` (K,) and ``config.prediction_type``.
    class_labels : int, optional
        Class label of every call (class-conditional UNets).
    timestep : {"continuous", "interpolate"}, optional
        How OU time reaches the UNet (default from its ``time_embedding_type``).
    name : str, optional
    process : OU, optional
    on_nonfinite : {"raise", "nan"}

    Attributes
    ----------
    shape : (C, H, W)
    d : int
        C H W.
    prediction_type : str
    t_min, t_max : float
        OU times of the first and last integer timestep (the range the model covers).

    Examples
    --------
    >>> from diffusers import DDPMScheduler, UNet2DModel
    >>> unet = UNet2DModel(sample_size=4, in_channels=1, out_channels=1, block_out_channels=(8,),
    ...                    down_block_types=("DownBlock2D",), up_block_types=("UpBlock2D",), norm_num_groups=4)
    >>> den = DiffusersDenoiser(unet, DDPMScheduler())
    >>> den.denoise(torch.zeros(2, 16), 0.5).shape
    torch.Size([2, 16])
    """

    def __init__(self, unet: torch.nn.Module, scheduler: Any, *, class_labels: int | None = None,
                 timestep: str | None = None, name: str | None = None, process: OU | None = None,
                 on_nonfinite: str = "raise"):
        if not isinstance(unet, torch.nn.Module) or not hasattr(unet, "config"):
            raise TypeError(f"`unet` must be a diffusers UNet2DModel; got {type(unet).__name__}")
        if not hasattr(scheduler, "alphas_cumprod") or not hasattr(scheduler, "config"):
            raise TypeError(f"`scheduler` must be a diffusers scheduler with `alphas_cumprod`; "
                            f"got {type(scheduler).__name__}")
        self.prediction_type = check_option(scheduler.config.prediction_type, "prediction_type", PREDICTION_TYPES)
        embedding = getattr(unet.config, "time_embedding_type", "positional")
        if embedding == "fourier":
            raise ModelError("a UNet with time_embedding_type 'fourier' takes sigma (score-SDE VE), not a "
                             "scheduler timestep; it is not supported")
        default = "interpolate" if embedding == "learned" else "continuous"
        self.timestep = check_option(timestep or default, "timestep", TIMESTEP_MODES)
        if self.timestep == "continuous" and embedding == "learned":
            raise ValueError("`timestep` 'continuous' needs a UNet that embeds real timesteps; this one has "
                             "time_embedding_type 'learned' (use 'interpolate')")
        self.class_labels = class_labels
        self.shape = _sample_shape(unet.config)
        self.scheduler = scheduler
        self.unet = unet
        self._t_k = scheduler_times(scheduler)
        if not np.all(np.diff(self._t_k) > 0):
            raise ModelError("the scheduler's alphas_cumprod must decrease strictly")
        self.t_min, self.t_max = float(self._t_k[0]), float(self._t_k[-1])
        super().__init__(unet, parametrization="x0", name=name or type(unet).__name__, process=process,
                         on_nonfinite=on_nonfinite)
        self.d = math.prod(self.shape)

    @property
    def config_digest(self) -> str:
        """The scheduler's config, the timestep mode and the class label (enter the model digest)."""
        cfg = {k: v for k, v in dict(self.scheduler.config).items() if not k.startswith("_")}
        return json.dumps([cfg, self.timestep, self.class_labels], sort_keys=True, default=str)

    def timestep_of(self, t: Any) -> np.ndarray:
        """The real timestep s(t) of OU times t (module doc), float64 array of t's shape."""
        t = np.asarray(t, dtype=np.float64)
        return np.interp(t, self._t_k, np.arange(self._t_k.size, dtype=np.float64))

    def _call(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """The UNet's raw output (B, d) at inputs x (B, d) and timesteps s (B,), in the UNet's dtype."""
        n = x.shape[0]
        kwargs = {}
        if self.class_labels is not None:
            kwargs["class_labels"] = torch.full((n,), int(self.class_labels), dtype=torch.long, device=self._device)
        out = self.unet(x.to(self._dtype).to(self._device).reshape(n, *self.shape), s.to(self._device),
                        **kwargs).sample
        return out.reshape(n, -1)

    def raw(self, x: torch.Tensor, timestep: Any) -> torch.Tensor:
        """The UNet's output (B, d) at x (B, d) and one scheduler timestep, exactly as a pipeline calls it."""
        with torch.no_grad():
            return self._call(x, torch.as_tensor(timestep))

    def _output(self, x: torch.Tensor, t: torch.Tensor, strict: bool = False) -> tuple[torch.Tensor, ...]:
        a, h = self.process.alpha(t)[..., None], self.process.h(t)[..., None]
        b = torch.sqrt(h)
        s = torch.as_tensor(self.timestep_of(t.detach().cpu().numpy()), dtype=torch.float64)
        try:
            with torch.no_grad():
                if self.timestep == "continuous":
                    f = self._call(x, s.to(self._dtype)).to(torch.float64).to(x.device)
                    m = denoised_from_prediction(f, x, a, b, self.prediction_type)
                else:
                    k0 = torch.clamp(torch.floor(s), max=self._t_k.size - 2)
                    lam = (s - k0).to(x.device)[..., None]
                    ms = []
                    for k in (k0, k0 + 1):  # the two neighbouring integer timesteps, each in its own frame
                        tk = torch.as_tensor(self._t_k[k.long().numpy()], dtype=torch.float64, device=x.device)
                        ak, bk = self.process.alpha(tk)[..., None], torch.sqrt(self.process.h(tk))[..., None]
                        f = self._call(x, k.long()).to(torch.float64).to(x.device)
                        ms.append(denoised_from_prediction(f, x, ak, bk, self.prediction_type))
                    m = (1 - lam) * ms[0] + lam * ms[1]
        except Exception as err:  # the user's model: one line naming it, the cause chained
            raise ModelError(f"model {self.name!r} raised {type(err).__name__} when called with images "
                             f"{(x.shape[0], *self.shape)}: {err}") from err
        bad = ~torch.isfinite(m).all(-1)
        if bool(bad.any()) and self.on_nonfinite == "nan" and not strict:
            m = m.masked_fill(bad[..., None], math.nan)
        elif bool(bad.any()):
            raise ModelError(f"model {self.name!r} returned {int((~torch.isfinite(m)).sum())} non-finite "
                             f"value(s) at t in [{float(t.min()):.3g}, {float(t.max()):.3g}]")
        return m, x, a, b

    def check(self, d: int, t: float | None = None) -> None:
        """Refuse a training set of another dimension than C H W, then probe the UNet once."""
        if d != self.d:
            raise ModelError(f"model {self.name!r} takes images {self.shape} (d = {self.d}); the training set "
                             f"has d = {d}")
        super().check(d, 0.5 * (self.t_min + self.t_max) if t is None else t)

    def _prep(self, x: Any, t: Any) -> tuple[torch.Tensor, torch.Tensor]:
        xt = as_tensor(x, name="x", dtype=torch.float64)
        if xt.shape[-1] != self.d:
            raise ValueError(f"`x` must have shape (..., {self.d}); got {tuple(xt.shape)}")
        tt = as_tensor(t, name="t", dtype=torch.float64, device=xt.device)
        check_positive_time(tt, "t")
        if bool((tt < self.t_min * (1 - 1e-12)).any()) or bool((tt > self.t_max * (1 + 1e-12)).any()):
            raise ValueError(f"`t` must lie in [{self.t_min:.6g}, {self.t_max:.6g}], the OU times of the scheduler's "
                             f"timesteps 0 .. {self._t_k.size - 1}; got [{float(tt.min()):.6g}, {float(tt.max()):.6g}]")
        return xt, broadcast_time(tt, xt.shape[:-1], "x")

    def __repr__(self) -> str:
        return (f"DiffusersDenoiser({self.name!r}, shape={self.shape}, prediction_type={self.prediction_type!r}, "
                f"timestep={self.timestep!r})")


def _folder(path: str | Path, base_dir: Path | None, field: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    if not p.is_dir():
        raise ModelError(f"`{field}` {str(p)!r} is not a folder")
    return p


def load_unet(path: str | Path, subfolder: str | None = None, base_dir: Path | None = None, device: Any = "cpu"):
    """``UNet2DModel.from_pretrained`` of a local folder (``local_files_only``), on ``device``, in eval mode."""
    from diffusers import UNet2DModel

    folder = _folder(path, base_dir, "path")
    if not (folder / (subfolder or "") / "config.json").is_file():
        raise ModelError(f"`path` {str(folder / (subfolder or ''))!r} holds no config.json (a UNet saved with "
                         "save_pretrained; a pipeline folder needs `subfolder: unet`)")
    try:
        unet = UNet2DModel.from_pretrained(str(folder), subfolder=subfolder, local_files_only=True,
                                           low_cpu_mem_usage=False)
    except (OSError, ValueError, TypeError) as err:
        raise ModelError(f"`path` {str(folder)!r}: diffusers cannot load a UNet2DModel there ({err})") from err
    return unet.to(device).eval()


def load_scheduler(path: str | Path, base_dir: Path | None = None):
    """The scheduler of a local folder holding ``scheduler_config.json`` (its own class, ``local_files_only``)."""
    import diffusers

    folder = _folder(path, base_dir, "scheduler")
    file = folder / "scheduler_config.json"
    if not file.is_file():
        raise ModelError(f"`scheduler` {str(folder)!r} holds no scheduler_config.json")
    config = json.loads(file.read_text())
    cls = getattr(diffusers, str(config.get("_class_name")), None)
    if cls is None or not hasattr(cls, "from_pretrained"):
        raise ModelError(f"`scheduler` {str(folder)!r}: unknown scheduler class {config.get('_class_name')!r}")
    return cls.from_pretrained(str(folder), local_files_only=True)


def scheduler_folder(block, base_dir: Path | None) -> Path:
    """The scheduler folder of a diffusers block: ``scheduler``, else ``path``/scheduler when it exists, else ``path``."""
    if block.scheduler is not None:
        return _folder(block.scheduler, base_dir, "scheduler")
    root = _folder(block.path, base_dir, "path")
    return root / "scheduler" if (root / "scheduler" / "scheduler_config.json").is_file() else root


def denoiser_from_block(block, base_dir: Path | None, device: Any = "cpu") -> DiffusersDenoiser:
    """The :class:`DiffusersDenoiser` of a ``kind: diffusers`` block (folders relative to ``base_dir``)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only, whatever the caller's environment
    unet = load_unet(block.path, block.subfolder, base_dir, device)
    scheduler = load_scheduler(scheduler_folder(block, base_dir))
    return DiffusersDenoiser(unet, scheduler, class_labels=block.class_labels, timestep=block.timestep,
                             name=block.label)


def build(exp, block, task, train, device: str = "cpu") -> DiffusersDenoiser:
    """The denoiser of a diffusers block, checked against the training set (d = C H W), non-finite
    outputs read as NaN (diverged trajectories) once the probe passed."""
    den = denoiser_from_block(block, exp.base_dir, device)
    den.check(train.shape[1])
    return den.nonfinite_as_nan()


#: scheduler classes a ``sampler: {kind: scheduler}`` block may step with (``scheduler_class``)
SCHEDULER_CLASSES = {"ddpm": "DDPMScheduler", "ddim": "DDIMScheduler"}


def block_scheduler(block, base_dir: Path | None):
    """The scheduler of a diffusers block (its folder, :func:`scheduler_folder`) and the image shape (C, H, W)
    of a state, from the UNet's config.json (the registry's ``scheduler`` hook of kind ``diffusers``).

    Raises
    ------
    ModelError
        When the UNet's config has no ``sample_size``.
    """
    scheduler = load_scheduler(scheduler_folder(block, base_dir))
    root = _folder(block.path, base_dir, "path") / (block.subfolder or "")
    cfg = json.loads((root / "config.json").read_text())
    size = cfg.get("sample_size")
    if size is None:
        raise ModelError(f"{str(root)!r}: the UNet's config has no `sample_size`: its image shape is unknown")
    return scheduler, (cfg.get("in_channels", 3), *((size, size) if isinstance(size, int) else size))


def entry_scheduler(exp):
    """The scheduler a ``sampler: {kind: scheduler}`` entry steps, and the image shape (C, H, W) of a state.

    The scheduler of the entry's first block whose kind has one (the registry's ``scheduler`` hook:
    a ``diffusers`` block's folder, a ``unet`` block's ``DDPMScheduler``), converted to
    ``sampler.scheduler_class`` (``from_config``, as ``DDIMPipeline`` does) when that is given.  A
    fresh object on every call (schedulers keep state).
    """
    import diffusers

    from .. import REGISTRY, model_kind

    for block in exp.blocks:
        stepper = model_kind(block.kind).stepper()
        if stepper is not None:
            scheduler, shape = stepper(block, exp.base_dir)
            break
    else:
        kinds = " or ".join(f"`{k}`" for k, entry in REGISTRY.items() if entry.scheduler)
        raise ValueError(f"entry {exp.name!r}: `sampler.kind: scheduler` steps the scheduler of a {kinds} "
                         "model block; this entry has none")
    name = exp.sampler.scheduler_class
    if name is not None and type(scheduler).__name__ != SCHEDULER_CLASSES[name]:
        scheduler = getattr(diffusers, SCHEDULER_CLASSES[name]).from_config(scheduler.config)
    if exp.sampler.eta is not None and type(scheduler).__name__ != SCHEDULER_CLASSES["ddim"]:
        raise ValueError(f"entry {exp.name!r}: `sampler.eta` is DDIM's; the scheduler is a {type(scheduler).__name__} "
                         "(set `sampler.scheduler_class: ddim`)")
    return scheduler, tuple(int(v) for v in shape)


def scheduler_predict(model, scheduler):
    """``predict(x, timestep, t) -> (output, score)`` of :func:`ridgexr.sampling.scheduler_sampling` for a
    denoiser of the package (``denoise(x, t)``, OU time).

    A :class:`DiffusersDenoiser` with a continuous timestep whose scheduler has the same ``alphas_cumprod``
    and ``prediction_type`` is called exactly as a pipeline calls its UNet (:meth:`DiffusersDenoiser.raw`,
    the integer timestep); any other model's E[x0 | x_t] is converted to the scheduler's
    ``prediction_type`` (:func:`prediction_from_denoised`).  The score is (a m - x) / h in float64.
    """
    kind = check_option(scheduler.config.prediction_type, "prediction_type", PREDICTION_TYPES)
    own = (isinstance(model, DiffusersDenoiser) and model.timestep == "continuous"
           and model.prediction_type == kind
           and torch.equal(torch.as_tensor(model.scheduler.alphas_cumprod), torch.as_tensor(scheduler.alphas_cumprod)))
    process = getattr(model, "process", None) or OU()

    def predict(x: torch.Tensor, timestep, t: float):
        x64 = x.to(torch.float64)
        tt = torch.tensor(t, dtype=torch.float64, device=x.device)
        a, b = process.alpha(tt), torch.sqrt(process.h(tt))
        if own:
            out = model.raw(x, timestep)
            m = denoised_from_prediction(out.to(torch.float64).to(x.device), x64, a, b, kind)
        else:
            m = torch.as_tensor(model.denoise(x64, t), dtype=torch.float64, device=x.device)
            out = prediction_from_denoised(m, x64, a, b, kind)
        return out.to(x.dtype).to(x.device), (a * m - x64) / (b * b)

    return predict
