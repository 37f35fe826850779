"""The planner's cost of a unet block (the registry's ``cost`` hook of kind ``unet``), and the U-Net
activation count that kind ``diffusers`` shares."""

from __future__ import annotations

from ..cost import CALL_SECONDS, CONV_FLOPS, UNET_CALL_BYTES, UNET_TRAIN_BYTES, EpochTrainedCost

__all__ = ["UNetCost", "COST", "unet_activations"]


def unet_activations(cfg: dict) -> float:
    """Floats of the down path's feature maps of one image through a ``UNet2DModel`` (the skip connections the
    up path holds): sum over levels i of (layers_per_block + 1) C_i H W / 4^i, from a config mapping
    (``sample_size``, ``layers_per_block``, ``block_out_channels``; diffusers' defaults where absent).

    >>> unet_activations({"sample_size": 28, "layers_per_block": 1, "block_out_channels": (8, 16)})
    18816.0
    """
    size = cfg.get("sample_size", 32)
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    layers = int(cfg.get("layers_per_block", 2)) + 1
    return float(sum(layers * c * h * w / 4**i for i, c in enumerate(cfg.get("block_out_channels", (64,)))))


class UNetCost(EpochTrainedCost):
    """A U-Net trained here: a call is its forward pass (:func:`ridgexr.models.unet.denoiser.forward_flops` at
    :data:`~ridgexr.models.cost.CONV_FLOPS`); trained by minibatch DSM; its activations are held per image."""

    activations_label = "U-Net architecture"
    image_libraries = True

    def call_seconds(self, block, d: int, n: int, queries: int = 1, width: int | None = None) -> float:
        """The forward pass's flops at the convolution rate, plus the call's fixed cost shared by ``queries``."""
        from .denoiser import forward_flops

        return forward_flops(block) / CONV_FLOPS + CALL_SECONDS / max(queries, 1)

    def fit_bytes(self, exp, blocks: list, n: int, d: int, memory_budget: int) -> dict[str, float]:
        """A training minibatch's saved activations (forward and backward) of the largest block."""
        return {"unet batch_size, architecture": max(
            (UNET_TRAIN_BYTES * self._activations(b) * b.batch_size for b in blocks), default=0.0)}

    def call_bytes(self, block, base_dir) -> float:
        """:data:`~ridgexr.models.cost.UNET_CALL_BYTES` per float of the block's activations."""
        return UNET_CALL_BYTES * self._activations(block)

    @staticmethod
    def _activations(block) -> float:
        return unet_activations({"block_out_channels": block.block_out_channels,
                                 "layers_per_block": block.layers_per_block, "sample_size": block.sample_size})


#: the hook named by the registry
COST = UNetCost()
