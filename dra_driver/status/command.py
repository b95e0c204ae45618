"""`dra-driver status`: read the cluster once and print who holds which GPU share.

Owns the subcommand (its flags and handler) and the one read of the cluster
that the simulator's report shares (`fetch_status`). May import
`dra_driver.cli` (the registration contract), `dra_driver.status`'s model and,
inside functions, the Kubernetes client and the renderers, so that
`dra-driver --help` loads neither rich nor the client.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra_driver.cli.registration import Subcommands
from dra_driver.objects.resource_api import RESOURCE_API
from dra_driver.status.model import ClusterStatus, StatusFilter, build_status

if TYPE_CHECKING:
    from dra_driver.kube.rest import KubeClient

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


def register(commands: Subcommands) -> None:
    status = commands.add_parser(
        "status",
        help="who holds which GPU share: per node and GPU, DRA claims and legacy pods",
        description=(
            "Read the cluster (kubeconfig) once: per node and GPU the capacity, allocated "
            "memory and cores, the claims and pods holding shares, and pending claims "
            "with their last failure reason."
        ),
    )
    status.add_argument(
        "-o", "--output", choices=("text", "json", "yaml"), env="STATUS_OUTPUT", default="text"
    )
    status.add_argument("--node", env="STATUS_NODE", help="only this node's GPUs")
    status.add_argument(
        "--namespace", "-n", env="STATUS_NAMESPACE", help="only shares and claims in this namespace"
    )
    status.add_argument("--driver", env="DRIVER_NAME", default="vgpu.hami.io")
    status.add_argument(
        "--kubeconfig",
        type=Path,
        env="KUBECONFIG",
        default=Path.home() / ".kube" / "config",
        help="kubeconfig file",
    )
    status.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    settings = StatusSettings(
        driver=args.driver,
        output=args.output,
        only=StatusFilter(node=args.node, namespace=args.namespace),
    )
    return asyncio.run(run_status(args.kubeconfig, settings))


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
    from rich.console import Console

    from dra_driver.kube.rest import KubeClient
    from dra_driver.status.render import render_data, render_text

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
