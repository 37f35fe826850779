"""The package's shape: the import contract (``.importlinter``: the floors, stated once, and the variables table
that imports no heavy library) is kept, no module imports another package's private module or uses another
module's underscore names, module-level imports have no cycle, and docs/tables/floors.md is the contract's."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import ridgexr

PKG = Path(ridgexr.__file__).parent


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path, path.name == "__init__.py"


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def test_no_module_uses_another_modules_underscore_names():
    offences = []
    for name, path, is_pkg in _modules():
        tree = ast.parse(path.read_text())
        module_aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src = _resolve(name, is_pkg, node)
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        offences.append(f"{name}: from {src} import {alias.name}")
                    if src.startswith("ridgexr") and (PKG.parent / (src.replace(".", "/") + "/" + alias.name)).exists():
                        module_aliases.add(alias.asname or alias.name)  # a subpackage imported as a name
                    if src.startswith("ridgexr") and (PKG.parent / (src.replace(".", "/") + "/" + alias.name + ".py")).exists():
                        module_aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                module_aliases |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("ridgexr")}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in module_aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                offences.append(f"{name}: {node.value.id}.{node.attr}")
    assert not offences, offences


def test_module_level_imports_have_no_cycle():
    graph = {}
    for name, path, is_pkg in _modules():
        deps = set()
        for node in ast.parse(path.read_text()).body:  # module level only; imports inside functions are lazy
            if isinstance(node, ast.ImportFrom):
                src = _resolve(name, is_pkg, node)
                if src.startswith("ridgexr"):
                    deps.add(src)
                    deps |= {f"{src}.{a.name}" for a in node.names}
        graph[name] = {d for d in deps if d != name}
    known = set(graph)
    graph = {k: {d for d in v if d in known and not k.startswith(d + ".")} for k, v in graph.items()}
    # a package's __init__ re-exports its submodules: that is not a cycle
    state, cycle = {}, []

    def visit(node, stack):
        state[node] = 1
        for dep in graph[node]:
            if state.get(dep) == 1 and not cycle:
                cycle.extend(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycle, " -> ".join(cycle)


#: the import contract (import-linter): the package's floors, stated once, and the known edges that break them
CONTRACT = PKG.parent / ".importlinter"
#: the generated table of floors that docs/index.md includes
FLOORS_PAGE = PKG.parent / "docs" / "tables" / "floors.md"


def _floors_contract() -> dict:
    from importlinter.api import read_configuration

    (contract,) = [c for c in read_configuration(str(CONTRACT))["contracts_options"] if c["type"] == "layers"]
    return contract


def floors() -> list[list[str]]:
    """The contract's floors, top first, each the names (relative to ``ridgexr``) of its modules."""
    layers = _floors_contract()["layers"]
    return [[m.strip() for m in layer.replace("|", ":").split(":")] for layer in layers]


def floors_markdown() -> str:
    """docs/tables/floors.md: the contract's floors as a table, top first, and the edges it ignores today."""
    fl = floors()
    lines = ["| floor | modules (a module imports its own floor and those below) |", "|---|---|"]
    lines += [f"| {len(fl) - i} | " + ", ".join(f"`{m}`" for m in layer) + " |" for i, layer in enumerate(fl)]
    ignored = sorted(_floors_contract().get("ignore_imports", []))
    if ignored:
        lines += ["", "Imports that break the floors today (`.importlinter` gives each one's reason and what removes it):", ""]
        lines += [f"- `{edge.replace('ridgexr.', '')}`" for edge in ignored]
    return "\n".join(lines) + "\n"


def test_the_import_contract_is_kept():
    """``lint-imports``: every module sits on a floor of ``.importlinter`` (exhaustive) and imports, directly or
    through a chain, lazy imports included, only its own floor and those below; every edge the contract ignores
    still exists (import-linter fails on an unmatched ignore, so a fixed edge must leave the contract)."""
    from importlinter.cli import lint_imports

    assert lint_imports(config_filename=str(CONTRACT), no_cache=True, no_logo=True) == 0


def test_the_floors_contract_ignores_no_import():
    """The floors hold without exceptions: ``training`` imports no model kind (the random-feature network and the
    output parametrizations it shares with ``models`` sit on the floor below both), so the contract lists no
    ``ignore_imports``."""
    assert not _floors_contract().get("ignore_imports"), _floors_contract()["ignore_imports"]


