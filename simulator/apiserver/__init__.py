"""An in-process kube-apiserver emulator the official `kubernetes` client talks to unchanged.

    async with APIServer() as server:          # or: with run_in_thread() as server:
        server.write_kubeconfig(tmp_path / "kubeconfig")
        server.faults.fail("/resourceclaims/", verb="PATCH", status=409)

Served types are listed in `registry.RESOURCES`.
"""

from .errors import ApiError
from .faults import FaultInjector, FaultRule
from .registry import RESOURCES, Registry, ResourceType
from .server import APIServer
from .settings import APIServerSettings
from .threaded import run_in_thread

__all__ = [
    "RESOURCES",
    "APIServer",
    "APIServerSettings",
    "ApiError",
    "FaultInjector",
    "FaultRule",
    "Registry",
    "ResourceType",
    "run_in_thread",
]
