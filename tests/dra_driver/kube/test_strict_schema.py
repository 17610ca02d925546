"""Strict decoding: the fast validator (jsonschema-rs) and the one that words the errors
(jsonschema) give the same verdict on every object, so no refusal is lost or invented."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.kube import strict_schema, yaml_io

EXAMPLES = Path(__file__).parents[3] / "examples"
RELEASES = ("1.32", "1.35", "1.37")


def _example_objects() -> list[dict[str, Any]]:
    found = []
    for path in sorted(EXAMPLES.glob("**/*.yaml")):
        for document in yaml_io.load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind"):
                found.append(document)
    return found


OBJECTS = _example_objects()
_ODD_VALUES: st.SearchStrategy[Any] = st.sampled_from(
    ["x", "", 0, -1, 2**40, 1.5, 2.0, True, None, [], [1], {}, {"bogus": 1}, {"cel": {}}]
)


def _verdicts(obj: dict[str, Any], release: str) -> tuple[bool, bool] | None:
    schema_dir, name = strict_schema._schema_dir(release), strict_schema._schema_file(obj)
    fast = strict_schema._fast_validator(schema_dir, name)
    slow = strict_schema._validator(schema_dir, name)
    if fast is None or slow is None:
        return None
    return fast.is_valid(obj), not any(slow.iter_errors(obj))


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into `value` (keys and indexes), the root excluded."""
    found = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else []
    )
    for key, child in items:
        found.append((*path, key))
        found.extend(_places(child, (*path, key)))
    return found


def test_the_examples_are_valid_for_both() -> None:
    assert len(OBJECTS) > 30
    for obj in OBJECTS:
        assert _verdicts(obj, "1.35") in (None, (True, True)), obj


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_both_validators_agree_on_damaged_objects(data: st.DataObject) -> None:
    obj = copy.deepcopy(data.draw(st.sampled_from(OBJECTS)))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_places(obj)))
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            parent[data.draw(st.sampled_from(["cout", "nmae", "x-extra"]))] = 1
        else:
            parent[path[-1]] = copy.deepcopy(data.draw(_ODD_VALUES))  # not shared by examples
    release = data.draw(st.sampled_from(RELEASES))

    verdicts = _verdicts(obj, release)

    assert verdicts is None or verdicts[0] == verdicts[1], (release, obj)


@pytest.mark.parametrize(
    "value",
    [datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC), datetime.date(2026, 11, 28)],
)
def test_a_yaml_timestamp_is_refused_with_the_field(value: Any) -> None:
    """The Rust validator takes only JSON values; a timestamp still gets its refusal."""
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"when": value}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }

    errors = strict_schema.strict_errors(obj, "1.35")

    assert [str(error) for error in errors or []] == [
        f'metadata.labels.when: Invalid value: "{value}": must be a string'
    ]


def test_a_valid_object_has_no_errors_and_an_unknown_kind_no_schema() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    assert strict_schema.strict_errors(pod, "1.35") == []
    assert (
        strict_schema.strict_errors({"apiVersion": "example.com/v1", "kind": "Gadget"}, "1.35")
        is None
    )
