"""A user's own trained model as a denoiser: import paths, time conventions, output checks.

Any callable ``f(y, s) -> output`` (an ``nn.Module`` or a plain function) becomes a
denoiser with the package's convention ``denoise(x, t)`` = E[x0 | x_t = x] under the OU
process x_t = alpha_t x0 + sqrt(h_t) z (alpha_t = e^{-t}, h_t = 1 - e^{-2t}) through
:class:`ModuleDenoiser`.  The model may have been trained in another time convention; each
maps OU time t to the model's own time s and input y = c_t x, and the model's process is
y = a x0 + b z:

=============================== =========================================== ======== =========== ==================
``time``                        model time s                                input y  a           b
=============================== =========================================== ======== =========== ==================
``ou``                          s = t                                       x        alpha_t     sqrt(h_t)
``vp`` (beta_min, beta_max)     solves int_0^s beta = 2 t, beta linear in s x        alpha_t     sqrt(h_t)
``ve``                          s = sigma = sqrt(e^{2t} - 1)                x/alpha_t 1          sigma
=============================== =========================================== ======== =========== ==================

VP: abar(s) = exp(-int_0^s beta(u) du) with beta(u) = beta_min + u (beta_max - beta_min),
u in [0, 1] (Song et al. 2021); abar(s) = alpha_t^2 is the OU marginal at t, so
s = (-beta_min + sqrt(beta_min^2 + 4 (beta_max - beta_min) t)) / (beta_max - beta_min)
(s = 2 t / beta_min when beta_max = beta_min), and x is passed unchanged.  The sampler's
largest time must map to s <= 1.  VE: x_t / alpha_t = x0 + sigma z with
sigma = sqrt(h_t) / alpha_t; the model is called with sigma as its time argument.

The output is read in the model's own frame by :func:`ridgexr.parametrization.denoised_from_frame`
(parametrizations ``x0``, ``posterior_mean`` = a E[x0|y], ``score`` = grad_y log q(y),
``epsilon`` = E[z|y]); E[x0 | y] = E[x0 | x_t] because y is an invertible function of x_t.

**Untrusted code.**  :func:`load_factory` imports a ``package.module:factory`` path and calls
it: that runs the user's code with the user's rights.  Only use catalogs whose modules you
trust.
"""

from __future__ import annotations

import copy
import importlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..._backend import as_tensor, broadcast_time, callable_digest, check_positive_time, load_plain, to_like
from ..._validation import check_float, check_option
from ...choices import SCHEDULE_NAMES
from ...process import OU
from ...parametrization import PARAMETRIZATIONS, denoised_from_frame
from . import PYTHON_OBJECT, TIME_CONVENTIONS

#: what a non-finite model output does (``ModuleDenoiser(on_nonfinite=...)``)
NONFINITE = ("raise", "nan")

__all__ = ["TIME_CONVENTIONS", "TimeConvention", "ModuleDenoiser", "load_factory", "module_from_spec", "ModelError",
           "PYTHON_OBJECT", "model_digest", "build"]


class ModelError(ValueError):
    """A user model that cannot be used: bad import path, wrong output shape, non-finite output."""


@dataclass(frozen=True)
class TimeConvention:
    """How OU time t maps to a model's own time, input scaling and process (table in the module doc).

    Parameters
    ----------
    kind : {"ou", "vp", "ve"}
    beta_min, beta_max : float
        The linear VP schedule (``kind="vp"`` only; Song et al.'s defaults 0.1 and 20).
    """

    kind: str = "ou"
    beta_min: float = 0.1
    beta_max: float = 20.0

    def __post_init__(self):
        check_option(self.kind, "time", TIME_CONVENTIONS)
        if self.kind == "vp":
            check_float(self.beta_min, "beta_min", min_val=0, include_boundaries="neither")
            check_float(self.beta_max, "beta_max", min_val=self.beta_min)

    @property
    def t_max(self) -> float:
        """Largest OU time the convention covers (VP: s = 1; else unbounded)."""
        if self.kind == "vp":
            return 0.5 * (self.beta_min + 0.5 * (self.beta_max - self.beta_min))
        return math.inf

    def model_time(self, t: torch.Tensor) -> torch.Tensor:
        """The model's time s for OU times t (same shape)."""
        if self.kind == "ou":
            return t
        if self.kind == "ve":
            return torch.sqrt(torch.expm1(2.0 * t))
        db = self.beta_max - self.beta_min
        if db == 0:
            return 2.0 * t / self.beta_min
        return (torch.sqrt(self.beta_min**2 + 4.0 * db * t) - self.beta_min) / db

    def frame(self, x: torch.Tensor, t: torch.Tensor, process: OU) -> tuple[torch.Tensor, ...]:
        """(y, a, b): the model's input (..., d) and its process coefficients (..., 1) at OU time t (...)."""
        alpha, h = process.alpha(t)[..., None], process.h(t)[..., None]
        if self.kind == "ve":
            return x / alpha, torch.ones_like(alpha), torch.sqrt(h) / alpha
        return x, alpha, torch.sqrt(h)

    def label(self) -> str:
        return f"vp({self.beta_min:g}, {self.beta_max:g})" if self.kind == "vp" else self.kind


