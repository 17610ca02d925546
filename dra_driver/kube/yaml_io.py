"""YAML through libyaml's C parser and emitter: the one place that picks them.

PyYAML's pure-Python scanner and emitter took 70 % of a 5,000-pod
`dra-gpu simulate -o yaml` run, and the plugin reads a claim and writes a CDI
spec per Prepare. libyaml's C classes read and write the same documents five
to ten times faster. PyYAML's wheels ship libyaml; a PyYAML built without it
falls back to the Python classes, which give the same results.

Everything that reads or writes YAML in bulk goes through `load`, `load_all`,
`dump` and `dump_all` (safe loading and dumping only). Errors are PyYAML's
`YAMLError` (re-exported), whose marks `errors.yaml_problem` words.

`load_all_strict` reads what users hand to `kubectl apply`: a mapping key
given twice is an error (`DuplicateKeysError`, every duplicate with its line,
as kubectl's YAML decoder reports them) instead of the last one silently
winning, and each document comes with the line it starts on. libyaml parses;
PyYAML's constructor, which turns the parsed nodes into Python values, is
Python and was 60 % of reading 5,000 Pods, so `_StrictLoader` builds the
plain maps, lists, strings, integers, booleans and nulls of API objects
itself (and remembers how each repeated scalar resolves) and leaves every
other tag, merge keys and complex keys to PyYAML's constructor, which gives
the same values.

libyaml only emits; PyYAML's representer, which turns Python values into YAML
nodes, is Python and was then half of writing 5,000 placements. `_Dumper`
represents the JSON-shaped values the API uses (dict, list, str, int, bool,
None) directly and leaves every other type to PyYAML. It never writes
anchors and aliases, as kubectl never does: a value used twice is written
twice.

Even so, building a node per value and handing it to libyaml was a fifth of
a 5,000-pod `simulate -o yaml`. `_BlockWriter` writes block-style YAML of
JSON-shaped documents as text directly, in PyYAML's layout (two-space
indents, sequences in mappings not indented, `{}` and `[]` for empty
collections): names, numbers and other strings that PyYAML writes plain are
written as they are, and any other scalar as PyYAML writes it alone (cached;
quoting does not depend on where a short single-line scalar stands). A
document with anything else (another type, a multi-line or long string, a
key PyYAML would not write plain) is dumped by PyYAML; tests compare both
on generated documents.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

import yaml
from yaml import MappingNode, Node, ScalarNode, SequenceNode, YAMLError

try:
    from yaml import CSafeDumper as SafeDumper
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeDumper, SafeLoader  # type: ignore[assignment]

__all__ = [
    "DuplicateKeysError",
    "SafeDumper",
    "SafeLoader",
    "YAMLError",
    "dump",
    "dump_all",
    "load",
    "load_all",
    "load_all_strict",
]

Source = str | bytes | IO[str] | IO[bytes]

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"


class _Dumper(SafeDumper):
    """SafeDumper representing JSON-shaped values without PyYAML's generic dispatch.

    It also remembers how each scalar resolves (whether `"true"` needs quotes),
    which the emitter asks twice per scalar and API objects repeat a lot.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._resolved: dict[tuple[str, tuple[bool, bool]], str] = {}

    def resolve(self, kind: type[Node], value: Any, implicit: Any) -> Any:
        if kind is not ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        key = (value, implicit)
        tag = self._resolved.get(key)
        if tag is None:
            resolved = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
            tag = self._resolved[key] = resolved
        return tag

    def represent_data(self, data: Any) -> Node:
        kind = type(data)
        if kind is str:
            return ScalarNode(_STR, data)
        if kind is dict:
            items = list(data.items())
            if self.sort_keys:
                with contextlib.suppress(TypeError):  # mixed key types stay in order, as in PyYAML
                    items = sorted(items)  # list.sort leaves a half-sorted list
            block = self.default_flow_style
            pairs = [(self.represent_data(k), self.represent_data(v)) for k, v in items]
            return MappingNode(_MAP, pairs, flow_style=block)
        if kind is list:
            values = [self.represent_data(item) for item in data]
            return SequenceNode(_SEQ, values, flow_style=self.default_flow_style)
        if kind is bool:
            return ScalarNode(_BOOL, "true" if data else "false")
        if kind is int:
            return ScalarNode(_INT, str(data))
        if data is None:
            return ScalarNode(_NULL, "null")
        node: Node = super().represent_data(data)
        return node


class DuplicateKeysError(YAMLError):
    """Mapping keys given twice in one document: `(line, key, first line)` each, 1-based."""

    def __init__(self, duplicates: list[tuple[int, str, int]]) -> None:
        self.duplicates = duplicates
        lines = "".join(
            f"\n  line {line}: mapping key {key!r} already defined at line {first}".replace(
                repr(key), '"' + key + '"'
            )
            for line, key, first in duplicates
        )
        super().__init__(f"yaml: unmarshal errors:{lines}")


