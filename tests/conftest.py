"""Shared fixtures and the test profile.  Markers are declared once, in pyproject.toml."""

import os

import numpy as np
import pytest
import torch
from hypothesis import settings

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=15, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` run only where torch sees a CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


SMALL_CATALOG = """
experiments:
  tiny:
    dataset: {points: two-points}
    process: {T: 2.0, t_min: 0.01, n_steps: %(steps)d}
    model: {widths: [8, 16], n_frequencies: 3, include_exact: true}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 4}
    schedules: ["1", "h2"]
    sampler: {kind: sde, block_steps: 8}
    n_samples: %(samples)d
    d_star: 1
    store: tiny.zarr
"""


def _write_catalog(tmp_path, steps=20, samples=16, name="cat.yaml"):
    f = tmp_path / name
    f.write_text(SMALL_CATALOG % dict(steps=steps, samples=samples))
    return f


@pytest.fixture(scope="session")
def write_catalog():
    """``write_catalog(folder, steps=20, samples=16, name="cat.yaml")`` writes a one-entry catalog
    (``tiny``: two points, widths 8 and 16, schedules 1 and h2 plus exact) and returns its path."""
    return _write_catalog


@pytest.fixture(scope="session")
def catalog_text():
    """``catalog_text(steps=20, samples=16)``: the text of the ``tiny`` catalog, to edit before writing."""
    return lambda steps=20, samples=16: SMALL_CATALOG % dict(steps=steps, samples=samples)


def _drawn_matplotlib_image(fig):
    """{(x tick label, y tick label): value} of the cells an hv.Image draws on matplotlib."""
    ax = fig.axes[0]
    im = ax.images[0]
    arr = np.asarray(im.get_array())
    left, right, bottom, top = im.get_extent()
    ny, nx = arr.shape
    xt = {round(float(p), 6): lab.get_text() for p, lab in zip(ax.get_xticks(), ax.get_xticklabels())}
    yt = {round(float(p), 6): lab.get_text() for p, lab in zip(ax.get_yticks(), ax.get_yticklabels())}
    out = {}
    for i in range(ny):
        for j in range(nx):  # row 0 is drawn at the top with origin="upper", at the bottom otherwise
            y = (top - (i + 0.5) * (top - bottom) / ny) if im.origin == "upper" else bottom + (i + 0.5) * (top - bottom) / ny
            x = left + (j + 0.5) * (right - left) / nx
            out[(xt[round(x, 6)], yt[round(y, 6)])] = float(arr[i, j])
    return out


@pytest.fixture(scope="session")
def drawn_matplotlib_image():
    """``drawn_matplotlib_image(fig)``: {(x tick label, y tick label): value} of an hv.Image rendered by matplotlib."""
    return _drawn_matplotlib_image
