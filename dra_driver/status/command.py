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
import gc
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra_driver.cli.registration import Subcommands
from dra_driver.objects.enforcement_events import ENFORCEMENT_DISABLED
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
EVENT_SELECTORS = ("type=Warning", f"reason={ENFORCEMENT_DISABLED}")
"""The only events the view reads: Warnings (pending claims' reasons, and the plugin's
OPT_OUT_IGNORED verdicts) and the plugin's Normal ENFORCEMENT_DISABLED verdicts. The
server filters them (both are field selectors kube-apiserver supports on core events),
so a cluster's thousands of Normal events (pulled, started, scheduled) never travel."""
OUTPUTS = ("text", "wide", "json", "yaml")


@dataclass(frozen=True, slots=True)
class StatusSettings:
    driver: str = "vgpu.hami.io"
    output: str = "text"
    """text (one row per node; with `only.node` that node's GPUs and shares), wide (every
    GPU and share), json or yaml (all of it)."""
    only: StatusFilter = field(default_factory=StatusFilter)


def register(commands: Subcommands) -> None:
    status = commands.add_parser(
        "status",
        help="who holds which GPU share: a row per node, details per GPU and share",
        description=(
            "Read the cluster (kubeconfig) once. By default one row per node, busiest "
            "first: GPUs, allocated memory and cores of total, holders (DRA claims and "
            "legacy pods), a cluster total and the pending claims in short. --node shows "
            "that node's GPUs and every share; -o wide every node's; -o json or yaml all "
            "of it, with each pending claim's last failure reason."
        ),
    )
    status.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        env="STATUS_OUTPUT",
        default="text",
        help="text: a row per node (with --node: its GPUs and shares); wide: every GPU and "
        "share; json, yaml: all of it",
    )
    status.add_argument("--node", env="STATUS_NODE", help="only this node: its GPUs and shares")
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
    """One list per kind, read concurrently. The server narrows what it can: slices to the
    driver's (and the node's, with `--node`), the node list to that node, pods and events
    to the namespace when asked, events to the ones the view reads (`EVENT_SELECTORS`).
    Claims and pods stay cluster-wide: pending claims are nobody's node's."""
    only = settings.only
    slices = f"spec.driver={settings.driver}"
    queries: dict[str, dict[str, str]] = {"slices": {"field_selector": slices}}
    if only.node:
        queries["slices"]["field_selector"] += f",spec.nodeName={only.node}"
        queries["nodes"] = {"field_selector": f"metadata.name={only.node}"}
    paths = dict(COLLECTIONS)
    events = paths.pop("events")
    if only.namespace:
        paths["pods"] = f"/api/v1/namespaces/{only.namespace}/pods"
        events = f"/api/v1/namespaces/{only.namespace}/events"
    lists = await asyncio.gather(
        *(client.list(path, **queries.get(key, {})) for key, path in paths.items()),
        *(client.list(events, field_selector=selector) for selector in EVENT_SELECTORS),
    )
    items: dict[str, list[dict[str, Any]]] = {
        key: listed.get("items") or [] for key, listed in zip(paths, lists, strict=False)
    }
    # An event both selectors match (a Warning ENFORCEMENT_DISABLED) is read once.
    events_by_uid = {
        (event.get("metadata") or {}).get("uid") or id(event): event
        for listed in lists[len(paths) :]
        for event in listed.get("items") or []
    }
    items["events"] = list(events_by_uid.values())
    return build_status(driver=settings.driver, only=only, **items)


async def run_status(kubeconfig: Path | None, settings: StatusSettings) -> int:
    from dra_driver.kube.rest import KubeClient

    # The lists and the view built from them are acyclic trees that reference counting
    # frees; at a thousand nodes they are millions of objects, and the cyclic collector's
    # passes over them while they are parsed, read and rendered cost more than the work.
    gc.disable()
    try:
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            status = await fetch_status(client, settings)
        finally:
            await client.aclose()
        _render(status, settings)
    finally:
        gc.enable()
    return 0


def _render(status: ClusterStatus, settings: StatusSettings) -> None:
    from rich.console import Console

    from dra_driver.status.render import render_data, render_text
    from dra_driver.status.render_summary import render_summary

    if settings.output in ("text", "wide"):
        # Piped output gets a fixed wide layout instead of rich's 80-column fallback.
        width = None if sys.stdout.isatty() else PIPED_WIDTH
        console = Console(file=sys.stdout, width=width)
        if settings.output == "text" and not settings.only.node:
            render_summary(status, console)
        else:
            render_text(status, console)
    else:
        sys.stdout.write(render_data(status, settings.output) + "\n")