class _StrictLoader(SafeLoader):
    """SafeLoader that records mapping keys given twice (merge keys `<<` excepted) and
    builds the JSON-shaped part of a document without PyYAML's generic dispatch."""

    def __init__(self, stream: Source) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[int, str, int]] = []
        self._resolved: dict[tuple[str, tuple[bool, bool]], str] = {}
        self._built: dict[int, Any] = {}

    def resolve(self, kind: type[Node], value: Any, implicit: Any) -> Any:
        if kind is not ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        key = (value, implicit)
        tag = self._resolved.get(key)
        if tag is None:
            resolved = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
            tag = self._resolved[key] = resolved
        return tag

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> Any:
        if isinstance(node, MappingNode):
            self._note_duplicates(node)
        return super().construct_mapping(node, deep=deep)

    def _note_duplicates(self, node: MappingNode) -> None:
        first: dict[tuple[str, str], int] = {}
        for key_node, _value in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = (key_node.tag, key_node.value)
            line = key_node.start_mark.line + 1
            if key in first:
                self.duplicates.append((line, key_node.value, first[key]))
            else:
                first[key] = line

    def build_document(self, node: Node) -> Any:
        """`construct_document`'s value, the JSON-shaped nodes built here."""
        try:
            return self._build(node)
        finally:
            self._built.clear()

    def _build(self, node: Node) -> Any:
        kind = type(node)
        tag = node.tag
        if kind is ScalarNode:
            text = node.value
            if tag == _STR:
                return text
            if tag == _INT and text.isdigit() and text.isascii():
                if text[0] != "0" or text == "0":  # 0-prefixed is octal in YAML 1.1
                    return int(text)
            elif tag == _BOOL:
                return self.bool_values[text.lower()]
            elif tag == _NULL:
                return None
            return self._constructed(node)
        built = self._built.get(id(node), _NOT_BUILT)
        if built is not _NOT_BUILT:
            return built  # an alias: the same value, as PyYAML's constructor gives
        value: Any
        if isinstance(node, MappingNode) and tag == _MAP and self._plain_keys(node):
            value = self._built[id(node)] = {}
            build = self._build
            for key_node, value_node in node.value:
                key = key_node.value if key_node.tag == _STR else build(key_node)
                if key in value:
                    self._note_duplicate(node, key_node)
                value[key] = build(value_node)
            return value
        if isinstance(node, SequenceNode) and tag == _SEQ:
            value = self._built[id(node)] = []
            value.extend(map(self._build, node.value))
            return value
        return self._constructed(node)

    def _constructed(self, node: Node) -> Any:
        """Timestamps, floats, binary, sets, ordered maps, merge keys: PyYAML's way."""
        built = self._built.get(id(node), _NOT_BUILT)
        if built is _NOT_BUILT:
            built = self._built[id(node)] = self.construct_document(node)
        return built

    def _note_duplicate(self, node: MappingNode, repeated: Node) -> None:
        """`repeated` gives a key already in the mapping: a duplicate if an earlier key has
        its tag and text (`1` and `01` both read as 1, and are not)."""
        for key_node, _value in node.value:
            if key_node is repeated:
                return
            if key_node.tag == repeated.tag and key_node.value == repeated.value:
                line, first = repeated.start_mark.line + 1, key_node.start_mark.line + 1
                self.duplicates.append((line, repeated.value, first))
                return

    @staticmethod
    def _plain_keys(node: MappingNode) -> bool:
        """Whether every key is a scalar and none a merge key (`<<`)."""
        for key_node, _value in node.value:
            if type(key_node) is not ScalarNode or key_node.tag == _MERGE:
                return False
        return True


_NOT_BUILT: Any = object()


def load_all_strict(source: Source) -> Iterator[tuple[Any, int]]:
    """(document, the 1-based line it starts on) for each document of `source`.

    Raises `DuplicateKeysError` at a document with a key given twice, and
    PyYAML's `YAMLError` at one that does not parse.
    """
    loader = _StrictLoader(source)
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1 if node is not None else 0
            document = loader.build_document(node) if node is not None else None
            if loader.duplicates:
                raise DuplicateKeysError(sorted(loader.duplicates))
            yield document, line
    finally:
        loader.dispose()


def load(source: Source, loader: type[SafeLoader] = SafeLoader) -> Any:
    """The one document in `source` (None for an empty one)."""
    return yaml.load(source, Loader=loader)


def load_all(source: Source) -> Iterator[Any]:
    """The documents in `source`, one by one (a YAMLError surfaces at the bad one)."""
    return yaml.load_all(source, Loader=SafeLoader)


def dump(data: Any, **options: Any) -> str:
    """`data` as block-style YAML; `options` are PyYAML's (`sort_keys`, `width`, ...)."""
    return dump_all([data], **options)


def dump_all(documents: Iterable[Any], **options: Any) -> str:
    """Several documents separated by `---`, like `dump`."""
    options.setdefault("default_flow_style", False)
    options.setdefault("Dumper", _Dumper)
    documents = list(documents)
    fast = _BlockWriter.write(documents, options)
    if fast is not None:
        return fast
    text: str = yaml.dump_all(documents, **options)
    return text


