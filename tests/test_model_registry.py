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
    "training.py": '''
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
                                                   "toykind.training:fit"))
    yield
    for mod in [m for m in sys.modules if m == "toykind" or m.startswith("toykind.")]:
        del sys.modules[mod]


def test_a_new_kind_is_one_package_and_one_registry_line(toy_kind, tmp_path):
    from ridgexr import open_dataset, run_experiment

    f = tmp_path / "c.yaml"
    f.write_text(textwrap.dedent("""
        experiments:
          toy:
            dataset: {points: two-points}
            process: {T: 2.0, t_min: 0.01, n_steps: 10}
            models: [{kind: toy, shrink: 0.25}, {kind: exact}]
            training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
            n_samples: 8
            store: toy.zarr
        """))
    exp = load_catalog_file(f)["toy"]
    assert type(exp.models[0]).__name__ == "ToySpec" and exp.models[0].shrink == 0.25
    assert Experiment.model_validate_json(exp.model_dump_json()) == exp  # the JSON a worker gets
    with pytest.raises(Exception, match=r"models\.0\.shrink"):
        Experiment.model_validate(exp.model_dump() | {"models": [{"kind": "toy", "shrink": 2.0}, {"kind": "exact"}]})
    res = run_experiment(exp, data_dir=tmp_path / "data")
    ds = open_dataset(res.store)
    assert list(ds["model"].values) == ["toy", "exact"]
    # the toy model's excess loss is positive (it is not the optimum); the exact denoiser's is zero
    excess = ds["excess_loss"].sel(model="toy").values
    assert float(excess) > 0 and float(ds["excess_loss"].sel(model="exact")) == pytest.approx(0, abs=1e-12)
    # its samples end shrunk: at the last step every toy trajectory is within shrink x |x_i| of the origin + noise
    last = ds["trajectory"].sel(model="toy").isel(step=-1).values
    assert np.abs(last[..., 0]).max() < 0.25 * 3.0 + 0.5
