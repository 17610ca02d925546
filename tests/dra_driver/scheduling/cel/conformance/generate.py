"""Generates the cel-spec conformance data this directory's test runs.

Reads google/cel-spec's simple tests (`tests/simple/testdata/<name>.textproto`)
for the libraries Kubernetes enables in its CEL environment, and writes one
JSON file per textproto under `data/`, plus `data/SOURCE.json` naming the
cel-spec commit. CI has no network, so the generated files are committed;
rerun this script to refresh them:

    python tests/dra_driver/scheduling/cel/conformance/generate.py /path/to/cel-spec.git [COMMIT]

The first argument is a git directory of google/cel-spec (a clone or a bare
mirror); COMMIT defaults to its HEAD. Nothing is copied by hand: every case
is the upstream test as written, with its expected value re-encoded as
tagged JSON (see `encode_value`).

The textproto reader below is deliberately small: it understands the subset
of the protobuf text format the cel-spec files use (nested messages, repeated
fields, strings with C escapes, numbers, enums and `[type.url]` Any fields).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

# The cel-spec files whose libraries Kubernetes enables for device selectors
# (k8s.io/apiserver/pkg/cel/environment/base.go at 1.34-1.37).
FILES = (
    "basic",
    "comparisons",
    "conversions",
    "fp_math",
    "integer_math",
    "lists",
    "logic",
    "macros",
    "macros2",
    "parse",
    "plumbing",
    "string",
    "string_ext",
    "bindings_ext",
    "optionals",
    "timestamps",
    # Kubernetes' IP and CIDR libraries, upstreamed to cel-go as its network extension.
    "network_ext",
)

DATA = Path(__file__).parent / "data"

Message = list[tuple[str, Any]]


# -- protobuf text format -------------------------------------------------------------


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def skip(self) -> None:
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c in " \t\r\n,;":
                self.i += 1
            elif c == "#":
                nl = text.find("\n", self.i)
                self.i = len(text) if nl < 0 else nl + 1
            else:
                return

    def peek(self) -> str:
        self.skip()
        return self.text[self.i] if self.i < len(self.text) else ""

    def expect(self, c: str) -> None:
        if self.peek() != c:
            raise ValueError(f"expected {c!r} at {self.i}: {self.text[self.i : self.i + 40]!r}")
        self.i += 1

    def name(self) -> str:
        self.skip()
        if self.peek() == "[":
            end = self.text.index("]", self.i)
            name = self.text[self.i : end + 1]
            self.i = end + 1
            return name
        start = self.i
        while self.i < len(self.text) and _is_name_char(self.text[self.i]):
            self.i += 1
        if start == self.i:
            raise ValueError(f"expected a field name at {self.i}")
        return self.text[start : self.i]

    def message(self, close: str) -> Message:
        fields: Message = []
        while self.peek() not in (close, ""):
            name = self.name()
            if self.peek() == ":":
                self.i += 1
            c = self.peek()
            if c in "{<":
                self.i += 1
                fields.append((name, self.message("}" if c == "{" else ">")))
                self.expect("}" if c == "{" else ">")
            elif c == "[":
                self.i += 1
                while self.peek() != "]":
                    fields.append((name, self.scalar_or_message()))
                self.i += 1
            else:
                fields.append((name, self.scalar()))
        return fields

    def scalar_or_message(self) -> Any:
        c = self.peek()
        if c in "{<":
            self.i += 1
            value = self.message("}" if c == "{" else ">")
            self.expect("}" if c == "{" else ">")
            return value
        return self.scalar()

    def scalar(self) -> Any:
        c = self.peek()
        if c in "\"'":
            data = b""
            while self.peek() in ("'", '"'):
                data += self.string()
            return data
        start = self.i
        while self.i < len(self.text) and (
            _is_name_char(self.text[self.i]) or self.text[self.i] in "-+"
        ):
            self.i += 1
        token = self.text[start : self.i]
        if not token:
            raise ValueError(f"unexpected {self.text[self.i : self.i + 20]!r}")
        return _Token(token)

    def string(self) -> bytes:
        quote = self.text[self.i]
        self.i += 1
        out = bytearray()
        text = self.text
        while text[self.i] != quote:
            c = text[self.i]
            if c != "\\":
                out += c.encode("utf-8")
                self.i += 1
                continue
            e = text[self.i + 1]
            simple = {"n": 10, "t": 9, "r": 13, "a": 7, "b": 8, "f": 12, "v": 11}
            if e in simple:
                out.append(simple[e])
                self.i += 2
            elif e in "01234567":
                j = self.i + 1
                while j < self.i + 4 and text[j] in "01234567":
                    j += 1
                out.append(int(text[self.i + 1 : j], 8))
                self.i = j
            elif e in "xX":
                j = self.i + 2
                while j < self.i + 4 and text[j] in "0123456789abcdefABCDEF":
                    j += 1
                out.append(int(text[self.i + 2 : j], 16))
                self.i = j
            elif e == "u":
                out += chr(int(text[self.i + 2 : self.i + 6], 16)).encode("utf-8")
                self.i += 6
            elif e == "U":
                out += chr(int(text[self.i + 2 : self.i + 10], 16)).encode("utf-8")
                self.i += 10
            else:
                out += e.encode("utf-8")
                self.i += 2
        self.i += 1
        return bytes(out)


def _is_name_char(c: str) -> bool:
    return c.isalnum() or c in "_."


class _Token(str):
    """An unquoted scalar: a number, an enum name, true/false, inf/nan."""


def parse_textproto(text: str) -> Message:
    reader = _Reader(text)
    result = reader.message("")
    if reader.peek():
        raise ValueError(f"trailing input at {reader.i}")
    return result


def _get(msg: Message, name: str, default: Any = None) -> Any:
    for key, value in msg:
        if key == name:
            return value
    return default


def _all(msg: Message, name: str) -> list[Any]:
    return [value for key, value in msg if key == name]


# -- conversion to JSON ------------------------------------------------------------------


def _number(token: Any) -> int | float | str:
    text = str(token)
    lowered = text.lower()
    if lowered in ("inf", "infinity", "-inf", "-infinity", "nan", "-nan"):
        return lowered.replace("infinity", "inf").replace("-nan", "nan")
    if any(c in lowered for c in ".e") and not lowered.startswith("0x"):
        return float(text)
    return int(text, 0)


def encode_value(value: Message) -> Any:
    """A cel.expr.Value as tagged JSON: {"int": 1}, {"list": [...]}, {"map": [[k, v], ...]}..."""
    (kind, raw), *_ = value or [("", None)]
    if kind == "null_value":
        return {"null": None}
    if kind == "bool_value":
        return {"bool": str(raw) == "true"}
    if kind == "int64_value":
        return {"int": _number(raw)}
    if kind == "uint64_value":
        return {"uint": _number(raw)}
    if kind == "double_value":
        number = _number(raw)
        if isinstance(number, float) and not math.isfinite(number):
            number = str(number)
        return {"double": float(number) if isinstance(number, int) else number}
    if kind == "string_value":
        return {"string": raw.decode("utf-8")}
    if kind == "bytes_value":
        return {"bytes": raw.hex()}
    if kind == "type_value":
        return {"type": raw.decode("utf-8")}
    if kind == "list_value":
        return {"list": [encode_value(v) for v in _all(raw, "values")]}
    if kind == "map_value":
        return {
            "map": [
                [encode_value(_get(e, "key")), encode_value(_get(e, "value"))]
                for e in _all(raw, "entries")
            ]
        }
    if kind == "enum_value":
        return {"enum": str(_get(raw, "type", b"").decode())}
    if kind == "object_value":
        (type_url, fields), *_ = raw
        message = type_url.strip("[]").rsplit("/", 1)[-1]
        if message in ("google.protobuf.Duration", "google.protobuf.Timestamp"):
            seconds = _number(_get(fields, "seconds", 0))
            nanos = _number(_get(fields, "nanos", 0))
            return {message.rsplit(".", 1)[-1].lower(): [seconds, nanos]}
        return {"object": message}
    return {"unsupported": kind}


def encode_type(t: Message) -> str:
    """A cel.expr.Type as the string the test parses back (`int`, `list(int)`, `message:X`)."""
    (kind, raw), *_ = t
    if kind == "primitive":
        return {
            "BOOL": "bool",
            "INT64": "int",
            "UINT64": "uint",
            "DOUBLE": "double",
            "STRING": "string",
            "BYTES": "bytes",
        }[str(raw)]
    if kind == "dyn":
        return "dyn"
    if kind == "null":
        return "null_type"
    if kind == "list_type":
        return f"list({encode_type(_get(raw, 'elem_type'))})"
    if kind == "map_type":
        return f"map({encode_type(_get(raw, 'key_type'))}, {encode_type(_get(raw, 'value_type'))})"
    if kind == "well_known":
        well_known = {
            "TIMESTAMP": "google.protobuf.Timestamp",
            "DURATION": "google.protobuf.Duration",
        }
        return well_known.get(str(raw), f"message:google.protobuf.{raw}")
    if kind == "message_type":
        return f"message:{raw.decode()}"
    if kind == "wrapper":
        return f"message:wrapper({raw})"
    return f"unsupported:{kind}"


def convert_test(test: Message) -> dict[str, Any]:
    case: dict[str, Any] = {
        "name": _get(test, "name", b"").decode(),
        "expr": _get(test, "expr", b"").decode("utf-8"),
    }
    for flag in ("disable_macros", "disable_check", "check_only"):
        if str(_get(test, flag, "")) == "true":
            case[flag] = True
    container = _get(test, "container")
    if container:
        case["container"] = container.decode()
    variables = {}
    for decl in _all(test, "type_env"):
        ident = _get(decl, "ident")
        if ident is not None:
            variables[_get(decl, "name").decode()] = encode_type(_get(ident, "type"))
        else:
            variables[_get(decl, "name").decode()] = "unsupported:function"
    if variables:
        case["variables"] = variables
    bindings = {}
    for entry in _all(test, "bindings"):
        bindings[_get(entry, "key").decode()] = encode_value(_get(_get(entry, "value"), "value"))
    if bindings:
        case["bindings"] = bindings
    if _get(test, "value") is not None:
        case["value"] = encode_value(_get(test, "value"))
    elif _get(test, "typed_result") is not None:
        typed = _get(test, "typed_result")
        case["value"] = encode_value(_get(typed, "result"))
        case["type"] = encode_type(_get(typed, "deduced_type"))
    elif _get(test, "eval_error") is not None:
        errors = _all(_get(test, "eval_error"), "errors")
        case["error"] = [_get(e, "message", b"").decode() for e in errors]
    elif _get(test, "any_eval_errors") is not None:
        case["error"] = []
    elif _get(test, "unknown") is not None or _get(test, "any_unknowns") is not None:
        case["unknown"] = True
    else:
        case["value"] = {"bool": True}  # cel-spec's default expectation
    return case


def convert_file(text: str) -> dict[str, Any]:
    top = parse_textproto(text)
    return {
        "name": _get(top, "name").decode(),
        "sections": [
            {
                "name": _get(section, "name").decode(),
                "tests": [convert_test(t) for t in _all(section, "test")],
            }
            for section in _all(top, "section")
        ],
    }


def main(argv: list[str]) -> int:
    git_dir = argv[1]
    commit = argv[2] if len(argv) > 2 else "HEAD"

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True
        ).stdout

    commit = git("rev-parse", commit).strip()
    DATA.mkdir(exist_ok=True)
    for name in FILES:
        text = git("show", f"{commit}:tests/simple/testdata/{name}.textproto")
        converted = convert_file(text)
        (DATA / f"{name}.json").write_text(
            json.dumps(converted, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    source = {
        "repository": "https://github.com/google/cel-spec",
        "commit": commit,
        "files": [f"tests/simple/testdata/{name}.textproto" for name in FILES],
        "generator": "tests/dra_driver/scheduling/cel/conformance/generate.py",
    }
    (DATA / "SOURCE.json").write_text(json.dumps(source, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
