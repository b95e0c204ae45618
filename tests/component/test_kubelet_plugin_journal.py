"""A node with enough claims prepared that the checkpoint journals: a restart keeps them all.

Past `JOURNAL_FROM_BYTES` of snapshot the plugin appends its changes to the
checkpoint's journal; what the restarted plugin reads back (snapshot plus
journal) must be every claim still prepared, answered as the first time.
"""

from __future__ import annotations

from test_kubelet_plugin import DRIVER, Node, node, result

from kubeletplugin.checkpoint import CheckpointFile, decode_checkpoint

__all__ = ["node"]

CLAIMS = 160
"""One-device claims whose snapshot passes 64 KiB (about 540 bytes each)."""


async def test_claims_prepared_through_the_journal_survive_a_restart(node: Node):
    claims = [
        await node.claim(f"many-{n}", [result(f"gpu-{n % 2}", "64Mi")]) for n in range(CLAIMS)
    ]
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        first = {}
        for start in range(0, CLAIMS, 40):
            batch = claims[start : start + 40]
            response = await node.kubelet.prepare(DRIVER, batch)
            assert all(entry.error == "" for entry in response.claims.values())
            first.update(response.claims)
        gone = claims[:10]
        await node.kubelet.unprepare(DRIVER, gone)
        journal = CheckpointFile(node.settings.checkpoint_path, "boot-1").journal_path
        assert journal.exists(), "the last stores were appended to the journal"
        snapshot = decode_checkpoint(node.settings.checkpoint_path.read_bytes())
        assert set(snapshot.claims) != {c.uid for c in claims[10:]}
    await node.kubelet.wait_deregistered(DRIVER)
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        assert {r.uid for r in plugin.preparer.prepared_records()} == {c.uid for c in claims[10:]}
        again = await node.kubelet.prepare(DRIVER, claims[10:])
        assert {uid: again.claims[uid] for uid in again.claims} == {
            c.uid: first[c.uid] for c in claims[10:]
        }
        assert len(list(node.cdi_dir.glob("*.json"))) == CLAIMS - 10
