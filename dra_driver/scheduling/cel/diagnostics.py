"""Internal error types of the CEL package and how they become `CelError`.

Inside the package a failure carries a source offset; only at the public
boundary (`selector.py`) is it turned into `dra_driver.errors.CelError` whose
message names the expression and the `line:column` at fault. Columns are
0-based, as in cel-go's source locations, so for
`device.attributes['gpu.nvidia.com'].model == 1` a missing `model` is
reported at `1:35`, the `.` before it.
"""

from __future__ import annotations

from dra_driver.errors import CelError

# Longest expression text quoted inside an error message; the full text is
# always available as `CelError.expression`.
_QUOTED_EXPRESSION_MAX = 200


class CompileError(Exception):
    """The expression does not parse or does not type-check."""

    def __init__(self, message: str, pos: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


class EvalError(Exception):
    """Evaluation failed at the node that starts at `pos`."""

    def __init__(self, message: str, pos: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


class FunctionError(Exception):
    """A library function refused its arguments; the caller adds the position."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def position(text: str, offset: int) -> str:
    """`line:column` (1-based line, 0-based column) of `offset` in `text`."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    line_start = text.rfind("\n", 0, offset) + 1
    return f"{line}:{offset - line_start}"


def offset_of(text: str, line: int, column: int) -> int:
    """The offset of a 1-based `line` and 1-based `column` (Lark's convention)."""
    start = 0
    for _ in range(line - 1):
        nl = text.find("\n", start)
        if nl < 0:
            break
        start = nl + 1
    return start + max(column - 1, 0)


def quote_expression(text: str) -> str:
    """The expression as it appears in messages: double-quoted, long ones shortened."""
    if len(text) > _QUOTED_EXPRESSION_MAX:
        text = text[:_QUOTED_EXPRESSION_MAX] + "..."
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_cel_error(text: str, message: str, pos: int | None) -> CelError:
    """The public error for a failure at `pos` (or at no particular place) in `text`."""
    where = position(text, pos) if pos is not None else ""
    suffix = f" (at {where})" if where else ""
    return CelError(
        f"selector {quote_expression(text)}: {message}{suffix}",
        expression=text,
        position=where,
    )
