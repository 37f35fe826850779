"""The package's shape: no module uses another's underscore names, and module-level imports have no cycle."""

import ast
from pathlib import Path

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


#: the package's layers, lowest first (docs/index.md, "Modules"): a module imports, at module level,
#: only modules of its own layer or below.  Within a layer imports may go either way as long as
#: no module-level cycle forms (the test above).
LAYERS = [
    {"defaults", "choices", "spec", "_validation", "_backend", "units", "paths", "threads", "heap", "verdicts"},
    {"process", "datasets", "autoencoder"},
    {"empirical"},
    {"scms", "ridge"},
    {"models", "training"},
    # store.variables, the table of stored variables, sits below the rest of store: observe fills its empty block
    {"sampling", "observe", "catalog", "nearest", "store.variables"},
    {"store"},
    {"analysis", "projection", "accessor"},
    {"quality", "claims"},
    {"reader", "engine"},
    {"run"},
    {"plot", "report", "explore"},
    {"cli", "__main__", ""},
]


def _layer_name(module: str, rank: dict) -> str:
    """The LAYERS name of ``ridgexr.X[.Y...]``: ``X.Y`` when LAYERS names that submodule, else ``X``."""
    parts = module.split(".")[1:]
    return ".".join(parts[:2]) if ".".join(parts[:2]) in rank else (parts[0] if parts else "")


def test_module_level_imports_point_downward_through_the_layers():
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    upward = []
    for name, path, is_pkg in _modules():
        mine = _layer_name(name, rank)
        assert mine in rank, f"{name}: top-level module {mine!r} is in no layer of LAYERS"
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                src = _resolve(name, is_pkg, node)
                targets = [src] if node.module else [f"{src}.{a.name}" for a in node.names]
                for target in targets:
                    theirs = _layer_name(target, rank)
                    if theirs in rank and rank[theirs] > rank[mine]:
                        upward.append(f"{name} imports {target} (layer {rank[theirs]} > {rank[mine]})")
    assert not upward, upward


def test_cell_dims_have_one_table():
    """The store's cell dimensions and the model blocks' ones come from ``choices.CELL_DIM_SOURCES`` (the
    lowest layer, so the models and the catalog read them without reaching up to the store)."""
    from ridgexr import choices, store
    from ridgexr.models import MODEL_CELL_DIMS

    assert store.CELL_DIMS == choices.CELL_DIMS == tuple(choices.CELL_DIM_SOURCES)
    assert MODEL_CELL_DIMS == tuple(d for d in choices.CELL_DIMS if choices.CELL_DIM_SOURCES[d] == "model")


#: the modules of ridgexr.store, lowest first (docs/index.md): each imports, at module level, only those before it
STORE_ORDER = ["variables", "layout", "lock", "lifecycle", "integrity", "write"]


def test_the_store_modules_import_downward_and_the_table_imports_no_array_library():
    """Issue 43: the store package's modules point downward in :data:`STORE_ORDER`, the package's ``__init__``
    only re-exports, and ``store.variables`` (which observe reads) imports neither zarr, xarray nor dask."""
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
            if mod == "variables" and isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] in ("zarr", "xarray", "dask") for n in names), names
    assert not upward, upward
