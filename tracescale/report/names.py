"""Op and kernel names short enough for a sentence or a table cell (documents keep them whole)."""

from __future__ import annotations

import re


def short_name(name: str, width: int = 60) -> str:
    """A kernel or op name short enough for a sentence (the JSON keeps the full name).

    A C++ kernel signature loses its return type, its trailing argument list and the inside
    of its template arguments (``void ns::k<float, 4>(int, float*)`` -> ``ns::k<…>``); what is
    still too long is cut in the middle, so both the namespace and the kernel stay readable.
    """
    text = name.strip().replace("(anonymous namespace)", "(anon)")
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                # An argument list follows its name directly; "Memcpy HtoD (a -> b)" keeps it.
                if i > 0 and not text[i - 1].isspace():
                    text = text[:i]
                break
    text = re.sub(r"^void\s+", "", text)
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            if depth == 0:
                out.append("<…>")
            depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out) or name
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep // 2] + "…" + text[-(keep - keep // 2) :]
