"""The claims' forward references kept on disk beside the store (ridgexr.claims.reference_cache): the cached table is
the uncached one, a second call observes nothing, a call stopped after k blocks resumes at block k and ends with the
uninterrupted table, and a reference under another key or with a damaged chunk is computed again."""

import io
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import zarr
from rich.console import Console
from rich.progress import Progress
from typer.testing import CliRunner

import ridgexr
import ridgexr.observe
from ridgexr.catalog import RidgeSpec
from ridgexr.claims import claims_table, observe_forward, store_claims
from ridgexr.claims.evidence import REFERENCE_BLOCK, REFERENCE_DRAWS
from ridgexr.claims.reference_cache import KEY_ATTR, ReferenceCache, cache_path, forward_key
from ridgexr.cli import app
from ridgexr.verdicts import claims_frame

CLAIMS = """    claims:
      - {kind: reach-falls, t: [1.0, 0.05]}
      - {kind: slide-slower, t: [1.0, 0.05]}
"""
N_BLOCKS = -(-REFERENCE_DRAWS // REFERENCE_BLOCK)


@pytest.fixture(scope="module")
def reference_store(tmp_path_factory, catalog_text, run_entry):
    """A two-points store whose claims read the forward reference at two times."""
    return run_entry(catalog_text(steps=12, samples=16) + CLAIMS, tmp_path_factory.mktemp("refcache"))[1].store


@pytest.fixture
def store(reference_store, tmp_path):
    """A copy of the store of its own (its cache folder starts absent)."""
    return shutil.copytree(reference_store, tmp_path / reference_store.name)


@pytest.fixture
def observations(monkeypatch):
    """The number of states each call of ridgexr.observe.step_quantities observes (the real function runs)."""
    calls, real = [], ridgexr.observe.step_quantities
    monkeypatch.setattr(ridgexr.observe, "step_quantities", lambda density, x, *a, **k: calls.append(x.shape[1])
                        or real(density, x, *a, **k))
    return calls


def _frame(claims) -> pd.DataFrame:
    """Each claim's table row and its numbers unrounded (estimate, interval, counts, null), one row per claim."""
    numbers = pd.DataFrame([dict(estimate=c.estimate, low=c.low, high=c.high, n=c.n, excluded=c.excluded,
                                 null_value=getattr(c.null, "value", np.nan), null_low=getattr(c.null, "low", np.nan),
                                 null_high=getattr(c.null, "high", np.nan)) for c in claims])
    return pd.concat([claims_frame(claims).reset_index(drop=True), numbers], axis=1)


def _references(store) -> dict:
    """{t: (blocks written, n_blocks)} of the store's cache folder."""
    root = zarr.open_group(cache_path(store), mode="r")
    out = {}
    for name, group in root.groups():
        marks = np.asarray(group["block_complete"][:], dtype=bool)
        out[group.attrs[KEY_ATTR]["t"]] = (int(marks.sum()), marks.size)
    return out


def test_the_cached_table_is_the_uncached_one_and_a_second_call_observes_nothing(store, observations):
    ds = ridgexr.open_dataset(store)
    plain = _frame(store_claims(ds, cache=False))
    assert not cache_path(store).exists() and sum(observations) >= 2 * REFERENCE_DRAWS
    del observations[:]
    first = _frame(store_claims(ds))
    assert sum(observations) >= 2 * REFERENCE_DRAWS  # computed, block by block, and written
    assert max(observations[:N_BLOCKS]) == REFERENCE_BLOCK
    assert sorted(_references(store).values()) == [(N_BLOCKS, N_BLOCKS)] * 2  # two times, every block written
    del observations[:]
    again = _frame(store_claims(ridgexr.open_dataset(store)))  # another process's view: the folder only
    frames = [plain, first, again]
    for f in frames[1:]:
        pd.testing.assert_frame_equal(f, plain)
    assert np.isfinite(plain["estimate"].astype(float)).any()
    # the second call reads both references: only slide-slower's tangential frames are observed, no SCMS block
    assert all(n != REFERENCE_BLOCK for n in observations)
    assert claims_table(ds, cache=False) == claims_table(ds)
    with pytest.raises(TypeError, match="`cache` must be"):
        store_claims(ds, cache=3)


class _StopAfter(Progress):
    """A rich Progress that stops the command (as Ctrl-C does) once ``stop`` draws of a reference are observed."""

    def __init__(self, stop: int | None = None):
        super().__init__(console=Console(file=io.StringIO()))
        self.stop, self.seen = stop, {}

    def update(self, task_id, **kwargs):
        super().update(task_id, **kwargs)
        description = self._tasks[task_id].description
        self.seen.setdefault(description, []).append(kwargs["completed"])
        if self.stop is not None and kwargs["completed"] >= self.stop:
            raise KeyboardInterrupt


@pytest.mark.parametrize("k", [1, 7])
def test_a_call_stopped_after_k_blocks_resumes_there_and_ends_with_the_uninterrupted_table(store, k, observations):
    ds = ridgexr.open_dataset(store)
    uninterrupted = _frame(store_claims(ds, cache=False))
    stopping = _StopAfter(k * REFERENCE_BLOCK)
    with pytest.raises(KeyboardInterrupt):
        store_claims(ds, progress=stopping)
    (first, counts), = stopping.seen.items()
    assert counts == [REFERENCE_BLOCK * i for i in range(k + 1)] and first.startswith("reference t = ")
    assert list(_references(store).values()) == [(k, N_BLOCKS)]  # the k blocks that finished, and no other
    del observations[:]
    resumed = _StopAfter()
    table = _frame(store_claims(ridgexr.open_dataset(store), progress=resumed))
    pd.testing.assert_frame_equal(table, uninterrupted)
    # it starts where it stopped: the k blocks read, the others observed
    assert resumed.seen[first] == [REFERENCE_BLOCK * i for i in range(k, N_BLOCKS + 1)]
    assert sum(n == REFERENCE_BLOCK for n in observations) == 2 * N_BLOCKS - k
    assert sorted(_references(store).values()) == [(N_BLOCKS, N_BLOCKS)] * 2


def test_a_reference_under_another_key_or_with_a_damaged_chunk_is_computed_again(tmp_path, observations):
    train = np.random.default_rng(0).normal(size=(30, 3))
    args = (train, 0.5, 1, 2 * REFERENCE_BLOCK + 20, 3, RidgeSpec())
    fresh = observe_forward(*args, tangential=False)
    cache = ReferenceCache(tmp_path / "c.claims-cache")
    assert len(observations) == 3  # blocks of 50, 50 and 20 draws
    np.testing.assert_array_equal(observe_forward(*args, tangential=False, cache=cache)["ridge_projection"],
                                  fresh["ridge_projection"])
    (name, group), = zarr.open_group(cache.folder, mode="r").groups()
    # read for its own key: a value changed in the cache comes back (the cache is what is read)
    zarr.open_group(cache.folder, mode="r+")[name]["ridge_distance"][:REFERENCE_BLOCK] = -1.0
    del observations[:]
    read = observe_forward(*args, tangential=False, cache=cache)["ridge_distance"]
    assert observations == [] and (read[:REFERENCE_BLOCK] == -1).all()
    np.testing.assert_array_equal(read[REFERENCE_BLOCK:], fresh["ridge_distance"][REFERENCE_BLOCK:])
    # the same group name holding another key (another time; another digest): never read, computed again and
    # rewritten
    meta = cache.folder / name / "zarr.json"
    for other in ({"t": 0.6}, {"digest": "0" * 64}):
        doc = json.loads(meta.read_text())
        doc["attributes"][KEY_ATTR] = {**doc["attributes"][KEY_ATTR], **other}
        meta.write_text(json.dumps(doc))
        del observations[:]
        with pytest.warns(RuntimeWarning, match="holds another reference"):
            again = observe_forward(*args, tangential=False, cache=cache)
        assert len(observations) == 3
    for v in ("ridge_distance", "ridge_projection"):
        np.testing.assert_array_equal(again[v], fresh[v])
    # a chunk that fails its checksum: that block alone is computed again
    chunk = cache.folder / name / "ridge_projection" / "c" / "1" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    del observations[:]
    with pytest.warns(RuntimeWarning, match="block 1 .* is damaged"):
        healed = observe_forward(*args, tangential=False, cache=cache)
    assert observations == [REFERENCE_BLOCK]
    np.testing.assert_array_equal(healed["ridge_projection"], fresh["ridge_projection"])
    # other inputs, another key: a reference of its own beside the first, nothing read from it
    del observations[:]
    other = observe_forward(train, 0.5, 1, 2 * REFERENCE_BLOCK + 20, 4, RidgeSpec(), tangential=False, cache=cache)
    assert len(observations) == 3 and len(list(zarr.open_group(cache.folder, mode="r").groups())) == 2
    np.testing.assert_array_equal(other["ridge_distance"],
                                  observe_forward(train, 0.5, 1, 2 * REFERENCE_BLOCK + 20, 4, RidgeSpec(),
                                                  tangential=False)["ridge_distance"])


def test_the_key_changes_with_every_input_of_the_reference():
    train = np.random.default_rng(1).normal(size=(5, 2))
    base = dict(train=train, t=0.5, d_star=1, n=100, seed=0, ridge=RidgeSpec(), block=50)
    flipped = train.copy()
    flipped[2, 1] = np.nextafter(flipped[2, 1], np.inf)
    changes = dict(train=flipped, t=np.nextafter(0.5, 1.0), d_star=0, n=101, seed=1, block=25,
                   ridge=RidgeSpec(tol=1e-9))
    keys = [json.dumps(forward_key(**base), sort_keys=True)]
    keys += [json.dumps(forward_key(**{**base, k: v}), sort_keys=True) for k, v in changes.items()]
    assert len(set(keys)) == len(keys)
    assert forward_key(**base) == forward_key(**{**base, "train": train.copy()})


def test_the_cli_keeps_the_cache_unless_told_not_to_and_shows_progress_on_stderr(store):
    runner = CliRunner()
    plain = runner.invoke(app, ["claims", str(store), "--markdown", "--no-cache"])
    assert plain.exit_code == 0, plain.output
    assert not cache_path(store).exists()
    cached = runner.invoke(app, ["claims", str(store), "--markdown"])
    assert cached.exit_code == 0, cached.output
    assert cached.stdout == plain.stdout and "| schedule |" in cached.stdout and "reference t" not in cached.stdout
    assert sorted(_references(store).values()) == [(N_BLOCKS, N_BLOCKS)] * 2



CHILD = """
import sys
import numpy as np
from ridgexr.claims import observe_forward
from ridgexr.claims.reference_cache import ReferenceCache
train = np.random.default_rng(5).normal(size=(120, 6))
observe_forward(train, 0.3, 2, {n}, 0, None, tangential=False, cache=ReferenceCache(sys.argv[1]),
                progress=lambda k: print(k, flush=True))
"""


def test_a_process_killed_between_or_inside_blocks_resumes_to_the_uninterrupted_reference(tmp_path, observations):
    """A real subprocess observing a reference into the cache is killed (SIGKILL) as soon as it says that 2 blocks
    are done; the blocks it wrote are kept, the next call computes only the others and ends with the numbers of an
    uninterrupted call."""
    import os
    import signal
    import subprocess
    import sys

    n = 24 * REFERENCE_BLOCK
    folder = tmp_path / "c.claims-cache"
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(n=n), str(folder)], stdout=subprocess.PIPE,
                             text=True, env=os.environ)
    for line in child.stdout:
        if int(line) >= 2 * REFERENCE_BLOCK:
            child.send_signal(signal.SIGKILL)
            break
    child.wait()
    assert child.returncode == -signal.SIGKILL
    (name, group), = zarr.open_group(folder, mode="r").groups()
    kept = int(np.asarray(group["block_complete"][:]).sum())
    assert 2 <= kept < n // REFERENCE_BLOCK, kept  # killed after its second block, before its last
    train = np.random.default_rng(5).normal(size=(120, 6))
    resumed = observe_forward(train, 0.3, 2, n, 0, None, tangential=False, cache=ReferenceCache(folder))
    assert len(observations) == n // REFERENCE_BLOCK - kept  # only the blocks it had not written
    assert not list(folder.rglob("*.partial"))
    fresh = observe_forward(train, 0.3, 2, n, 0, None, tangential=False)
    for v in ("ridge_distance", "ridge_projection"):
        np.testing.assert_array_equal(resumed[v], fresh[v])
    assert np.isfinite(fresh["ridge_distance"]).sum() > n // 2
