"""Watches selecting one field value (a kubelet's `spec.nodeName=<node>`) are offered only
the events that concern them (store.WatcherSet), and still see every transition."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer

PODS = "/api/v1/namespaces/default/pods"


async def events(
    client: KubeClient, selector: str, version: str, until: tuple[str, str]
) -> list[tuple[str, str]]:
    """(type, pod name) of the watch's events from `version` up to `until`."""
    seen: list[tuple[str, str]] = []
    async for event in client.watch(
        PODS, fieldSelector=selector, resourceVersion=version, timeoutSeconds=30
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if seen[-1] == until:
            break
    return seen


async def test_field_selected_watches_see_moves_in_and_out(tmp_path: Path) -> None:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kc"))
        try:
            version = (await client.list(PODS))["metadata"]["resourceVersion"]
            watches = [
                asyncio.create_task(events(client, selector, version, until))
                for selector, until in (
                    ("spec.nodeName=node-a", ("DELETED", "p")),
                    ("spec.nodeName=node-b", ("ADDED", "r")),
                    ("spec.nodeName=", ("ADDED", "q")),
                    ("", ("DELETED", "p")),
                )
            ]
            body: dict[str, Any] = {
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
            await client.create(PODS, body)
            binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-a"}}
            await client.create(f"{object_path(PODS, 'p')}/binding", binding)
            await client.create(PODS, {**body, "metadata": {"name": "q"}})
            bound = {
                **body,
                "metadata": {"name": "r"},
                "spec": {**body["spec"], "nodeName": "node-b"},
            }
            await client.create(PODS, bound)
            await client.delete(object_path(PODS, "p"), gracePeriodSeconds=0)
            on_a, on_b, unbound, everything = await asyncio.gather(*watches)
        finally:
            await client.aclose()
    assert on_a[0] == ("ADDED", "p") and on_a[-1] == ("DELETED", "p")
    assert {kind for kind, _ in on_a[1:-1]} <= {"MODIFIED"}
    assert on_b == [("ADDED", "r")]
    assert unbound == [("ADDED", "p"), ("DELETED", "p"), ("ADDED", "q")]
    assert everything[:4] == [("ADDED", "p"), ("MODIFIED", "p"), ("ADDED", "q"), ("ADDED", "r")]
    assert everything[4:] == [("MODIFIED", "p")] * (len(on_a) - 2) + [("DELETED", "p")]
