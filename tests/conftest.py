"""Shared fixtures, the test profile, and the guard that no test writes into the checkout.

Markers are declared once, in pyproject.toml.

The suite leaves the checkout as it found it: ``git status --porcelain --ignored`` is the same
before and after a session (``pytest_sessionstart`` takes a snapshot, ``pytest_sessionfinish``
compares, and a difference fails the session, naming the paths).  What would otherwise write
into the tree is stopped at its source rather than filtered out of the comparison:

* Python bytecode: ``sys.dont_write_bytecode`` is set below, before anything else is imported,
  and ``PYTHONDONTWRITEBYTECODE=1`` is exported to every subprocess (sphinx, benchmark scripts,
  the CLI, notebook kernels, dask workers).  The one file that cannot be stopped this way is
  this module's own cached bytecode: pytest compiles and caches a conftest before running a line
  of it.  That file, and only that file, is deleted again below when this process wrote it, so
  the tree after the suite is the tree before ``python -m pytest`` started (it is gone before
  the snapshot, so the guard never sees it and filters nothing).
* pytest's cache (``.pytest_cache``): ``-p no:cacheprovider`` in pyproject's ``addopts``.
* hypothesis's storage (``.hypothesis/`` in the working directory by default: its example
  database and its unicode tables): a temporary folder for the session, unless
  ``$HYPOTHESIS_STORAGE_DIRECTORY`` names one (point it outside the checkout to keep
  the example database between runs).
* Stores, figures, built documentation: tests write under ``tmp_path``; the documentation build
  runs on a copy of ``docs/`` and the wheel is built from a copy of the sources.
"""

import sys

sys.dont_write_bytecode = True  # first: every module imported from here on (ridgexr included) stays uncompiled

import os  # noqa: E402

os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # inherited by every subprocess the tests start

import atexit  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402
from reference_runs import uninterrupted  # noqa: E402  (tests/ is on sys.path: the rootdir conftest's folder)


def _forget_own_bytecode():
    """Delete this conftest's bytecode if this process wrote it (pytest does, before the module runs)."""
    started = psutil.Process().create_time()
    here = Path(__file__).resolve()
    cache = here.parent / "__pycache__"
    for pyc in cache.glob(here.stem + ".*.pyc"):
        if pyc.stat().st_mtime >= started:
            pyc.unlink()
    if cache.is_dir() and not any(cache.iterdir()):
        cache.rmdir()


_forget_own_bytecode()

