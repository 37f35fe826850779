"""One source of defaults: a model built through the API with only its required arguments equals the
model a catalog entry with only its required fields builds, for every kind (ridgexr.defaults)."""

import inspect
import math

import numpy as np
import pytest
import torch

from ridgexr import ExactDenoiser, MLPDenoiser, ModuleDenoiser, RandomFeatureDenoiser, defaults, fit_neural
from ridgexr.catalog import Experiment, ProcessSpec, RidgeSpec, TrainingSpec
from ridgexr.models import REGISTRY
from ridgexr.models.module.denoiser import TimeConvention
from ridgexr.run.plan import CellTask
from ridgexr.training import fit_random_features, fit_sweep

TRAIN = np.array([[-3.0, 0.0], [3.0, 0.0]])


def _entry(block: dict) -> Experiment:
    """A catalog entry that gives only the required fields."""
    return Experiment(name="e", store="e.zarr", dataset={"points": "two-points"}, schedules=["1"], model=block)


def _signature_defaults(func) -> dict:
    return {k: p.default for k, p in inspect.signature(func).parameters.items() if p.default is not p.empty}


def test_random_features_api_and_catalog_build_the_same_model():
    exp = _entry({"widths": [8]})
    block = exp.model
    task = CellTask((0,), {"width": 8}, {}, 0, np.zeros((2, 8)))
    from_catalog = REGISTRY["random_features"].builder()(exp, block, task, TRAIN)
    by_hand = RandomFeatureDenoiser(2, 8)
    for attr in ("n_frequencies", "feature_period", "activation", "parametrization", "seed"):
        assert getattr(from_catalog, attr) == getattr(by_hand, attr), attr
    assert by_hand.feature_period == exp.process.T == defaults.T == 10.0  # the paper's period: the sampler's T
    for name in ("w_x", "w_t", "b"):
        assert torch.equal(getattr(from_catalog, name), getattr(by_hand, name))
    x = torch.randn(5, 2, dtype=torch.float64)
    assert torch.equal(from_catalog.with_A(torch.ones(2, 8)).score(x, 0.3), by_hand.with_A(torch.ones(2, 8)).score(x, 0.3))


def test_random_feature_fit_defaults_are_the_catalogs():
    proc, train, block = ProcessSpec(), TrainingSpec(), _entry({"widths": [8]}).model
    for fit in (fit_random_features, fit_sweep):
        sig = _signature_defaults(fit)
        assert sig["t_min"] == proc.t_min
        assert sig["quadrature"] == train.quadrature and sig["n_time"] == train.n_time
        assert sig["n_noise"] == train.n_noise and sig["target"] == train.target and sig["method"] == train.method
        assert sig["init"] == block.init
        assert sig["T"] is None  # the features' period, itself the sampler's T by default
    assert (train.quadrature, train.n_time, train.n_noise, block.init) == ("simpson-t", 2001, 2000, "normal")


def test_mlp_api_and_catalog_build_the_same_network_and_training():
    exp = _entry({"kind": "mlp"})
    block = exp.model
    net_sig = _signature_defaults(MLPDenoiser.__init__)
    assert net_sig["hidden"] == (block.hidden_widths[0],) * block.depth
    assert (net_sig["embed_dim"], net_sig["embed_scale"]) == (block.embed_dim, block.embed_scale)
    assert net_sig["activation"] == block.nonlinearity and net_sig["parametrization"] == block.output
    fit_sig = _signature_defaults(fit_neural)
    for field in ("epochs", "batch_size", "lr", "optimizer", "ema"):
        assert fit_sig[field] == getattr(block, field), field
    assert (fit_sig["T"], fit_sig["t_min"]) == (exp.process.T, exp.process.t_min)
    state = MLPDenoiser(2, hidden=(block.hidden_widths[0],) * block.depth, seed=exp.seeds.init).state_dict()
    task = CellTask((0,), {"width": block.hidden_widths[0]}, {}, 0, state)
    from_catalog = REGISTRY["mlp"].builder()(exp, block, task, TRAIN)
    by_hand = MLPDenoiser(2).eval()
    x = torch.randn(4, 2, dtype=torch.float64)
    assert torch.equal(from_catalog.denoise(x, 0.4), by_hand.denoise(x, 0.4))


def test_module_and_exact_defaults_are_the_catalogs():
    block = REGISTRY["module"].spec_class()(module="pkg.mod:factory")
    sig = _signature_defaults(ModuleDenoiser.__init__)
    assert sig["parametrization"] == block.output and sig["time"] == block.time
    tc = TimeConvention()
    assert (tc.kind, tc.beta_min, tc.beta_max) == (block.time, block.beta_min, block.beta_max)
    ex, ridge = _signature_defaults(ExactDenoiser.__init__), RidgeSpec()
    assert (ex["top_k"], ex["drop_tol"]) == (ridge.top_k, ridge.drop_tol)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_every_spec_default_that_the_paper_fixes_comes_from_ridgexr_defaults(kind):
    spec = REGISTRY[kind].spec_class()
    paper = {v for k, v in vars(defaults).items() if k.isupper() and not isinstance(v, (bool, type(None)))}
    for name, field in spec.model_fields.items():
        if isinstance(field.default, (int, float)) and not isinstance(field.default, bool) \
                and not math.isinf(field.default) and name not in ("beta_min", "beta_max"):
            assert field.default in paper, f"{kind}.{name} = {field.default} is not read from ridgexr.defaults"
