"""Reading a reference case's fields: numbers checked and bounded (a bad field is that
case's error, naming its path, never the file's), mappings, ids, the ``measured`` and
``derived`` sections, and the runs a file lists as skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from twin.core.errors import SpecError


def _number(value: Any, path: str, *, integer: bool = False, minimum: float = 0.0) -> Any:
    """``value`` as a finite number (an int if ``integer``) above ``minimum``, or None if null;
    a SpecError naming ``path`` otherwise (a bad field is that case's error, not the file's).
    """
    if value is None:
        return None
    # (an int of any size is finite; math.isfinite would overflow converting it to a float)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise SpecError(path, f"must be a number (got {_shown(value)})")
    if integer:
        if value != int(value):
            raise SpecError(path, f"must be a whole number (got {_shown(value)})")
        value = int(value)
    if value <= minimum:
        raise SpecError(path, f"must be > {minimum:g} (got {_shown(value)})")
    if value > _LARGEST:
        raise SpecError(path, f"must be at most {_LARGEST:g} (got {_shown(value)})")
    return value


# No field of a reference case comes near this (the largest are message sizes, ~1e11 bytes);
# past it a number is a typo or an attack, refused naming its field before it reaches arithmetic.
_LARGEST = 1e18


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters; a huge integer by its size (Python refuses to
    print one of over 4,300 digits, and a 400-digit one is not worth echoing whole).
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# A malformed value that no check names (a type the reading code does not expect): that case's
# error ("malformed case"), like a SpecError, never the file's.
_MALFORMED = (TypeError, ValueError, AttributeError, ArithmeticError)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` if it is a mapping, {} if null, else a SpecError naming ``path``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be a mapping (got {type(value).__name__})")
    return value


def _case_id(case: Mapping[str, Any], default: str) -> str:
    """A case's ``id`` as text (``default`` where it has none; a non-text id shown cut short)."""
    cid = case.get("id")
    if cid is None:
        return default
    return cid if isinstance(cid, str) else _shown(cid)


def _section(case: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``case[key]`` where it is a mapping (``measured``, ``derived``), else empty: a case whose
    section is malformed publishes no figure there, and is skipped as such.
    """
    value = case.get(key)
    return value if isinstance(value, Mapping) else {}


def _listed_skips(data: Mapping[str, Any]) -> list[dict[str, str]]:
    """The runs a reference file itself lists under ``skipped:`` (entries that are not mappings ignored)."""
    listed = data.get("skipped")
    return [{"id": str(s.get("id", "?")), "reason": f"skipped by the reference file: {s.get('reason', '')}"}
            for s in (listed if isinstance(listed, list) else []) if isinstance(s, Mapping)]