if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    _hypothesis_home = tempfile.mkdtemp(prefix="ridgexr-hypothesis-")
    set_hypothesis_home_dir(_hypothesis_home)
    atexit.register(shutil.rmtree, _hypothesis_home, ignore_errors=True)

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=15, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# One torch/OpenMP thread per core in all: under pytest-xdist each of the PYTEST_XDIST_WORKER_COUNT workers gets
# its share, and so do the processes the tests start (the CLI, kill-and-resume runs, benchmark scripts, dask
# workers), through OMP_NUM_THREADS.  Two workers with two threads each on 2 cores spun: the full suite's CPU time
# grew from ~1 700 s to ~2 030 s when the CPU-heavy modules ran side by side (docs/performance.md, "The test suite").
_TEST_THREADS = max(1, min(2, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
os.environ["OMP_NUM_THREADS"] = str(_TEST_THREADS)
torch.set_num_threads(_TEST_THREADS)


_TREE_KEY = pytest.StashKey()  # (git top level, rootdir, status at the session's start)
_CHANGES_KEY = pytest.StashKey()  # the lines naming what the session changed


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True).stdout


def _tree_state(top, rootdir):
    """{git status line: (size, mtime_ns) of the path, or None}: every modified, untracked and ignored path.

    ``--untracked-files=all`` lists files inside untracked and ignored folders one by one, so a
    file added to an existing ignored folder (``docs/_build/``, a virtual environment) counts; size
    and modification time catch a file rewritten that was already listed (a tracked file already
    modified, an ignored file overwritten).
    """
    out = _git(top, "status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=all", "--", str(rootdir))
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    state = {}
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        if entry[0] in "RC":  # a staged rename or copy: the original path follows
            entry += " <- " + fields[i]
            i += 1
        path = top / entry[3:].split(" <- ")[0]
        try:
            st = os.stat(path, follow_symlinks=False)
            state[entry] = (st.st_size, st.st_mtime_ns)
        except OSError:
            state[entry] = None
    return state


def _tree_difference(before, after):
    """Lines naming what appeared, disappeared or changed between two ``_tree_state`` snapshots."""
    lines = [f"new      {e}" for e in sorted(after.keys() - before.keys())]
    lines += [f"gone     {e}" for e in sorted(before.keys() - after.keys())]
    lines += [f"changed  {e}" for e in sorted(before.keys() & after.keys()) if before[e] != after[e]]
    return lines


def pytest_sessionstart(session):
    """Snapshot the checkout's status (only inside a git checkout)."""
    rootdir = Path(session.config.rootpath).resolve()
    try:
        top = Path(_git(rootdir, "rev-parse", "--show-toplevel").decode().strip()).resolve()
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout: nothing to guard
        return
    session.config.stash[_TREE_KEY] = (top, rootdir, _tree_state(top, rootdir))


def pytest_sessionfinish(session, exitstatus):
    """Fail the session when the tests changed the checkout's status."""
    snapshot = session.config.stash.get(_TREE_KEY, None)
    if snapshot is None:
        return
    top, rootdir, before = snapshot
    changes = _tree_difference(before, _tree_state(top, rootdir))
    if changes:
        session.config.stash[_CHANGES_KEY] = changes
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    changes = config.stash.get(_CHANGES_KEY, None)
    if changes:
        terminalreporter.write_sep("=", "the tests wrote into the checkout", red=True, bold=True)
        terminalreporter.write_line(f"`git status --porcelain --ignored` changed during the session "
                                    f"({len(changes)} paths); no test may write into the source tree:")
        for line in changes[:50]:
            terminalreporter.write_line("  " + line)
        if len(changes) > 50:
            terminalreporter.write_line(f"  ... and {len(changes) - 50} more")



# The longest test modules of the full suite, with their seconds on 2 cores (two xdist workers, 2026-12-03, from
# --junitxml; 1 872 s of tests in all).  They are scheduled first, longest first, so the two workers finish
# together: in xdist's own order (modules with the most tests first) the 2-test kill module came last and one
# worker ran the final ~4 minutes alone.  Only the order matters; a module not listed keeps its collection
# order after these.
LONGEST_MODULES = {"test_run_robustness": 365, "test_run_signals": 163, "test_report": 131, "test_run_kills": 107,
                   "test_run": 107, "test_docs": 104, "test_run_models": 104, "test_claims": 97, "test_benchmarks": 86,
                   "test_lowrank": 80, "test_store_lifecycle": 66, "test_diffusers_models": 56}


def pytest_collection_modifyitems(config, items):
    """The longest modules first (``LONGEST_MODULES``; a module's own tests keep their order); tests marked
    ``cuda`` run only where torch sees a CUDA device."""
    def cost(item):
        return -LONGEST_MODULES.get(item.path.stem, 0)

    items[:] = sorted(items, key=cost)  # stable: the order within a module, and of the others, is kept
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


def _write_idx_folder(folder, images, labels, split="train"):
    """Write ``images`` (n, H, W) uint8 and ``labels`` (n,) as gzipped IDX files in ``folder``."""
    import gzip
    import struct

    prefix = "train" if split == "train" else "t10k"
    folder.mkdir(parents=True, exist_ok=True)
    images, labels = np.asarray(images, dtype=np.uint8), np.asarray(labels, dtype=np.uint8)
    with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as fh:
        fh.write(struct.pack(">IIII", 0x803, *images.shape) + images.tobytes())
    with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as fh:
        fh.write(struct.pack(">II", 0x801, labels.shape[0]) + labels.tobytes())
    return folder


@pytest.fixture(scope="session")
def write_idx_folder():
    """``write_idx_folder(folder, images (n, H, W) uint8, labels (n,), split="train")`` writes the gzipped
    IDX pair ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`` and returns the folder."""
    return _write_idx_folder


# The uninterrupted reference runs of the robustness tests (tests/reference_runs.py): session fixtures, so the
# three modules that compare against them (test_run_robustness, test_run_kills, test_run_signals) share one
# build per worker.
@pytest.fixture(scope="session")
def reference(tmp_path_factory, write_catalog):
    """(catalog path, experiment, store, seconds) of an uninterrupted run of the ``tiny`` catalog at 60 steps
    x 32 samples."""
    return uninterrupted(tmp_path_factory.mktemp("ref"), write_catalog, steps=60, samples=32)


@pytest.fixture(scope="session")
def small_reference(tmp_path_factory, write_catalog):
    """As ``reference`` at the catalog's default size (20 steps, 16 samples): for the damage tests, whose
    repairs rerun whole cells and need no time to interrupt a run."""
    return uninterrupted(tmp_path_factory.mktemp("small"), write_catalog)


@pytest.fixture(scope="session")
def long_reference(tmp_path_factory, write_catalog):
    """As ``reference`` at 200 steps x 64 samples: long enough that a signal sent once the first cell is
    complete lands mid-run (the three signal tests share it)."""
    return uninterrupted(tmp_path_factory.mktemp("long"), write_catalog, steps=200, samples=64)


@pytest.fixture(scope="session")
def new_reference(tmp_path_factory, small_reference):
    """The store of the configuration that replaces ``small_reference``'s (8 samples instead of 16), uninterrupted."""
    from ridgexr.run import run_experiment

    cat, exp, _, _ = small_reference
    other = exp.model_copy(update={"n_samples": 8})
    return other, run_experiment(other, store=tmp_path_factory.mktemp("newref") / "new.zarr").store


def _texts_of(fig):
    """[(where, Text, owner)] of every visible, non-empty text of a matplotlib figure: figure texts, and per axes its
    titles, axis labels, tick labels inside the view, annotations (owner: the axes) and legend entries (owner: the
    legend)."""
    out = [(f"figure text {t.get_text()!r}", t, None) for t in fig.texts]
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        name = f"axes {i} ({ax.get_title() or ax.get_label()!r})"
        out += [(f"{name} title {t.get_text()!r}", t, None) for t in (ax.title, ax._left_title, ax._right_title)]
        for axis in (ax.xaxis, ax.yaxis):
            if not axis.get_visible() or not ax.axison:
                continue
            out.append((f"{name} {axis.axis_name} label {axis.label.get_text()!r}", axis.label, None))
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low):
                    out += [(f"{name} {axis.axis_name} tick {lab.get_text()!r}", lab, None)
                            for lab in (tick.label1, tick.label2)]
        out += [(f"{name} annotation {t.get_text()!r}", t, ax) for t in ax.texts]
    for legend in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
        if legend is not None and legend.get_visible():
            out += [(f"legend entry {t.get_text()!r}", t, legend) for t in legend.get_texts()]
            out.append((f"legend title {legend.get_title().get_text()!r}", legend.get_title(), legend))
    return [(w, t, o) for w, t, o in out if t.get_visible() and t.get_text().strip()]


