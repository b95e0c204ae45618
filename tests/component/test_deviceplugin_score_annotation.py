"""The device plugin publishes the GPUs' pair scores (`hami.io/node-nvidia-score`)
next to the register annotation, as HAMi's does for `topology-aware`, from the mock
file's links; a node whose GPUs no longer report links loses the stale score."""

from __future__ import annotations

from deviceplugin_rig import RESOURCE, UUID_A, UUID_B, bounded, node_rig

from api.hami_annotations import NODE_NVIDIA_REGISTER, NODE_NVIDIA_SCORE, decode_pair_scores

UUID_C = "GPU-00000000-0000-0000-0000-00000000000c"
LINKED = f"""
gpus:
  - uuid: {UUID_A}
    index: 0
    links: [{{peer: {UUID_B}, p2p: single, nvlinks: 4}}, {{peer: {UUID_C}, p2p: system}}]
  - uuid: {UUID_B}
    index: 1
    links: [{{peer: {UUID_A}, p2p: single, nvlinks: 4}}, {{peer: {UUID_C}, p2p: system}}]
  - uuid: {UUID_C}
    index: 2
    links: [{{peer: {UUID_A}, p2p: system}}, {{peer: {UUID_B}, p2p: system}}]
"""
UNLINKED = f"""
gpus:
  - {{uuid: {UUID_A}, index: 0}}
  - {{uuid: {UUID_B}, index: 1}}
  - {{uuid: {UUID_C}, index: 2}}
"""


def annotations(node: dict) -> dict[str, str]:
    return node["metadata"].get("annotations") or {}


async def test_the_score_annotation_follows_the_gpus_links() -> None:
    async with node_rig(gpus=LINKED) as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        scored = await bounded(rig.wait_node(lambda n: NODE_NVIDIA_SCORE in annotations(n)))
        rig.mock_gpus.write_text(UNLINKED)
        unscored = await bounded(rig.wait_node(lambda n: NODE_NVIDIA_SCORE not in annotations(n)))

    assert decode_pair_scores(annotations(scored)[NODE_NVIDIA_SCORE]) == {
        UUID_A: {UUID_B: 450, UUID_C: 10},
        UUID_B: {UUID_A: 450, UUID_C: 10},
        UUID_C: {UUID_A: 10, UUID_B: 10},
    }
    assert NODE_NVIDIA_REGISTER in annotations(unscored)
