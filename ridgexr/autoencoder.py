"""A small VAE (784-400-200-d with a sigmoid decoder) that maps MNIST digits to a latent space.

The latents of the high-dimensional experiment are the encoder means mu(x) of the training
images, *not* standardised (the KL term already keeps them at unit scale; standardising
would change the geometry of p_t per dimension).  A trained model is cached on disk under a
content hash of (pixel data, architecture, seed, epochs), so reruns reuse it; the cache
file also holds the latents and the reconstruction error.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ._backend import load_plain, save_atomic

__all__ = ["VAE", "AutoencoderResult", "train_vae", "cached_vae", "cache_dir", "load_vae", "AutoencoderError"]


class AutoencoderError(ValueError):
    """A cached autoencoder does not match the configuration, or training input is invalid."""


class VAE(nn.Module):
    """Encoder 784-400-200-(mu, logvar) with ReLU; decoder d-200-400-784 with a sigmoid output."""

    def __init__(self, n_pixels: int = 784, latent_dim: int = 32, hidden=(400, 200)):
        super().__init__()
        h1, h2 = hidden
        self.n_pixels, self.latent_dim, self.hidden = n_pixels, latent_dim, tuple(hidden)
        self.encoder = nn.Sequential(nn.Linear(n_pixels, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU())
        self.mu = nn.Linear(h2, latent_dim)
        self.logvar = nn.Linear(h2, latent_dim)
        self.decoder = nn.Sequential(nn.Linear(latent_dim, h2), nn.ReLU(), nn.Linear(h2, h1), nn.ReLU(),
                                     nn.Linear(h1, n_pixels), nn.Sigmoid())

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x)
        return self.mu(h), self.logvar(h)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z)

    def forward(self, x, generator=None):
        mu, logvar = self.encode(x)
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
        z = mu + torch.exp(0.5 * logvar) * eps
        return self.decode(z), mu, logvar


@dataclass
class AutoencoderResult:
    model: VAE
    latents: np.ndarray  # (n, latent_dim) encoder means
    recon_bce: float  # mean per-pixel binary cross-entropy of decode(mu(x))
    recon_mse: float  # mean per-pixel squared error of decode(mu(x))
    key: str  # content hash
    path: Path | None
    config: dict


def cache_dir() -> Path:
    """``$RIDGEXR_CACHE`` or ``~/.cache/ridgexr``."""
    return Path(os.environ.get("RIDGEXR_CACHE", Path.home() / ".cache" / "ridgexr"))


BATCH_SIZE = 128
LEARNING_RATE = 1e-3


def _vae_config(n_pixels: int, latent_dim: int, seed: int, epochs: int, batch_size: int, lr: float) -> dict:
    """Everything that determines a trained VAE besides the pixels (part of the cache key)."""
    return dict(arch="vae", n_pixels=int(n_pixels), hidden=[400, 200], latent_dim=int(latent_dim), seed=int(seed),
                epochs=int(epochs), batch_size=int(batch_size), lr=float(lr))


def _key(images: np.ndarray, config: dict) -> str:
    h = hashlib.sha256(np.ascontiguousarray(images, dtype=np.float64).tobytes())
    h.update(json.dumps(config, sort_keys=True).encode())
    return h.hexdigest()


def train_vae(images: np.ndarray, *, latent_dim: int = 32, epochs: int = 60, seed: int = 0,
              batch_size: int = BATCH_SIZE, lr: float = LEARNING_RATE, progress=None) -> AutoencoderResult:
    """Train the VAE on ``images`` (n, 784) in [0, 1] (float32 on CPU, fixed seed)."""
    x = np.asarray(images, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or not np.all(np.isfinite(x)) or x.min() < 0 or x.max() > 1:
        raise AutoencoderError("images must be a finite (n >= 2, pixels) array with values in [0, 1]")
    if latent_dim < 1 or epochs < 1:
        raise AutoencoderError(f"latent_dim and epochs must be >= 1, got {latent_dim}, {epochs}")
    config = _vae_config(x.shape[1], latent_dim, seed, epochs, batch_size, lr)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = VAE(x.shape[1], latent_dim)
    data = torch.tensor(x, dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = data.shape[0]
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for s in range(0, n, batch_size):
            xb = data[perm[s:s + batch_size]]
            rec, mu, logvar = model(xb, gen)
            bce = nn.functional.binary_cross_entropy(rec, xb, reduction="sum")
            kl = -0.5 * torch.sum(1 + logvar - mu**2 - logvar.exp())
            loss = (bce + kl) / xb.shape[0]
            opt.zero_grad()
            loss.backward()
            opt.step()
        if progress is not None:
            progress(epoch + 1, epochs)
    model.eval()
    with torch.no_grad():
        mu, _ = model.encode(data)
        rec = model.decode(mu)
        bce = float(nn.functional.binary_cross_entropy(rec, data, reduction="mean"))
        mse = float(((rec - data) ** 2).mean())
    return AutoencoderResult(model=model, latents=mu.double().numpy(), recon_bce=bce, recon_mse=mse,
                             key=_key(x, config), path=None, config=config)


def cached_vae(images: np.ndarray, *, latent_dim: int = 32, epochs: int = 60, seed: int = 0,
               directory: str | Path | None = None, progress=None, batch_size: int = BATCH_SIZE) -> AutoencoderResult:
    """Load the VAE for (images, architecture, seed, epochs, batch_size) from the cache, or train and cache it."""
    x = np.asarray(images, dtype=np.float64)
    config = _vae_config(x.shape[1], latent_dim, seed, epochs, batch_size, LEARNING_RATE)
    key = _key(x, config)
    d = Path(directory) if directory is not None else cache_dir()
    path = d / f"vae-{key[:20]}.pt"
    if path.is_file():
        blob = load_plain(path)
        stored = blob.get("config", {})
        if stored.get("latent_dim") != latent_dim or stored.get("n_pixels") != x.shape[1]:
            raise AutoencoderError(f"cached autoencoder {str(path)!r} has latent_dim={stored.get('latent_dim')} and "
                                   f"n_pixels={stored.get('n_pixels')}, but the config asks for latent_dim="
                                   f"{latent_dim} and {x.shape[1]} pixels; delete the file or change the cache")
        if blob.get("key") != key:
            raise AutoencoderError(f"cached autoencoder {str(path)!r} was trained on other data or settings "
                                   "(content hash differs); delete the file")
        model = VAE(stored["n_pixels"], stored["latent_dim"])
        model.load_state_dict(blob["state_dict"])
        model.eval()
        latents = blob["latents"]  # a tensor (a numpy array in caches written before)
        latents = latents.numpy() if isinstance(latents, torch.Tensor) else np.asarray(latents)
        return AutoencoderResult(model=model, latents=latents, recon_bce=blob["recon_bce"],
                                 recon_mse=blob["recon_mse"], key=key, path=path, config=stored)
    res = train_vae(x, latent_dim=latent_dim, epochs=epochs, seed=seed, progress=progress, batch_size=batch_size)
    d.mkdir(parents=True, exist_ok=True)
    save_atomic({"state_dict": res.model.state_dict(), "latents": torch.from_numpy(np.ascontiguousarray(res.latents)),
                 "recon_bce": res.recon_bce,
                 "recon_mse": res.recon_mse, "key": res.key, "config": res.config}, path)  # never half-written
    res.path = path
    return res


def load_vae(path: str | Path) -> VAE:
    """The VAE stored in a cache file (for decoding latents)."""
    p = Path(path)
    if not p.is_file():
        raise AutoencoderError(f"no cached autoencoder at {str(p)!r}")
    blob = load_plain(p)
    cfg = blob["config"]
    model = VAE(cfg["n_pixels"], cfg["latent_dim"])
    model.load_state_dict(blob["state_dict"])
    return model.eval()