def _figure_layout_problems(fig, tol=1.0, min_text_px=11.0, max_legend_width=0.4):
    """What overlaps or is clipped in a matplotlib figure, from matplotlib's own extents after a draw (a list of
    sentences; empty when the figure is clean).

    * every text (titles, axis and tick labels, annotations, legend entries), legend box and axes lies inside the
      canvas;
    * no two texts overlap, except entries of one legend with its own title;
    * no text and no legend overlaps the data area (axes box) of any axes, except an axes' own annotations;
    * no two data areas overlap (a colour bar has its own axes beside the image, not over it);
    * every text is at least ``min_text_px`` pixels high at the figure's resolution (its size in points x dpi / 72),
      and no legend is wider than ``max_legend_width`` of the figure.

    Extents are pixels of the renderer (``get_window_extent``), shrunk by ``tol`` pixels each side (touching is
    not overlapping).  Axes that draw nothing (holoviews' empty layout slots) are skipped.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox

    if not isinstance(fig.canvas, FigureCanvasAgg):  # holoviews' figures come with a bare FigureCanvasBase
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = Bbox.from_bounds(0, 0, *fig.canvas.get_width_height())

    def box(artist):
        b = artist.get_window_extent(renderer)
        return Bbox.from_extents(b.x0 + tol, b.y0 + tol, b.x1 - tol, b.y1 - tol)

    def inside(b):
        return b.x0 >= canvas.x0 - tol and b.y0 >= canvas.y0 - tol and b.x1 <= canvas.x1 + tol and b.y1 <= canvas.y1 + tol

    def meet(a, b):
        return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1

    axes = [(f"axes {i} ({ax.get_title() or ax.get_label()!r})", ax, box(ax)) for i, ax in enumerate(fig.axes)
            if ax.get_visible() and (ax.axison or ax.images or ax.lines or ax.collections or ax.patches)]
    texts = [(w, t, o, box(t)) for w, t, o in _texts_of(fig)]
    legends = [(f"legend of {len(lg.get_texts())} entries", lg, box(lg))
               for lg in [ax.get_legend() for ax in fig.axes] + list(fig.legends) if lg is not None and lg.get_visible()]
    problems = []
    for where, _, *rest in [(w, t, b) for w, t, _, b in texts] + [(w, a, b) for w, a, b in axes + legends]:
        b = rest[-1]
        if not inside(b):
            problems.append(f"{where} lies outside the canvas ({b.x0:.0f}, {b.y0:.0f}, {b.x1:.0f}, {b.y1:.0f}) "
                            f"of {canvas.x1:.0f} x {canvas.y1:.0f} px")
    for i, (w1, t1, o1, b1) in enumerate(texts):
        for w2, t2, o2, b2 in texts[i + 1:]:
            if o1 is not None and o1 is o2 and not hasattr(o1, "get_xaxis"):
                continue  # a legend's own entries and title are laid out by the legend
            if meet(b1, b2):
                problems.append(f"{w1} overlaps {w2}")
        for wa, ax, ba in axes:
            if o1 is ax:
                continue  # an axes' own annotations are drawn on its data
            if meet(b1, ba):
                problems.append(f"{w1} overlaps the data area of {wa}")
    for wl, lg, bl in legends:
        for wa, ax, ba in axes:
            if meet(bl, ba):
                problems.append(f"{wl} ({', '.join(t.get_text() for t in lg.get_texts()[:2])}, ...) overlaps the data "
                                f"area of {wa}")
        for w, t, o, b in texts:
            if o is not lg and meet(bl, b):
                problems.append(f"{wl} overlaps {w}")
    for i, (w1, _, b1) in enumerate(axes):
        for w2, _, b2 in axes[i + 1:]:
            if meet(b1, b2):
                problems.append(f"{w1} overlaps the data area of {w2}")
    for w, t, _, _ in texts:
        if t.get_fontsize() * fig.dpi / 72 < min_text_px:
            problems.append(f"{w} is {t.get_fontsize() * fig.dpi / 72:.1f} px high (< {min_text_px} px)")
    for wl, _, bl in legends:
        if bl.width > max_legend_width * canvas.width:
            problems.append(f"{wl} is {bl.width / canvas.width:.0%} of the figure's width (> {max_legend_width:.0%})")
    return problems


@pytest.fixture(scope="session")
def figure_layout_problems():
    """``figure_layout_problems(fig)``: the sentences naming what overlaps or is clipped in a matplotlib figure
    (texts, legends, data areas, the canvas), from its renderer's extents; empty when none."""
    return _figure_layout_problems


