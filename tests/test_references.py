"""Every paper the code cites has a row, with a permanent link, in docs/references.md (issue 25, item 5).

A citation is "Surname YEAR", "Surname et al. YEAR", "A & B YEAR" or "A-B-C YEAR" in a docstring or comment of
``src/lethe`` (optionally with a comma or an opening parenthesis before the year). Venue names ("ICML 2025") and
words that only look like names are not citations.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "lethe"
REFERENCES = ROOT / "docs" / "references.md"

NAME = r"[A-Z][a-zA-Z]+(?:-[A-Z][a-zA-Z]+)*"
CITATION = re.compile(rf"\b({NAME}(?: et al\.| & {NAME})?),? \(?((?:19|20)\d\d)\b")
# capitalised words followed by a year that are not authors (venues, months, data sets)
NOT_AUTHORS = {"ICML", "CCS", "NeurIPS", "AISTATS", "COLT", "FOCS", "CSF", "ACL", "TCC", "ISIT", "JMLR", "SIAM",
               "UCI", "Python", "Proceedings", "Submitted", "Rotten", "Round", "Issue", "November", "October"}


def cited_keys() -> set[str]:
    keys: set[str] = set()
    for path in SRC.rglob("*.py"):
        for name, year in CITATION.findall(path.read_text(encoding="utf-8")):
            if name.split()[0] in NOT_AUTHORS or name.isupper():
                continue
            keys.add(f"{name} {year}")
    return keys


def reference_keys() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in REFERENCES.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("key", "---"):
            rows[cells[0]] = cells[2]
    return rows


def test_the_scan_finds_the_main_papers() -> None:
    keys = cited_keys()
    assert {"Guo et al. 2020", "Chourasia & Shah 2023", "Balle & Wang 2018", "Koloskova et al. 2025"} <= keys


def test_every_cited_paper_has_a_reference_with_a_link() -> None:
    rows = reference_keys()
    missing = sorted(k for k in cited_keys() if k not in rows)
    assert not missing, f"cited in src/lethe but missing from docs/references.md: {missing}"
    for key, link in rows.items():
        assert re.search(r"\]\((https://(arxiv\.org/abs/|doi\.org/10\.|proceedings\.mlr\.press/))", link), (
            f"{key}: the link must be an arXiv, DOI or PMLR address, found {link!r}")


def test_a_missing_row_is_caught(tmp_path: Path) -> None:
    """Mutation check: the scan reports a citation with no row."""
    rows = reference_keys()
    rows.pop("Balle & Wang 2018")
    assert "Balle & Wang 2018" in {k for k in cited_keys() if k not in rows}
