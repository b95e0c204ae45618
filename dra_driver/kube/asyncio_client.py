"""The official client's asyncio half, without the rest of the package.

`import kubernetes.aio` first runs `kubernetes/__init__.py`, which eagerly
imports the synchronous client with its thousand model classes, the dynamic
client, watch, stream and informer: about 7 MiB of resident memory that no
component uses, on a node agent whose idle budget is 80 MiB. The package is
registered here as a plain namespace of its submodules instead, so only
`kubernetes.aio` loads; any other submodule (`kubernetes.client`, ...) still
imports on first attribute access, so code that wants the whole package keeps
working in the same process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


def _lazy_package(name: str) -> ModuleType:
    """`name` as a package whose `__init__` does not run; attributes import submodules."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ImportError(f"the {name!r} package is not installed")
    package = importlib.util.module_from_spec(spec)

    def import_submodule(attribute: str) -> ModuleType:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return importlib.import_module(f"{name}.{attribute}")

    package.__getattr__ = import_submodule  # type: ignore[method-assign]
    return package


if "kubernetes" not in sys.modules:
    sys.modules["kubernetes"] = _lazy_package("kubernetes")

from kubernetes.aio import client as aio_client  # noqa: E402
from kubernetes.aio import config as aio_config  # noqa: E402
from kubernetes.aio.client import rest as aio_rest  # noqa: E402

__all__ = ["aio_client", "aio_config", "aio_rest"]