IMAGE_CATALOG = """
experiments:
  imgs:
    dataset: {images: {images: tiny, %(block)s}}
    process: {T: 1.0, t_min: 0.05, n_steps: 6}
    models: [{kind: exact}]
    training: {n_time: 3, n_noise: 1}
    sampler: {kind: sde, block_steps: 3}
    n_samples: 3
    d_star: 1
    store: imgs.zarr
"""


@pytest.fixture(scope="session")
def image_stores(tmp_path_factory, write_idx_folder):
    """{"pixel": store, "latent": store}: a pixel store (5 x 5 images in [-1, 1]) and a latent store (a 2-d VAE of
    the same images) of one exact-model cell each."""
    from ridgexr.catalog import experiment_from_file
    from ridgexr.run import run_experiment

    tmp = tmp_path_factory.mktemp("grid")
    g = np.random.default_rng(7)
    write_idx_folder(tmp / "tiny", g.integers(0, 256, (10, 5, 5)), np.arange(10) % 2)
    stores = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RIDGEXR_CACHE", str(tmp / "cache"))
        for name, block in (("pixel", "scale: symmetric"), ("latent", "space: latent, latent_dim: 2, epochs: 2")):
            f = tmp / f"{name}.yaml"
            f.write_text(IMAGE_CATALOG % dict(block=block))
            stores[name] = run_experiment(experiment_from_file(f), data_dir=tmp / name).store
    return stores


