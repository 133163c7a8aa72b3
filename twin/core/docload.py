"""One bounded reader for every YAML/JSON document the twin parses (scenario files and
request documents, sweep specs, jobs).

A document is text from someone else: it must not be able to take the process down.
Limits, each a :class:`SpecError` naming the field:

- size: ``MAX_DOCUMENT_CHARS`` characters;
- YAML aliases: refused in requests (``allow_aliases=False``); in files they are allowed but
  the document *as expanded* may hold at most ``MAX_NODES`` nodes (a "billion laughs"
  document of a few hundred bytes expands to 10^9 nodes, and everything that walks it, a
  deep copy or a validator, would try to visit each);
- nesting: ``MAX_DEPTH`` levels (PyYAML's composer and ``json`` recurse per level);
- integers: ``MAX_INT_DIGITS`` digits (no field of the schema needs more; Python refuses
  to convert beyond 4,300 digits and a 10^5-digit literal costs seconds);
- text: every string must be valid Unicode (a lone surrogate, U+D800 alone, cannot be
  encoded again, on the wire or in a log).

A document of more than ``FAST_CHARS`` characters is read with libyaml (PyYAML's C parser,
where PyYAML was built with it; the same safe constructor, resolver and limits): a 5.4 MB
document took 4.3 s of CPU with the pure-Python parser and 0.35 s with libyaml (issue 39 found
an 8 MiB scenario document costing 7.1 s while every other request waited for the GIL). Smaller
ones keep the pure-Python parser, whose messages name the problem more plainly.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from twin.core.errors import SpecError

MAX_DOCUMENT_CHARS = 8 * 2**20
MAX_NODES = 1_000_000
MAX_DEPTH = 64
MAX_INT_DIGITS = 40
# Past this size a YAML document is parsed by libyaml: 64 KiB is ~50 ms of the pure-Python parser
# (~0.8 us a character here), and larger than any scenario, sweep or fleet in examples/ (< 10 KB).
FAST_CHARS = 64 * 1024


class _LongInteger(Exception):
    def __init__(self, digits: int, line: int) -> None:
        super().__init__(digits, line)
        self.digits, self.line = digits, line


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with integers bounded in length."""


# libyaml's parser where PyYAML has it (else the pure-Python one), with the same constructor.
_C_SAFE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _FastLoader(_C_SAFE):  # type: ignore[misc, valid-type]
    """:class:`_Loader` on libyaml's parser."""


def _construct_int(loader: SafeConstructor, node: yaml.ScalarNode) -> Any:
    digits = len(str(node.value).replace("_", "").lstrip("+-"))
    if digits > MAX_INT_DIGITS:
        raise _LongInteger(digits, node.start_mark.line + 1)
    return SafeConstructor.construct_yaml_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_FastLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def parse_document(text: str, field: str, *, allow_aliases: bool = False, json_only: bool = False) -> Any:
    """The data of a YAML (or JSON) document, within the module's limits; errors name ``field``."""
    if len(text) > MAX_DOCUMENT_CHARS:
        raise SpecError(field, f"is {len(text):,} characters; the limit is {MAX_DOCUMENT_CHARS:,}")
    try:
        data = _json(text, field) if json_only else _yaml(text, field, allow_aliases)
    except RecursionError as err:
        raise SpecError(field, f"is nested too deeply (more than {MAX_DEPTH} levels)") from err
    _check_data(data, field)
    return data


def _json(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(field, f"is not valid JSON: {err}") from err
    except ValueError as err:  # an integer beyond Python's conversion limit
        raise SpecError(field, f"has an integer longer than {MAX_INT_DIGITS} digits") from err


def _yaml(text: str, field: str, allow_aliases: bool) -> Any:
    fast = len(text) > FAST_CHARS
    try:
        loader = (_FastLoader if fast else _Loader)(text)  # the reader refuses control characters here already
    except yaml.YAMLError as err:
        raise SpecError(field, f"is not valid YAML/JSON: {str(err).splitlines()[0]}") from err
    try:
        if not allow_aliases and "*" in text:
            for event in yaml.parse(text, Loader=_C_SAFE if fast else yaml.SafeLoader):
                if isinstance(event, yaml.AliasEvent):
                    raise SpecError(field, "YAML aliases (*name) are not accepted here")
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node, field)
        return loader.construct_document(node)
    except _LongInteger as err:
        raise SpecError(field, f"line {err.line}: an integer of {err.digits} digits; the limit is "
                               f"{MAX_INT_DIGITS}") from err
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0]
        if "flow level" in first:  # libyaml's own nesting bound
            raise SpecError(field, f"is nested too deeply (more than {MAX_DEPTH} levels)") from err
        raise SpecError(field, f"is not valid YAML/JSON: {first}") from err
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_graph(root: yaml.Node, field: str) -> None:
    """Expanded size and depth of a composed YAML graph (aliases share nodes: memoised, so
    the walk is linear in the distinct nodes even when the expansion is exponential).
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if size[key] > MAX_NODES:
                raise SpecError(field, f"expands to more than {MAX_NODES:,} values (YAML aliases?)")
            if depth[key] > MAX_DEPTH:
                raise SpecError(field, f"is nested too deeply (more than {MAX_DEPTH} levels)")
            continue
        if key in size:
            continue
        if key in on_path:
            raise SpecError(field, "refers to itself (a recursive YAML alias)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def _check_data(data: Any, field: str) -> None:
    """Depth, size and valid Unicode of the loaded data (JSON, or YAML after construction)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while stack:
        value, level = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise SpecError(field, f"has more than {MAX_NODES:,} values")
        if level > MAX_DEPTH:
            raise SpecError(field, f"is nested too deeply (more than {MAX_DEPTH} levels)")
        if isinstance(value, str):
            _check_text(value, field)
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str):
                    _check_text(k, field)
                stack.append((v, level + 1))
        elif isinstance(value, list):
            stack.extend((v, level + 1) for v in value)
        elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * MAX_INT_DIGITS:
            raise SpecError(field, f"has an integer longer than {MAX_INT_DIGITS} digits")


def _check_text(text: str, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise SpecError(field, f"contains text that is not valid Unicode (an unpaired surrogate at "
                               f"character {err.start})") from err
