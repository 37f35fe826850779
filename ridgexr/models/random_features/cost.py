"""The planner's cost of a random-feature block (the registry's ``cost`` hook of kind ``random_features``)."""

from __future__ import annotations

from ..cost import (BLOCK_SECONDS, ELEMENT_SECONDS, GEMM_FLOPS, HELDOUT_BLOCK, KindCost, moments_seconds)

__all__ = ["RandomFeaturesCost", "COST", "FIT_BATCH"]

#: rows per streamed block of the training sample (:mod:`ridgexr.training.fit`)
FIT_BATCH = 8192


class RandomFeaturesCost(KindCost):
    """Random features: a call is W x and A psi (4 p d flops, 2 p element passes); a fit streams the training
    sample through a p x p Gram; the diagnostics run once per fit, their features shared by its cells."""

    def call_seconds(self, block, d: int, n: int, queries: int = 1, width: int | None = None) -> float:
        """W x and A psi per state (the time features once per step): 4 p d flops and 2 p element passes at
        ``width`` p (default the block's largest)."""
        p = width or max(block.values("width"))
        return 4.0 * p * d / GEMM_FLOPS + 2 * p * ELEMENT_SECONDS

    def _fits(self, exp, cells: list[dict], n_trains: list[int]):
        """The distinct (target, n_noise, n_train) of the cells: one streamed fit each (a set, iterated in
        the same order by :meth:`fit_seconds` and :meth:`diagnostics_seconds`)."""
        tr = exp.training
        return {(lab.get("target"), lab.get("n_noise", tr.n_noises[0]), lab.get("n_train", n_trains[0]))
                for lab in cells}

    def fit_seconds(self, exp, block, cells: list[dict], d: int, n_trains: list[int]) -> list[float]:
        """Per fit, N n_time n_noise rows, each a p x p Gram update (2 p^2 flops at the GEMM rate), its features
        (4 p element passes and one call) and an exact posterior mean, a fixed cost per time node, and one
        p x p eigendecomposition (30 p^3 flops) per schedule and width."""
        tr, p, out = exp.training, max(block.values("width")), []
        for _, n_noise, m in self._fits(exp, cells, n_trains):
            rows = float(m) * tr.n_time * n_noise
            out.append(rows * (2.0 * p * p / GEMM_FLOPS + 4 * p * ELEMENT_SECONDS + self.call_seconds(block, d, m)
                               + moments_seconds(m, d, queries=HELDOUT_BLOCK))
                       + tr.n_time * BLOCK_SECONDS
                       # one eigh(U) per schedule and width
                       + len(exp.schedules or ()) * sum(30.0 * w**3 for w in block.values("width")) / GEMM_FLOPS)
        return out

    def diagnostics_seconds(self, exp, block, cells: list[dict], d: int, n_trains: list[int],
                            d_frame: int) -> list[float]:
        """Per fit, its held-out rows: one call, the readouts of every (schedule, width, tau) (2 p d flops each)
        and an exact posterior mean and frame per row, plus a fixed cost per time node."""
        tr, p, out = exp.training, max(block.values("width")), []
        n_fits = len(exp.schedules or ()) * len(block.values("width")) * max(1, len(block.values("tau")))
        for _, n_noise, m in self._fits(exp, cells, n_trains):
            h_time, h_noise = block.diagnostics.sizes(tr.n_time, n_noise)
            h_rows = float(min(m, block.diagnostics.n_points or m)) * h_time * h_noise
            out.append(h_rows * (self.call_seconds(block, d, m) + n_fits * 2.0 * p * d / GEMM_FLOPS
                                 + moments_seconds(m, d, d_star=d_frame, frame="auto",
                                                   queries=min(h_rows / h_time, HELDOUT_BLOCK)))
                       + h_time * BLOCK_SECONDS)
        return out

    def heldout_moments(self, exp, block, lab: dict, d: int, n_trains: list[int], d_frame: int) -> None:
        """None: a fit's held-out sample is its own (new noise on the fit's sample), its means and frames priced
        in :meth:`diagnostics_seconds`."""
        return None

    def fit_bytes(self, exp, blocks: list, n: int, d: int, memory_budget: int) -> dict[str, float]:
        """Fitting streams the training sample (S = N n_time n_noise points) node by node and holds the (p x p)
        moments of every schedule at the largest width, one node's noise (N n_noise d), one block's features
        (a block holds all n_noise draws of a point) and the time features (p x (2 n_frequencies + 1)) of
        every fitted width."""
        p, sum_p, n_tau, n_phi = self._sizes(blocks)
        n_sched = len(exp.schedules or ())
        batch = FIT_BATCH
        n_noise = max(exp.training.n_noises)
        # a time node's noise (n_train, n_noise, d) is drawn whole; a block holds all draws of a point
        rows = max(batch, n_noise)
        # the fit streams the training sample against the cells' training sets (at most the largest n_train)
        n_fit = max(exp.dataset.n_train_sizes(n))
        return {
            "model.widths, schedules": (8.0 * p * p * (n_sched + 3) + 8.0 * n_sched * n_tau * p * d * 2
                                        + 8.0 * batch * 4 * p),
            "training.n_noise": 8.0 * n_fit * n_noise * d + 8.0 * (rows - batch) * (4 * p + n_fit * 2 + 8 * d),
            # the exact posterior of a streamed block over the training set: chunked within the density's scratch
            # budget (ridgexr.empirical), counted as at most two such buffers however large N x batch is
            # (fashion-latent: 8 192 x 60 000 x 16 bytes = 7.9 GB uncapped against a 2.38 GB measured peak)
            "the training set (dataset.n_train)": min(8.0 * batch * (n_fit * 2 + 8 * d), 2.0 * memory_budget),
            # the fixed time features W_t (p, 2K + 1): drawn in numpy, copied to torch, and kept by every
            # (schedule, width) fit
            "model.n_frequencies": 8.0 * n_phi * (2 * p + n_sched * sum_p) + 8.0 * rows * n_phi * (1 if n_phi > 1
                                                                                               else 0),
        }

    def sampling_bytes(self, exp, blocks: list, n: int, d: int) -> float:
        """The time features of the largest width at every step: 2 (2 n_frequencies + 1) p floats."""
        p, _, _, n_phi = self._sizes(blocks)
        return 8.0 * 2 * n_phi * p

    @staticmethod
    def _sizes(blocks: list) -> tuple[int, int, int, int]:
        """(largest width, sum of the widths, most taus, most time features 2 K + 1) over the blocks."""
        p = max((w for b in blocks for w in b.values("width")), default=0)
        sum_p = sum(sum(b.values("width")) for b in blocks)
        n_tau = max((len(b.values("tau")) for b in blocks), default=1)
        n_phi = max((2 * b.n_frequencies + 1 for b in blocks), default=0)
        return p, sum_p, n_tau, n_phi


#: the hook named by the registry
COST = RandomFeaturesCost()
