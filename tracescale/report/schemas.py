"""The shipped JSON Schemas (draft 2020-12) of the analyze and compare documents."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def load_schema(kind: str = "study") -> dict[str, Any]:
    """The schema for ``kind`` 'study' (analyze document) or 'compare'."""
    name = {"study": "schema.json", "compare": "compare_schema.json"}[kind]
    text = resources.files("tracescale.report").joinpath(name).read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def validate(doc: dict[str, Any], kind: str = "study") -> None:
    """Raise ``jsonschema.ValidationError`` when ``doc`` breaks the contract (needs jsonschema).

    A compare document's ``before`` and ``after`` are checked against the study schema too.
    """
    import jsonschema

    jsonschema.Draft202012Validator(load_schema(kind)).validate(doc)
    if kind == "compare":
        for side in ("before", "after"):
            validate(doc[side], "study")
