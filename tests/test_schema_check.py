"""The study cache's schema check (``schemas.check``) gives jsonschema's verdict on every
document, without importing jsonschema; a schema keyword it does not implement hands the
document to jsonschema rather than letting it through."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracescale.report import schemas

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong"
#: Values that sit on the edges of JSON Schema's types: integers written as floats, booleans
#: beside 0 and 1, NaN against minimum, numbers around the 0..100 percent bounds.
EDGES = st.one_of(
    st.sampled_from([0, 1, -1, 1.0, 2.0, -0.0, 0.5, 100, 100.5, 101, True, False, None]),
    st.sampled_from([float("nan"), float("inf"), -1e-300, "", "1", [], {}, [1.0, 2], [1]]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=4),
    st.lists(st.one_of(st.integers(), st.floats(), st.none()), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@pytest.fixture(scope="module")
def study_doc() -> dict[str, Any]:
    from tracescale import api

    doc: dict[str, Any] = json.loads(api.analyze(str(RUN), jobs=1, no_cache=True).to_json())
    return doc  # as the cache reads it: JSON arrays are lists, never tuples


@pytest.fixture(scope="module")
def study_text(study_doc: dict[str, Any]) -> tuple[str, list[tuple[Any, ...]]]:
    """study_doc as JSON text (parsing it copies the document faster than deepcopy) and the
    paths into it that the property test edits."""
    return json.dumps(study_doc), [p for p in _paths(study_doc) if p]


def _jsonschema_accepts(doc: Any, kind: str = "study") -> bool:
    import jsonschema  # here, not at collection: its import costs every worker seconds

    try:
        schemas.validate(doc, kind)
    except jsonschema.ValidationError:
        return False
    return True


def _check_accepts(doc: Any, kind: str = "study") -> bool:
    try:
        schemas.check(doc, kind)
    except schemas.ShapeError:
        return False
    return True


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _paths(v, (*prefix, i))


def test_shipped_schemas_use_only_implemented_keywords() -> None:
    """Else check() silently falls back to jsonschema and a cache hit pays its import again."""
    assert schemas._compiled("study") is not None
    assert schemas._compiled("compare") is not None


def test_a_real_document_passes_both(study_doc: dict[str, Any]) -> None:
    assert _jsonschema_accepts(study_doc) and _check_accepts(study_doc)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_same_verdict_as_jsonschema(
    study_text: tuple[str, list[tuple[Any, ...]]], data: st.DataObject
) -> None:
    text, paths = study_text
    doc = json.loads(text)  # a fresh copy of study_doc (JSON through and through)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(paths))
        parent: Any = doc
        try:
            for key in where[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(where[-1], None)
            elif data.draw(st.booleans()) and isinstance(parent, dict):
                parent[data.draw(st.text(max_size=3))] = data.draw(EDGES)  # an added key
            else:
                parent[where[-1]] = data.draw(EDGES)
        except (KeyError, IndexError, TypeError):
            continue
    assert _check_accepts(doc) == _jsonschema_accepts(doc)


@pytest.mark.parametrize(
    "value",
    [1, 1.0, True, 2, "1", None, [1], 0.5],
)
def test_const_and_integer_edges(value: Any, study_doc: dict[str, Any]) -> None:
    """schema_version is const 1: 1.0 is 1 for JSON Schema, True is not."""
    doc = {**study_doc, "schema_version": value}
    assert _check_accepts(doc) == _jsonschema_accepts(doc)


def test_an_unimplemented_keyword_falls_back_to_jsonschema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}
    monkeypatch.setattr(schemas, "load_schema", lambda kind="study": schema)
    schemas._compiled.cache_clear()
    try:
        assert schemas._compiled("study") is None
        assert _check_accepts({"a": "xy"})
        assert not _check_accepts({"a": "yx"}), "the pattern must still be enforced"
    finally:
        schemas._compiled.cache_clear()


def test_check_imports_no_jsonschema(study_doc: dict[str, Any], tmp_path: Path) -> None:
    doc = tmp_path / "study.json"
    doc.write_text(json.dumps(study_doc))
    code = (
        "import json, sys\n"
        "from tracescale.report.schemas import check\n"
        f"check(json.loads(open({str(doc)!r}).read()))\n"
        "print('jsonschema' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
