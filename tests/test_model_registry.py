"""The model-kind registry: every kind has a spec, a builder, a trainer and a docs row; a new kind
is one package plus one registry line; loading a catalog imports neither torch nor xarray."""

import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ridgexr.catalog import Experiment, load_catalog_file
from ridgexr.models import REGISTRY, ModelKind, ModelSpec

DOCS = Path(__file__).resolve().parent.parent / "docs" / "models.md"


def _documented_kinds() -> set[str]:
    """The kinds named in the first column of the table under '## Kinds' in docs/models.md."""
    text = DOCS.read_text()
    section = text.split("## Kinds", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)`", section, flags=re.M))


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_every_kind_has_a_spec_a_builder_a_trainer_and_a_docs_row(kind):
    entry = REGISTRY[kind]
    spec = entry.spec_class()
    assert issubclass(spec, ModelSpec) and spec.model_fields["kind"].default == kind
    assert spec.summary, f"{kind}: the spec has no summary line"
    assert list(inspect.signature(entry.builder()).parameters)[:5] == ["exp", "block", "task", "train", "device"]
    assert list(inspect.signature(entry.trainer()).parameters) == ["ctx", "bi", "block", "cells"]
    assert kind in _documented_kinds(), f"docs/models.md has no row for kind {kind!r}"


def test_docs_rows_name_only_registered_kinds():
    assert _documented_kinds() == set(REGISTRY)


def test_loading_every_catalog_imports_neither_torch_nor_xarray():
    code = ("import sys, ridgexr.catalog as c; cat = c.open_catalog(); "
            "[e.config_hash for e in cat.experiments.values()]; "
            "print(len(cat), 'torch' in sys.modules, 'xarray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 10 and out[1:] == ["False", "False"]


TOY = {
    "__init__.py": '''
        from typing import ClassVar, Literal
        from pydantic import Field
        from ridgexr.models import ModelSpec

        class ToySpec(ModelSpec):
            """The exact denoiser shrunk towards 0 by a factor."""
            summary: ClassVar[str] = "a toy kind"
            kind: Literal["toy"] = "toy"
            shrink: float = Field(0.5, gt=0, le=1)
            hash_neutral: ClassVar[dict] = {"shrink": 0.5}  # as if added later with the neutral value 0.5
        ''',
    "cost.py": '''
        from ridgexr.models.cost import KindCost

        class ToyCost(KindCost):
            """Round numbers, so the planner's sums can be checked by hand."""
            activations_label = "toy activations"

            def call_seconds(self, block, d, n, queries=1, width=None):
                return 1.0

            def fit_seconds(self, exp, block, cells, d, n_trains):
                return [100.0]

            def diagnostics_seconds(self, exp, block, cells, d, n_trains, d_frame):
                return [10.0] * len(cells)

            def fit_bytes(self, exp, blocks, n, d, memory_budget):
                return {"toy shrink": 7e12}

            def call_bytes(self, block, base_dir):
                return 3e9

        COST = ToyCost()
        ''',
    "denoiser.py": '''
        from ridgexr import ExactDenoiser

        class Shrunk:
            def __init__(self, train, shrink):
                self.exact, self.shrink, self.process = ExactDenoiser(train), shrink, ExactDenoiser(train).process
            def denoise(self, x, t):
                return self.shrink * self.exact.denoise(x, t)
            def score(self, x, t):
                a, h = self.process.alpha(t), self.process.h(t)
                return (a * self.denoise(x, t) - x) / h

        def build(exp, block, task, train, device="cpu"):
            return Shrunk(train, block.shrink)
        ''',
    "fit_adapter.py": '''
        from ridgexr.models import FittedCell
        from ridgexr.training.heldout import heldout_diagnostics, heldout_sample
        from .denoiser import Shrunk

        def fit(ctx, bi, block, cells):
            model = Shrunk(ctx.train, block.shrink)
            return {idx: FittedCell(None, heldout_diagnostics(model.denoise, heldout_sample(ctx, None), "1",
                                                              ctx.exp.d_star)) for idx, _ in cells}
        ''',
}


@pytest.fixture
def toy_kind(tmp_path, monkeypatch):
    """A new kind written as a package of its own (three files) and added by one registry line."""
    pkg = tmp_path / "toykind"
    pkg.mkdir()
    for name, text in TOY.items():
        (pkg / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(REGISTRY, "toy", ModelKind("toy", "toykind:ToySpec", "toykind.denoiser:build",
                                                   "toykind.fit_adapter:fit"))
    yield
    for mod in [m for m in sys.modules if m == "toykind" or m.startswith("toykind.")]:
        del sys.modules[mod]


TOY_ENTRY = """
experiments:
  toy:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: 10}
    models: [{kind: toy, shrink: 0.25}, {kind: exact}]
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    n_samples: 8
    store: toy.zarr
"""


def test_a_new_kind_is_one_package_and_one_registry_line(toy_kind, tmp_path, run_entry):
    from ridgexr import open_dataset

    exp, res = run_entry(TOY_ENTRY, tmp_path, "toy")
    assert type(exp.models[0]).__name__ == "ToySpec" and exp.models[0].shrink == 0.25
    assert Experiment.model_validate_json(exp.model_dump_json()) == exp  # the JSON a worker gets
    with pytest.raises(Exception, match=r"models\.0\.shrink"):
        Experiment.model_validate(exp.model_dump() | {"models": [{"kind": "toy", "shrink": 2.0}, {"kind": "exact"}]})
    ds = open_dataset(res.store)
    assert list(ds["model"].values) == ["toy", "exact"]
    # the toy model's excess loss is positive (it is not the optimum); the exact denoiser's is zero
    excess = ds["excess_loss"].sel(model="toy").values
    assert float(excess) > 0 and float(ds["excess_loss"].sel(model="exact")) == pytest.approx(0, abs=1e-12)
    # its samples end shrunk: at the last step every toy trajectory is within shrink x |x_i| of the origin + noise
    last = ds["trajectory"].sel(model="toy").isel(step=-1).values
    assert np.abs(last[..., 0]).max() < 0.25 * 3.0 + 0.5



def test_the_planner_costs_a_new_kind_by_its_cost_hook(toy_kind, tmp_path, monkeypatch):
    """A toy kind with its own cost hook (round numbers) is priced by the planner without any planner change:
    its fit and diagnostics are the hook's, each of its n_steps x n_samples calls costs the hook's second, its
    memory term and activations drive the peak; the same kind without a hook is costed as a small network."""
    from ridgexr.models.cost import KindCost
    from ridgexr.run.plan import estimate_resources, estimate_stage_seconds

    f = tmp_path / "c.yaml"
    f.write_text(TOY_ENTRY)
    exp = load_catalog_file(f)["toy"]
    shape = (2, 2)
    plain = estimate_stage_seconds(exp, shape)  # the fixture's registry line names no cost
    monkeypatch.setitem(REGISTRY, "toy", ModelKind("toy", "toykind:ToySpec", "toykind.denoiser:build",
                                                   "toykind.fit_adapter:fit", cost="toykind.cost:COST"))
    hooked = estimate_stage_seconds(exp, shape)
    monkeypatch.setitem(REGISTRY, "toy", ModelKind("toy", "toykind:ToySpec", "toykind.denoiser:build",
                                                   "toykind.fit_adapter:fit"))
    assert hooked["fit"] == plain["fit"] + 100.0 and plain["fit"] == 0.0  # the exact block fits nothing
    toy = exp.models[0]
    default_call = KindCost().call_seconds(toy, 2, 2, 8)
    default_diag = sum(KindCost().diagnostics_seconds(exp, toy, [{}], 2, [2], 1))
    assert hooked["diagnostics"] == pytest.approx(plain["diagnostics"] - default_diag + 10.0, rel=1e-12)
    # one toy cell: n_steps x n_samples calls at the hook's 1 s instead of the small network's
    assert hooked["sampling and observation"] - plain["sampling and observation"] == pytest.approx(
        10 * 8 * (1.0 - default_call), rel=1e-12)
    plain_mem = estimate_resources(exp, shape)
    assert "toy shrink" not in plain_mem["memory_drivers"]
    monkeypatch.setitem(REGISTRY, "toy", ModelKind("toy", "toykind:ToySpec", "toykind.denoiser:build",
                                                   "toykind.fit_adapter:fit", cost="toykind.cost:COST"))
    mem = estimate_resources(exp, shape)
    assert mem["memory_stage"] == "fit" and mem["memory_drivers"] == ["toy shrink"]
    assert mem["peak_memory"] >= 7e12
    assert mem["store_size"] == plain_mem["store_size"]
    # its activations, 3e9 bytes per state, a sampling term of their own: 8 samples x 3e9 < 7e12, 4000 x 3e9 above
    big = estimate_resources(exp.model_copy(update={"n_samples": 4000}), shape)
    assert big["memory_stage"] == "sampling" and big["memory_drivers"][0] == "n_samples x toy activations"


def test_a_kind_declares_its_hash_neutral_fields(toy_kind, tmp_path):
    """The toy spec declares ``shrink: 0.5`` hash-neutral: at 0.5 the field leaves the hashed config (the hash
    of a block that never had it), at 0.25 it stays; the catalog's HASH_NEUTRAL names no model field."""
    from ridgexr.catalog import HASH_NEUTRAL, NOT_HASHED, hashed_config

    f = tmp_path / "c.yaml"
    f.write_text(TOY_ENTRY)
    exp = load_catalog_file(f)["toy"]
    cfg = hashed_config(exp.model_dump(exclude=set(NOT_HASHED)))
    assert cfg["models"][0]["shrink"] == 0.25
    neutral = exp.model_copy(update={"models": [exp.models[0].model_copy(update={"shrink": 0.5}), exp.models[1]]})
    assert "shrink" not in hashed_config(neutral.model_dump(exclude=set(NOT_HASHED)))["models"][0]
    assert not any(path.startswith(("model.", "models")) for path in HASH_NEUTRAL)


def test_the_planner_names_no_kind():
    """run/plan.py's time and memory estimates price blocks through the registry's cost hooks only: no kind's
    name is a string in them (plan_tasks' ``"exact"`` is a schedule label, not a kind)."""
    from ridgexr.run import plan

    text = "".join(inspect.getsource(f) for f in (plan.estimate_resources, plan.estimate_stage_seconds,
                                                  plan.count_run_cells))
    assert not [k for k in REGISTRY if f'"{k}"' in text or f"'{k}'" in text]
