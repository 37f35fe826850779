"""timescales-unet: U-Nets on 8 to 128 Fashion-MNIST T-shirts over three seeds, tau_mem's law by its intervals.

A design is three entries (catalogs/timescales.yaml), one U-Net on three seeds, trained full batch to 12 000 Adam
steps, 8 checkpoints per decade, 512 final samples per checkpoint stored without ridge observation
(:data:`DESIGNS`): ``timescales-unet`` (``-seed1``, ``-seed2``), a small U-Net ([8, 16, 16]), and
``timescales-unet-full`` (``-seed1``, ``-seed2``), timescales-fashion's U-Net ([16, 32, 32]).  ``--design`` picks
one (default ``timescales-unet``).  This script

- ``--plan``: prints the planner's estimate of each entry (``ridgexr.run.plan``; nothing is run);
- ``--piece SECONDS``: runs the entries in order for at most SECONDS of wall time, then stops the run with
  SIGINT (a run stopped so resumes: training from its last checkpoint, sampling at the next incomplete cell), so
  the design runs in pieces across sessions (each under the shared CPU lock);
- otherwise reads, per entry, the sizes whose cells are complete in its store (a store run in pieces,
  ``ridgexr run NAME --cells n_train=N``, holds some) and the others from its committed summary, and prints, per
  (n, seed), tau_gen (the entry's registered rule)
  and tau_mem (f_mem - f_fresh's interval reaching 0.1, the memorization claims' rule, on a store with the
  memorized-share null; else f_mem's interval above 0.1) with their checkpoint intervals; the laws of both over
  the seeds by the interval-censored likelihood (``ridgexr.analysis.interval_law``); the collapse of f_mem(tau / n^b)
  (``ridgexr.analysis.memorization_collapse``).

Its figures are registered in analyses/figures.py: ``timescales_unet_fmem`` (f_mem of every (n, seed) against the
steps and collapsed at the fitted b) and ``timescales_unet_gallery`` (the samples per n at three checkpoints, with
their nearest training images): ``python analyses/figures.py --summarize --only timescales_unet_fmem
timescales_unet_gallery``.

Run:  python analyses/timescales_unet.py [--design NAME] [--plan] [--piece 7200] [--entries NAME ...] [--data DIR]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import xarray as xr

from _common import experiment_for, markdown_table

import ridgexr
from ridgexr.analysis import interval_law, memorization_collapse, training_timescales
from ridgexr.claims import timescale_rule
from ridgexr.claims.timescale_slope import law_claims
from ridgexr.paths import data_folder

#: each design's entries, one per seed (its name is its first entry's, and names its docs tables and summaries)
DESIGNS = {design: (design, f"{design}-seed1", f"{design}-seed2") for design in ("timescales-unet", "timescales-unet-full")}
DOCS = Path(__file__).resolve().parent.parent / "docs"


def summaries(design: str) -> Path:
    """The folder of a design's committed summaries: each complete store's training timescales (``--docs`` writes
    them), so the tables and the laws over the seeds can be made again where a store is gone (a store is 1-2 GB;
    its summary a few kB)."""
    return DOCS / "tables" / "data" / design


#: what a summary keeps: the per-checkpoint shares and quality, and the per-(n, seed) times with their intervals
SUMMARY_VARS = ("f_mem", "f_mem_low", "f_mem_high", "f_mem_n_valid", "f_mem_excess", "f_mem_excess_low",
                "f_mem_excess_high", "f_fresh", "quality", "tau_gen", "tau_gen_low", "tau_gen_high",
                "tau_gen_censored", "tau_mem", "tau_mem_low", "tau_mem_high", "tau_mem_censored")


def plan(entries) -> str:
    """The planner's estimate of each entry and their total (2 idle cores; docs/performance.md has its error)."""
    from ridgexr.datasets import training_shape
    from ridgexr.run.plan import estimate_stage_seconds, format_seconds

    rows, total = [], 0.0
    for name in entries:
        exp = experiment_for(name)
        seconds = estimate_stage_seconds(exp, training_shape(exp.dataset, base_dir=exp.base_dir))
        total += sum(seconds.values())
        rows.append({"entry": name, **{k: format_seconds(v) for k, v in seconds.items()},
                     "total": format_seconds(sum(seconds.values()))})
    return markdown_table(pd.DataFrame(rows)) + f"\n\nall entries: {format_seconds(total)}"