class _NotPlain(Exception):
    """A document `_BlockWriter` leaves to PyYAML."""


# Strings PyYAML writes plain in block context when they resolve to str: no indicator
# first, no spaces, quotes, `:` or `#`.
_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*")
_RESOLVER = yaml.resolver.Resolver()


class _BlockWriter:
    """Block-style YAML text of JSON-shaped documents, as PyYAML writes it (see the
    module docstring)."""

    def __init__(
        self, *, sort_keys: bool, width: int, dumper: Any = None, allow_unicode: bool = False
    ) -> None:
        self._sort_keys = sort_keys
        self._width = width
        # Quoted scalars are written by the caller's Dumper (its quoting style), one at a time.
        self._dumper = dumper or _Dumper
        self._allow_unicode = allow_unicode
        self._out: list[str] = []
        self._scalars: dict[str, str] = {}  # this call's quoted scalars (a daemon dumps on)

    @classmethod
    def write(cls, documents: list[Any], options: dict[str, Any]) -> str | None:
        """The documents' text, or None where PyYAML must write them."""
        extra = set(options) - {
            "default_flow_style",
            "sort_keys",
            "width",
            "Dumper",
            "allow_unicode",
        }
        width = options.get("width") or 80
        if extra or options["default_flow_style"] is not False or not isinstance(width, int):
            return None
        writer = cls(
            sort_keys=bool(options.get("sort_keys", True)),
            width=max(width, 20),
            dumper=options.get("Dumper", _Dumper),
            allow_unicode=bool(options.get("allow_unicode", False)),
        )
        try:
            for index, document in enumerate(documents):
                writer._document(document, first=index == 0)
        except _NotPlain:
            return None
        return "".join(writer._out)

    def _document(self, document: Any, *, first: bool) -> None:
        kind = type(document)
        if kind not in (dict, list) or (not document and not first):
            raise _NotPlain
        if not first:
            self._out.append("---\n")
        if not document:
            self._out.append("{}\n" if kind is dict else "[]\n")
        elif kind is dict:
            self._mapping(document, 0, "")
        else:
            self._sequence(document, 0, "")

    def _mapping(self, mapping: dict[Any, Any], indent: int, lead: str) -> None:
        items = list(mapping.items())
        if self._sort_keys:
            with contextlib.suppress(TypeError):  # mixed key types stay in order, as in PyYAML
                items = sorted(items)  # list.sort would leave half of it sorted
        out = self._out
        pad = " " * indent
        for index, (key, value) in enumerate(items):
            start = (lead if index == 0 else pad) + self._key(key) + ":"
            kind = type(value)
            if kind is dict and value:
                out.append(start + "\n")
                self._mapping(value, indent + 2, " " * (indent + 2))
            elif kind is list and value:
                out.append(start + "\n")
                self._sequence(value, indent, pad)  # not indented, as PyYAML writes it
            else:
                out.append(f"{start} {self._scalar(value, len(start) + 1)}\n")

    def _sequence(self, sequence: list[Any], indent: int, lead: str) -> None:
        out = self._out
        pad = " " * indent
        for index, item in enumerate(sequence):
            start = (lead if index == 0 else pad) + "- "
            kind = type(item)
            if kind is dict and item:
                self._mapping(item, indent + 2, start)
            elif kind is list and item:
                self._sequence(item, indent + 2, start)
            else:
                out.append(start + self._scalar(item, len(start)) + "\n")

    @staticmethod
    def _key(key: Any) -> str:
        kind = type(key)
        if kind is str:
            if len(key) < 128 and _PLAIN.fullmatch(key) and _plain_str(key):
                return str(key)
            raise _NotPlain
        if kind is bool or kind is int or key is None:
            return _BlockWriter._simple(key)
        raise _NotPlain

    def _scalar(self, value: Any, column: int) -> str:
        kind = type(value)
        if kind is not str:
            if kind is dict:
                return "{}"
            if kind is list:
                return "[]"
            if kind is bool or kind is int or value is None:
                return self._simple(value)
            raise _NotPlain
        if _PLAIN.fullmatch(value) and _plain_str(value):
            return str(value)
        if "\n" in value or column + len(value) * 2 + 8 > self._width:
            raise _NotPlain  # lines PyYAML may break where they stand
        text = self._scalars.get(value)
        if text is None:
            alone: str = yaml.dump(
                value, Dumper=self._dumper, width=self._width, allow_unicode=self._allow_unicode
            )
            text = alone.removesuffix("\n...\n").removesuffix("\n")
            if "\n" in text:
                raise _NotPlain
            self._scalars[value] = text
        return text

    @staticmethod
    def _simple(value: Any) -> str:
        if value is None:
            return "null"
        if value is True or value is False:
            return "true" if value else "false"
        return str(value)


def _plain_str(text: str) -> bool:
    """Whether `text`, written plain, reads back as a string (not `true`, `1e3`, `~`, nor
    the document end marker `...`)."""
    tag = _RESOLVER.resolve(ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    return not text.startswith("...") and bool(tag == _STR)
