"""Reading catalog files: YAML with a safe loader, validated into :class:`Experiment` entries.

A catalog file holds ``experiments: {name: entry}``.  YAML is read with a safe loader (no
Python tags, duplicate keys refused).  Malformed or unknown fields raise one
:class:`CatalogError` naming the file and, one line each, every entry and field that is wrong.  Where catalog files come
from: see :mod:`ridgexr.catalog`.
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
import re
import warnings
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import CatalogError, CatalogWarning, wrong_type
from .experiment import Experiment
from .folders import default_data_dir

__all__ = ["load_catalog_file", "builtin_catalog_files", "catalog_files", "data_folder_catalog_files", "Catalog",
           "open_catalog", "RENAMED_ENTRIES",
           "experiment_from_file", "describe", "summary_line"]


def _location(entry: str, loc: tuple) -> str:
    """Where an error is, in words: "entry 'x'", "entry 'x', field 'process.n_steps'", "... 'models[1].widths'"."""
    field = ""
    for part in loc:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    return f"entry {entry!r}" + (f", field {field!r}" if field else "")


def _problems(entry: str, err: ValidationError) -> list[str]:
    """One line per error of ``err`` (the validation of ``entry``): its location in words, then what is wrong
    (a validator's own message, without pydantic's "Value error, " prefix)."""
    lines = []
    for e in err.errors():
        cause = e.get("ctx", {}).get("error") if e["type"] == "value_error" else None
        what = cause if isinstance(cause, Exception) else wrong_type(e) or e["msg"]  # a wrong type: value, example
        lines.append(f"{_location(entry, e['loc'])}: {what}")
    return lines


def _catalog_error(path: Path, problems: list[str]) -> CatalogError:
    """One :class:`CatalogError` for every problem of a file: the file and the count, then one line each."""
    if len(problems) == 1:
        return CatalogError(f"{path}: {problems[0]}")
    return CatalogError(f"{path}: {len(problems)} problems:\n" + "\n".join(f"  {p}" for p in problems))


#: deepest nesting of lists and mappings a catalog file may have (a catalog needs ~5 levels; Python's
#: recursion limit is reached by PyYAML's recursive composer near 300)
MAX_YAML_DEPTH = 64


class _TooDeep(yaml.YAMLError):
    """A YAML document nested deeper than :data:`MAX_YAML_DEPTH` (one-line message)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a repeated key (YAML would keep the last) and
    nesting deeper than :data:`MAX_YAML_DEPTH` (PyYAML would recurse into a RecursionError)."""

    def compose_node(self, parent, index):
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _TooDeep(f"lists and mappings nested deeper than {MAX_YAML_DEPTH} levels "
                               f"(line {mark.line + 1}, column {mark.column + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


#: YAML 1.2's float (core schema): ``1e-3``, ``1.0e6``, ``.5``, ``-1.5E+3``, ``.inf``, ``.nan``.  PyYAML
#: resolves YAML 1.1, whose floats need a dot and a signed exponent, so ``1e-3`` would be a string
_FLOAT_12 = re.compile(r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
                          |[-+]?\.(?:inf|Inf|INF)
                          |\.(?:nan|NaN|NAN))$""", re.X)
