"""Docs pages state the current truth for a user: no page but the changelog carries an issue number, a run's
date, a session or stop number, or a "Status" / "built on" history paragraph (those belong to CHANGELOG.md and
commit messages); and the catalogs page's complete example entry loads as the catalog it says it is."""

import re
from pathlib import Path

import pytest

from ridgexr.catalog import Experiment, load_catalog_file, schema_markdown
from ridgexr.catalog.reference import EXAMPLE_CATALOG

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: every page a reader sees: the README and each Markdown page of docs/ (the changelog page only includes
#: CHANGELOG.md, where history belongs)
PAGES = ["README.md"] + sorted(f"docs/{p.name}" for p in DOCS.glob("*.md") if p.name != "changelog.md")

#: what marks a line as history rather than the current truth, each with the reason it gives
HISTORY = [
    (re.compile(r"\bissues?\s+#?\d+|\bissues?\s+[IVX]+\b|(?<![\w&/#])#\d+\b", re.I), "an issue number"),
    (re.compile(r"\bspeed issue\b", re.I), "an issue number"),
    (re.compile(r"\b(session|stop)[\s-]+\d+\b", re.I), "a session or stop number"),
    (re.compile(r"\b20\d\d-\d\d-\d\d\b"), "a date"),
    (re.compile(r"^\s*(#+\s*|\*\*)?Status\b"), "a 'Status' paragraph"),
    (re.compile(r"\b[Bb]uilt (on|since)\b"), "a 'built on' history"),
]
FENCE = re.compile(r"^\s*(```|~~~)")


def history_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, reason, line) of every line that reads as history.  Dates inside fenced code are allowed
    (a claim's ``written:`` field records where and when it was written); issue numbers are not."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        for pattern, reason in HISTORY:
            if fenced and reason == "a date":
                continue
            if pattern.search(line):
                out.append((i, reason, line.strip()))
                break
    return out


def test_the_history_checker_finds_each_kind_and_passes_current_prose():
    page = """# A page

## Status

The projection converges in 4 iterations (issue 24).
Measured on 2026-12-03, session 11; speed issue II asked for it.
Built on the store package.
The paper (He, Qiu & Tao, 2026) defines the ridge; `d_star` is its dimension.
See [the tables](#model-blocks), 3 x 10^5 samples, 60 000 images, `&#8230;`.

```yaml
claims: [{kind: reach-falls, written: "docs/findings.md, 2026-12-04"}]
```
"""
    found = [(n, reason) for n, reason, _ in history_lines(page)]
    assert found == [(3, "a 'Status' paragraph"), (5, "an issue number"), (6, "an issue number"),
                     (7, "a 'built on' history")]
    assert history_lines("Measured on 2026-12-03.") == [(1, "a date", "Measured on 2026-12-03.")]
    assert history_lines("fixed in #43") == [(1, "an issue number", "fixed in #43")]
    assert history_lines("stop 49 ran it") == [(1, "a session or stop number", "stop 49 ran it")]
    assert history_lines("```\nsee issue 7\n```") == [(2, "an issue number", "see issue 7")]


@pytest.mark.parametrize("page", PAGES)
def test_no_docs_page_carries_issue_numbers_dates_or_history_paragraphs(page):
    found = history_lines((ROOT / page).read_text())
    assert not found, (f"{page}: history belongs in CHANGELOG.md, the page states the current truth:\n"
                       + "\n".join(f"  line {n} ({reason}): {line[:120]}" for n, reason, line in found))


def _example_yaml(page: str) -> str:
    """The YAML block under the catalogs page's heading "A complete entry"."""
    section = page.split("## A complete entry", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)


def test_the_catalogs_pages_example_entry_loads(tmp_path):
    from ridgexr.claims import check_claim_specs

    page = (DOCS / "catalogs.md").read_text()
    assert page == schema_markdown()  # the page is the generator's output
    text = _example_yaml(page)
    assert text == EXAMPLE_CATALOG
    path = tmp_path / "my.yaml"
    path.write_text(text)
    entries = load_catalog_file(path)
    assert list(entries) == ["my-three-points"]
    exp = entries["my-three-points"]
    # complete: every field an entry sets is written out (name and source come from the loader; models is the
    # alternative to model, timescales is for entries that sweep training time)
    written = set(re.findall(r"^    (\w+):", text, flags=re.M))
    assert written == set(Experiment.model_fields) - {"name", "source", "models", "timescales"}
    # what the comments say it is: 2 schedules x 2 widths of random features, plus the exact denoiser
    coords = dict(exp.cell_coords())
    assert set(coords["schedule"]) == {"1", "h2", "exact"} and set(coords["width"]) == {64, 256}
    assert exp.process.n_steps == 200 and exp.n_samples == 128 and exp.d_star == 1
    assert exp.store == "my-three-points.zarr" and exp.ridge.tol == 1e-8
    check_claim_specs(exp.claims)  # the claims name kinds an entry can claim, with the times they compare
    assert [c.kind for c in exp.claims] == ["reach-falls", "align-tangent"]


@pytest.mark.slow
def test_the_catalogs_pages_example_entry_runs_and_its_claims_read(tmp_path):
    """The example is a whole entry, not only a valid one: it runs to a complete store (6 cells: 2 schedules x
    2 widths and the exact denoiser at each width) and ``ridgexr claims`` reads both its claims, testable, in every random-feature cell."""
    import ridgexr
    from ridgexr.claims import store_claims
    from ridgexr.run import run_experiment
    from ridgexr.verdicts import VERDICT_WORDS

    path = tmp_path / "my.yaml"
    path.write_text(_example_yaml((DOCS / "catalogs.md").read_text()))
    exp = load_catalog_file(path)["my-three-points"]
    res = run_experiment(exp, data_dir=tmp_path / "data")
    assert res.store == tmp_path / "data" / "my-three-points.zarr"
    ds = ridgexr.open_dataset(res.store)
    assert int(ds.cell_complete.sum()) == ds.cell_complete.size == 6
    assert ds.sizes["sample"] == 128 and ds.sizes["step"] == 101  # 200 steps, every 2nd and the last recorded
    claims = store_claims(ds)
    by_kind = {}
    for claim in claims:
        by_kind.setdefault(claim.kind, []).append(claim)
        assert claim.verdict.split(":")[0] in VERDICT_WORDS and not claim.verdict.startswith("untestable")
    # both claims in every cell of a model that is not the memorizer: 2 schedules x 2 widths
    assert set(by_kind) == {"reach-falls", "align-tangent"}
    assert len(by_kind["reach-falls"]) == 4 and len(by_kind["align-tangent"]) == 4
