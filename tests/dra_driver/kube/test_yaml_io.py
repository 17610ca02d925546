"""The YAML helper writes what PyYAML's safe representer would (on libyaml), and reads it back."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.kube import yaml_io

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=12),
    st.sampled_from(["true", "no", "null", "~", "1.5", "0x1F", "2026-11-25", "a: b", "- x", ""]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.lists(_VALUES, min_size=1, max_size=3), st.booleans())
def test_dump_matches_pyyaml_and_round_trips(documents: list[Any], sort_keys: bool) -> None:
    expected = yaml.dump_all(
        documents, Dumper=yaml_io.SafeDumper, sort_keys=sort_keys, default_flow_style=False
    )
    text = yaml_io.dump_all(documents, sort_keys=sort_keys)
    assert text == expected
    assert list(yaml_io.load_all(text)) == documents


def test_shared_values_are_written_out_not_aliased() -> None:
    shared = {"driver": "gpu.nvidia.com"}
    text = yaml_io.dump({"a": shared, "b": shared})
    assert "&" not in text
    assert "*" not in text
    assert yaml_io.load(text) == {"a": shared, "b": shared}


def test_other_types_fall_back_to_pyyaml() -> None:
    assert yaml_io.dump({"ratio": 1.5, "keys": {3: "x"}}) == "keys:\n  3: x\nratio: 1.5\n"


def test_errors_carry_the_position() -> None:
    with pytest.raises(yaml_io.YAMLError) as info:
        list(yaml_io.load_all("a: 1\n---\nb: [1, 2\n"))
    mark = getattr(info.value, "problem_mark", None)
    assert mark is not None
    assert mark.line >= 2
