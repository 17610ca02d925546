"""The YAML helper writes what PyYAML's safe representer would (on libyaml), and reads it back."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
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


@given(st.lists(_VALUES, min_size=1, max_size=3))
def test_strict_loading_gives_what_pyyaml_gives(documents: list[Any]) -> None:
    text = yaml.dump_all(documents, Dumper=yaml_io.SafeDumper)

    loaded = [document for document, _line in yaml_io.load_all_strict(text)]

    assert loaded == list(yaml.load_all(text, Loader=yaml_io.SafeLoader))


@pytest.mark.parametrize(
    "text",
    [
        "a: 010\nb: 0x1F\nc: 1_000\nd: +5\ne: -0\nf: 190:20:30\ng: 1.5e3\nh: .inf\n",
        "a: yes\nb: Off\nc: ~\nd: null\ne: ''\nf: !!str 12\ng: !!int '12'\nh: !!float 1\n",
        "when: 2026-11-28T12:00:00Z\nday: 2026-11-28\nblob: !!binary aGk=\n",
        "base: &base {driver: gpu.nvidia.com, count: 1}\nmerged: {<<: *base, count: 2}\n",
        "list: &l [1, 2]\nagain: *l\nset: !!set {a, b}\npairs: !!omap [{a: 1}, {b: 2}]\n",
        "1: one\n2.5: two\nnull: three\ntrue: four\n",
        "- [a, b]\n- {x: {y: [{z: 1}]}}\n",
    ],
)
def test_strict_loading_of_other_tags_aliases_and_merge_keys(text: str) -> None:
    (document, line), *_ = yaml_io.load_all_strict(text)

    assert line == 1
    assert document == yaml.load(text, Loader=yaml_io.SafeLoader)


def test_an_alias_is_the_same_value_as_its_anchor() -> None:
    (document, _line), *_ = yaml_io.load_all_strict("a: &x {k: [1]}\nb: *x\n")

    assert document["a"] is document["b"]


def test_duplicate_keys_are_found_in_merged_and_plain_mappings() -> None:
    text = "a: 1\nb: {c: 1, c: 2}\nm: {<<: {x: 1}, y: 1, y: 2}\na: 3\n"

    with pytest.raises(yaml_io.DuplicateKeysError) as info:
        list(yaml_io.load_all_strict(text))

    assert info.value.duplicates == [(2, "c", 2), (3, "y", 3), (4, "a", 1)]


def test_a_list_as_a_key_is_refused_as_pyyaml_refuses_it() -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="unhashable key"):
        list(yaml_io.load_all_strict("{? [x, y] : z}\n"))


_NAMES = st.text(alphabet="abcz019_./-", min_size=1, max_size=10)
_API_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    _NAMES,
    st.sampled_from(["", "...x", "a: b", "x #y", "0/3 nodes: no fit", "é", "1.5", "on", "=", "~"]),
)
_API_VALUES = st.recursive(
    _API_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(_NAMES, st.integers(), st.booleans()), children, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=300)
@given(
    st.lists(_API_VALUES, min_size=1, max_size=3),
    st.booleans(),
    st.sampled_from([None, 40, 1000]),
)
def test_the_text_writer_writes_what_pyyaml_writes(
    documents: list[Any], sort_keys: bool, width: int | None
) -> None:
    """Names and numbers as API objects have them, nested: the shapes `_BlockWriter` writes
    itself instead of leaving them to PyYAML."""
    options: dict[str, Any] = {"sort_keys": sort_keys}
    if width:
        options["width"] = width
    expected = yaml.dump_all(
        documents, Dumper=yaml_io.SafeDumper, default_flow_style=False, **options
    )

    assert yaml_io.dump_all(documents, **options) == expected


def test_placements_are_written_by_the_text_writer_as_pyyaml_would() -> None:
    records = [
        {
            "pod": f"bench/infer-{index}",
            "placed": index != 1,
            "node": None if index == 1 else "a100x10-0",
            "reason": "0/500 nodes: no device fits" if index == 1 else "",
            "claims": [{"claim": "bench/x", "results": [{"device": "gpu-0"}], "config": []}],
        }
        for index in range(3)
    ]
    expected = yaml.dump(records, Dumper=yaml_io.SafeDumper, sort_keys=False, width=1000)

    assert (
        yaml_io._BlockWriter.write(
            [records], {"default_flow_style": False, "width": 1000, "sort_keys": False}
        )
        == expected
    )


def test_keys_read_alike_but_written_differently_are_no_duplicates() -> None:
    """As before: `1` and `01` (octal) are both 1, the later one wins, no refusal."""
    (document, _line), *_ = yaml_io.load_all_strict("a: {1: x, 01: y}\n")

    assert document == {"a": {1: "y"}}


def test_a_string_tag_on_a_mapping_is_refused_as_pyyaml_refuses_it() -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="expected a scalar node"):
        list(yaml_io.load_all_strict("a: !!str {b: c}\n"))
