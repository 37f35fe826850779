"""The random-feature kind's builder: the network of :mod:`ridgexr.features` carrying a cell's fitted readout.

The network (:class:`ridgexr.features.RandomFeatureDenoiser`: fixed random features, readout A) sits below
:mod:`ridgexr.training`, which fits A; this module turns a catalog block into the network's arguments
(:func:`model_kwargs`) and a cell's readout into its denoiser (:func:`build`).
"""

from __future__ import annotations

import torch

from ...features import RandomFeatureDenoiser

__all__ = ["RandomFeatureDenoiser", "model_kwargs", "build"]


def model_kwargs(exp, block) -> dict:
    """Keyword arguments of :class:`RandomFeatureDenoiser` for a random-feature block of an entry."""
    return dict(n_frequencies=block.n_frequencies, feature_period=block.period(exp.process.T),
                activation=block.nonlinearity, parametrization=block.output, seed=exp.seeds.features)


def build(exp, block, task, train, device: str = "cpu"):
    """The denoiser of one random-feature cell: the network with the cell's readout A, or the exact
    denoiser for the entry's schedule 'exact' (no readout)."""
    if task.state is None:
        from ..exact.denoiser import build as build_exact

        return build_exact(exp, block, task, train, device)
    return RandomFeatureDenoiser(train.shape[1], task.labels["width"], device=torch.device(device),
                                 **model_kwargs(exp, block)).with_A(task.state)
