"""Names are data, never control: text from traces made safe to print on a terminal or in a file.

Kernel, op and file names come from the traces (or the file system) and are untrusted. Written
raw, an OSC sequence (``ESC ] 0 ; title BEL``) retitles the user's terminal, ``ESC ] 8 ;;``
plants a clickable link, a CSI sequence recolours or moves the cursor, a newline turns a
one-line error into two, and a right-to-left override (U+202E) makes ``exe.png`` read as
``gnp.exe``. Every text renderer (terminal table, Markdown, warnings, errors, ``inspect``)
passes names through :func:`clean`, which

- turns line and page breaks and tabs (``\\t \\n \\v \\f \\r``, the file/group/record/unit
  separators, NEL, U+2028, U+2029) into one space, so a line stays one line;
- drops every other C0 control, DEL and every C1 control (U+0080-U+009F, where a lone
  U+009B is a CSI on some terminals): what is left of an escape sequence is inert text;
- shows bidirectional embeddings, overrides, isolates and marks as their escape (``\\u202e``),
  so the reader sees that the name holds one instead of reading reordered text;
- replaces a lone surrogate (the bytes of a non-UTF-8 file name) with U+FFFD.

Printable text comes back unchanged (and fast: one ``str.isprintable`` check). HTML does not use
this: it escapes markup itself and a browser does not execute control characters. JSON keeps
every name exact: :func:`json_escape` writes the characters JSON leaves raw (DEL, C1, the bidi
controls, U+2028/9) as ``\\uXXXX`` escapes, which parse back to the same string.
"""

from __future__ import annotations

#: Bidirectional formatting characters: ALM, LRM, RLM, LRE/RLE/PDF/LRO/RLO, LRI/RLI/FSI/PDI.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

#: Controls that separate words or lines: one space each, so words stay apart.
_SPACES = "\t\n\v\f\r\x1c\x1d\x1e\x1f\x85\u2028\u2029"


def _table() -> dict[int, str | None]:
    table: dict[int, str | None] = {c: None for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
    table.update({ord(c): " " for c in _SPACES})
    table.update({ord(c): f"\\u{ord(c):04x}" for c in BIDI})
    table.update({c: "\ufffd" for c in range(0xD800, 0xE000)})
    return table


_TABLE = _table()


def clean(text: object) -> str:
    """``text`` as one line of inert, printable text (see the module docstring)."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return s.translate(_TABLE)


#: What ``json.dumps(ensure_ascii=False)`` leaves raw that a terminal acts on (it escapes C0).
_JSON_RAW = {c: f"\\u{c:04x}" for c in [0x7F, *range(0x80, 0xA0), 0x2028, 0x2029]}
_JSON_RAW.update({ord(c): f"\\u{ord(c):04x}" for c in BIDI})


def json_escape(text: str) -> str:
    """JSON text with those characters as ``\\uXXXX``: the same document, safe to print.

    Only valid on JSON text: outside strings JSON is ASCII, so every such character is in a
    string, where the escape means the character itself.
    """
    if text.isascii() and "\x7f" not in text:  # a fast scan: most documents are ASCII
        return text
    return text.translate(_JSON_RAW)
