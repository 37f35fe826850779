"""Image grids of image stores (ridgexr.plot.image_grid): the values drawn, for pixel and latent stores."""

import numpy as np
import pytest
import torch
import xarray as xr

import ridgexr
from ridgexr import plot
from ridgexr.autoencoder import load_vae
from ridgexr.store import json_attr

# image_stores: a session fixture of conftest.py (the report's layout test renders the pixel store too)


def _tiles(canvas, h, w, pad=1):
    rows, cols = (canvas.shape[0] + pad) // (h + pad), (canvas.shape[1] + pad) // (w + pad)
    return np.stack([[canvas[r * (h + pad):r * (h + pad) + h, c * (w + pad):c * (w + pad) + w]
                      for c in range(cols)] for r in range(rows)])


def _expected(ds, show, n_times):
    """(sample, 3 n_times, H, W): state / alpha, projection / alpha, brute-force nearest training point."""
    steps = np.unique(np.linspace(0, ds.sizes["step"] - 1, n_times).round().astype(int))
    cell = ds.isel(model=0, step=steps)
    a = cell["alpha"].values[None, :, None]
    x, p = cell["trajectory"].values / a, cell["ridge_projection"].values / a
    train = ds["train_data"].values
    near = train[np.argmin(((x[:, :, None] - train) ** 2).sum(-1), -1)]
    out = [[f(v) for i in range(len(steps)) for f, v in ((show, x[s, i]), (show, p[s, i]), (show, near[s, i]))]
           for s in range(x.shape[0])]
    return np.array(out)


