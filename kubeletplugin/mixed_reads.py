"""Mixed mode's reads: what the API server says this node runs, for `mixed_usage`.

Both node components read the legacy pods bound to the node (one list with
`fieldSelector=spec.nodeName=<node>`: what the node actually runs). The device
plugin also reads the DRA side: the node's ResourceSlices of the driver, whose
devices name the GPU by its `uuid` attribute, and every allocated claim, whose
results name (pool, device) of such a slice. A read that fails fails the call it
serves (a refused prepare or Allocate is retried by kubelet), rather than
letting a share through unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.kube.rest import ApiError, KubeClient

PODS = "/api/v1/pods"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class MixedReadError(DriverError):
    """The node's usage could not be read, so a share could not be checked."""


async def fetch_node_pods(client: KubeClient, node_name: str) -> list[dict[str, Any]]:
    """The pods bound to the node (every namespace)."""
    try:
        listed = await client.list(PODS, field_selector=f"spec.nodeName={node_name}")
    except ApiError as error:
        raise MixedReadError(f"pods of node {node_name} not read: {error}") from error
    return list(listed.get("items") or [])


async def fetch_slice_uuids(
    client: KubeClient, node_name: str, driver: str
) -> dict[tuple[str, str], str]:
    """(pool, device name) -> GPU uuid over the node's slices of `driver`."""
    try:
        listed = await client.list(
            SLICES, field_selector=f"spec.nodeName={node_name},spec.driver={driver}"
        )
    except ApiError as error:
        raise MixedReadError(
            f"ResourceSlices of driver {driver} on node {node_name} not read: {error}"
        ) from error
    return slice_uuids(listed.get("items") or [])


def slice_uuids(slices: list[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    found = {}
    for item in slices:
        spec = item.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name") or ""
        for device in spec.get("devices") or []:
            uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
            if uuid:
                found[(pool, device.get("name") or "")] = uuid
    return found


async def fetch_allocated_claims(client: KubeClient) -> list[dict[str, Any]]:
    """Every claim with an allocation (every namespace)."""
    try:
        listed = await client.list(CLAIMS)
    except ApiError as error:
        raise MixedReadError(f"ResourceClaims not read: {error}") from error
    return [c for c in listed.get("items") or [] if (c.get("status") or {}).get("allocation")]
