"""The records' codec: every field written, defaults for what older files lack, typed reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar

import pytest

from dra_driver.claims.record_codec import REQUIRED, Record, json_key
from dra_driver.errors import CheckpointError


class Color(StrEnum):
    RED = "Red"
    BLUE = "Blue"


@dataclass(frozen=True)
class Leaf(Record):
    WHERE: ClassVar[str] = "leaf"

    size: int = json_key("size")


@dataclass(frozen=True)
class Tree(Record):
    WHERE: ClassVar[str] = "tree"

    name: str = json_key("name")
    tags: tuple[str, ...] = json_key("tags", missing=())
    color: Color = json_key("color", default=Color.RED, missing=REQUIRED)
    leaves: tuple[Leaf, ...] = json_key("leaves", default=())
    top: Leaf | None = json_key("top", default=None)
    labels: Mapping[str, str] = json_key("labels", default_factory=lambda: MappingProxyType({}))
    old: bool = json_key("old", default=False)


def test_every_field_is_written_and_read_back() -> None:
    tree = Tree("oak", ("a",), Color.BLUE, (Leaf(2),), None, MappingProxyType({"b": "1", "a": "2"}))
    assert tree.to_dict() == {
        "name": "oak",
        "tags": ["a"],
        "color": "Blue",
        "leaves": [{"size": 2}],
        "top": None,
        "labels": {"a": "2", "b": "1"},
        "old": False,
    }
    assert Tree.from_dict(tree.to_dict()) == tree


def test_missing_keys_take_their_defaults_unknown_keys_are_ignored() -> None:
    tree = Tree.from_dict({"name": "elm", "color": "Red", "added-later": 1, "top": None})
    assert tree == Tree("elm", ())


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"color": "Red"}, "tree.name is missing"),
        ({"name": "x"}, "tree.color is missing"),
        ({"name": "x", "color": "Green"}, "tree.color is 'Green', expected one of Red, Blue"),
        ({"name": 3, "color": "Red"}, "tree.name must be str, got 3"),
        ({"name": "x", "color": "Red", "old": 1}, "tree.old must be bool, got 1"),
        ({"name": "x", "color": "Red", "tags": "a"}, "tree.tags must be a list of strings"),
        ({"name": "x", "color": "Red", "leaves": {}}, "tree.leaves must be a list"),
        ({"name": "x", "color": "Red", "leaves": [{"size": True}]}, r"tree.leaves\[0\].size must"),
        ({"name": "x", "color": "Red", "top": []}, "tree.top must be an object"),
        ({"name": "x", "color": "Red", "labels": {"a": 1}}, "tree.labels must be an object of"),
    ],
)
def test_bad_values_name_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        Tree.from_dict(obj)
