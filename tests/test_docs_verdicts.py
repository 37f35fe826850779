"""Verdict words come from generated tables: no table cell of a docs page outside the generated, included tables
(docs/claims_tables/) holds "agrees", "disagrees", "inconclusive" or "untestable" (ridgexr.verdicts.VERDICT_WORDS);
every claims table a page includes is one of them, and a table not regenerated under the current criteria says
so with the command that regenerates it."""

import re
from pathlib import Path

import pytest

from ridgexr.verdicts import VERDICT_WORDS

DOCS = Path(__file__).resolve().parent.parent / "docs"
WORD = re.compile(r"\b(" + "|".join(VERDICT_WORDS) + r")\b", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```|~~~)")


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (escaped pipes kept inside their cell)."""
    body = line.strip().strip("|")
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def hand_typed_verdicts(text: str) -> list[tuple[int, str]]:
    """(line number, cell) of every table cell outside fenced code that holds a verdict word."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.lstrip().startswith("|") or re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", line):
            continue
        out += [(i, cell) for cell in _cells(line) if WORD.search(cell)]
    return out


def test_the_checker_finds_a_hand_typed_verdict_in_a_table_cell_and_nothing_else():
    page = """# A page

The claims table below says which claims agrees with the theory (prose is not a table).

| claim | measured | verdict |
|---|---|---|
| reach | 0.5 [0.4, 0.6] | **agrees** |
| slide | 0.1 | Inconclusive: more draws |

```text
| a | agrees |
```
"""
    assert hand_typed_verdicts(page) == [(7, "**agrees**"), (8, "Inconclusive: more draws")]


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_no_docs_table_cell_holds_a_hand_typed_verdict(page):
    found = hand_typed_verdicts((DOCS / page).read_text())
    assert not found, f"{page}: verdict words in hand-typed table cells (use a generated table): {found}"


def test_every_included_claims_table_is_generated_and_a_stale_one_says_how_to_regenerate_it():
    tables = DOCS / "claims_tables"
    included = set()
    for page in DOCS.glob("*.md"):
        included |= set(re.findall(r"claims_tables/([\w.-]+\.md)", page.read_text()))
    assert included and included <= {p.name for p in tables.glob("*.md")}
    for name in sorted(included):
        text = (tables / name).read_text()
        assert "generated" in text[:2000].lower(), name
        if "criterion (before the run)" in text or "stale: criteria changed" in text:  # read under older criteria
            assert "stale: criteria changed" in text, name
            assert re.search(r"`(python analyses/\S+\.py|ridgexr claims) [^`]+`", text), name