def piece(entries, seconds: float, data: Path) -> int:
    """Run the entries in order for at most ``seconds``; the running one is stopped by SIGINT at the deadline."""
    deadline = time.monotonic() + seconds
    for name in entries:
        left = deadline - time.monotonic()
        if left <= 60:
            print("piece over: the next call resumes")
            return 0
        cmd = [sys.executable, "-m", "ridgexr.cli", "run", name, "--data-dir", str(data)]
        print("running", " ".join(cmd), f"for at most {left:.0f} s", flush=True)
        proc = subprocess.Popen(cmd)
        try:
            rc = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            rc = proc.wait()
            print(f"{name}: stopped at the piece's end (exit {rc}); the next call resumes it")
            return 0
        if rc != 0:
            print(f"{name}: exit {rc}")
            return rc
        print(f"{name}: complete")
    return 0


def _entry(name: str, catalogs: list[str]):
    """The entry ``name`` of the built-in catalogs or of one of the files ``catalogs``."""
    for cat in catalogs:
        try:
            return experiment_for(name, cat)
        except KeyError:
            continue
    return experiment_for(name)


def write_summary(tt: xr.Dataset, path: Path) -> Path:
    """One seed's training timescales (``SUMMARY_VARS``, dims n_train[, epoch]) as a small netCDF file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = tt[list(SUMMARY_VARS)].reset_coords(drop=True)
    out = out.assign({k: out[k].astype("int8") for k in SUMMARY_VARS if k.endswith("_censored")})
    out.attrs = {k: v for k, v in tt.attrs.items() if isinstance(v, (str, int, float))}
    out.to_netcdf(path, engine="scipy")
    return path


def read_summary(path: Path) -> xr.Dataset:
    """A summary written by :func:`write_summary`, loaded, its censoring flags boolean again."""
    with xr.open_dataset(path, engine="scipy") as f:
        tt = f.load()
    return tt.assign({k: tt[k].astype(bool) for k in SUMMARY_VARS if k.endswith("_censored")})


def complete_sizes(ds: xr.Dataset) -> list[int]:
    """The n_train labels of a store whose cells are all complete (a store run in pieces, ``ridgexr run NAME
    --cells n_train=N``, holds some)."""
    marks = ds["cell_complete"]
    whole = marks.all([d for d in marks.dims if d != "n_train"])
    return [int(n) for n in marks.n_train.values[whole.values]]


def store_timescales(ds: xr.Dataset, sizes: list[int]) -> xr.Dataset:
    """tau_gen and tau_mem of the store's complete sizes ``sizes`` by the entry's registered rule."""
    spec, _ = timescale_rule(ds)
    tt = training_timescales(ds.sel(n_train=sizes), quality=spec.quality, rule=spec.rule, factor=spec.factor,
                             quality_null=spec.quality_null).compute()
    # the cell dims of one label (schedule, model) go; n_train and epoch stay, whatever their sizes
    return tt.squeeze([d for d, k in tt.sizes.items() if k == 1 and d not in ("n_train", "epoch")], drop=True)


def merged(new: xr.Dataset | None, old: xr.Dataset | None) -> xr.Dataset | None:
    """One seed's timescales over the sizes of both: a store's (``new``) where it has them, else the committed
    summary's (``old``); sorted by n_train."""
    if new is None or old is None:
        return new if old is None else old
    have = {int(n) for n in new.n_train.values}
    keep = [int(n) for n in old.n_train.values if int(n) not in have]
    new = new[list(SUMMARY_VARS)].reset_coords(drop=True)
    if not keep:
        return new
    both = xr.concat([new, old[list(SUMMARY_VARS)].sel(n_train=keep).reset_coords(drop=True)],
                     dim="n_train", data_vars="minimal", coords="minimal", compat="override")
    return both.sortby("n_train")


