"""Codec of `hami.io/node-nvidia-score` = `[{"uuid":..,"score":{uuid:int}}]`: GPU link scores.

HAMi's device plugin publishes, per GPU, a score for the link to every
peer (NVLink 100 per link, PCIe 10..60), which its scheduler's topology
policy reads. Owns the JSON format only; computing the scores from NVML
is the device plugin's. Calls `keys` and `go_compat` only.
"""

from __future__ import annotations

from collections.abc import Mapping

from api.hami_annotations.go_compat import (
    INT64_BOUNDS,
    AnnotationDecodeError,
    check_int,
    go_struct_fields,
    json_array,
    json_object,
    load_json,
    marshal_go_json,
)
from api.hami_annotations.keys import NODE_NVIDIA_SCORE


def encode_pair_scores(scores: Mapping[str, Mapping[str, int]]) -> str:
    """The JSON HAMi's device plugin writes: devices in the given order, peers sorted
    (Go sorts map keys), both fields always there (`DeviceScore` has no `omitempty`,
    so a GPU without peers is `"score":{}`)."""
    entries = []
    for uuid, peers in scores.items():
        for peer, score in peers.items():
            check_int(f"score {uuid}->{peer}", score, INT64_BOUNDS)
        entries.append({"uuid": uuid, "score": dict(sorted(peers.items()))})
    return marshal_go_json(entries)


def decode_pair_scores(value: str) -> dict[str, dict[str, int]]:
    """Map each GPU UUID to its peers' link scores (NVLink 100 per link, PCIe 10..60)."""
    annotation = NODE_NVIDIA_SCORE
    document = load_json(value, annotation)
    if document is None:
        return {}
    scores: dict[str, dict[str, int]] = {}
    for position, item in enumerate(json_array(document, annotation, "value")):
        where = f"entry {position}"
        entry = go_struct_fields(item, {"uuid": "uuid", "score": "score"}, annotation, where)
        uuid = entry.get("uuid", "")
        if not isinstance(uuid, str):
            raise AnnotationDecodeError(annotation, f"{where} uuid must be a string")
        if uuid in scores:
            raise AnnotationDecodeError(annotation, f"device {uuid!r} is listed twice")
        peers = json_object(entry.get("score", {}), annotation, f"{where} score")
        for peer, score in peers.items():
            if type(score) is not int or not INT64_BOUNDS[0] <= score <= INT64_BOUNDS[1]:
                raise AnnotationDecodeError(
                    annotation, f"score {uuid}->{peer} must be an integer, got {score!r}"
                )
        scores[uuid] = dict(peers)
    return scores