def test_pixel_grid_draws_states_projections_and_nearest_images(image_stores):
    ds = ridgexr.open_dataset(image_stores["pixel"])
    assert plot.is_image_store(ds) and ds.attrs["image_shape"] == [1, 5, 5]
    canvas, t, cell = plot.image_grid_values(ds, n_samples=3, n_times=3)
    K = ds.sizes["step"]
    np.testing.assert_allclose(t, ds["t"].values[[0, (K - 1) // 2, K - 1]])
    want = _expected(ds, lambda v: np.clip((v.reshape(5, 5) + 1) / 2, 0, 1), 3)
    np.testing.assert_allclose(_tiles(canvas, 5, 5), want, atol=1e-12)
    assert np.isnan(canvas[5]).all() and np.isnan(canvas[:, 5]).all()  # the gaps between tiles
    fig = hv_render(plot.image_grid(ds, n_samples=3, n_times=3))
    im = fig.axes[0].images[0]
    drawn = np.asarray(im.get_array(), dtype=float)
    drawn = drawn if im.origin == "upper" else drawn[::-1]
    np.testing.assert_allclose(np.ma.filled(np.ma.masked_invalid(drawn), np.nan), canvas, atol=1e-12)


def test_a_scheduler_output_at_t0_ends_each_row_beside_its_nearest_image(image_stores):
    """With ``final_sample`` (the scheduler's output at t = 0, docs/schema.md) three more tiles per row:
    that output, an empty tile (no ridge at t = 0) and its brute-force nearest training image."""
    ds = ridgexr.open_dataset(image_stores["pixel"])
    final = np.random.default_rng(3).uniform(-1, 1, (ds.sizes["model"], ds.sizes["sample"], ds.sizes["dim"]))
    ds = ds.assign(final_sample=(("model", "sample", "dim"), final))
    canvas, t, _ = plot.image_grid_values(ds, n_samples=3, n_times=3)
    assert t.size == 4 and t[-1] == 0.0
    show = lambda v: np.clip((v.reshape(5, 5) + 1) / 2, 0, 1)  # noqa: E731
    tiles = _tiles(canvas, 5, 5)
    np.testing.assert_allclose(tiles[:, :9], _expected(ds, show, 3), atol=1e-12)  # the recorded steps unchanged
    train = ds["train_data"].values
    for s in range(3):
        near = train[np.argmin(((final[0, s] - train) ** 2).sum(-1))]
        np.testing.assert_allclose(tiles[s, 9], show(final[0, s]), atol=1e-12)
        assert np.isnan(tiles[s, 10]).all()
        np.testing.assert_allclose(tiles[s, 11], show(near), atol=1e-12)


def test_latent_grid_draws_vae_decodings(image_stores):
    ds = ridgexr.open_dataset(image_stores["latent"])
    assert "image_shape" not in ds.attrs and plot.is_image_store(ds)
    vae = load_vae(json_attr(ds, "dataset_provenance")["vae_cache"])

    def decode(z):
        with torch.no_grad():
            return vae.decode(torch.tensor(z[None], dtype=torch.float32)).double().numpy().reshape(5, 5)

    canvas, _, _ = plot.image_grid_values(ds, n_samples=2, n_times=2)
    np.testing.assert_allclose(_tiles(canvas, 5, 5), _expected(ds.isel(sample=slice(0, 2)), decode, 2), atol=1e-7)


def test_report_includes_the_grid(image_stores, tmp_path):
    from ridgexr.report import make_report

    paths = make_report(ridgexr.open_dataset(image_stores["pixel"]), tmp_path / "rep")
    assert paths["image_grid_0"].stat().st_size > 1000 and "image_grid_0" in paths["html"].read_text()


def test_a_report_whose_every_frame_is_degenerate_leaves_the_distance_curves_out(image_stores, tmp_path):
    """At d = 784 every ridge frame can be degenerate (fashion-unet's smoke run): every distance is masked,
    the log-scaled distance curves have nothing to draw and are left out; the rest of the report is written."""
    from ridgexr.report import make_report

    ds = ridgexr.open_dataset(image_stores["pixel"])
    ds = ds.assign(ridge_degenerate=xr.ones_like(ds["ridge_degenerate"]))
    paths = make_report(ds, tmp_path / "rep")
    assert "distance_curves" not in paths and "image_grid_0" in paths
    assert "distance_curves" not in paths["html"].read_text()


def hv_render(obj):
    import holoviews as hv

    return hv.render(obj, backend="matplotlib")


def test_explorer_shows_the_images_at_the_sliders_t(image_stores):
    """An image store's explorer has a third view: at the slider's step, each sample / alpha_t beside its
    ridge projection / alpha_t and its nearest training image (brute force here)."""
    import holoviews as hv
    import panel as pn

    from ridgexr.explore import ExplorerData, images_view

    ds = ridgexr.open_dataset(image_stores["pixel"])
    assert len(ds.ridge.explore().select(pn.pane.HoloViews)) == 3  # samples, distance curves, images
    data = ExplorerData(ds)
    labels = {d: ds[d].values.tolist()[0] for d in data.cell_dims}
    show = lambda v: np.clip((v.reshape(5, 5) + 1) / 2, 0, 1)  # noqa: E731  [-1, 1] pixels -> [0, 1]
    train = ds["train_data"].values
    for k in (1, ds.sizes["step"] - 1):
        cell = ds.sel(labels).isel(step=k)
        a = float(cell["alpha"])
        x, p = cell["trajectory"].values / a, cell["ridge_projection"].values / a
        near = train[np.argmin(((x[:, None] - train) ** 2).sum(-1), -1)]
        want = np.array([[show(x[s]), show(p[s]), show(near[s])] for s in range(x.shape[0])])
        canvas = data.image_frame(labels, k)
        np.testing.assert_allclose(_tiles(canvas, 5, 5), want, atol=1e-12)
        img = images_view(data, labels, k)
        drawn = img.dimension_values(2, flat=False)  # holoviews' y axis points up: row 0 is the bottom
        np.testing.assert_allclose(np.flipud(drawn), canvas, atol=1e-12)
        hv.render(img, backend="bokeh")  # it renders


def test_each_image_pixel_gets_at_least_two_screen_pixels(image_stores):
    """A person must see the images: with 28 x 28 tiles the grid once drew each image pixel on less than
    one screen pixel (fashion-unet-16's 16 x 15 tiles in a 514 x 147 PNG).  Here the store's 5 x 5 images
    are blown up to 25 x 25 (each pixel a 5 x 5 block), and the drawn axes must give every image pixel
    at least 2 pixels across at the resolution of the report's PNGs (plot.DPI, laid out by plot.matplotlib_figure)."""
    ds = ridgexr.open_dataset(image_stores["pixel"]).load()
    k = np.ones((5, 5))

    def up(v):
        lead = v.shape[:-1]
        return np.stack([np.kron(x.reshape(5, 5), k).ravel() for x in v.reshape(-1, 25)]).reshape(*lead, 625)

    big = ds.drop_dims("dim").assign(
        {name: (ds[name].dims, up(ds[name].transpose(..., "dim").values)) for name in ("trajectory", "ridge_projection",
                                                                                     "train_data")})
    big = big.assign({name: big[name].transpose(*ds[name].dims) for name in ("trajectory", "ridge_projection",
                                                                            "train_data")})
    big.attrs["image_shape"] = [1, 25, 25]
    canvas, _, _ = plot.image_grid_values(big, n_samples=4, n_times=6)
    fig = plot.matplotlib_figure(plot.image_grid(big, n_samples=4, n_times=6))
    fig.canvas.draw()
    box = fig.axes[0].get_window_extent()
    px = plot.DPI / fig.dpi  # the report's PNGs are saved at plot.DPI
    assert box.width * px / canvas.shape[1] >= 2 and box.height * px / canvas.shape[0] >= 2, (box, canvas.shape)


def test_the_sample_gallery_draws_each_cells_final_samples_above_training_images(image_stores):
    """One row per cell (its final states over alpha at t_min), then a row of training images: the values drawn
    (read back from the rendered figure) are those images; the gate's verdict is in the title."""
    ds = ridgexr.open_dataset(image_stores["pixel"])
    canvas, labels = plot.sample_gallery_values(ds, n=3)
    assert labels == ["model=exact", "training images"]
    show = lambda v: np.clip((v.reshape(-1, 5, 5) + 1) / 2, 0, 1)  # noqa: E731
    last = ds.isel(step=-1, model=0)
    want = np.stack([show(last["trajectory"].values / float(last["alpha"])), show(ds["train_data"].values[:3])])
    np.testing.assert_allclose(_tiles(canvas, 5, 5), want, atol=1e-12)
    fig = hv_render(plot.sample_gallery(ds, n=3, gates={"model=exact": "generates"}))
    im = fig.axes[0].images[0]
    drawn = np.asarray(im.get_array(), dtype=float)
    drawn = drawn if im.origin == "upper" else drawn[::-1]
    np.testing.assert_allclose(np.ma.filled(np.ma.masked_invalid(drawn), np.nan), canvas, atol=1e-12)
    assert "model=exact [generates]" in fig.axes[0].get_title()


def test_the_report_of_an_image_store_starts_with_its_samples_and_shows_the_quality_table(image_stores, tmp_path):
    """The rendered page: a quality table per cell (an IDX folder without a test split: nothing to measure, the
    gate 'not assessed') and the sample gallery as the first figure."""
    from bs4 import BeautifulSoup

    from ridgexr.report import make_report

    ds = ridgexr.open_dataset(image_stores["pixel"])
    paths = make_report(ds, tmp_path / "rep")
    page = BeautifulSoup(paths["html"].read_text(), "html.parser")
    table = page.find("table", id="quality")
    head = [th.get_text() for th in table.find_all("th")]
    cells = [[td.get_text() for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")]
    assert head[0] == "model" and head[-2:] == ["gate", "claims about the cell"]
    assert cells == [["exact", *["-"] * 9, "not assessed", "testable"]]
    assert page.find_all("figure")[0]["id"] == "sample_gallery" and paths["sample_gallery"].is_file()


def test_the_explorer_says_each_cells_quality_gate(image_stores, tmp_path):
    """The explorer's quality pane (bound to the cell widgets) for the IDX folder without a test split: the gate is
    'not assessed' with the reason; a store of an older schema says so."""
    import panel as pn

    from ridgexr.explore import ExplorerData, explorer

    ds = ridgexr.open_dataset(image_stores["pixel"])
    view = explorer(ds)
    panes = [p for p in view.select(pn.pane.Markdown) if "sample quality" in str(p.object)]
    assert len(panes) == 1 and "not assessed" in panes[0].object and "no measure" in panes[0].object
    old = ds.drop_vars([n for n in ds.data_vars if n.startswith("quality_")])
    assert "schema < 1.7" in ExplorerData(old).quality_text({"model": "exact"})
