"""Saved documents in, their kind out: tell a compare document from a study and load it checked.

``report`` re-renders whatever ``analyze`` or ``compare`` saved with ``--format json``; the two
documents share ``schema_version`` and ``studies`` keys, so the kind is decided by the keys only
a compare document has (``before``, ``after``, ``runs`` at the top level).
"""

from __future__ import annotations

import json
from typing import Any

from tracescale.errors import InvalidTraceError, NoTracesError

#: The compare document version this tracescale writes and reads.
COMPARE_SCHEMA_VERSION = 1


def is_compare_document(doc: Any) -> bool:
    """True for a ``compare --format json`` document (a study document has no before/after)."""
    return isinstance(doc, dict) and "before" in doc and "after" in doc and "runs" in doc


def read_json(path: str) -> Any:
    """The parsed JSON of a saved document; unreadable input is one line naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError as exc:
        raise NoTracesError("no such file", path=path) from exc
    except IsADirectoryError as exc:
        raise InvalidTraceError(
            "is a folder, not a saved study or compare JSON (`analyze` reads trace folders)",
            path=path,
        ) from exc
    except RecursionError as exc:
        raise InvalidTraceError(
            "not a readable JSON document (nested too deeply)", path=path
        ) from exc
    except (OSError, ValueError) as exc:
        raise InvalidTraceError(f"not a readable JSON document ({exc})", path=path) from exc


def checked_compare_document(doc: dict[str, Any], path: str) -> dict[str, Any]:
    """``doc`` when it is a compare document of a supported version that meets its schema."""
    if doc.get("schema_version") != COMPARE_SCHEMA_VERSION:
        raise InvalidTraceError(
            f"compare schema_version {doc.get('schema_version')} is not supported "
            f"(this tracescale reads {COMPARE_SCHEMA_VERSION})",
            path=path,
        )
    import jsonschema

    from tracescale.report.schemas import validate

    try:
        validate(doc, "compare")
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise InvalidTraceError(
            f"damaged compare document at {where}: {exc.message[:200]}", path=path
        ) from exc
    return doc
