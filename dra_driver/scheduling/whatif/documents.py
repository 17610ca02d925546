"""Reading the YAML files `dra-gpu simulate -f` and `explain -f` are given.

Users hand the simulator what they would `kubectl apply` and what `kubectl get
-o yaml` prints: multi-document YAML, `kind: List` wrappers, empty documents
between `---` lines. This module is the only place that touches those files;
it turns them into plain dicts, each remembering where it came from
(`file#document`), so every later complaint can name the document at fault.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dra_driver.errors import ConfigError, yaml_problem
from dra_driver.kube import yaml_io

STDIN = "-"


@dataclass(frozen=True)
class SourcedObject:
    """One API object and where it was read (`file#index`, `file#index.items[j]`)."""

    obj: Mapping[str, Any]
    source: str


def read_documents(
    paths: Sequence[str | Path], *, stdin: TextIO | None = None
) -> list[SourcedObject]:
    """Every object of every file, in order; `-` reads standard input.

    `kind: List` (and `*List` kinds such as `PodList`) are unwrapped. Empty
    documents are skipped. Raises ConfigError naming the file and document
    index for unreadable files, bad YAML and documents that are not objects.
    """
    objects: list[SourcedObject] = []
    for path in paths:
        name = str(path)
        if name == STDIN:
            text = (stdin or sys.stdin).read()
            name = "<stdin>"
        else:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"{name}: cannot read: {exc.strerror or exc}") from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{name}: not UTF-8 text: {exc}") from exc
        objects.extend(parse_documents(text, name))
    return objects


def parse_documents(text: str, name: str) -> Iterator[SourcedObject]:
    """The objects of one YAML text (see `read_documents`)."""
    index = 0
    loader = yaml_io.load_all(text)
    while True:
        try:
            document = next(loader)
        except StopIteration:
            return
        except yaml_io.YAMLError as exc:
            raise ConfigError(
                f"{name}: document {index}: not valid YAML: {yaml_problem(exc)}"
            ) from exc
        source = f"{name}#{index}"
        index += 1
        if document is None:
            continue
        if not isinstance(document, dict):
            raise ConfigError(
                f"{source}: expected a Kubernetes object (a mapping), got {type(document).__name__}"
            )
        yield from _unwrap(document, source)


def _unwrap(document: dict[str, Any], source: str) -> Iterator[SourcedObject]:
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ConfigError(f"{source}: the object has no kind")
    if kind == "List" or (kind.endswith("List") and "items" in document):
        items = document.get("items") or []
        if not isinstance(items, list):
            raise ConfigError(f"{source}: {kind}.items must be a list")
        item_kind = kind[: -len("List")] if kind != "List" else ""
        for position, item in enumerate(items):
            where = f"{source}.items[{position}]"
            if not isinstance(item, dict):
                raise ConfigError(f"{where}: expected an object, got {type(item).__name__}")
            # A typed list (`PodList`) says what its items are when they omit kind.
            typed = {**item, "kind": item_kind} if item_kind and not item.get("kind") else item
            yield from _unwrap(typed, where)
        return
    yield SourcedObject(document, source)
