"""A user's own model: parametrizations, VP/VE time conventions against their closed forms, one-line errors."""

import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from ridgexr import ExactDenoiser
from ridgexr.models.module.denoiser import ModelError, ModuleDenoiser, TimeConvention, load_factory, module_from_spec
from ridgexr.parametrization import PARAMETRIZATIONS

TRAIN = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])


def _mixture_mean(y: torch.Tensor, a: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """E[x0 | y] for y = a x0 + b z, x0 uniform on TRAIN -- written here, independently of ridgexr."""
    xs = torch.as_tensor(TRAIN)
    logits = -((y[:, None, :] - a[:, None, None] * xs[None]) ** 2).sum(-1) / (2 * b2[:, None])
    return torch.softmax(logits, -1) @ xs


def _vp_model(beta_min, beta_max, parametrization):
    """A VP model (Song et al.'s linear beta on s in [0, 1]) that is exact in its own convention."""

    def model(y, s):
        abar = torch.exp(-beta_min * s - 0.5 * (beta_max - beta_min) * s**2)
        a, b2 = torch.sqrt(abar), 1 - abar
        m = _mixture_mean(y, a, b2)
        a, b = a[:, None], torch.sqrt(b2)[:, None]
        return {"x0": m, "posterior_mean": a * m, "score": (a * m - y) / b**2, "epsilon": (y - a * m) / b}[parametrization]

    return model


def _ve_model(parametrization):
    """A VE model: y = x0 + sigma z, called with sigma."""

    def model(y, sigma):
        m = _mixture_mean(y, torch.ones_like(sigma), sigma**2)
        s = sigma[:, None]
        return {"x0": m, "posterior_mean": m, "score": (m - y) / s**2, "epsilon": (y - m) / s}[parametrization]

    return model


def _ou_model(parametrization):
    def model(y, t):
        a, h = torch.exp(-t), -torch.expm1(-2 * t)
        m = _mixture_mean(y, a, h)
        a, b = a[:, None], torch.sqrt(h)[:, None]
        return {"x0": m, "posterior_mean": a * m, "score": (a * m - y) / b**2, "epsilon": (y - a * m) / b}[parametrization]

    return model


@given(par=st.sampled_from(PARAMETRIZATIONS), kind=st.sampled_from(["ou", "vp", "ve"]), seed=st.integers(0, 99),
       t=st.floats(0.01, 2.5))
def test_a_model_exact_in_its_own_convention_is_the_exact_ou_denoiser(par, kind, seed, t):
    """Time mapping and input scaling checked on models whose exact denoiser is known in their own time."""
    model = {"ou": lambda: _ou_model(par), "vp": lambda: _vp_model(0.1, 20.0, par), "ve": lambda: _ve_model(par)}[kind]()
    wrapped = ModuleDenoiser(model, parametrization=par, time=TimeConvention(kind), d=2)
    x = np.random.default_rng(seed).normal(size=(20, 2)) * 2 + 1
    ex = ExactDenoiser(TRAIN)
    np.testing.assert_allclose(wrapped.denoise(x, t), ex.denoise(x, t), atol=1e-9)
    np.testing.assert_allclose(wrapped.score(x, t), ex.score(x, t), rtol=1e-7, atol=1e-7)


def test_vp_time_map_and_its_range():
    c = TimeConvention("vp", beta_min=0.1, beta_max=20.0)
    s = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    t = 0.5 * (0.1 * s + 0.5 * 19.9 * s**2)  # OU time with alpha_t^2 = abar(s)
    np.testing.assert_allclose(c.model_time(t).numpy(), s.numpy(), atol=1e-12)
    assert c.t_max == pytest.approx(float(t[-1]))
    flat = TimeConvention("vp", beta_min=2.0, beta_max=2.0)
    assert float(flat.model_time(torch.tensor(0.5))) == pytest.approx(0.5)
    wrapped = ModuleDenoiser(_vp_model(0.1, 20.0, "x0"), parametrization="x0", time=c)
    with pytest.raises(ValueError, match="t"):
        wrapped.denoise(np.zeros((2, 2)), 6.0)


def test_bad_models_give_one_line_errors(tmp_path, monkeypatch):
    (tmp_path / "usermods.py").write_text(textwrap.dedent("""
        import torch
        def wrong_shape():
            return lambda y, s: y[:, :1]
        def nan():
            return lambda y, s: torch.full_like(y, float("nan"))
        def boom():
            raise RuntimeError("no GPU here")
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(2, 2)
            def forward(self, y, s):
                return self.lin(y)
        def net():
            return Net()
        def one_arg():
            return torch.nn.Linear(2, 2)
        not_callable = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = {"usermods": "must look like", "usermods:": "must look like", "nosuchpkg_xyz:f": "cannot import",
             "usermods:missing": "no attribute", "usermods:not_callable": "not callable",
             "usermods:wrong_shape": r"returned shape \(3, 1\)", "usermods:nan": "non-finite",
             "usermods:boom": "factory raised RuntimeError: no GPU here",
             "usermods:one_arg": "raised TypeError when called as model"}
    for path, msg in cases.items():
        with pytest.raises(ModelError, match=msg) as err:
            module_from_spec(path, d=2, parametrization="x0", time=TimeConvention())
        assert "\n" not in str(err.value)
    with pytest.raises(ModelError, match="does not exist"):
        module_from_spec("usermods:net", d=2, parametrization="x0", time=TimeConvention(), checkpoint="none.pt",
                         base_dir=tmp_path)
    torch.save({"lin." + k: v for k, v in torch.nn.Linear(3, 2).state_dict().items()}, tmp_path / "bad.pt")
    with pytest.raises(ModelError, match="does not fit"):
        module_from_spec("usermods:net", d=2, parametrization="x0", time=TimeConvention(), checkpoint="bad.pt",
                         base_dir=tmp_path)
    good = torch.nn.Linear(2, 2)
    torch.save({"lin." + k: v for k, v in good.state_dict().items()}, tmp_path / "good.pt")
    m = module_from_spec("usermods:net", d=2, parametrization="x0", time=TimeConvention(), checkpoint="good.pt",
                         base_dir=tmp_path)
    x = torch.ones(4, 2, dtype=torch.float64)
    torch.testing.assert_close(torch.as_tensor(m.denoise(x, 0.3)), good(x.float()).double())
    with pytest.raises(TypeError, match="model"):
        ModuleDenoiser(3)
    with pytest.raises(ValueError, match="time"):
        TimeConvention("edm")
    assert load_factory("math:sqrt")(4.0) == 2.0
    sys.modules.pop("usermods", None)


def test_nonfinite_outputs_raise_or_become_whole_nan_samples():
    """``on_nonfinite="raise"`` (default) refuses a NaN output; ``"nan"`` (a run) makes the whole sample NaN
    and leaves the others bit-identical; the probe refuses a broken model in either mode."""
    def half(y, s):
        out = 2.0 * y
        out[y[:, 0] > 0, 1] = float("inf")
        return out

    x = torch.tensor([[1.0, 2.0], [-1.0, 2.0], [3.0, -1.0]], dtype=torch.float64)
    with pytest.raises(ModelError, match="2 non-finite"):
        ModuleDenoiser(half, parametrization="x0").denoise(x, 0.5)
    m = ModuleDenoiser(half, parametrization="x0", on_nonfinite="nan")
    out = m.denoise(x, 0.5)
    assert torch.isnan(out[[0, 2]]).all() and torch.equal(out[1], 2.0 * x[1])
    assert ModuleDenoiser(half, parametrization="x0").nonfinite_as_nan().on_nonfinite == "nan"
    with pytest.raises(ModelError, match="non-finite"):
        ModuleDenoiser(lambda y, s: y / 0.0 * 0.0, parametrization="x0", d=2, on_nonfinite="nan")
    with pytest.raises(ValueError, match="on_nonfinite"):
        ModuleDenoiser(half, on_nonfinite="ignore")
