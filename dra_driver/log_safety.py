"""Log lines that untrusted text cannot forge or blow up.

Claim names, namespaces and UIDs come from whoever may create a
ResourceClaim, and error messages quote them. A name with a newline would
write a second, forged log line (`... INFO kubelet_plugin: prepared ...`),
and a 3 MiB name a 6 MiB one. `SafeLogFilter`, installed on the daemon's log
handler (`dra_driver.cli`), turns every record into one bounded line:
control characters (newlines, carriage returns, escape sequences) are
written as Python escapes (`\\n`, `\\x1b`) and the message, and every
string field passed in `extra`, are cut to a maximum length with a note of
how much was left out. `one_line` does the same for text that leaves the
process another way (a claim's error sent back to the kubelet).

`claim_fields` gives the structured fields of a claim for `extra=`, so that
JSON logs (`--log-format json`) carry `claim_namespace`, `claim_name` and
`claim_uid` as fields a log collector can filter on, instead of only text.
No logging library escapes messages this way (python-json-logger escapes
JSON strings but does not bound them), hence this module.
"""

from __future__ import annotations

import logging
import re
from typing import Final

MAX_MESSAGE_CHARS: Final = 8192
MAX_FIELD_CHARS: Final = 512
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_STANDARD_FIELDS: Final = frozenset(
    logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None).__dict__
) | {"message", "asctime", "taskName"}


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` with control characters escaped, cut to `limit` characters (noting the cut)."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return _CONTROL.sub(_escape, text)


def claim_fields(namespace: str, name: str, uid: str) -> dict[str, str]:
    """A claim's identity as `extra=` fields for a log call (bounded and escaped on output)."""
    return {"claim_namespace": namespace, "claim_name": name, "claim_uid": uid}


class SafeLogFilter(logging.Filter):
    """Makes each record one bounded line (see the module docstring); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception as exc:  # a bad format string must not lose the record
            message = f"{record.msg!r} (unformattable: {exc})"
        record.msg = one_line(message)
        record.args = None
        for key, value in list(record.__dict__.items()):
            if key not in _STANDARD_FIELDS and isinstance(value, str):
                setattr(record, key, one_line(value, MAX_FIELD_CHARS))
        return True


def _escape(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]
