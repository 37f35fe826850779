"""Image datasets: the IDX reader's counts, locating the files, pixel scales, the catalog block, image_shape."""

import gzip
import json

import numpy as np
import pytest
from pydantic import ValidationError

import ridgexr
from ridgexr.catalog.data import DatasetSpec
from ridgexr.datasets import (IMAGE_SETS, ImageError, image_shape, load_images, load_training_set, locate_images,
                              read_idx_images)
from ridgexr.datasets import images as images_mod

FASHION = images_mod.DEBIAN_DATASETS / "fashion-mnist"
needs_fashion = pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").is_file(),
                                   reason="Debian package dataset-fashion-mnist not installed "
                                          "(apt-get install dataset-fashion-mnist)")


@pytest.fixture
def no_image_folders(tmp_path, monkeypatch):
    """No $RIDGEXR_IMAGES, an empty data folder and an empty Debian folder."""
    monkeypatch.delenv("RIDGEXR_IMAGES", raising=False)
    monkeypatch.setenv("RIDGEXR_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(images_mod, "DEBIAN_DATASETS", tmp_path / "debian")
    return tmp_path


@needs_fashion
def test_fashion_mnist_idx_counts_and_bytes():
    """The Debian files hold 60 000 / 10 000 images of 28 x 28, 6 000 / 1 000 per class; the pixels are the
    file's bytes after the 16-byte header (read independently with gzip)."""
    for split, n in (("train", 60_000), ("test", 10_000)):
        x, y = read_idx_images(FASHION, split, name="fashion-mnist")
        assert x.shape == (n, 28, 28) and x.dtype == np.uint8
        assert np.bincount(y).tolist() == [n // 10] * 10
    raw = gzip.open(FASHION / "t10k-images-idx3-ubyte.gz").read()
    np.testing.assert_array_equal(np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 28, 28), x)
    imgs, labels, hw, _ = load_images("fashion-mnist", classes=[9, 0], n=100, scale="symmetric")
    ref, yref = read_idx_images(FASHION, "train")
    keep = np.flatnonzero(np.isin(yref, [0, 9]))[:100]
    np.testing.assert_array_equal(labels, yref[keep])
    np.testing.assert_allclose(imgs, ref[keep].reshape(100, -1) * (2 / 255) - 1, atol=1e-15)
    assert hw == (28, 28) and imgs.min() >= -1 and imgs.max() <= 1


def test_count_check_rejects_a_short_or_unbalanced_named_set(tmp_path, monkeypatch, write_idx_folder, rng):
    """A folder posing as fashion-mnist with 20 images (or 60 000 unbalanced ones would) is refused by the counts."""
    folder = write_idx_folder(tmp_path / "imgs" / "fashion-mnist", rng.integers(0, 256, (20, 28, 28)),
                              np.arange(20) % 10)
    monkeypatch.setenv("RIDGEXR_IMAGES", str(tmp_path / "imgs"))
    assert locate_images("fashion-mnist") == folder
    with pytest.raises(ImageError, match=r"hold 20 images .* expected 60000 .* 6000 per class"):
        load_images("fashion-mnist")
    # the same files as a user's folder: no published counts to check
    x, y, hw, _ = load_images(str(folder))
    assert x.shape == (20, 784) and hw == (28, 28)


def test_missing_files_give_one_line_with_the_install_command(no_image_folders):
    with pytest.raises(ImageError) as info:
        locate_images("fashion-mnist")
    msg = str(info.value)
    assert "\n" not in msg and "apt-get install dataset-fashion-mnist" in msg and "RIDGEXR_IMAGES" in msg
    with pytest.raises(ImageError, match="neither"):
        locate_images(str(no_image_folders / "nowhere"))


def test_lookup_order_env_then_data_folder(no_image_folders, monkeypatch, write_idx_folder, rng):
    imgs, labels = rng.integers(0, 256, (4, 3, 3)), np.arange(4)
    in_data = write_idx_folder(no_image_folders / "data" / "images" / "fashion-mnist", imgs, labels)
    assert locate_images("fashion-mnist") == in_data
    env = write_idx_folder(no_image_folders / "env", imgs, labels)  # $RIDGEXR_IMAGES itself holds the files
    monkeypatch.setenv("RIDGEXR_IMAGES", str(env))
    assert locate_images("fashion-mnist") == env


def test_user_folder_scales_selection_and_image_shape(tmp_path, write_idx_folder, rng):
    raw = rng.integers(0, 256, (30, 5, 6)).astype(np.uint8)
    labels = np.arange(30) % 3
    write_idx_folder(tmp_path / "mine", raw, labels)
    unit, y, hw, _ = load_images("mine", classes=[2, 1], n=7, base_dir=tmp_path)
    sym, _, _, _ = load_images("mine", classes=[2, 1], n=7, scale="symmetric", base_dir=tmp_path)
    keep = np.flatnonzero(labels != 0)[:7]
    np.testing.assert_array_equal(y, labels[keep])
    np.testing.assert_allclose(unit, raw[keep].reshape(7, 30) / 255.0)
    np.testing.assert_allclose(sym, 2 * unit - 1, atol=1e-15)
    assert hw == (5, 6)
    spec = DatasetSpec.model_validate({"images": {"images": "mine", "classes": [2, 1], "n": 7}})
    np.testing.assert_array_equal(load_training_set(spec, base_dir=tmp_path), unit)
    assert image_shape(spec, tmp_path) == (1, 5, 6)
    with pytest.raises(ImageError, match="only 20 images"):
        load_images("mine", classes=[1, 2], n=21, base_dir=tmp_path)


def test_catalog_block_validation_and_image_shape():
    ok = DatasetSpec.model_validate({"images": {"images": "fashion-mnist", "classes": [0, 7]}})
    assert ok.images.scale == "unit" and ok.images.space == "pixel" and ok.label == "fashion-mnist (pixel)"
    assert image_shape(ok) == (1, *IMAGE_SETS["fashion-mnist"]["shape"]) == (1, 28, 28)
    latent = DatasetSpec.model_validate({"images": {"images": "fashion-mnist", "space": "latent"}})
    assert image_shape(latent) is None
    assert image_shape(DatasetSpec.model_validate({"mnist": {"space": "pixel"}})) == (1, 28, 28)
    assert image_shape(DatasetSpec.model_validate({"mnist": {}})) is None
    assert image_shape(DatasetSpec.model_validate({"points": "two-points"})) is None
    for bad, match in (({"images": "fashion-mnist", "space": "latent", "scale": "symmetric"}, "must be 'unit'"),
                       ({"images": "fashion-mnist", "classes": [1, 1]}, "distinct"),
                       ({"images": "fashion-mnist", "scale": "signed"}, "scale"),
                       ({"images": "fashion-mnist", "sapce": "pixel"}, "space")):
        with pytest.raises(ValidationError, match=match):
            DatasetSpec.model_validate({"images": bad})
    with pytest.raises(ValidationError, match="exactly one"):
        DatasetSpec.model_validate({"images": {"images": "fashion-mnist"}, "points": "two-points"})


def test_pixel_run_stores_the_images_and_image_shape(tmp_path, write_idx_folder, rng, run_entry):
    """A pixel-space run of 5 x 5 images: train_data is the scaled pixels, attr image_shape = (1, 5, 5), a
    training point reshaped by it is the file's image, and the per-step nearest-training distance and d1/d2
    equal a brute-force search over alpha_t x_i."""
    raw = rng.integers(0, 256, (12, 5, 5)).astype(np.uint8)
    write_idx_folder(tmp_path / "tiny", raw, np.arange(12) % 2)
    exp, res = run_entry("""
experiments:
  tiny-images:
    dataset: {images: {images: tiny, classes: [1], scale: symmetric}}
    process: {T: 1.0, t_min: 0.05, n_steps: 6}
    models: [{kind: exact}]
    training: {n_time: 3, n_noise: 1}
    sampler: {kind: sde, block_steps: 3}
    n_samples: 4
    d_star: 2
    store: tiny-images.zarr
""", tmp_path)
    ds = ridgexr.open_dataset(res.store)
    assert ds.attrs["image_shape"] == [1, 5, 5]
    train = ds["train_data"].values
    np.testing.assert_allclose(train.reshape(-1, *ds.attrs["image_shape"])[:, 0], raw[1::2] * (2 / 255) - 1)
    x = ds["trajectory"].values[0]  # (sample, step, dim) of the one (exact) cell
    alpha = ds["alpha"].values[None, :, None, None]
    dist = np.sort(np.linalg.norm(x[:, :, None, :] - alpha * train[None, None], axis=-1), axis=-1)
    np.testing.assert_allclose(ds["nearest_distance"].values[0], dist[..., 0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds["nearest_ratio"].values[0], dist[..., 0] / dist[..., 1], rtol=1e-10)
    prov = json.loads(ds.attrs["dataset_provenance"])
    assert prov["dataset"] == "images" and prov["space"] == "pixel" and prov["labels"] == [1] * 6


def test_image_catalog_entries():
    """The built-in image entries: pixel-space exact denoiser on nested 1 000 / 10 000 / 60 000 images, VAE latents
    of all 60 000 for the paper's models; the -large variants only grow the run."""
    cat = ridgexr.open_catalog()
    exact, latent = cat["fashion-exact"], cat["fashion-latent"]
    assert exact.dataset.images.space == "pixel" and exact.dataset.images.scale == "symmetric"
    assert exact.dataset.n_train == [1000, 10000, 60000] and [b.kind for b in exact.blocks] == ["exact"]
    assert image_shape(exact.dataset) == (1, 28, 28) and image_shape(latent.dataset) is None
    assert latent.dataset.images.space == "latent" and latent.dataset.images.n is None  # all 60 000
    assert {b.kind for b in latent.blocks} == {"mlp", "random_features", "exact"} and latent.d_star == 25
    for name in ("fashion-exact", "fashion-latent"):
        small, large = cat[name], cat[f"{name}-large"]
        assert large.dataset == small.dataset and large.n_samples == 4 * small.n_samples == 256
        assert large.process.n_steps // large.sampler.record_every > small.process.n_steps // small.sampler.record_every
