"""What a store records about how it was made: configuration, package versions, seeds, device."""

from __future__ import annotations

import json
import platform
import socket
from datetime import datetime, timezone

import numpy as np
import torch

from .. import units
from ..catalog import Experiment
from ..datasets import dataset_provenance, image_shape

__all__ = ["provenance", "store_attrs"]


def provenance(device: str, scheduler: str | None, threads_source: str | None = None) -> dict:
    """Package versions, host, device, scheduler, torch's CPU threads (and where the count came from:
    :func:`ridgexr.threads.resolve_threads`; it changes rounding only) and creation time (UTC, ISO 8601)."""
    import dask
    import xarray
    import zarr

    from .._version import __version__

    return {
        "ridgexr_version": __version__, "numpy_version": np.__version__, "torch_version": torch.__version__,
        "xarray_version": xarray.__version__, "zarr_version": zarr.__version__, "dask_version": dask.__version__,
        "python_version": platform.python_version(), "host": socket.gethostname(), "device": device,
        "scheduler": scheduler or "in-process", "threads": torch.get_num_threads(),
        "threads_source": threads_source or "torch's default", "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def store_attrs(exp: Experiment, config_hash: str, device: str, scheduler: str | None, d_star_info: dict,
                threads_source: str | None = None) -> dict:
    """The root attributes of a new store (JSON-valued ones are strings; see docs/schema.md)."""
    prov = provenance(device, scheduler, threads_source)
    attrs = {
        "title": f"ridgexr experiment {exp.name}", "experiment": exp.name, "description": exp.description,
        "config": exp.model_dump_json(), "config_hash": config_hash, "provenance": json.dumps(prov),
        "seeds": json.dumps(exp.seeds.model_dump()), "d_star": int(exp.d_star), "device": device,
        "dataset": exp.dataset.label,
        "sampler": exp.sampler.kind,
        "created": prov["created"],
        "d_star_info": json.dumps(d_star_info),
        "dataset_provenance": json.dumps(dataset_provenance(exp.dataset, exp.base_dir)),
        "top_k": -1 if exp.ridge.top_k is None else int(exp.ridge.top_k),
        "drop_tol": float(exp.ridge.drop_tol),
        "tau_units": units.TAU_UNITS,
        "loss_units": "paper: int_{t_min}^{T} lambda(t) E|f - y|^2 dt summed over coordinates, lambda = w / h_t^2",
        "quadrature": f"{exp.training.quadrature}, {exp.training.n_time} nodes, {exp.training.n_noise} noise draws",
        "target": ", ".join(exp.training.targets),
        "models": json.dumps([{"label": b.label, "kind": b.kind, "parametrization": b.output} for b in exp.blocks]),
    }
    if exp.sampler.kind == "scheduler":  # what the scheduler does to its predicted x0 (clip_shift measures it)
        from ..models.diffusers.denoiser import entry_scheduler
        from ..sampling import scheduler_clipping

        attrs |= scheduler_clipping(entry_scheduler(exp)[0])
    shape = image_shape(exp.dataset, exp.base_dir)
    if shape is not None:  # pixel-space images: a training point x is the image x.reshape(image_shape)
        attrs["image_shape"] = [int(v) for v in shape]
    for b in reversed(exp.blocks):  # the first block that sets an attribute wins
        attrs.update(b.store_attrs(exp))
    if exp.legacy_exact:
        attrs["note_exact"] = ("schedule 'exact' is the exact (memorizing) denoiser: it does not depend on width, "
                               "every width holds the same trajectories (sampled once per training set and copied to the other "
                               "widths, taus, targets and n_noise)")
    if exp.model_dim:
        attrs["note_masked"] = ("a model block is stored at the first label of each cell dimension it does not use "
                                "(cell_applies); the other cells are never run and hold NaN")
    return attrs
