"""W3C Trace Context: the `traceparent` value, read and written, and a
job's trace context carried in its headers.

A job's headers (contract 0.5) carry the context it was created in under
the keys `traceparent` and `tracestate`.  This module needs no OpenTelemetry:
the workers use it to link a job's process spans to that context when the
application's propagators did not read it, and an application without
OpenTelemetry can use it to carry an incoming request's context into a job,
or to log a job's trace id.

    >>> tp = parse("00-5f2b4c1a9e8d7c6b5a4f3e2d1c0b9a88-c3d2e1f0a9b8c7d6-01")
    >>> tp.trace_id, tp.sampled
    ('5f2b4c1a9e8d7c6b5a4f3e2d1c0b9a88', True)
    >>> str(tp)
    '00-5f2b4c1a9e8d7c6b5a4f3e2d1c0b9a88-c3d2e1f0a9b8c7d6-01'

What `parse` accepts, after the Trace Context specification (Level 2,
"traceparent Header Field Values" and "Versioning of traceparent"):

- a version of two lowercase hex digits followed by a dash; `ff` is invalid;
- version `00`: exactly `00-<trace-id>-<parent-id>-<trace-flags>`, 55
  characters, nothing after the flags;
- a higher version (`01` to `fe`): at least 55 characters, the same three
  fields at the same places, and after the flags either the end or a dash
  (what follows is a later version's and is not read);
- trace-id: 32 lowercase hex digits, not all zero; parent-id: 16 lowercase
  hex digits, not all zero; trace-flags: 2 lowercase hex digits;
- spaces and tabs around the whole value (HTTP's optional whitespace) are
  ignored; nothing else is.

`write` always writes version `00` (a higher version read is written as
`00`, the mutation the specification allows) with the flags this version
defines, sampled (01) and random trace id (02); the others are set to
zero, as the specification requires.  `tracestate` is never parsed or
changed: it is carried as it came, and dropped with a `traceparent` that
is missing or invalid (a vendor that cannot read traceparent must not use
tracestate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["TraceParent", "InvalidTraceParent", "parse", "write", "read", "tracestate", "carry",
           "SAMPLED", "RANDOM"]

SAMPLED = 0x01          # the caller may have recorded trace data
RANDOM = 0x02           # at least the right-most 7 bytes of the trace id are random
_KNOWN_FLAGS = SAMPLED | RANDOM

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_HEX = re.compile(r"[0-9a-f]+", re.ASCII)
_OWS = " \t"


class InvalidTraceParent(ValueError):
    """A traceparent value the specification says to ignore."""


def _hex(text: str, size: int) -> bool:
    return len(text) == size and _HEX.fullmatch(text) is not None


@dataclass(frozen=True)
class TraceParent:
    """One traceparent: ids as lowercase hex, flags as an int, and the
    version it was read as (it is always written as 00)."""

    trace_id: str
    parent_id: str
    flags: int = 0
    version: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.trace_id, str) or not _hex(self.trace_id, 32):
            raise InvalidTraceParent("trace-id must be 32 lowercase hex digits")
        if self.trace_id == "0" * 32:
            raise InvalidTraceParent("trace-id must not be all zero")
        if not isinstance(self.parent_id, str) or not _hex(self.parent_id, 16):
            raise InvalidTraceParent("parent-id must be 16 lowercase hex digits")
        if self.parent_id == "0" * 16:
            raise InvalidTraceParent("parent-id must not be all zero")
        if not isinstance(self.flags, int) or not 0 <= self.flags <= 0xff:
            raise InvalidTraceParent("trace-flags must be a byte")
        if not isinstance(self.version, int) or not 0 <= self.version < 0xff:
            raise InvalidTraceParent("version must be 0 to 254")

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)

    @property
    def random(self) -> bool:
        return bool(self.flags & RANDOM)

    def __str__(self) -> str:
        return write(self)


def parse(value: Any) -> TraceParent:
    """The traceparent in `value`, or InvalidTraceParent saying why not."""
    if not isinstance(value, str):
        raise InvalidTraceParent("traceparent must be a string")
    value = value.strip(_OWS)
    if len(value) < 3 or not _hex(value[:2], 2) or value[2] != "-":
        raise InvalidTraceParent("no version: two lowercase hex digits and a dash")
    version = int(value[:2], 16)
    if version == 0xff:
        raise InvalidTraceParent("version ff is invalid")
    if version == 0:
        if len(value) != 55:
            raise InvalidTraceParent("a version 00 traceparent is 55 characters long")
    elif len(value) < 55:
        raise InvalidTraceParent("a traceparent is at least 55 characters long")
    elif len(value) > 55 and value[55] != "-":
        raise InvalidTraceParent("trace-flags must be followed by the end or a dash")
    if value[35] != "-" or value[52] != "-":
        raise InvalidTraceParent("fields must be separated by dashes at 3, 36 and 53")
    if not _hex(value[53:55], 2):
        raise InvalidTraceParent("trace-flags must be 2 lowercase hex digits")
    return TraceParent(value[3:35], value[36:52], int(value[53:55], 16), version)


def write(tp: TraceParent) -> str:
    """The version 00 traceparent of `tp`: the flags this version defines
    are kept, the others set to zero."""
    return f"00-{tp.trace_id}-{tp.parent_id}-{tp.flags & _KNOWN_FLAGS:02x}"


def _values(headers: Mapping[str, Any], name: str) -> List[Any]:
    """The values of a header whose name is `name` in any case (header
    names are case-insensitive): the lowercase key's first."""
    found = [v for k, v in headers.items()
             if isinstance(k, str) and k != name and k.lower() == name]
    if name in headers:
        found.insert(0, headers[name])
    return found


def read(headers: Optional[Mapping[str, Any]]) -> Optional[TraceParent]:
    """The traceparent of a job's headers (or any mapping of header names
    to values), or None if there is none, more than one, or it is invalid."""
    if not headers:
        return None
    values = _values(headers, TRACEPARENT)
    if len(values) != 1:
        return None
    try:
        return parse(values[0])
    except InvalidTraceParent:
        return None


def tracestate(headers: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The tracestate of `headers` as it came (several, in any case of the
    name, joined by commas as HTTP joins repeated fields), or None."""
    if not headers:
        return None
    values = [v for v in _values(headers, TRACESTATE) if isinstance(v, str)]
    return ",".join(values) if values else None


def carry(headers: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    """The trace context of `headers` for a job's headers: `traceparent`
    written as version 00, and `tracestate` unchanged; {} if the headers
    have no valid traceparent (their tracestate is then dropped too).

        client.enqueue("emails", payload, headers=carry(request.headers))
    """
    tp = read(headers)
    if tp is None:
        return {}
    out = {TRACEPARENT: write(tp)}
    state = tracestate(headers)
    if state is not None:
        out[TRACESTATE] = state
    return out
