"""MLCommons Chakra execution traces on disk: the schema's messages and the file format.

The messages are generated from ``proto/twin/rpc/chakra/et_def.proto``, the published schema
(mlcommons/chakra ``schema/protobuf/et_def.proto`` at commit 6dc63e14, same fields and numbers,
package renamed). A trace file is one ``GlobalMetadata`` then ``Node`` messages, each preceded
by its length as a varint (Chakra ``src/third_party/utils/protolib.py``: ``encodeMessage``
writes ``_EncodeVarint32(len)`` then the bytes; ``decodeMessage`` reads them back), optionally
gzipped (``openFileRd`` tries gzip first). Protobuf is the ``traces`` extra.

Reading is strict where a trace can be wrong: a truncated length or message, a message that
does not parse, a node id seen twice, or a dependency on a node that is not in the file is a
:class:`~twin.core.errors.SpecError` naming the file and the node, never a traceback.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.core.errors import SpecError
from twin.core.extras import needs_extra

# Chakra's schema version the published generator writes (src/generator/generator.py: "0.0.4").
SCHEMA_VERSION = "0.0.4"
SCHEMA_SOURCE = "mlcommons/chakra schema/protobuf/et_def.proto @ 6dc63e147b9d115286626cc122459e44d9d08401"
# The twin's collective names and Chakra's CollectiveCommType values (et_def.proto).
COMM_TYPES = {"all_reduce": 0, "reduce": 1, "all_gather": 2, "gather": 3, "scatter": 4, "broadcast": 5,
              "all_to_all": 6, "reduce_scatter": 7, "reduce_scatter_block": 8, "barrier": 9}
COMM_NAMES = {v: k for k, v in COMM_TYPES.items()}
# NodeType values (et_def.proto).
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE, METADATA_NODE = 4, 5, 6, 7, 1
# A length prefix past this is not a trace message (a node is kilobytes): a file that is not a trace.
MAX_MESSAGE_BYTES = 64 << 20


def schema() -> Any:
    """The generated module of the Chakra schema (``twin.rpc.chakra.et_def_pb2``)."""
    with needs_extra("traces", "Chakra execution traces"):
        from twin.rpc.chakra import et_def_pb2
    return et_def_pb2


def _varint(value: int) -> bytes:
    """``value`` as a protobuf varint (7 bits a byte, low first, high bit set on all but the last)."""
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(0x80 | bits)
        else:
            out.append(bits)
            return bytes(out)


def encode(messages: Iterable[Any]) -> bytes:
    """Messages as a Chakra trace file's bytes: each length-prefixed (protolib.encodeMessage)."""
    out = bytearray()
    for msg in messages:
        body = msg.SerializeToString()
        out += _varint(len(body))
        out += body
    return bytes(out)


def write_trace(path: Path, metadata: Any, nodes: Iterable[Any]) -> int:
    """Write one trace file (metadata, then the nodes); its size in bytes."""
    data = encode([metadata, *nodes])
    path.write_bytes(data)
    return len(data)


@dataclass(slots=True)
class Trace:
    """One trace file read back: its metadata and its nodes in file order."""

    path: str
    metadata: Any
    nodes: list[Any]


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise SpecError(str(path), f"cannot read the trace: {err.strerror or err}") from None
    if raw[:2] == b"\x1f\x8b":  # gzip's magic, as Chakra's openFileRd accepts
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise SpecError(str(path), f"a gzip file that does not decompress: {err}") from None
    return raw


def _split(raw: bytes, where: str) -> list[bytes]:
    """The length-prefixed messages of a file's bytes."""
    out = []
    pos, n = 0, len(raw)
    while pos < n:
        start, size, shift = pos, 0, 0
        while True:
            if pos >= n:
                raise SpecError(where, f"truncated: a message length at byte {start} runs past the end of the file")
            b = raw[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise SpecError(where, f"not a Chakra trace: no valid message length at byte {start}")
        if size > MAX_MESSAGE_BYTES:
            raise SpecError(where, f"not a Chakra trace: message {len(out)} claims {size} bytes at byte {start}")
        if pos + size > n:
            raise SpecError(where, f"truncated: message {len(out)} needs {size} bytes at byte {pos}, "
                                   f"{n - pos} are left")
        out.append(raw[pos:pos + size])
        pos += size
    return out


def read_trace(path: str | Path) -> Trace:
    """A Chakra trace file: its GlobalMetadata and Nodes, checked (module docstring)."""
    pb = schema()
    path = Path(path)
    where = str(path)
    chunks = _split(_read_bytes(path), where)
    if not chunks:
        raise SpecError(where, "an empty file: a Chakra trace starts with a GlobalMetadata message")
    from google.protobuf.message import DecodeError  # the traces extra (schema() checked it)

    metadata = pb.GlobalMetadata()
    try:
        metadata.ParseFromString(chunks[0])
    except DecodeError as err:
        raise SpecError(where, f"not a Chakra trace: its first message is no GlobalMetadata ({err})") from None
    nodes = []
    seen: set[int] = set()
    for i, chunk in enumerate(chunks[1:], start=1):
        node = pb.Node()
        try:
            node.ParseFromString(chunk)
        except DecodeError as err:
            raise SpecError(where, f"message {i} is not a Chakra Node ({err})") from None
        if node.id in seen:
            raise SpecError(f"{where}: node {node.id}", "a node id seen twice")
        seen.add(node.id)
        nodes.append(node)
    for node in nodes:
        for dep in (*node.data_deps, *node.ctrl_deps):
            if dep not in seen:
                raise SpecError(f"{where}: node {node.id} ({node.name})", f"depends on node {dep}, which is not in "
                                                                          "the trace")
    return Trace(where, metadata, nodes)


def attributes(node: Any) -> dict[str, Any]:
    """A node's (or metadata's) attributes by name, each its one value (a list as a Python list)."""
    out: dict[str, Any] = {}
    for attr in node.attr:
        kind = attr.WhichOneof("value")
        if kind is None:
            continue
        value = getattr(attr, kind)
        out[attr.name] = list(value.values) if kind.endswith("_list") else value
    return out


def attr(name: str, value: Any, kind: str) -> Any:
    """An AttributeProto ``name`` holding ``value`` in its ``kind`` field (``uint64_val``, ``string_val``...)."""
    pb = schema()
    return pb.AttributeProto(name=name, **{kind: value})
