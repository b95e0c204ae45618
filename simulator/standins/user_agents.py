"""The User-Agent each control-plane stand-in sends, shaped like the real components'.

client-go sends `<binary>/<version> (<os>/<arch>) kubernetes/<commit>`; the stand-ins
put `simulator` where the commit goes, so the emulator's write counts
(simulator.apiserver.audit.WriteAudit) name them as the real components and a reader
of a request log can still tell them from real binaries.
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.36.2"
_PLATFORM = "(linux/amd64) simulator"

KUBE_SCHEDULER = f"kube-scheduler/{KUBERNETES_VERSION} {_PLATFORM}"
KUBE_CONTROLLER_MANAGER = f"kube-controller-manager/{KUBERNETES_VERSION} {_PLATFORM}"
KUBELET = f"kubelet/{KUBERNETES_VERSION} {_PLATFORM}"
