"""A diffusers ``UNet2DModel`` as a network of the package's DSM training, and the U-Net of a trained cell.

:class:`UNetDenoiser` is what :func:`ridgexr.fit_neural` trains: ``forward(x, t)`` takes flattened
images x (B, d) at OU times t (B,), calls the U-Net at the real timestep s(t) of its
``DDPMScheduler`` (alpha_bar(s) = e^{-2t}, :mod:`ridgexr.models.diffusers.denoiser`) and returns
its output (B, d) in ``parametrization`` (``epsilon`` = E[z | x_t], the scheduler's 'epsilon';
``x0``, the scheduler's 'sample').  The U-Net and scheduler are therefore an ordinary diffusers
model: saved with ``save_pretrained``, diffusers' pipelines and ``kind: diffusers`` read them
with the same time map.
"""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ..._backend import to_like
from ..diffusers.denoiser import DiffusersDenoiser, scheduler_times

__all__ = ["UNetDenoiser", "make_unet", "make_scheduler", "block_scheduler", "forward_flops", "PREDICTION_TYPE", "build"]

#: the scheduler's ``prediction_type`` of each parametrization a U-Net is trained in
PREDICTION_TYPE = {"epsilon": "epsilon", "x0": "sample"}


def make_scheduler(block):
    """The ``DDPMScheduler`` of a unet block (its beta schedule, timesteps and prediction type)."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(num_train_timesteps=block.num_train_timesteps, beta_schedule=block.beta_schedule,
                         prediction_type=PREDICTION_TYPE[block.output])


def block_scheduler(block, base_dir=None):
    """The scheduler of a unet block (:func:`make_scheduler`) and the image shape (C, H, W) of a state
    (the registry's ``scheduler`` hook of kind ``unet``; ``base_dir`` is not read)."""
    return make_scheduler(block), (block.in_channels, *block.sample_size)


def make_unet(block, seed: int = 0):
    """The ``UNet2DModel`` of a unet block, initialised from ``seed`` (the global generator left as it was)."""
    from diffusers import UNet2DModel

    n = len(block.block_out_channels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return UNet2DModel(sample_size=tuple(block.sample_size), in_channels=block.in_channels,
                           out_channels=block.in_channels, block_out_channels=tuple(block.block_out_channels),
                           layers_per_block=block.layers_per_block, down_block_types=("DownBlock2D",) * n,
                           up_block_types=("UpBlock2D",) * n, norm_num_groups=block.norm_num_groups,
                           attention_head_dim=8, add_attention=block.attention)


@functools.lru_cache(maxsize=8)
def _forward_flops(arch: str) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    block = json.loads(arch)
    unet = make_unet(SimpleNamespace(**block))
    x = torch.zeros(1, block["in_channels"], *block["sample_size"])
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        unet(x, torch.tensor([1]))
    return float(counter.get_total_flops())


def forward_flops(block) -> float:
    """Floating-point operations of one forward pass of a unet block's ``UNet2DModel`` on one image
    (torch's ``FlopCounterMode``: 2 per multiply-add of the convolutions and linear maps; not counted:
    normalisations, activations and the middle block's two attention products, 4 (HW)^2 C flops, 3e5
    for the default).  The default block (~0.27 M parameters, 28 x 28 x 1): 9.3e7.  Memoised per
    architecture."""
    arch = {k: getattr(block, k) for k in ("sample_size", "in_channels", "block_out_channels", "layers_per_block",
                                           "norm_num_groups", "attention")}
    return _forward_flops(json.dumps(arch, sort_keys=True))


class UNetDenoiser(torch.nn.Module):
    """A ``UNet2DModel`` + ``DDPMScheduler`` as ``f(x (B, d), t (B,)) -> (B, d)`` in OU time (module doc).

    Parameters
    ----------
    unet : diffusers.UNet2DModel
    scheduler : diffusers.DDPMScheduler
        Fixes the timestep convention (its ``alphas_cumprod``) and the output
        (``prediction_type`` 'epsilon' or 'sample').

    Examples
    --------
    >>> from diffusers import DDPMScheduler, UNet2DModel
    >>> unet = UNet2DModel(sample_size=4, in_channels=1, out_channels=1, block_out_channels=(8,),
    ...                    down_block_types=("DownBlock2D",), up_block_types=("UpBlock2D",), norm_num_groups=4)
    >>> UNetDenoiser(unet, DDPMScheduler())(torch.zeros(3, 16), torch.full((3,), 0.5)).shape
    torch.Size([3, 16])
    """

    def __init__(self, unet: torch.nn.Module, scheduler: Any):
        super().__init__()
        inverse = {v: k for k, v in PREDICTION_TYPE.items()}
        if scheduler.config.prediction_type not in inverse:
            raise ValueError(f"the scheduler's prediction_type must be one of {list(inverse)}; "
                             f"got {scheduler.config.prediction_type!r}")
        self.parametrization = inverse[scheduler.config.prediction_type]
        self.unet, self.scheduler = unet, scheduler
        self.register_buffer("t_k", torch.as_tensor(scheduler_times(scheduler)), persistent=False)
        cfg = unet.config
        size = (cfg.sample_size,) * 2 if isinstance(cfg.sample_size, int) else tuple(cfg.sample_size)
        self.shape = (int(cfg.in_channels), *map(int, size))
        self.d = int(np.prod(self.shape))

    def timestep(self, t: torch.Tensor) -> torch.Tensor:
        """The real timestep s(t) (float64, t's shape): linear interpolation of k against t_k."""
        tk = self.t_k.to(torch.float64).to(t.device)
        t = t.to(torch.float64)
        i = torch.searchsorted(tk, t).clamp(1, tk.numel() - 1)
        lo, hi = tk[i - 1], tk[i]
        return (i - 1).to(torch.float64) + ((t - lo) / (hi - lo)).clamp(0, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The U-Net's output (B, d) at flattened images x (B, d) and OU times t (B,), in its dtype."""
        dtype = next(self.unet.parameters()).dtype
        n = x.shape[0]
        s = self.timestep(t.reshape(-1).expand(n) if t.numel() == 1 else t).to(dtype)
        return self.unet(x.to(dtype).reshape(n, *self.shape), s).sample.reshape(n, self.d)

    def denoiser(self) -> DiffusersDenoiser:
        """The same U-Net and scheduler read as a :class:`DiffusersDenoiser` (the geometry's view)."""
        return DiffusersDenoiser(self.unet, self.scheduler, timestep="continuous", name="unet")

    def denoise(self, x: Any, t: Any) -> Any:
        """E[x0 | x_t = x] (..., d) in float64 (through :meth:`denoiser`)."""
        return to_like(self.denoiser().denoise(x, t), x)

    def score(self, x: Any, t: Any) -> Any:
        """grad log p_t(x) (..., d) in float64."""
        return to_like(self.denoiser().score(x, t), x)


def build(exp, block, task, train, device: str = "cpu") -> DiffusersDenoiser:
    """The trained U-Net of one cell (``task.state``: its weights, EMA ones with ``ema``) as a
    :class:`DiffusersDenoiser`, on ``device``, non-finite outputs read as NaN."""
    unet = make_unet(block, exp.seeds.init)
    unet.load_state_dict(task.state)
    unet.to(torch.device(device)).eval()
    den = DiffusersDenoiser(unet, make_scheduler(block), timestep="continuous", name=block.label)
    den.check(train.shape[1])
    return den.nonfinite_as_nan()