def test_the_variables_table_imports_without_torch_zarr_xarray_or_dask():
    """Importing ``ridgexr.schema`` runs the root package's ``__init__`` too, which the import graph does not
    show (the contract's forbidden imports see the table's own chain only): a fresh interpreter checks both."""
    code = ("import sys; import ridgexr.schema; "
            "print(sorted(m for m in ('torch', 'zarr', 'xarray', 'dask') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_no_module_imports_a_private_module_of_another_package():
    """A module named ``_x`` belongs to the package that holds it: only that package's modules import it.
    Checked on the package's import graph (grimp, lazy imports included) and on the analysis and benchmark
    scripts and the tests, which are outside every package; the tests, which test ``ridgexr`` as a whole, may
    import its own top-level private modules (``ridgexr._validation``), not a subpackage's."""
    import grimp

    graph = grimp.build_graph("ridgexr", cache_dir=None)

    def owner(module: str) -> str | None:
        """The package that owns ``module``'s first private part, or None when none is private."""
        parts = module.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                return ".".join(parts[:i])
        return None

    offences = []
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            pkg = owner(imported)
            if pkg is not None and not (importer == pkg or importer.startswith(pkg + ".")):
                offences.append(f"{importer} imports {imported}")
    for folder in ("tests", "analyses", "benchmarks"):
        for path in sorted((PKG.parent / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                for name in names:
                    pkg = owner(name) if name.startswith("ridgexr") else None
                    if pkg is not None and not (folder == "tests" and pkg == "ridgexr"):
                        offences.append(f"{path.relative_to(PKG.parent)} imports {name}")
    assert not offences, offences


def test_the_floors_page_is_the_contract():
    """docs/tables/floors.md (included by docs/index.md) is generated from the contract;
    ``python tests/test_architecture.py`` rewrites it."""
    assert FLOORS_PAGE.read_text() == floors_markdown(), "stale: run python tests/test_architecture.py"


def test_cell_dims_have_one_table():
    """The store's cell dimensions and the model blocks' ones come from ``choices.CELL_DIM_SOURCES`` (the
    lowest layer, so the models and the catalog read them without reaching up to the store)."""
    from ridgexr import choices, schema
    from ridgexr.models import MODEL_CELL_DIMS

    assert schema.CELL_DIMS == choices.CELL_DIMS == tuple(choices.CELL_DIM_SOURCES)
    assert MODEL_CELL_DIMS == tuple(d for d in choices.CELL_DIMS if choices.CELL_DIM_SOURCES[d] == "model")


#: the modules of ridgexr.store, lowest first (docs/index.md): each imports, at module level, only those before it
STORE_ORDER = ["record", "layout", "opening", "update", "lock", "lifecycle", "integrity", "write"]


def test_the_store_modules_import_downward():
    """The store package's modules point downward in :data:`STORE_ORDER` (the table they read is
    :mod:`ridgexr.schema`, below the store)."""
    store = PKG / "store"
    assert sorted(p.stem for p in store.glob("*.py") if p.stem != "__init__") == sorted(STORE_ORDER)
    upward = []
    for mod in STORE_ORDER:
        tree = ast.parse((store / f"{mod}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                theirs = node.module.split(".")[0]
                if theirs not in STORE_ORDER or STORE_ORDER.index(theirs) >= STORE_ORDER.index(mod):
                    upward.append(f"store.{mod} imports .{node.module}")
    assert not upward, upward


def _calls(tree: ast.AST) -> set[str]:
    """Names of the functions and methods a module calls (``f(...)``, ``obj.f(...)``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def test_one_module_opens_a_store_and_layout_only_lays_out():
    """A store is opened as a Dataset in one place, ``store.opening`` (``xr.open_zarr``; the reader and the xarray
    backend call its ``open_store``), and ``store.layout`` reads and changes no store: it opens no group, reads no
    file and replaces none (it writes only a new store's template)."""
    opens = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "open_zarr" in _calls(ast.parse(p.read_text())))
    assert opens == ["store/opening.py"], opens
    layout = _calls(ast.parse((PKG / "store" / "layout.py").read_text()))
    reads_or_changes = {"open_group", "open_zarr", "open_store", "open_arrays", "read_bytes", "read_text", "replace",
                        "write_text", "root_metadata", "read_record"}
    assert not layout & reads_or_changes, sorted(layout & reads_or_changes)
    for module in ("reader.py", "xarray_backend.py"):
        assert "open_store" in _calls(ast.parse((PKG / module).read_text())), module


if __name__ == "__main__":  # rewrite docs/tables/floors.md from the contract
    FLOORS_PAGE.write_text(floors_markdown())
