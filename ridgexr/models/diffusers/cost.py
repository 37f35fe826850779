"""The planner's cost of a diffusers block (the registry's ``cost`` hook of kind ``diffusers``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..cost import UNET_CALL_BYTES, KindCost
from ..unet.cost import unet_activations

__all__ = ["DiffusersCost", "COST"]


class DiffusersCost(KindCost):
    """A user's diffusers UNet2DModel: trained elsewhere and its call costed as a small network (the
    default), its activations read from its folder's config.json (no weights loaded)."""

    activations_label = "U-Net architecture"
    image_libraries = True

    def call_bytes(self, block, base_dir) -> float:
        """:data:`~ridgexr.models.cost.UNET_CALL_BYTES` per float of the UNet's activations
        (:func:`ridgexr.models.unet.cost.unet_activations` of its config.json); 0 when that cannot be read."""
        folder = Path(block.path).expanduser()
        if not folder.is_absolute() and base_dir is not None:
            folder = Path(base_dir) / folder
        try:
            cfg = json.loads((folder / (block.subfolder or "") / "config.json").read_text())
        except (OSError, ValueError):
            return 0.0
        return UNET_CALL_BYTES * unet_activations(cfg)


#: the hook named by the registry
COST = DiffusersCost()