def load_factory(path: str) -> Callable:
    """Import ``"package.module:attribute"`` and return the attribute (the user's factory).

    Raises :class:`ModelError` (one line) when the path is malformed, the module cannot be
    imported, or the attribute is missing or not callable.  Importing runs the module's code.
    """
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ModelError(f"`module` must look like 'package.module:factory'; got {path!r}")
    mod_name, attr = path.split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as err:
        raise ModelError(f"`module` {path!r}: cannot import {mod_name!r} ({err})") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelError(f"`module` {path!r}: {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ModelError(f"`module` {path!r}: {attr!r} is not callable")
    return obj


class ModuleDenoiser:
    """Wrap a trained model ``f(y, s)`` as a denoiser in the package's OU convention.

    Parameters
    ----------
    model : callable
        ``f(y, s) -> output``: y (B, d) and s (B,) tensors in the model's dtype and device,
        output (B, d) in ``parametrization`` of the model's own frame.  An ``nn.Module`` is
        put in eval mode and its parameters' dtype/device are used.
    parametrization : {"score", "epsilon", "x0", "posterior_mean"}
    time : TimeConvention or {"ou", "vp", "ve"}
        The model's time convention (default OU, the package's).
    d : int, optional
        Data dimension; when given, :meth:`check` probes the model once at construction.
    name : str, optional
        Label of the model (default: the class or function name).
    process : OU, optional
    schedule : {"1", "h", "h2"}, optional
        The loss-weight schedule the model was trained with: its label on a store's ``schedule``
        dimension when passed to ``run_experiment(model=...)`` and the weight of its held-out
        diagnostics (default: the entry's first schedule).
    on_nonfinite : {"raise", "nan"}
        What a non-finite output does: ``"raise"`` (default) a :class:`ModelError`; ``"nan"``
        makes every row (sample) holding a NaN or inf all NaN, so a sampler's divergence guard
        flags that trajectory ``diverged`` (what a run does, after :meth:`check` passed).

    Examples
    --------
    >>> import numpy as np
    >>> from ridgexr import ExactDenoiser
    >>> ex = ExactDenoiser(np.array([[0.0, 0.0], [1.0, 0.0]]))
    >>> m = ModuleDenoiser(lambda y, s: torch.as_tensor(ex.denoise(y, s)), parametrization="x0", d=2)
    >>> bool(np.allclose(m.denoise(np.ones((3, 2)), 0.5), ex.denoise(np.ones((3, 2)), 0.5)))
    True
    """

    def __init__(self, model: Callable, *, parametrization: str = "score", time: TimeConvention | str = "ou",
                 d: int | None = None, name: str | None = None, process: OU | None = None,
                 on_nonfinite: str = "raise", schedule: str | None = None):
        if not callable(model):
            raise TypeError(f"`model` must be callable (an nn.Module or a function (y, s) -> output); "
                            f"got {type(model).__name__}")
        self.parametrization = check_option(parametrization, "parametrization", PARAMETRIZATIONS)
        self.time = time if isinstance(time, TimeConvention) else TimeConvention(time)
        self.on_nonfinite = check_option(on_nonfinite, "on_nonfinite", NONFINITE)
        self.schedule = None if schedule is None else check_option(schedule, "schedule", SCHEDULE_NAMES)
        self.model = model
        self.process = process or OU()
        self.name = name or getattr(model, "__name__", type(model).__name__)
        if isinstance(model, torch.nn.Module):
            model.eval()
            p = next(model.parameters(), None)
            self._dtype, self._device = (p.dtype, p.device) if p is not None else (torch.float32, torch.device("cpu"))
        else:
            self._dtype, self._device = torch.float64, torch.device("cpu")
        self.d = d
        if d is not None:
            self.check(d)

    def check(self, d: int, t: float = 0.5) -> None:
        """Call the model once on (3, d) zeros at OU time t; :class:`ModelError` on a wrong shape or NaN
        (whatever ``on_nonfinite`` says: a model broken from the start is refused)."""
        x = torch.zeros(3, d, dtype=torch.float64)
        self._output(x, torch.full((3,), float(t), dtype=torch.float64), strict=True)

    def nonfinite_as_nan(self) -> "ModuleDenoiser":
        """A shallow copy with ``on_nonfinite="nan"`` (same model object): what a run samples with."""
        new = copy.copy(self)
        new.on_nonfinite = "nan"
        return new

    def _output(self, x: torch.Tensor, t: torch.Tensor, strict: bool = False) -> tuple[torch.Tensor, ...]:
        y, a, b = self.time.frame(x, t, self.process)
        s = self.time.model_time(t)
        try:
            with torch.no_grad():
                out = self.model(y.to(self._dtype).to(self._device), s.to(self._dtype).to(self._device))
        except Exception as err:  # the user's code: one line naming the model, the cause chained
            raise ModelError(f"model {self.name!r} raised {type(err).__name__} when called as model(y, s) "
                             f"with y ({tuple(y.shape)}): {err}") from err
        if not isinstance(out, torch.Tensor):
            raise ModelError(f"model {self.name!r} must return a torch tensor; got {type(out).__name__}")
        if tuple(out.shape) != tuple(x.shape):
            raise ModelError(f"model {self.name!r} returned shape {tuple(out.shape)} for inputs of shape "
                             f"{tuple(x.shape)}; expected {tuple(x.shape)}")
        out = out.to(torch.float64).to(x.device)
        bad = ~torch.isfinite(out).all(-1)
        if bool(bad.any()) and self.on_nonfinite == "nan" and not strict:
            out = out.masked_fill(bad[..., None], math.nan)  # the whole sample: the guard flags it
        elif bool(bad.any()):
            raise ModelError(f"model {self.name!r} returned {int((~torch.isfinite(out)).sum())} non-finite "
                             f"value(s) at t in [{float(t.min()):.3g}, {float(t.max()):.3g}]")
        return out, y, a, b

    def _prep(self, x: Any, t: Any) -> tuple[torch.Tensor, torch.Tensor]:
        xt = as_tensor(x, name="x", dtype=torch.float64)
        tt = as_tensor(t, name="t", dtype=torch.float64, device=xt.device)
        check_positive_time(tt, "t")
        if bool((tt > self.time.t_max).any()):
            raise ValueError(f"`t` must be <= {self.time.t_max:.6g} for time convention {self.time.label()} "
                             f"(model time s <= 1); got max {float(tt.max()):.6g}")
        return xt, broadcast_time(tt, xt.shape[:-1], "x")

    def denoise(self, x: Any, t: Any) -> Any:
        """E[x0 | x_t = x] (..., d) in float64; numpy or torch in, the same kind out."""
        xt, tt = self._prep(x, t)
        f, y, a, b = self._output(xt.reshape(-1, xt.shape[-1]), tt.reshape(-1))
        return to_like(denoised_from_frame(f, y, a, b, self.parametrization).reshape(xt.shape), x)

    def score(self, x: Any, t: Any) -> Any:
        """grad log p_t(x) = (alpha_t E[x0 | x_t] - x) / h_t, (..., d) in float64."""
        xt, tt = self._prep(x, t)
        m = torch.as_tensor(self.denoise(xt, tt))
        return to_like((self.process.alpha(tt)[..., None] * m - xt) / self.process.h(tt)[..., None], x)

    def __repr__(self) -> str:
        return f"ModuleDenoiser({self.name!r}, parametrization={self.parametrization!r}, time={self.time.label()!r})"


def model_digest(model: Callable) -> str:
    """A short SHA-256 of what determines a model's outputs, for the config hash of a store.

    An ``nn.Module``: its class and every state-dict tensor (names, dtypes, shapes, bytes).
    Another callable: its qualified name and bytecode -- data it closes over are not seen,
    so a changed closure must be run with ``overwrite``.  A :class:`ModuleDenoiser`: that of the
    model it wraps, then its parametrization, time convention and ``config_digest`` (e.g. a
    diffusers model's scheduler).  (:func:`ridgexr._backend.callable_digest`.)
    """
    if isinstance(model, ModuleDenoiser):
        return callable_digest(model.model, f"{model.parametrization}:{model.time}",
                               str(getattr(model, "config_digest", "")))
    return callable_digest(model)


def module_from_spec(path: str, *, d: int, parametrization: str, time: TimeConvention, checkpoint: str | None = None,
                     base_dir: Path | None = None, device: Any = "cpu") -> ModuleDenoiser:
    """The :class:`ModuleDenoiser` of a catalog ``kind: module`` block.

    Calls the factory at ``path`` with no arguments; an ``nn.Module`` result gets the state
    dict at ``checkpoint`` (relative paths against ``base_dir``) and is moved to ``device``.
    ``base_dir`` (the catalog file's folder) is put on ``sys.path`` first, so a module file
    beside the catalog imports by its name.
    """
    if path.startswith(PYTHON_OBJECT + ":"):
        raise ModelError(f"model {path.split(':')[1].split('@')[0]!r} was handed to run_experiment as a Python "
                         "object; pass it again with run_experiment(..., model=...)")
    if base_dir is not None and str(base_dir) not in sys.path:  # a catalog's own folder is importable
        sys.path.insert(0, str(base_dir))
    factory = load_factory(path)
    try:
        model = factory()
    except Exception as err:  # the user's code: report it in one line, keep the cause chained
        raise ModelError(f"`module` {path!r}: the factory raised {type(err).__name__}: {err}") from err
    if not callable(model):
        raise ModelError(f"`module` {path!r}: the factory returned {type(model).__name__}, not an nn.Module "
                         f"or a callable (y, s) -> output")
    if checkpoint is not None:
        if not isinstance(model, torch.nn.Module):
            raise ModelError(f"`checkpoint` needs the factory to return an nn.Module; {path!r} returned "
                             f"{type(model).__name__}")
        file = Path(checkpoint)
        if not file.is_absolute() and base_dir is not None:
            file = base_dir / file
        if not file.is_file():
            raise ModelError(f"`checkpoint` {str(file)!r} does not exist")
        state = load_plain(file)  # a state dict: pickled code is refused, naming the file
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0]
            raise ModelError(f"`checkpoint` {str(file)!r} does not fit {path!r}: {first}") from None
    if isinstance(model, torch.nn.Module):
        model.to(device)
    return ModuleDenoiser(model, parametrization=parametrization, time=time, d=d, name=path.split(":")[1])


def build(exp, block, task, train, device: str = "cpu") -> ModuleDenoiser:
    """The :class:`ModuleDenoiser` of a module block: the object handed to ``run_experiment(model=...)``
    (``task.state``), else the factory imported and probed (``d`` = the training set's).

    Either reads non-finite outputs as NaN (``on_nonfinite="nan"``) once the probe passed: a model
    that breaks down mid-run gives ``diverged`` trajectories, as every other kind does."""
    if task is not None and task.state is not None:
        return task.state.nonfinite_as_nan()
    time = TimeConvention(block.time, block.beta_min, block.beta_max)
    if exp.process.T > time.t_max:
        raise ValueError(f"`process.T` ({exp.process.T}) exceeds the largest OU time {time.t_max:.6g} of model "
                         f"{block.label!r}'s time convention {time.label()} (model time s <= 1)")
    return module_from_spec(block.module, d=train.shape[1], parametrization=block.output, time=time,
                            checkpoint=block.checkpoint, base_dir=exp.base_dir, device=device).nonfinite_as_nan()
