"""Op and kernel names short enough for a sentence or a table cell (documents keep them whole)."""

from __future__ import annotations

import re


def short_name(name: str, width: int = 60) -> str:
    """A kernel or op name short enough for a sentence (the JSON keeps the full name).

    A C++ kernel signature loses its return type, its trailing argument list and the inside
    of its template arguments (``void ns::k<float, 4>(int, float*)`` -> ``ns::k<…>``). What is
    still too long loses its leading qualifiers first (``enumerate(DataLoader)#``, namespaces,
    folders), since the last part is what names the op and tells two ops apart
    (``…_SingleProcessDataLoaderIter.__next__`` and ``…_MultiProcessingDataLoaderIter.__next__``,
    where a cut in the middle would remove exactly the difference); only a last part that is
    still too long is cut in the middle.
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
    ends = [m.end() for m in _QUALIFIER_END.finditer(text)]
    # The bare last part ("__next__") says too little once the name has several qualifiers.
    for end in ends[:-1] if len(ends) > 1 else ends:
        tail = text[end:]
        if len(tail) < width and tail.strip():
            return "…" + tail
    keep = width - 1
    return text[: keep // 2] + "…" + text[-(keep - keep // 2) :]


#: Where a leading qualifier ends: after '#', '::', '/' or a '.' that joins two names.
_QUALIFIER_END = re.compile(r"#|::|/|(?<=\w)\.(?=\w)")


def short_names(names: list[str], width: int = 48) -> list[str]:
    """:func:`short_name` of each, kept distinct: names that shorten alike keep more of
    themselves (their template arguments), and any still alike are numbered."""
    out = [short_name(n, width) for n in names]
    for i, text in enumerate(out):
        same = [j for j, t in enumerate(out) if t == text and names[j] != names[i]]
        if not same:
            continue
        for j in [i, *same]:
            full = _with_templates(names[j])
            wide = width + 12
            out[j] = full if len(full) <= wide else full[: wide // 2] + "…" + full[-wide // 2 :]
    seen: dict[str, int] = {}
    for i, text in enumerate(out):
        seen[text] = seen.get(text, 0) + 1
        if seen[text] > 1:
            out[i] = f"{text} [{seen[text]}]"
    return out


def _with_templates(name: str) -> str:
    """The kernel's own name with its template arguments: no return type, namespaces or
    argument list (what tells two instantiations of one kernel apart)."""
    text = short_name(name, width=10_000)
    stem = text.split("<…>", 1)[0]
    full = name.strip().replace("(anonymous namespace)", "(anon)").removeprefix("void ")
    start = full.find(stem) if stem else -1
    if start < 0:
        return text
    depth, end = 0, len(full)
    for k in range(start + len(stem), len(full)):
        depth += {"<": 1, ">": -1}.get(full[k], 0)
        if depth == 0:
            end = k + 1
            break
    own = full[start:end]
    head, _, tail = own.partition("<")
    return head.rsplit("::", 1)[-1] + ("<" + tail if tail else "")
