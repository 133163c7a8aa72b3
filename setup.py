"""Build hook: generate the gRPC modules (twin/rpc/v1/*_pb2*.py) from proto/ at build time.

Everything else about the package is in pyproject.toml. The generated modules are not in
git; every build (wheel, sdist install, editable ``pip install -e .``) regenerates them
into the source tree first, so the editable install finds them where the package lives
and a wheel build copies them like any other module. The proto tree mirrors the Python
package (proto/twin/rpc/v1 -> twin.rpc.v1), so the generated imports need no rewriting.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
PROTO_ROOT = ROOT / "proto"


def generate_protos() -> list[Path]:
    """Run protoc (from grpcio-tools) over proto/; return the generated files."""
    from importlib import resources

    from grpc_tools import protoc

    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {PROTO_ROOT}")
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={ROOT}",
            f"--pyi_out={ROOT}", f"--grpc_python_out={ROOT}", *(str(p.relative_to(PROTO_ROOT)) for p in protos)]
    # protoc resolves the relative proto names against -I, so run it from the proto root.
    import os

    cwd = os.getcwd()
    os.chdir(PROTO_ROOT)
    try:
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + ", ".join(p.name for p in protos))
    finally:
        os.chdir(cwd)
    return sorted((ROOT / "twin" / "rpc").rglob("*_pb2*.py*"))


class GenerateProtos(Command):
    """``python setup.py generate_protos``: regenerate the gRPC modules in place."""

    description = "generate twin/rpc/v1 modules from proto/"
    user_options: ClassVar[list] = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        for path in generate_protos():
            self.announce(f"generated {path.relative_to(ROOT)}", level=2)


class BuildPyWithProtos(build_py):
    """build_py that generates the gRPC modules first (also runs for editable installs)."""

    def run(self) -> None:
        generate_protos()
        super().run()


class SdistWithProtos(sdist):
    """sdist ships the .proto files; the modules are generated again when it is built."""

    def run(self) -> None:
        generate_protos()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProtos, "sdist": SdistWithProtos, "generate_protos": GenerateProtos})
