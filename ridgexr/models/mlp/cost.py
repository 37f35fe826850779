"""The planner's cost of an mlp block (the registry's ``cost`` hook of kind ``mlp``)."""

from __future__ import annotations

from ..cost import ELEMENT_SECONDS, GEMM_FLOPS, EpochTrainedCost

__all__ = ["MLPCost", "COST"]


class MLPCost(EpochTrainedCost):
    """The paper's MLP score network: a call is its dense layers; trained here by minibatch DSM
    (:class:`ridgexr.models.cost.EpochTrainedCost`); holds its weights, Adam's state and a minibatch."""

    def call_seconds(self, block, d: int, n: int, queries: int = 1, width: int | None = None) -> float:
        """2 (depth w^2 + (embed_dim + 2 d) w) flops at the GEMM rate and 2 depth w element passes, w the
        block's largest hidden width."""
        w, depth, embed = max(block.hidden_widths), block.depth, block.embed_dim
        return 2.0 * (depth * w * w + (embed + 2 * d) * w) / GEMM_FLOPS + 2 * depth * w * ELEMENT_SECONDS

    def fit_bytes(self, exp, blocks: list, n: int, d: int, memory_budget: int) -> dict[str, float]:
        """The largest block's weights, gradients and Adam's two moments (4 copies of depth w^2 +
        (embed_dim + 2 d) w floats) and one minibatch's activations."""
        return {"mlp widths, depth, embed_dim, batch_size": self._weights_bytes(blocks, d)}

    def sampling_bytes(self, exp, blocks: list, n: int, d: int) -> float:
        """The weights while sampling: a quarter of the training footprint."""
        return self._weights_bytes(blocks, d) / 4

    @staticmethod
    def _weights_bytes(blocks: list, d: int) -> float:
        return max((8.0 * (4 * (b.depth * w * w + (b.embed_dim + 2 * d) * w) + 4 * b.batch_size * w * (b.depth + 2)
                           + 2 * b.batch_size * b.embed_dim) for b in blocks for w in b.hidden_widths), default=0.0)


#: the hook named by the registry
COST = MLPCost()
