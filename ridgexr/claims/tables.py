"""The claims a store's entry makes, evaluated from the store (``ridgexr claims NAME``, the report's table), and
the generated table of claim kinds (docs/claims.md).

An entry lists its claims in the catalog (``claims:``, :class:`ridgexr.catalog.ClaimSpec`), committed before the
run; each names a kind of the registry (:data:`ridgexr.claims.KINDS`), which fixes its measure, reference, null,
criterion and margin, so a claim's verdict is never chosen after the numbers are seen.  :func:`store_claims`
builds the claims of every (claim, cell it applies to) from the store's numbers: the table changes when the
store does, and no verdict is pasted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import xarray as xr

from ..store.layout import is_exact_cell
from ..verdicts import Claim, claims_markdown, markdown_cell
from .evidence import StoreEvidence
from .registry import ENTRIES_SEEN, KINDS

if TYPE_CHECKING:
    from ..catalog import TimescaleSpec

__all__ = ["store_claims", "claims_table", "claim_specs", "check_claim_specs", "kinds_markdown", "timescale_rule",
           "with_timescale_quality", "KINDS_TABLE_COLUMNS"]


def check_claim_specs(specs) -> None:
    """Raise ValueError unless every claim names a cell kind of the registry with the times it compares
    (``ridgexr run`` checks an entry's claims before its first cell)."""
    cell_kinds = sorted(k for k, v in KINDS.items() if v.scope == "cell")
    for spec in specs:
        kind = KINDS.get(spec.kind)
        if kind is None or kind.scope != "cell":
            raise ValueError(f"claim kind {spec.kind!r} is not a kind an entry can claim; choose one of {cell_kinds}")
        kind.check_times(spec.t)


def _written(ds: xr.Dataset, field: str) -> tuple[object, str, str]:
    """A field written before the run (not hashed: ``claims``, ``timescales``) as the store's configuration
    records it, else as the catalog entry the store records has it: (value or None, where: "store", "catalog"
    or "", the entry's name)."""
    from ..catalog import Experiment, open_catalog

    exp = Experiment.model_validate_json(ds.attrs["config"])
    if getattr(exp, field):
        return getattr(exp, field), "store", exp.name
    try:
        entry = open_catalog()[exp.name]
    except KeyError:  # no such entry in the default catalogs
        return None, "", exp.name
    return (getattr(entry, field), "catalog", exp.name) if getattr(entry, field) else (None, "", exp.name)


def claim_specs(ds: xr.Dataset) -> tuple[list, str]:
    """The claims recorded with the store (its configuration's ``claims``), or, for a store written before
    its entry declared any, those of the catalog entry it records; and a sentence saying which."""
    claims, where, name = _written(ds, "claims")
    if where == "store":
        return list(claims), "criteria recorded in the store's configuration"
    if where == "catalog":
        return list(claims), (f"criteria from catalog entry {name!r} (not recorded in this store, "
                              "which predates them; see the entry's history)")
    return [], f"entry {name!r} declares no claims"


def timescale_rule(ds: xr.Dataset) -> tuple[TimescaleSpec, str]:
    """How tau_gen is read from the store (:class:`ridgexr.catalog.TimescaleSpec`: quality, rule, factor, the
    quality's null): as its configuration records it, else as its catalog entry has it (a store written before
    the field existed), else the defaults; and a sentence saying which.

    >>> import json, xarray as xr
    >>> from ridgexr.catalog import Experiment
    >>> exp = Experiment(name="x", dataset={"points": "two-points"}, model={"kind": "exact"}, store="x.zarr",
    ...                  timescales={"quality": "quality_frechet", "rule": "null"})
    >>> spec, how = timescale_rule(xr.Dataset(attrs={"config": exp.model_dump_json()}))
    >>> spec.quality, spec.rule, spec.factor, how
    ('quality_frechet', 'null', 2.0, "tau_gen's rule recorded in the store's configuration")
    """
    from ..catalog import TimescaleSpec

    spec, where, name = _written(ds, "timescales")
    if where == "store":
        return spec, "tau_gen's rule recorded in the store's configuration"
    if where == "catalog":
        return spec, (f"tau_gen's rule from catalog entry {name!r} (not recorded in this store, which predates "
                      "the field; see the entry's history)")
    return TimescaleSpec(), f"entry {name!r} writes no tau_gen rule: the defaults"


def with_timescale_quality(ds: xr.Dataset, spec) -> xr.Dataset:
    """``ds`` with the quality ``spec`` (a :class:`ridgexr.catalog.TimescaleSpec`) reads: as stored, or for the
    distance along the law's axis computed lazily from the stored samples (:func:`ridgexr.quality.axis_quality`)."""
    from ..quality import AXIS_QUALITY, axis_quality

    if spec.quality == AXIS_QUALITY and AXIS_QUALITY not in ds:
        return ds.merge(axis_quality(ds))
    return ds


def store_claims(ds: xr.Dataset, specs=None, *, cache: bool | str | Path = True, progress=None) -> list[Claim]:
    """Every claim of the store's entry (or ``specs``), for every cell it applies to, evaluated on ``ds``.

    Parameters
    ----------
    ds : xarray.Dataset
        A ridgexr store (``ridgexr.open_dataset``).
    specs : list of ClaimSpec, optional
        Default: :func:`claim_specs` (the store's own, else its catalog entry's).
    cache : bool or path
        Where the forward references are kept between calls (:class:`ridgexr.claims.StoreEvidence`): True (the
        default) beside the store (``STORE.claims-cache``), a folder, or False (computed in memory only).
    progress : rich.progress.Progress, optional
        Shows each forward reference's draws as they are observed.

    Returns
    -------
    list of :class:`ridgexr.verdicts.Claim`, labelled by their cell (model, schedule, ...); post hoc where the
    claim says so or the store's entry is one of :data:`ridgexr.claims.registry.ENTRIES_SEEN`.

    Raises
    ------
    ValueError
        For a claim whose kind is not in the registry or whose times do not fit it.
    """
    if specs is None:
        specs, _ = claim_specs(ds)
    if not specs:
        return []
    check_claim_specs(specs)
    evidence = StoreEvidence(ds, cache=cache, progress=progress)
    seen = ds.attrs.get("experiment") in ENTRIES_SEEN  # its numbers were seen before the criteria were written
    out = []
    for spec in specs:
        kind = KINDS[spec.kind]
        if seen and not spec.post_hoc:
            spec = spec.model_copy(update={"post_hoc": True})
        for label in evidence.cells:
            about = (evidence.model_name(label) in spec.models if spec.models is not None
                     else kind.applies_to(label, is_exact_cell(label)))
            if about:
                out.extend(kind.evaluate(evidence, spec, label))
    return out


def claims_table(ds: xr.Dataset, *, drop: tuple[str, ...] = ("measure",), cache: bool | str | Path = True,
                 progress=None) -> str:
    """The store's claims as Markdown, preceded by where their criteria come from (``cache``, ``progress``: as
    :func:`store_claims`'s)."""
    specs, source = claim_specs(ds)
    claims = store_claims(ds, specs, cache=cache, progress=progress)
    written = sorted({s.written for s in specs if s.written})
    post_hoc = any(s.post_hoc for s in specs) or ds.attrs.get("experiment") in ENTRIES_SEEN
    head = (f"Claims of {ds.attrs.get('experiment', 'this store')!r} (store config hash "
            f"{ds.attrs.get('config_hash', '?')}): {source}" + (f"; written {', '.join(written)}" if written else "")
            + ("; post hoc: registered after the numbers were seen" if post_hoc else "")
            + ". Criteria and margins: the claim kinds of docs/claims.md. Generated by `ridgexr claims NAME "
            "--markdown` from the store.\n\n")
    return head + (claims_markdown(claims, drop=drop) if claims else "(no claims)")


#: the columns of the generated table of claim kinds (docs/claims.md)
KINDS_TABLE_COLUMNS = ("kind", "scope", "claim", "reference", "null", "criterion", "margin", "applies", "minimum")


def kinds_markdown(columns: tuple[str, ...] = KINDS_TABLE_COLUMNS) -> str:
    """The registry's claim kinds as a Markdown table, one row per kind in registry order (docs/claims.md includes
    it; tests/test_claim_kinds.py checks that the file is this)."""
    rows = [kind.docs_row() for kind in KINDS.values()]
    head = ("<!-- generated from the claims registry by ridgexr.claims.kinds_markdown(); do not edit -->\n\n"
            "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
    return head + "\n".join("| " + " | ".join(markdown_cell(r[c]) for c in columns) + " |" for r in rows) + "\n"