def load(entries, data: Path, catalogs: list[str] = (), write: bool = False,
         design: str = "timescales-unet") -> tuple[xr.Dataset, list[str]]:
    """tau_gen and tau_mem of every entry, concatenated over ``seed`` (each entry labelled by its training seed,
    ``seeds.training``), by its registered rule: from the sizes of its store whose cells are complete (a store run in
    pieces, one n_train at a time, has some), and, for the sizes the store lacks, from the committed summary
    (``summaries(design)``).  ``write`` (re)writes each entry's summary with what was read, so a size is summarized
    once its cells are complete, and a summary outlives the store (a store is 1-2 GB; its summary a few kB).
    A size neither holds is missing (NaN) for that seed."""
    parts, names = [], []
    for name in entries:
        exp = _entry(name, list(catalogs))
        path, summary = data / exp.store, summaries(design) / f"{name}.nc"
        ds = ridgexr.open_dataset(path) if path.exists() else None
        sizes = complete_sizes(ds) if ds is not None else []
        new = store_timescales(ds, sizes) if sizes else None
        old = read_summary(summary) if summary.exists() else None
        tt = merged(new, old)
        held = [] if tt is None else [int(n) for n in tt.n_train.values]
        print(f"{name}: n_train {sizes or 'none'} from its store"
              + (f", {sorted(set(held) - set(sizes))} from its summary {summary}" if old is not None else "")
              + ("" if held else ", left out"))
        if tt is None:
            continue
        if write and new is not None:
            print(f"{name}: summary {write_summary(tt.assign_attrs(new.attrs), summary)}")
        parts.append(tt[list(SUMMARY_VARS)].reset_coords(drop=True).expand_dims(seed=[int(exp.seeds.training)]))
        names.append(name)
    if not parts:
        raise SystemExit(f"no complete size of {', '.join(entries)} in {data} or in their summaries")
    return xr.concat(parts, dim="seed", data_vars="minimal", coords="minimal", compat="override",
                     join="outer"), names


def _interval(c, name) -> str:
    v, lo, hi, cen = (float(c[f"{name}{k}"]) for k in ("", "_low", "_high", "_censored"))
    return f">= {v:.0f} (censored)" if cen else f"{v:.0f} ({lo:.0f}, {hi:.0f}]"


#: the measures of the laws' claims, in the generated claims table's words
LAW_MEASURES = {"tau_mem": "first checkpoint with f_mem - f_fresh's interval reaching 0.1 (interval-censored "
                           "likelihood over the (n, seed) checkpoint intervals, profile 95 % interval)",
                "tau_gen": "first checkpoint with the Frechet distance within 2 x its floor (interval-censored "
                           "likelihood, profile 95 % interval)",
                "f_mem_collapse": "f_mem(tau / n^b) one curve across n (parametric-bootstrap 95 % interval)"}


def law_table_claims(tt: xr.Dataset) -> list:
    """The claims of the two laws (``interval_law``) and of the collapse (``memorization_collapse``), by the claims
    registry's timescale kinds."""
    claims = []
    for name in ("tau_mem", "tau_gen"):
        claims += law_claims(interval_law(tt, name), {name: LAW_MEASURES[name]})
    return claims + law_claims(memorization_collapse(tt, n_boot=200), {"f_mem_collapse": LAW_MEASURES["f_mem_collapse"]})


def write_docs(parts: dict[str, str], tt: xr.Dataset, names: list[str], command: str,
               design: str = "timescales-unet") -> list[Path]:
    """``docs/tables/<design>.md`` (``parts["times"]``, tau per (n, seed)) and ``docs/claims_tables/<design>.md``
    (``parts["laws"]``, the laws' claims), each headed by the command that wrote it and the stores it read."""
    missing = not_yet_read(tt, names, design)
    head = (f"<!-- generated by analyses/timescales_unet.py ({command}); do not edit -->\n\n"
            f"Generated from {', '.join(f'`{n}`' for n in names)} (training seeds "
            f"{', '.join(str(int(s)) for s in tt.seed.values)}; the complete sizes of their stores, or their "
            f"committed summaries in docs/tables/data/{design}/)"
            + (f"; not yet complete: {'; '.join(missing)}" if missing else "") + ".\n\n")
    tables_path, claims_path = DOCS / "tables" / f"{design}.md", DOCS / "claims_tables" / f"{design}.md"
    tables_path.write_text(head + parts["times"] + "\n")
    claims_path.write_text(head + parts["laws"] + "\n")
    return [tables_path, claims_path]


