"""docs/contributing.md names only what exists: each file, each test (``file::function``) and each ``ridgexr.``
name it quotes."""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "contributing.md"


def _quoted() -> list[str]:
    """Every backticked token of the guide without a placeholder (``<kind>``), a space or a call."""
    return sorted({q for q in re.findall(r"`([^`\n]+)`", GUIDE.read_text()) if not re.search(r"[<\s(]", q)})


def _paths() -> list[str]:
    return [q for q in _quoted() if "/" in q and not q.startswith("ridgexr.") and "::" not in q]


def _tests() -> list[str]:
    return [q for q in _quoted() if "::" in q]


def _names() -> list[str]:
    return [q for q in _quoted() if q.startswith("ridgexr.") and "/" not in q]


def _resolve(dotted: str):
    """The object ``dotted`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_guide_quotes_files_tests_and_names():
    """The three kinds of reference are found (so an empty parse cannot pass the tests below)."""
    assert len(_paths()) >= 15 and len(_tests()) >= 8 and len(_names()) >= 15, (_paths(), _tests(), _names())


@pytest.mark.parametrize("path", _paths())
def test_every_file_the_guide_names_exists(path):
    assert (ROOT / path.rstrip("/")).exists(), path


@pytest.mark.parametrize("ref", _tests())
def test_every_test_the_guide_names_exists(ref):
    file, name = ref.split("::")
    tree = ast.parse((ROOT / file).read_text())
    assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, ref


@pytest.mark.parametrize("name", _names())
def test_every_name_the_guide_quotes_exists(name):
    _resolve(name)


def test_the_guide_is_in_the_docs_toctree():
    toctrees = [block.split("```", 1)[0] for block in (ROOT / "docs" / "index.md").read_text().split("```{toctree}")[1:]]
    assert any("contributing" in toctree.split() for toctree in toctrees)
