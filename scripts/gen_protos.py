"""Generate the Python modules of proto/**/*.proto into the source tree (twin/rpc/...).

    python scripts/gen_protos.py

The proto tree mirrors the package (proto/twin/rpc/v1 -> twin.rpc.v1), so generated
modules import each other with no rewriting. Needs grpcio-tools. Idempotent.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Run protoc over proto/ into the source tree; returns protoc's status."""
    import grpc_tools
    from grpc_tools import protoc  # build-time only

    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    if not protos:
        return 0
    include = str(Path(grpc_tools.__file__).parent / "_proto")
    args = ["protoc", f"-I{ROOT / 'proto'}", f"-I{include}", f"--python_out={ROOT}", f"--grpc_python_out={ROOT}",
            f"--pyi_out={ROOT}", *protos]
    rc = protoc.main(args)
    if rc != 0:
        print(f"gen_protos: protoc failed ({rc})", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
