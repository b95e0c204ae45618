"""The controller keeps each watched object compact: managedFields dropped, everything
else equal, and keys and short texts shared between objects decoded apart."""

from __future__ import annotations

import json

from controller.object_state import SHARED_TEXT_MAX, compact_object

POD = {
    "metadata": {
        "name": "p",
        "namespace": "team",
        "resourceVersion": "4711",
        "managedFields": [{"manager": "kubectl", "operation": "Update"}],
    },
    "spec": {"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]},
    "status": {"message": "x" * (SHARED_TEXT_MAX + 1), "phase": "Pending"},
}


def test_managed_fields_go_and_the_rest_stays_equal() -> None:
    decoded = json.loads(json.dumps(POD))
    kept = compact_object(decoded)
    assert "managedFields" not in kept["metadata"]
    assert kept == {
        **POD,
        "metadata": {"name": "p", "namespace": "team", "resourceVersion": "4711"},
    }
    assert decoded["metadata"]["managedFields"] == POD["metadata"]["managedFields"]


def test_keys_and_short_texts_are_shared_between_objects() -> None:
    first = compact_object(json.loads(json.dumps(POD)))
    second = compact_object(json.loads(json.dumps(POD)))
    [first_key] = [k for k in first["spec"]["tolerations"][0] if k == "operator"]
    [second_key] = [k for k in second["spec"]["tolerations"][0] if k == "operator"]
    assert first_key is second_key
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["status"]["phase"] is second["status"]["phase"]
    assert first["status"]["message"] is not second["status"]["message"]


def test_a_resource_version_is_not_shared() -> None:
    first = compact_object(json.loads(json.dumps(POD)))
    second = compact_object(json.loads(json.dumps(POD)))
    assert first["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    assert first["metadata"]["resourceVersion"] is not second["metadata"]["resourceVersion"]
