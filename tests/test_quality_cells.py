"""Sample quality stored per cell by a run, and the gate on a store: a U-Net at its initial weights fails it and
its claims read untestable; the memorizing exact denoiser passes."""

import numpy as np
import pytest

import ridgexr
from ridgexr.catalog import experiment_from_file
from ridgexr.quality import UNTESTABLE, gated_verdict
from ridgexr.run import run_experiment

pytest.importorskip("diffusers")

CATALOG = """
experiments:
  tiny-quality:
    dataset: {images: {images: tiny, scale: symmetric}}
    process: {T: 3.0, t_min: 0.001, n_steps: 4}
    models:
      - {kind: unet, sample_size: [6, 6], block_out_channels: [8], norm_num_groups: 4, epochs: 1, batch_size: 8,
         lr: 1.0e-12, diagnostics: {n_time: 3}}
      - {kind: exact, diagnostics: {n_time: 3}}
    training: {n_time: 3, n_noise: 1}
    sampler: {kind: scheduler, block_steps: 4}
    n_samples: 12
    d_star: 1
    ridge: {max_iter: 20}
    store: tiny-quality.zarr
"""


def _images(rng, n):
    """A law of 6 x 6 images: a bright bar at a random row over a dark background, with pixel noise."""
    img = np.full((n, 6, 6), 30.0) + rng.normal(0, 8, (n, 6, 6))
    img[np.arange(n), rng.integers(0, 6, n)] += 180
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def quality_store(tmp_path_factory, write_idx_folder):
    tmp = tmp_path_factory.mktemp("quality")
    rng = np.random.default_rng(0)
    write_idx_folder(tmp / "tiny", _images(rng, 40), np.zeros(40))
    write_idx_folder(tmp / "tiny", _images(rng, 30), np.zeros(30), split="test")
    (tmp / "cat.yaml").write_text(CATALOG)
    res = run_experiment(experiment_from_file(tmp / "cat.yaml"), data_dir=tmp / "data")
    return ridgexr.open_dataset(res.store), tmp


def test_the_stored_nearest_ratio_is_the_ratio_of_median_nearest_distances(quality_store):
    """quality_nearest_ratio of each cell against a brute-force search: the median distance of its final samples
    (the scheduler's output at t = 0) to the nearest training image over that of the held-out test images."""
    ds, tmp = quality_store
    train = ds["train_data"].values
    from ridgexr.datasets.images import load_images

    held, _, _, _ = load_images(str(tmp / "tiny"), scale="symmetric", split="test")

    def nearest(q):
        return np.sqrt(((q[:, None, :] - train[None]) ** 2).sum(-1)).min(1)

    for model in ds.model.values:
        x = ds["final_sample"].sel(model=model).squeeze(drop=True).transpose("sample", "dim").values
        want = np.median(nearest(x)) / np.median(nearest(held))
        cell = ds.sel(model=model).squeeze(drop=True)
        np.testing.assert_allclose(float(cell.quality_nearest_ratio), want, rtol=1e-12, atol=1e-15)
        assert float(cell.quality_nearest_ratio_lower) <= want <= float(cell.quality_nearest_ratio_upper)
        assert float(cell.quality_n_finite) == 12
        assert np.isnan(float(cell.quality_frechet))  # no classifier for an IDX folder: not measured


def test_a_unet_at_its_initial_weights_fails_the_gate_and_its_claims_are_untestable(quality_store):
    ds, _ = quality_store
    q = ds.ridge.sample_quality()
    gate = dict(zip(q.model.values, q.gate.squeeze().values))
    assert gate["exact"] == "generates"  # it copies training images: nearest ratio ~0 (memorization passes)
    assert gate["unet"] == "does not generate"
    assert float(q.quality_nearest_ratio.sel(model="unet").squeeze()) > 1.5
    assert gated_verdict("agrees", gate["unet"]) == UNTESTABLE
    assert gated_verdict("disagrees", gate["exact"]) == "disagrees"


def test_a_store_without_quality_variables_is_refused_naming_the_schema(quality_store):
    ds, _ = quality_store
    with pytest.raises(ValueError, match="schema 1.7"):
        ds.drop_vars([n for n in ds.data_vars if n.startswith("quality_")]).ridge.sample_quality()


def test_the_run_summary_says_whether_each_cell_generates(quality_store):
    """The summary the run prints (and ridgexr info) has the gate's verdict per cell."""
    from ridgexr.reader import summarize

    ds, _ = quality_store
    rows = summarize(ds.encoding["source"])
    assert {r["model"]: r["quality"] for r in rows} == {"unet": "does not generate", "exact": "generates"}


def test_a_latent_store_measures_against_the_encoded_test_images(tmp_path, write_idx_folder, monkeypatch):
    """VAE latents: the held-out reals are the test images encoded by the training set's cached VAE; the stored
    nearest ratio is the brute-force ratio of medians in latent space."""
    import torch

    from ridgexr.datasets.images import load_images
    from ridgexr.datasets.training_set import image_latents

    monkeypatch.setenv("RIDGEXR_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(1)
    write_idx_folder(tmp_path / "tiny", _images(rng, 30), np.zeros(30))
    write_idx_folder(tmp_path / "tiny", _images(rng, 20), np.zeros(20), split="test")
    (tmp_path / "cat.yaml").write_text("""
experiments:
  latent-quality:
    dataset: {images: {images: tiny, space: latent, latent_dim: 2, epochs: 2}}
    process: {T: 1.0, t_min: 0.01, n_steps: 4}
    models: [{kind: exact}]
    training: {n_time: 3, n_noise: 1}
    sampler: {kind: sde, block_steps: 4}
    n_samples: 10
    d_star: 1
    store: latent-quality.zarr
""")
    exp = experiment_from_file(tmp_path / "cat.yaml")
    ds = ridgexr.open_dataset(run_experiment(exp, data_dir=tmp_path / "data").store)
    vae = image_latents(exp.dataset.images, tmp_path).model
    px, _, _, _ = load_images(str(tmp_path / "tiny"), scale="unit", split="test")
    with torch.no_grad():
        held = vae.encode(torch.as_tensor(px, dtype=torch.float32))[0].double().numpy()
    train = ds["train_data"].values
    last = ds.isel(step=-1, model=0)
    x = last["trajectory"].values / float(last["alpha"])

    def nearest(q):
        return np.sqrt(((q[:, None, :] - train[None]) ** 2).sum(-1)).min(1)

    want = np.median(nearest(x)) / np.median(nearest(held))
    np.testing.assert_allclose(float(ds.quality_nearest_ratio.isel(model=0)), want, rtol=1e-10)
