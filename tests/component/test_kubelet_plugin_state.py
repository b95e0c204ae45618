"""What the kubelet plugin does with the state it finds at start: a checkpoint from a newer
release or a damaged one is refused (the plugin stays up, answers every claim with the
refusal, reports it on the Node, in a metric and on readiness, and touches nothing), and
only files it certainly wrote are swept as orphans."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from test_kubelet_plugin import DRIVER, NODE, Node, node, result

from kubeletplugin.checkpoint import CheckpointFile
from kubeletplugin.checkpoint_journal import journal_line
from kubeletplugin.checkpoint_schema import this_release
from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin

__all__ = ["node"]

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def plugin_with(node: Node, registry: CollectorRegistry) -> KubeletPlugin:
    return KubeletPlugin(node.settings, node.client, MockBackend(node.settings.mock_gpus), registry)


def files_under(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a directory or socket)."""
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
        for path in sorted(root.rglob("*"))
    }


def newer_version(node: Node) -> tuple[str, str]:
    path = node.settings.checkpoint_path
    document = json.loads(path.read_bytes())
    document["data"].update(version=2, writer="9.1.0")
    document["data"]["claims"] = {}
    path.write_bytes(json.dumps(document).encode())
    return "checkpoint", "newer_version"


def truncated(node: Node) -> tuple[str, str]:
    path = node.settings.checkpoint_path
    path.write_bytes(path.read_bytes()[:-40])
    return "checkpoint", "corrupt"


def corrupt_journal_line(node: Node) -> tuple[str, str]:
    path = node.settings.checkpoint_path
    base = json.loads(path.read_bytes())["checksum"]
    line = journal_line(base, [], ["00000000-0000-4000-8000-000000000000"])
    journal = CheckpointFile(path, "boot-1").journal_path
    journal.write_bytes(line + line.replace(b'"delete"', b'"dElete"') + line)
    return "journal", "corrupt"


EXPECTED_IN_MESSAGE = {
    newer_version: ("schema version 2", "release 9.1.0", "rolled forward to 9.1.0"),
    truncated: ("truncated",),
    corrupt_journal_line: ("line 2 of 3",),
}


@pytest.mark.parametrize("damage", [newer_version, truncated, corrupt_journal_line])
async def test_a_checkpoint_it_must_not_use_is_refused_and_left_untouched(
    node: Node, damage: Callable[[Node], tuple[str, str]]
):
    claim = await node.claim("kept", [result("gpu-0", "1Gi")])
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        assert (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid].error == ""
    await node.kubelet.wait_deregistered(DRIVER)
    file, reason = damage(node)
    slices = await node.client.list(SLICES, field_selector=f"spec.nodeName={NODE}")
    assert slices["items"], "the plugin published before"
    state_before = files_under(node.settings.service_dir / "state")
    cdi_before, vgpu_before = files_under(node.cdi_dir), files_under(node.root / "vgpu")
    other = await node.claim("new", [result("gpu-1", "1Gi")])

    registry = CollectorRegistry()
    async with plugin_with(node, registry) as plugin:
        await node.kubelet.wait_registered(DRIVER)
        path = str(node.settings.checkpoint_path) + (".journal" if file == "journal" else "")
        prepared = await node.kubelet.prepare(DRIVER, [claim, other])
        unprepared = await node.kubelet.unprepare(DRIVER, [claim])
        errors = [prepared.claims[claim.uid].error, prepared.claims[other.uid].error]
        errors.append(unprepared.claims[claim.uid].error)
        for error in errors:
            assert path in error and "left untouched" in error
            assert all(part in error for part in EXPECTED_IN_MESSAGE[damage])
        assert f"default/new ({other.uid})" in errors[1]
        assert not prepared.claims[claim.uid].devices

        assert (
            registry.get_sample_value("vgpu_dra_state_refused", {"file": file, "reason": reason})
            == 1
        )
        others = [
            (f, r)
            for f in ("checkpoint", "journal")
            for r in ("newer_version", "corrupt")
            if (f, r) != (file, reason)
        ]
        for f, r in others:
            assert (
                registry.get_sample_value("vgpu_dra_state_refused", {"file": f, "reason": r}) == 0
            )
        readiness = plugin.readiness()
        assert readiness is not None and path in readiness

        await plugin.events.wait_idle()
        events = await node.client.list("/api/v1/namespaces/default/events")
        (event,) = [e for e in events["items"] if e["reason"] == "CheckpointRefused"]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "Node"
        assert event["involvedObject"]["name"] == NODE
        assert path in event["message"]

    assert files_under(node.settings.service_dir / "state") == state_before
    assert files_under(node.cdi_dir) == cdi_before
    assert files_under(node.root / "vgpu") == vgpu_before
    after = await node.client.list(SLICES, field_selector=f"spec.nodeName={NODE}")
    assert after["items"] == slices["items"]


