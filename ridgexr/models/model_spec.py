"""What every model block of a catalog entry has: ``kind``, ``name``, and how it sits in the store.

Each kind's spec (``ridgexr.models.<kind>``) subclasses :class:`ModelSpec` with its own fields
and defaults; pydantic refuses a field that is not the kind's.  The methods below say which
cell dimensions a block puts labels on and which cells it applies to (masked cells); the
defaults are those of a block that is trained on nothing the cell dimensions sweep (the exact
denoiser).  Torch-free.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable, Literal, Mapping

from pydantic import Field, model_validator

from .. import defaults
from ..choices import MODEL_CELL_DIMS, TRAINED_WEIGHTS
from ..spec import Spec, as_list

__all__ = ["ModelSpec", "EpochTrainedSpec", "DiagnosticsSpec", "MODEL_CELL_DIMS", "sorted_widths", "sized_diagnostics",
           "hashed_diagnostics", "IMAGE_DIAGNOSTICS_HELP"]


def sorted_widths(v: list[int] | None) -> list[int] | None:
    """A ``widths`` field checked (non-empty, distinct, >= 1) and sorted; None stays None."""
    if v is not None and (not v or any(w < 1 for w in v) or len(set(v)) != len(v)):
        raise ValueError("widths must be distinct integers >= 1")
    return None if v is None else sorted(v)


#: the random stream of the held-out point subset (``0x706f696e`` spells "poin"): apart from the noise of
#: node j, which draws from ``default_rng([seed, j])``
POINT_SUBSET_STREAM = 0x706F696E


class DiagnosticsSpec(Spec):
    """Size of the held-out sample on which a block's per-cell diagnostics are estimated.

    The held-out sample is the training sample's rule (``training.quadrature`` on [t_min, T],
    noise seed ``seeds.training + 1``) on at most ``n_time`` nodes and at most ``n_noise`` draws
    per (training point, node); null keeps the training sample's number.  Its cost grows with
    n_train x n_time x n_noise rows (each with the exact posterior mean and, with d*, a ridge frame);
    ``n_points`` draws the x0 from a seeded subset of the training points (n_points x n_time x n_noise
    rows), while the density the diagnostics compare with stays the whole training set.
    """

    n_time: int | None = Field(None, ge=1,
        description="at most this many time nodes of training.quadrature (null: training.n_time; odd for simpson-t)")
    n_noise: int | None = Field(None, ge=1,
        description="at most this many noise draws per (training point, node) (null: the fit's n_noise)")
    n_points: int | None = Field(None, ge=1,
        description="at most this many training points as x0: a uniform subset without replacement drawn with the "
                    "held-out seed (the posterior means and frames still use every training point; null: every point)")

    def sizes(self, n_time: int, n_noise: int) -> tuple[int, int]:
        """(nodes, draws) of the held-out sample for a training sample of ``n_time`` x ``n_noise``."""
        return (n_time if self.n_time is None else min(self.n_time, n_time),
                n_noise if self.n_noise is None else min(self.n_noise, n_noise))

    def point_subset(self, n_train: int, seed: int):
        """Sorted indices (n_points,) of the training points the held-out x0 are drawn from, or None (all
        ``n_train`` of them): ``numpy.random.default_rng([seed, POINT_SUBSET_STREAM]).choice`` without
        replacement, so the subset of a cell is fixed by the held-out seed and ``n_train``."""
        import numpy as np

        if self.n_points is None or self.n_points >= n_train:
            return None
        rng = np.random.default_rng([int(seed), POINT_SUBSET_STREAM])
        return np.sort(rng.choice(int(n_train), size=self.n_points, replace=False))

    def check_training(self, training) -> None:
        """Raise ValueError when the resolved node count does not fit ``training.quadrature``."""
        n_time, _ = self.sizes(training.n_time, 1)
        if training.quadrature == "simpson-t" and (n_time < 3 or n_time % 2 == 0):
            raise ValueError(f"diagnostics.n_time must be odd and >= 3 for quadrature 'simpson-t'; got {n_time}")
        if training.quadrature == "trapezoid-log-t" and n_time < 2:
            raise ValueError(f"diagnostics.n_time must be >= 2 for quadrature 'trapezoid-log-t'; got {n_time}")


def hashed_diagnostics(diagnostics: dict, n_time: int, n_noises: list[int]) -> dict:
    """A block's dumped ``diagnostics`` as the config hash sees it: the neutral ``{n_time: None, n_noise:
    None}`` when its sizes cut nothing from a training sample of ``n_time`` nodes and ``n_noises``
    draws (its held-out sample is then the training sample's size, as before the field existed),
    else as given."""
    spec = DiagnosticsSpec(**diagnostics)
    if spec.n_points is None and all(spec.sizes(n_time, n) == (n_time, n) for n in n_noises):
        return {"n_time": None, "n_noise": None}
    # n_points: null (every point) hashes as before the field existed
    return {k: v for k, v in diagnostics.items() if not (k == "n_points" and v is None)}


def sized_diagnostics():
    """The held-out sample of the kinds not fitted in closed form (mlp, module, exact): at most
    :data:`ridgexr.defaults.HELDOUT_N_TIME` nodes x :data:`ridgexr.defaults.HELDOUT_N_NOISE` draws."""
    return DiagnosticsSpec(n_time=defaults.HELDOUT_N_TIME, n_noise=defaults.HELDOUT_N_NOISE)


#: the field description shared by every kind (its default differs per kind)
DIAGNOSTICS_HELP = ("size of the held-out sample of the per-cell diagnostics: {n_time, n_noise, n_points}, each at "
                    "most the training sample's (null: the training sample's)")

#: the same field of the image-scale kinds (unet, diffusers), whose diagnostics are off unless asked for
IMAGE_DIAGNOSTICS_HELP = ("held-out diagnostics of each cell (excess loss over the exact denoiser, its ridge split): "
                          "off by default (null), as at d ~ 10^3 each held-out row costs a ridge frame of d x d and "
                          "65 x 64 rows per training image took hours; ask for them with a size, e.g. {n_time: 8, "
                          "n_noise: 1, n_points: 64} (each at most the training sample's; {} the training sample's)")


class ModelSpec(Spec):
    """Base of a model block (subclassed once per kind)."""

    #: what the kind's network outputs when ``parametrization`` is not given
    default_parametrization: ClassVar[str] = "x0"
    #: one line for the docs' table of kinds (docs/models.md)
    summary: ClassVar[str] = ""
    #: trained once per loss-weight schedule (the entry must list ``schedules``, unless the kind has defaults)
    trained_per_schedule: ClassVar[bool] = False
    #: the entry's ``schedules`` when it lists none and every trained block is of this kind (None: required)
    default_schedules: ClassVar[tuple[str, ...] | None] = None
    #: labelled along a ``model`` dimension even when it is the entry's only block
    always_labelled: ClassVar[bool] = True
    #: fields of this class the config hash leaves out while they hold this neutral value: the value that
    #: reproduces the numbers of the release before the field existed (the release in the comment).  A
    #: subclass declares only its own fields; :meth:`neutral_fields` collects them over the class's bases.
    #: The entry's other fields: :data:`ridgexr.catalog.HASH_NEUTRAL`
    hash_neutral: ClassVar[dict[str, object]] = {
        "name": None,  # 0.2
        "diagnostics": {"n_time": None, "n_noise": None},  # 0.4: the training sample's size
    }

    kind: str
    name: str | None = Field(None, description="label of the block in the model dimension (default: the kind)")
    diagnostics: DiagnosticsSpec = Field(default_factory=sized_diagnostics,
        description=DIAGNOSTICS_HELP + f"; default {{n_time: {defaults.HELDOUT_N_TIME}, "
                                       f"n_noise: {defaults.HELDOUT_N_NOISE}}}")

    @classmethod
    def neutral_fields(cls) -> dict[str, object]:
        """Field -> neutral value of every field of this kind that the config hash leaves out at that value
        (the ``hash_neutral`` of the class and of its bases)."""
        out: dict[str, object] = {}
        for klass in reversed(cls.__mro__):
            out.update(vars(klass).get("hash_neutral", {}))
        return out

    @property
    def label(self) -> str:
        """The block's label in the ``model`` dimension."""
        return self.name or self.kind

    @property
    def output(self) -> str:
        """The parametrization of the block's output, with the kind's default resolved."""
        return getattr(self, "parametrization", None) or self.default_parametrization

    def values(self, dim: str) -> list:
        """The labels this block has along a model cell dimension (``MODEL_CELL_DIMS``); [] if none."""
        return []

    def swept(self, dim: str) -> bool:
        """Whether this block asks for ``dim`` as a cell dimension (a listed sweep)."""
        return False

    def adds_exact_schedule(self) -> bool:
        """Whether this block, alone in its entry, also runs the exact denoiser as schedule 'exact'."""
        return False

    def store_attrs(self, exp) -> dict:
        """Root attributes of a store whose first such block this is (e.g. the features' period)."""
        return {}

    def check_entry(self, exp) -> None:
        """Raise ValueError when the block does not fit the rest of its entry (``exp``: the Experiment)."""

    def diagnostic_schedule(self, schedules: list[str] | None) -> str:
        """The schedule label of a block that is not trained per schedule (module, exact): its
        weight in the held-out diagnostics."""
        return schedules[0] if schedules else "1"

    def applies(self, at: Callable[..., bool], schedules: list[str] | None, n_train: tuple | None) -> bool:
        """Whether this block uses every label of a cell (else the cell is masked: stored once).

        ``at(dim, allowed=None)`` is true when the cell's label along ``dim`` is in ``allowed``
        (default: the dimension's first label), or the store has no such dimension; ``n_train``
        is the n_train dimension's labels (None without one).  The default: stored once, at the
        first label of every dimension.
        """
        return all(at(dim) for dim in ("schedule", "width", "tau", "epoch", "target", "n_noise", "draw"))


class EpochTrainedSpec(ModelSpec):
    """Base of the kinds trained here by minibatch DSM over ``epochs`` (mlp, unet): their shared fields and rules.

    ``epochs`` (an int, or a list that makes an epoch dimension) must hold distinct values, and the
    entry's ``training.target`` must include ``'dsm'`` (the only target these networks are trained on).
    Every such kind has ``ema``, ``weights`` and ``time_proposal`` (its own default), trained by
    :func:`ridgexr.models.trained.fit_epoch_block`.
    """

    hash_neutral: ClassVar[dict[str, object]] = {
        "weights": "ema",  # 0.4: the averaged weights, as before the field existed
    }

    #: the cell labels, besides ``n_train`` and ``data_draw``, that make separate training runs, each with the tag
    #: that precedes its label in the run's folder name (:meth:`run_folder`); ``schedule`` first
    run_tags: ClassVar[dict[str, str]] = {"schedule": ""}

    weights: Literal[TRAINED_WEIGHTS] = Field("ema",
        description="with ema: the cells sample with the moving average ('ema') or the optimizer's own weights "
                    "('raw'); both are kept and exported (without ema the two are the same)")

    @model_validator(mode="after")
    def _distinct_epochs(self):
        epochs = as_list(self.epochs)
        if not epochs or len(set(epochs)) != len(epochs):
            raise ValueError("epochs must be distinct")
        return self

    @property
    def run_dims(self) -> tuple[str, ...]:
        """The cell labels besides ``n_train`` and ``data_draw`` that make separate training runs (``schedule``
        first)."""
        return tuple(self.run_tags)

    def run_folder(self, labels: Mapping[str, Any]) -> str:
        """The name of the checkpoint folder (under ``<checkpoint root>/<block label>``) of the training run of the
        cells labelled ``labels`` (dim -> label: :attr:`run_dims`, ``n_train``, ``data_draw``; a missing
        ``n_train`` or ``data_draw`` reads as None): the run's labels joined by ``-``, each after its tag,
        ``n_train`` as ``n<size>`` (``nall``: the whole set) and a ``data_draw`` as ``d<draw>``.

        >>> from ridgexr.models.unet import UNetSpec
        >>> UNetSpec(sample_size=[8, 8]).run_folder({"schedule": "h", "n_train": 128})
        'h-n128'
        """
        n, draw = labels.get("n_train"), labels.get("data_draw")
        parts = [f"{tag}{labels[dim]}" for dim, tag in self.run_tags.items()] + [f"n{'all' if n is None else n}"]
        return "-".join(parts + ([] if draw is None else [f"d{draw}"]))

    def training_runs(self, cells: Iterable[Mapping[str, Any]], n_train: int | None = None) -> dict[str, dict]:
        """The training runs the cells labelled ``cells`` need, ``{run folder: the run's labels}`` (one per distinct
        :attr:`run_dims`, ``n_train`` and ``data_draw``; ``n_train``: the label of a cell without one), in the
        order :func:`ridgexr.models.trained.fit_epoch_block` trains them."""
        keys = {(*(lab.get(dim) for dim in self.run_dims), lab.get("n_train", n_train), lab.get("data_draw"))
                for lab in cells}
        names = (*self.run_dims, "n_train", "data_draw")
        return {self.run_folder(labels): labels for labels in (dict(zip(names, key)) for key in sorted(keys, key=str))}

    def check_entry(self, exp) -> None:
        if "dsm" not in exp.training.targets:
            raise ValueError(f"{self.kind} models are trained on the DSM target: training.target must include 'dsm'")
