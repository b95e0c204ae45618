"""The committed stubs are exactly what `python -m api.generate` produces."""

from __future__ import annotations

import importlib
from pathlib import Path

from api import generate


def test_regenerating_reproduces_the_committed_stubs(tmp_path: Path) -> None:
    written = generate.generate(tmp_path)

    committed = sorted(p.name for p in generate.GENERATED_DIR.iterdir() if p.is_file())
    assert sorted(p.name for p in written) == committed
    for path in written:
        assert path.read_text() == (generate.GENERATED_DIR / path.name).read_text(), path.name


def test_every_proto_has_message_and_service_modules() -> None:
    for proto in generate.proto_files():
        for suffix in ("_pb2", "_pb2_grpc"):
            module = importlib.import_module(f"api.generated.{proto.stem}{suffix}")
            assert module.__name__.startswith("api.generated.")


def test_sibling_imports_become_package_imports() -> None:
    source = "import grpc\nimport dra_v1_pb2 as dra__v1__pb2\n"

    assert generate.rewrite_imports(source) == (
        "import grpc\nfrom api.generated import dra_v1_pb2 as dra__v1__pb2\n"
    )


def test_generated_stubs_never_import_siblings_top_level() -> None:
    for path in generate.GENERATED_DIR.glob("*.py"):
        for line in path.read_text().splitlines():
            assert not (line.startswith("import ") and "_pb2" in line), f"{path.name}: {line}"