def read_sizes(tt: xr.Dataset) -> xr.DataArray:
    """(seed, n_train) bool: the sizes each seed's entry has (its f_mem is not all missing)."""
    return tt["f_mem"].notnull().any("epoch")


def not_yet_read(tt: xr.Dataset, names: list[str], design: str) -> list[str]:
    """The design's (entry, sizes) not in ``tt``, in words: an entry read for some of its sizes names the others."""
    sizes = [int(n) for n in experiment_for(DESIGNS[design][0]).dataset.n_trains]
    has = read_sizes(tt)
    out = []
    for name in DESIGNS[design]:
        if name not in names:
            out.append(f"`{name}`")
            continue
        held = has.isel(seed=names.index(name))
        lack = [n for n in sizes if n not in tt.n_train.values or not bool(held.sel(n_train=n))]
        if lack:
            out.append(f"`{name}` n = {', '.join(map(str, lack))}")
    return out


def tables(tt: xr.Dataset) -> dict[str, str]:
    rows = []
    has = read_sizes(tt)
    for n in tt.n_train.values:
        for s in tt.seed.values:
            if not bool(has.sel(n_train=n, seed=s)):
                continue
            c = tt.sel(n_train=n, seed=s)
            rows.append({"n": int(n), "seed": int(s), "tau_gen": _interval(c, "tau_gen"),
                         "tau_mem": _interval(c, "tau_mem"),
                         "f_mem at the last checkpoint": f"{float(c.f_mem.isel(epoch=-1)):.3f} "
                                                         f"[{float(c.f_mem_low.isel(epoch=-1)):.3f}, "
                                                         f"{float(c.f_mem_high.isel(epoch=-1)):.3f}]"})
    from ridgexr.verdicts import claims_markdown

    return {"times": markdown_table(pd.DataFrame(rows)), "laws": claims_markdown(law_table_claims(tt))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--design", choices=sorted(DESIGNS), default="timescales-unet",
                    help="the three-seed design (its entries, tables and summaries)")
    ap.add_argument("--entries", nargs="+", default=None, help="the design's entries to read or run (default: all)")
    ap.add_argument("--data", default=None, help="the data folder (default: RIDGEXR_DATA or the user's)")
    ap.add_argument("--catalog", action="append", default=[], help="an extra catalog file holding entries (repeatable)")
    ap.add_argument("--plan", action="store_true", help="print the planner's estimate of each entry and exit")
    ap.add_argument("--piece", type=float, default=None, help="run the entries for at most this many seconds")
    ap.add_argument("--docs", action="store_true", help="also write docs/tables/<design>.md, "
                                                        "docs/claims_tables/<design>.md and the stores' "
                                                        "summaries (docs/tables/data/<design>/)")
    args = ap.parse_args(argv)
    entries = args.entries or list(DESIGNS[args.design])
    data = Path(args.data) if args.data else data_folder()
    if args.plan:
        print(plan(entries))
        return 0
    if args.piece is not None:
        return piece(entries, args.piece, data)
    tt, names = load(entries, data, args.catalog, write=args.docs, design=args.design)
    print("entries read:", ", ".join(names))
    parts = tables(tt)
    for name, text in parts.items():
        print(f"\n{name}\n\n{text}")
    if args.docs:
        command = " ".join(["python analyses/timescales_unet.py",
                            *(["--design", args.design] if args.design != "timescales-unet" else []),
                            *(["--entries", *entries] if entries != list(DESIGNS[args.design]) else []), "--docs"])
        for path in write_docs(parts, tt, names, command, args.design):
            print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
