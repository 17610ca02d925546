"""Reading the YAML files `dra-gpu simulate -f` and `explain -f` are given.

Users hand the simulator what they would `kubectl apply` and what `kubectl get
-o yaml` prints: multi-document YAML (or JSON), `kind: List` wrappers, empty
documents between `---` lines. This module is the only place that touches
those files; it turns them into plain dicts, each remembering where it came
from (`file#document` and the line it starts on), so every later complaint
can name the document at fault.

`-f` takes what `kubectl apply -f` takes (`expand_paths`): files, `-` for
standard input, comma-separated lists, globs, and directories, whose
`.yaml`, `.yml` and `.json` files are read in name order (subdirectories too
with `-R`). YAML is read strictly: a key given twice in a mapping is an error
with both lines, as kubectl reports it, where PyYAML would let the last one
win (and two pods silently merge into one).
"""

from __future__ import annotations

import glob
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

from dra_driver.errors import ConfigError, yaml_problem
from dra_driver.kube import yaml_io

STDIN = "-"
MANIFEST_SUFFIXES: Final = (".yaml", ".yml", ".json")  # what kubectl reads from a directory
_GLOB_CHARACTERS: Final = frozenset("*?[")


@dataclass(frozen=True)
class SourcedObject:
    """One API object and where it was read (`file#index`, `file#index.items[j]`), with the
    file and the line its document starts on (0 when unknown)."""

    obj: Mapping[str, Any]
    source: str
    file: str = ""
    line: int = 0

    @property
    def location(self) -> str:
        """`file:line` when known, else the source."""
        return f"{self.file}:{self.line}" if self.file and self.line else self.source


def expand_paths(specs: Sequence[str | Path], *, recursive: bool = False) -> list[str]:
    """The files `-f` names, in order (see the module docstring); `-` stays `-`.

    Raises ConfigError for a path that does not exist, a glob that matches
    nothing and a directory without manifests, as kubectl does.
    """
    files: list[str] = []
    for spec in specs:
        for raw in str(spec).split(","):
            part = raw.strip()
            if not part:
                continue
            if part == STDIN:
                files.append(STDIN)
            elif _GLOB_CHARACTERS & set(part):
                matches = sorted(glob.glob(part, recursive=recursive))
                if not matches:
                    raise ConfigError(f"{part}: no files match the pattern")
                for match in matches:
                    files.extend(_files_of(Path(match), recursive=recursive, named=False))
            else:
                files.extend(_files_of(Path(part), recursive=recursive, named=True))
    return files


def _files_of(path: Path, *, recursive: bool, named: bool) -> list[str]:
    if path.is_dir():
        pattern = "**/*" if recursive else "*"
        found = sorted(
            str(p) for p in path.glob(pattern) if p.is_file() and p.suffix in MANIFEST_SUFFIXES
        )
        if not found and named:
            hint = "" if recursive else " (-R reads its subdirectories too)"
            raise ConfigError(
                f"{path}: the directory has no {', '.join(MANIFEST_SUFFIXES)} files{hint}"
            )
        return found
    if not path.exists() and named:
        raise ConfigError(f'the path "{path}" does not exist')
    return [str(path)]


def read_documents(
    paths: Sequence[str | Path], *, stdin: TextIO | None = None, recursive: bool = False
) -> list[SourcedObject]:
    """Every object of every file `-f` names (`expand_paths`), in order; `-` reads stdin.

    `kind: List` (and `*List` kinds such as `PodList`) are unwrapped. Empty
    documents are skipped. Raises ConfigError naming the file and document
    index for unreadable files, bad YAML and documents that are not objects,
    and the file and lines of keys given twice.
    """
    objects: list[SourcedObject] = []
    for path in expand_paths(paths, recursive=recursive):
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
    loader = yaml_io.load_all_strict(text)
    while True:
        try:
            document, line = next(loader)
        except StopIteration:
            return
        except yaml_io.DuplicateKeysError as exc:
            raise ConfigError(f"{name}: {exc}") from exc
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
        yield from _unwrap(document, source, name, line)


def _unwrap(
    document: dict[str, Any], source: str, file: str = "", line: int = 0
) -> Iterator[SourcedObject]:
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
            yield from _unwrap(typed, where, file, line)
        return
    yield SourcedObject(document, source, file, line)