def spec_file(node: Node, uid: str) -> Path:
    return node.cdi_dir / f"k8s.vgpu.hami.io-claim_{uid}.json"


async def test_after_a_reboot_only_specs_it_writes_are_swept(
    node: Node, caplog: pytest.LogCaptureFixture
):
    """A checkpoint of another boot reads empty, so every spec and cache dir is an
    orphan; a spec under the driver's name that this release would not have written
    (a later cdiVersion, another kind, not JSON) stays, with its cache dir."""
    claims = [await node.claim(f"c{n}", [result("gpu-0", "1Gi")]) for n in range(4)]
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        response = await node.kubelet.prepare(DRIVER, claims)
        assert all(entry.error == "" for entry in response.claims.values())
    await node.kubelet.wait_deregistered(DRIVER)
    swept, later, other_kind, damaged = claims
    for claim, change in ((later, {"cdiVersion": "1.1.0"}), (other_kind, {"kind": "x.io/y"})):
        document = json.loads(spec_file(node, claim.uid).read_text())
        spec_file(node, claim.uid).write_text(json.dumps({**document, **change}))
    spec_file(node, damaged.uid).write_text("{")
    left = [later, other_kind, damaged]
    kept = {claim.uid: spec_file(node, claim.uid).read_bytes() for claim in left}
    (node.root / "boot_id").write_text("boot-2\n")

    with caplog.at_level(logging.WARNING, logger="kubeletplugin.orphans"):
        async with node.plugin() as plugin:
            await node.kubelet.wait_registered(DRIVER)
            assert plugin.readiness() is None

    assert not spec_file(node, swept.uid).exists()
    assert not (node.root / "vgpu" / "claims" / swept.uid).exists()
    for claim in left:
        assert spec_file(node, claim.uid).read_bytes() == kept[claim.uid]
        assert (node.root / "vgpu" / "claims" / claim.uid).is_dir()
    logged = {r.claim_uid: r.problem for r in caplog.records if hasattr(r, "claim_uid")}
    assert set(logged) == {claim.uid for claim in left}
    assert "cdiVersion '1.1.0'" in logged[later.uid]


async def test_what_a_newer_release_added_survives_this_plugins_stores(node: Node):
    """A newer release that kept schema version 1 may add keys to the body and to a
    claim's record; this plugin keeps them through its own prepares (each store
    rewrites or journals the checkpoint) and answers the claim as recorded."""
    first = await node.claim("first", [result("gpu-0", "1Gi")])
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        answered = (await node.kubelet.prepare(DRIVER, [first])).claims[first.uid]
    await node.kubelet.wait_deregistered(DRIVER)
    path = node.settings.checkpoint_path
    body = json.loads(path.read_bytes())["data"]
    body.update(writer="0.9.0", placementHints={"gpu-0": [1, 2]})
    body["claims"][first.uid]["leaseRenewed"] = "2027-01-01T00:00:00Z"
    path.write_bytes(envelope(body))

    second = await node.claim("second", [result("gpu-1", "1Gi")])
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        assert (await node.kubelet.prepare(DRIVER, [second])).claims[second.uid].error == ""
        assert (await node.kubelet.prepare(DRIVER, [first])).claims[first.uid] == answered

    written = json.loads(path.read_bytes())["data"]
    assert written["writer"] == this_release()
    assert written["placementHints"] == {"gpu-0": [1, 2]}
    assert written["claims"][first.uid]["leaseRenewed"] == "2027-01-01T00:00:00Z"
    assert set(written["claims"]) == {first.uid, second.uid}


def envelope(body: dict) -> bytes:
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    checksum = hashlib.sha256(data).hexdigest().encode()
    return b'{"checksum":"' + checksum + b'","data":' + data + b"}"
