"""Regenerate the gRPC stubs in api/generated from api/proto: `python -m api.generate`.

protoc emits sibling imports (`import dra_v1_pb2 as ...`) that only work when the
output directory is on sys.path; they are rewritten to `from api.generated import ...`
so the stubs import as a package. The output depends only on the .proto files and the
grpcio-tools version, so a test can regenerate into a temporary directory and compare.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent / "proto"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
GENERATED_PACKAGE = "api.generated"
PACKAGE_DOCSTRING = '"""Generated gRPC stubs; regenerate with `python -m api.generate`."""\n'

_SIBLING_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


class GenerationError(RuntimeError):
    """protoc refused the .proto files; its diagnostics went to stderr."""


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def rewrite_imports(source: str) -> str:
    """Turn protoc's top-level sibling imports into package-qualified ones."""
    return _SIBLING_IMPORT.sub(rf"from {GENERATED_PACKAGE} import \1 as \2", source)


def generate(out_dir: Path) -> list[Path]:
    """Write the stubs of every .proto file into out_dir; return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    protos = proto_files()
    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(path) for path in protos),
    ]
    if protoc.main(args) != 0:
        raise GenerationError(f"protoc failed on {[p.name for p in protos]}")
    written = []
    for path in sorted(out_dir.glob("*_pb2*.py*")):
        path.write_text(rewrite_imports(path.read_text()))
        written.append(path)
    init = out_dir / "__init__.py"
    init.write_text(PACKAGE_DOCSTRING)
    written.append(init)
    return sorted(written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GENERATED_DIR, help="output directory")
    options = parser.parse_args(argv)
    for path in generate(options.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
