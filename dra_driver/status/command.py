"""`dra-driver status`: read the cluster once and print who holds which GPU share."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from dra_driver.kube.rest import KubeClient
from dra_driver.objects.resource_api import RESOURCE_API
from dra_driver.status.model import ClusterStatus, StatusFilter, build_status
from dra_driver.status.render import render_data, render_text

PIPED_WIDTH = 160
COLLECTIONS = {
    "slices": f"{RESOURCE_API}/resourceslices",
    "claims": f"{RESOURCE_API}/resourceclaims",
    "device_classes": f"{RESOURCE_API}/deviceclasses",
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "events": "/api/v1/events",
}


@dataclass(frozen=True, slots=True)
class StatusSettings:
    driver: str = "vgpu.hami.io"
    output: str = "text"
    """text, json or yaml."""
    only: StatusFilter = field(default_factory=StatusFilter)


async def fetch_status(client: KubeClient, settings: StatusSettings) -> ClusterStatus:
    """One list per kind, read concurrently; pods and events narrowed by namespace when asked."""
    namespace = settings.only.namespace
    paths = dict(COLLECTIONS)
    if namespace:
        paths["pods"] = f"/api/v1/namespaces/{namespace}/pods"
        paths["events"] = f"/api/v1/namespaces/{namespace}/events"
    lists = await asyncio.gather(*(client.list(path) for path in paths.values()))
    items: dict[str, list[dict[str, Any]]] = {
        key: listed.get("items") or [] for key, listed in zip(paths, lists, strict=True)
    }
    return build_status(driver=settings.driver, only=settings.only, **items)


async def run_status(kubeconfig: Path | None, settings: StatusSettings) -> int:
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        status = await fetch_status(client, settings)
    finally:
        await client.aclose()
    if settings.output == "text":
        # Piped output gets a fixed wide layout instead of rich's 80-column fallback.
        width = None if sys.stdout.isatty() else PIPED_WIDTH
        render_text(status, Console(file=sys.stdout, width=width))
    else:
        sys.stdout.write(render_data(status, settings.output) + "\n")
    return 0