#: the test classifier of the image quality measures: the first 3 000 Fashion-MNIST training images, 2 epochs of
#: batches of 64 (4-10 s on one thread; test accuracy 0.79, recall of Trouser 0.91; of T-shirt/top 0.50-0.86 over
#: seeds, hence class 1 in the tests)
FASHION_CLASSIFIER = dict(n_train=3000, epochs=2, batch_size=64)


@pytest.fixture(scope="session")
def fashion_classifier(tmp_path_factory):
    """The small Fashion-MNIST classifier of :data:`FASHION_CLASSIFIER`, trained on one torch thread and cached in a
    temporary folder; the test is skipped when Fashion-MNIST is not installed (apt-get install
    dataset-fashion-mnist)."""
    from ridgexr.datasets import ImageError, locate_images
    from ridgexr.quality import cached_classifier

    try:
        locate_images("fashion-mnist")
    except ImageError:
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return cached_classifier(**FASHION_CLASSIFIER, directory=tmp_path_factory.mktemp("classifier-cache"))
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def run_entry():
    """``run_entry(text, folder, name=None, *, data_dir=None, catalog="cat.yaml", **run_kwargs)`` ->
    ``(experiment, RunResult)``: the write-a-catalog-then-run steps of a test.

    Writes the catalog ``text`` (YAML) to ``folder / catalog``, validates its entry ``name`` (the only one when
    None; ``ridgexr.catalog.experiment_from_file``) and runs or resumes it with ``ridgexr.run.run_experiment``
    into ``data_dir`` (default ``folder / "data"``), passing ``run_kwargs`` on.  Session-scoped, so module and
    session fixtures use it too."""
    from ridgexr.catalog import experiment_from_file
    from ridgexr.run import run_experiment

    def run(text: str, folder, name: str | None = None, *, data_dir=None, catalog: str = "cat.yaml", **run_kwargs):
        path = Path(folder) / catalog
        path.write_text(text)
        exp = experiment_from_file(path, name)
        return exp, run_experiment(exp, data_dir=Path(folder) / "data" if data_dir is None else data_dir, **run_kwargs)

    return run
