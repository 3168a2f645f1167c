"""MkDocs hook: render the Sphinx roles of lethe's docstrings (``:class:`~a.b.C```, ``:func:`f```, ...) cleanly.

mkdocstrings renders a role as the literal text ``:class:`` followed by inline code. This hook, run on each page's
HTML, replaces it by the code alone (``~`` keeps only the last component, as in Sphinx) wrapped in an optional
mkdocs-autorefs cross-reference: a lethe object documented on the site becomes a link, anything else (scikit-learn,
a relative name) stays plain code without a warning.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|obj|exc|const|term|ref):<code>(~?)([^<]+)</code>")


def _replace(match: re.Match[str]) -> str:
    tilde, target = match.group(1), match.group(2).strip()
    shown = target.rsplit(".", 1)[-1] if tilde else target
    if target.startswith("lethe."):
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'
    return f"<code>{shown}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_replace, html)
