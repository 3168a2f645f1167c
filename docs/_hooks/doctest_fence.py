"""Griffe extension: a doctest block (``>>>`` lines) outside a numpydoc "Examples" section renders as code.

In a module docstring, ``>>> code`` is read by Markdown as nested block quotes. This extension wraps each such block
(from its first ``>>>`` line to the next blank line) in a ``pycon`` fence before mkdocstrings renders it. Blocks
inside an "Examples" section are left alone: the numpydoc parser already renders them as code.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    in_examples = False
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        stripped = nxt.strip()
        if line.strip() and stripped and set(stripped) == {"-"} and len(stripped) >= 3:  # a numpydoc header
            in_examples = line.strip() == "Examples"
        if not in_examples and line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            out += [f"{indent}```pycon", *block, f"{indent}```"]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestFence(griffe.Extension):
    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if getattr(obj, "is_alias", False) or obj.docstring is None:
            return
        obj.docstring.value = fence_doctests(obj.docstring.value)
