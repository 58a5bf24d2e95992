"""The shipped JSON Schemas (draft 2020-12) of the analyze and compare documents.

Two ways to hold a document to them: :func:`validate` runs jsonschema (full error messages,
for a saved study given to ``report``), and :func:`check` gives the same verdict for the few
keywords these schemas use without importing jsonschema, for the study cache, whose every hit
is checked: importing jsonschema and running its validator cost a cached ``analyze`` of a
64-rank study more than the rest of it together.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from importlib import resources
from typing import Any

#: Keywords :func:`check` implements, plus annotations that constrain nothing.
_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "$ref", "enum"}
    | {"const", "oneOf", "anyOf", "minimum", "maximum", "minItems", "maxItems"}
    | {"description", "title", "$schema", "$id", "$defs"}
)
_TYPES = frozenset(["object", "array", "string", "number", "integer", "boolean", "null"])
_REF = "#/$defs/"


class ShapeError(ValueError):
    """A document that breaks its schema (:func:`check`'s verdict)."""


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


def check(doc: Any, kind: str = "study") -> None:
    """Raise :class:`ShapeError` exactly when :func:`validate` would reject ``doc``, a document
    as ``json.loads`` returns it (plain dict, list, str, int, float, bool, None).

    Only the keywords in ``_KEYWORDS`` are implemented, with jsonschema's meaning (an integer
    may be written 2.0, a boolean is neither a number nor equal to 0 or 1, NaN passes minimum
    and maximum); a schema that uses any other keyword is handed to jsonschema instead, so an
    edited schema stays enforced. The error names no field: its caller only needs the verdict.
    """
    test = _compiled(kind)
    if test is None:
        import jsonschema

        try:
            validate(doc, kind)
        except jsonschema.ValidationError as exc:
            raise ShapeError(f"breaks the {kind} schema: {exc.message[:200]}") from exc
        return
    if not test(doc):
        raise ShapeError(f"breaks the {kind} schema")
    if kind == "compare":
        for side in ("before", "after"):
            check(doc[side], "study")


Test = Callable[[Any], bool]
_NUMBERS = frozenset([int, float])
_TYPE_TESTS: dict[str, Test] = {
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "string": lambda v: type(v) is str,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "number": lambda v: type(v) in _NUMBERS,
    "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer()),
}


def _always(value: Any) -> bool:
    return True


def _never(value: Any) -> bool:
    return False


@functools.cache
def _compiled(kind: str) -> Test | None:
    """``kind``'s schema as one function of the document, built once per process; None when
    the schema uses a keyword, type or reference this module does not implement."""
    root = load_schema(kind)
    refs: dict[str, Test] = {}
    try:
        return _compile(root, root, refs)
    except _Unsupported:
        return None


class _Unsupported(Exception):
    """A schema construct :func:`check` does not implement (jsonschema takes over)."""


def _compile(schema: Any, root: dict[str, Any], refs: dict[str, Test]) -> Test:
    """A function telling whether a value satisfies ``schema`` (every keyword, all at once)."""
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict) or not set(schema) <= _KEYWORDS:
        raise _Unsupported(schema)
    tests: list[Test] = []
    if "$ref" in schema:
        tests.append(_ref(schema["$ref"], root, refs))
    if "type" in schema:
        tests.append(_type_test(schema["type"]))
    if "const" in schema:
        const = schema["const"]
        tests.append(lambda v: _equal(v, const))
    if "enum" in schema:
        enum = list(schema["enum"])
        tests.append(lambda v: any(_equal(v, e) for e in enum))
    for key, need_one in (("oneOf", True), ("anyOf", False)):
        if key in schema:
            tests.append(_alternatives([_compile(s, root, refs) for s in schema[key]], need_one))
    tests += _number_tests(schema)
    if {"items", "minItems", "maxItems"} & set(schema):
        tests.append(_array_test(schema, root, refs))
    if {"properties", "required", "additionalProperties"} & set(schema):
        tests.append(_object_test(schema, root, refs))
    if not tests:
        return _always
    if len(tests) == 1:
        return tests[0]
    return lambda v: all(t(v) for t in tests)


def _ref(ref: Any, root: dict[str, Any], refs: dict[str, Test]) -> Test:
    if not isinstance(ref, str) or not ref.startswith(_REF):
        raise _Unsupported(ref)
    name = ref[len(_REF) :]
    if name not in refs:
        if name not in root.get("$defs", {}):
            raise _Unsupported(ref)
        refs[name] = _always  # a placeholder while a recursive definition compiles
        refs[name] = _compile(root["$defs"][name], root, refs)
    return lambda v: refs[name](v)


def _type_test(types: Any) -> Test:
    names = [types] if isinstance(types, str) else list(types)
    if not names or not all(isinstance(n, str) and n in _TYPES for n in names):
        raise _Unsupported(types)
    if len(names) == 1:
        return _TYPE_TESTS[names[0]]
    tests = [_TYPE_TESTS[n] for n in names]
    return lambda v: any(t(v) for t in tests)


def _alternatives(tests: list[Test], need_one: bool) -> Test:
    if need_one:
        return lambda v: sum(t(v) for t in tests) == 1
    return lambda v: any(t(v) for t in tests)


def _number_tests(schema: dict[str, Any]) -> list[Test]:
    """minimum and maximum, written ``not v < m`` so NaN passes, as in jsonschema."""
    out: list[Test] = []
    if "minimum" in schema:
        low = schema["minimum"]
        out.append(lambda v: type(v) not in _NUMBERS or not v < low)
    if "maximum" in schema:
        high = schema["maximum"]
        out.append(lambda v: type(v) not in _NUMBERS or not v > high)
    return out


def _array_test(schema: dict[str, Any], root: dict[str, Any], refs: dict[str, Test]) -> Test:
    item = _compile(schema.get("items", True), root, refs)
    low, high = schema.get("minItems", 0), schema.get("maxItems")

    def test(v: Any) -> bool:
        if type(v) is not list:
            return True
        if len(v) < low or (high is not None and len(v) > high):
            return False
        return item is _always or all(map(item, v))

    return test


def _object_test(schema: dict[str, Any], root: dict[str, Any], refs: dict[str, Test]) -> Test:
    props = {k: _compile(s, root, refs) for k, s in schema.get("properties", {}).items()}
    extra = _compile(schema.get("additionalProperties", True), root, refs)
    required = list(schema.get("required", ()))

    def test(v: Any) -> bool:
        if type(v) is not dict:
            return True
        if not all(name in v for name in required):
            return False
        return all(props.get(name, extra)(item) for name, item in v.items())

    return test


def _equal(a: Any, b: Any) -> bool:
    """JSON equality as jsonschema's enum and const use it (True is not 1; 1 is 1.0)."""
    if isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)