#: (PyYAML's float constructor reads them; its int resolver still comes first, so ``1`` stays an int)
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def load_catalog_file(path: str | Path) -> dict[str, Experiment]:
    """Read and validate one catalog file; returns {name: Experiment}.

    Raises
    ------
    CatalogError
        The file cannot be read or is not YAML; or it has invalid entries: then one error lists every
        problem of every entry, one line each, located in words ("entry 'x', field 'process.n_steps'").
    """
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (SafeLoader)
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not a text catalog (not UTF-8: byte {exc.object[exc.start]:#04x} at "
                           f"offset {exc.start})") from None
    except _TooDeep as exc:
        raise CatalogError(f"{path}: not a catalog: {exc}") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML (safe loader): {exc}") from None
    except OSError as exc:
        raise CatalogError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(raw, dict) or set(raw) != {"experiments"} or not isinstance(raw["experiments"], dict):
        raise CatalogError(f"{path}: must be a mapping with the single key 'experiments: {{name: entry}}'")
    out, problems = {}, []
    for name, entry in raw["experiments"].items():  # every entry, so that one error names every problem
        if not isinstance(entry, dict):
            problems.append(f"entry {str(name)!r}: must be a mapping")
            continue
        try:
            out[str(name)] = Experiment(name=str(name), source=str(path), **entry)
        except ValidationError as exc:
            problems += _problems(str(name), exc)
        except TypeError as exc:
            problems.append(f"entry {str(name)!r}: {exc}")
    if problems:
        raise _catalog_error(path, problems)
    return out


def builtin_catalog_files() -> list[Path]:
    """The YAML files of the built-in catalogs (package data ``ridgexr.catalogs``)."""
    root = importlib.resources.files("ridgexr.catalogs")
    return sorted(Path(str(f)) for f in root.iterdir() if f.name.endswith(".yaml"))


def _yaml_files(location: str | Path) -> list[Path]:
    p = Path(location).expanduser()
    if p.is_dir():
        return sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
    if p.is_file():
        return [p]
    raise CatalogError(f"catalog location {str(p)!r} (from $RIDGEXR_CATALOGS or --catalog) does not exist")


def catalog_files(data_dir: str | Path | None = None, files: list[str | Path] = ()) -> list[Path]:
    """Every catalog file, in the order of the module docstring (built-in, env, data folder, explicit)."""
    out = builtin_catalog_files()
    for loc in filter(None, os.environ.get("RIDGEXR_CATALOGS", "").split(os.pathsep)):
        out += _yaml_files(loc)
    out += data_folder_catalog_files(data_dir)
    for f in files:
        found = _yaml_files(f)
        if not found:  # a folder named with --catalog that holds no catalog file: said, not ignored
            raise CatalogError(f"catalog folder {str(Path(f).expanduser())!r} (from --catalog) holds no .yaml or "
                               ".yml file")
        out += found
    return list(dict.fromkeys(p.resolve() for p in out))


def data_folder_catalog_files(data_dir: str | Path | None = None) -> list[Path]:
    """The catalog files of the data folder's ``catalogs/`` (resolved paths; [] when it has none)."""
    user = default_data_dir(data_dir) / "catalogs"
    return [p.resolve() for p in _yaml_files(user)] if user.is_dir() else []


#: built-in entries renamed in 0.4 -> their new names (a lookup of the old name says so)
RENAMED_ENTRIES = {"square-center-paper": "square-center-ours", "grid-3x3-paper": "grid-3x3-ours"}


class Catalog:
    """All experiments of the catalog files (see the module docstring for where they come from).

    A file of ``optional`` (the data folder's ``catalogs/``, for :func:`open_catalog`) that cannot be
    read or validated is skipped with a :class:`CatalogWarning` naming it and why, so that one broken
    file there does not break every command; its error is raised when an entry that is in no other
    file is asked for (:meth:`__getitem__`, :meth:`not_found`).  Any other file's error is raised.
    """

    def __init__(self, files: list[str | Path] | None = None, *, data_dir: str | Path | None = None,
                 optional: list[str | Path] | None = None):
        if files is None:
            files, optional = catalog_files(data_dir), data_folder_catalog_files(data_dir)
        self.files = [Path(f) for f in files]
        skippable = {Path(f).resolve() for f in optional or ()}
        #: the skipped files of ``optional`` -> why
        self.skipped: dict[Path, str] = {}
        self.experiments: dict[str, Experiment] = {}
        for f in self.files:
            try:
                entries = load_catalog_file(f)
            except CatalogError as exc:
                if f.resolve() not in skippable:
                    raise
                self.skipped[f] = str(exc).replace("\n", " | ")
                warnings.warn(f"skipped catalog file {str(f)!r} of the data folder: {self.skipped[f]}",
                              CatalogWarning, stacklevel=2)
                continue
            for name, exp in entries.items():
                if name in self.experiments:
                    raise CatalogError(f"{f}: entry {name!r} is already defined in {self.experiments[name].source}")
                self.experiments[name] = exp
        self.files = [f for f in self.files if f not in self.skipped]

    def __getitem__(self, name: str) -> Experiment:
        if name not in self.experiments:
            raise self.not_found(name)
        return self.experiments[name]

    def not_found(self, name: str) -> Exception:
        """The error for an entry that no read file defines: the skipped files' errors when any were skipped
        (the entry may be in one of them; a :class:`CatalogError`), else a ``KeyError`` with "did you mean"."""
        if self.skipped:
            return CatalogError(f"no experiment {name!r}{self.did_you_mean(name)} in the catalogs that could be read; "
                                f"skipped: " + "; ".join(f"{why}" for why in self.skipped.values()))
        return KeyError(f"no experiment {name!r}{self.did_you_mean(name)} in the catalogs "
                        f"{[str(f) for f in self.files]}; known: {sorted(self.experiments)}")

    def did_you_mean(self, name: str) -> str:
        """"; did you mean 'X'?" naming the closest entry, or "" when none is close (for an entry renamed in 0.4,
        its new name: :data:`RENAMED_ENTRIES`)."""
        if name in RENAMED_ENTRIES and name not in self.experiments and RENAMED_ENTRIES[name] in self.experiments:
            return (f" (renamed in ridgexr 0.4: its settings are ours, not the authors'); did you mean "
                    f"{RENAMED_ENTRIES[name]!r}?")
        close = difflib.get_close_matches(str(name), list(self.experiments), n=1)
        return f"; did you mean {close[0]!r}?" if close else ""

    def __iter__(self):
        return iter(self.experiments)

    def __len__(self):
        return len(self.experiments)


def open_catalog(directory: str | Path | None = None, *, files: list[str | Path] = (),
                 data_dir: str | Path | None = None) -> Catalog:
    """Open the experiment catalogs.

    Parameters
    ----------
    directory : path, optional
        Read only the ``*.yaml`` files of this folder (no built-in catalogs).
    files : list of paths
        Extra catalog files, read after the built-in, ``$RIDGEXR_CATALOGS`` and data-folder ones.
    data_dir : path, optional
        The data folder whose ``catalogs/`` subfolder is read (see :func:`default_data_dir`); a
        file there that cannot be read is skipped with a :class:`CatalogWarning` (see :class:`Catalog`).
    """
    if directory is not None:
        return Catalog(_yaml_files(directory))
    asked = {p.resolve() for f in files for p in _yaml_files(f)}  # a file named explicitly is never skipped
    optional = [f for f in data_folder_catalog_files(data_dir) if f not in asked]
    return Catalog(catalog_files(data_dir, list(files)), optional=optional)


def experiment_from_file(path: str | Path, name: str | None = None) -> Experiment:
    """The single (or named) experiment of a catalog file."""
    exps = load_catalog_file(path)
    if name is None:
        if len(exps) != 1:
            raise CatalogError(f"{path}: holds {len(exps)} experiments; name one of {sorted(exps)}")
        return next(iter(exps.values()))
    if name not in exps:
        raise CatalogError(f"{path}: no experiment {name!r}; known: {sorted(exps)}")
    return exps[name]


def summary_line(text: str) -> str:
    """The first sentence of a description (up to its first ". " or ":"-free end), whitespace folded.

    >>> summary_line("Two training points (-3,0),(3,0). Random features at three widths.")
    'Two training points (-3,0),(3,0).'
    """
    text = " ".join(text.split())
    m = re.search(r"(?<=[.;])\s+(?=[A-Z(])", text)
    return text[:m.start()] if m else text


def describe(exp: Experiment) -> dict[str, Any]:
    """A short dict summary of an experiment (for listings): its name, the first sentence of its description and
    its sizes."""
    return {
        "name": exp.name,
        "description": summary_line(exp.description),
        "dataset": exp.dataset.label + (f" {exp.dataset.mnist.digits}" if exp.dataset.mnist else ""),
        "models": ", ".join(b.label for b in exp.blocks),  # ", ": a listing may wrap between items
        "schedules": ", ".join(exp.cell_schedules),
        "widths": ", ".join(map(str, sorted({w for b in exp.blocks for w in b.values("width")}))),
        "samples": exp.n_samples, "steps": exp.process.n_steps, "d*": exp.d_star, "store": exp.store,
    }
