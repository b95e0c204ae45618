"""The components' REST layer loads only the official client's asyncio half (idle memory on
nodes), and the rest of the package still imports on demand in the same process."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import dra_driver.kube.rest
loaded = sorted(name for name in sys.modules if name.startswith("kubernetes."))
print("sync client loaded:", "kubernetes.client" in sys.modules)
print("dynamic loaded:", "kubernetes.dynamic" in sys.modules)
import kubernetes
from kubernetes import config, watch
print("on demand:", kubernetes.client.CoreV1Api.__name__, config.load_kube_config.__name__,
      watch.Watch.__name__)
"""


def test_the_rest_layer_leaves_the_sync_client_unloaded_until_asked_for() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == [
        "sync client loaded: False",
        "dynamic loaded: False",
        "on demand: CoreV1Api load_kube_config Watch",
    ]
