"""HAMi's annotation protocol: the keys, and codecs byte-exact with HAMi's Go code.

HAMi's scheduler, device plugin and monitor coordinate through node and pod
annotations. A component that shares a cluster with them, or stands in for
one of them, must read and write the same bytes, so every codec here follows
HAMi (`pkg/device/devices.go`, `pkg/util/nodelock`, the NVIDIA register and
handshake code) and says where it is deliberately stricter. Pure functions.

This package is the protocol's one public surface: importers use
`from api.hami_annotations import X` (or the package as `keys`) and never
reach into its modules, which are cut by annotation:

- `keys`: every key and label, and the enumerated values some take;
- `node_register`: `hami.io/node-nvidia-register`, the registered GPUs;
- `pod_devices`: `hami.io/vgpu-devices-to-allocate` and `-allocated`;
- `node_lock`: `hami.io/mutex.lock`;
- `handshake`: `hami.io/node-handshake`;
- `pair_scores`: `hami.io/node-nvidia-score`, GPU link scores;
- `mig_allocations`: `hami.io/vgpu-mig-allocations`, the MIG slices reserved;
- `go_compat`: the Go behaviour they share (strconv, encoding/json) and
  `AnnotationDecodeError`.

Each codec calls only `keys` and `go_compat`; none calls another codec.
"""

from __future__ import annotations

from api.hami_annotations.go_compat import AnnotationDecodeError, annotation_is_true
from api.hami_annotations.handshake import (
    Handshake,
    HandshakePhase,
    decode_handshake,
    encode_handshake,
)
from api.hami_annotations.keys import (
    BIND_PHASE,
    BIND_TIME,
    DEVICE_CORDON,
    DEVICE_SCORING_WEIGHTS,
    GPU_SCHEDULER_POLICY,
    NO_USE_GPU_TYPE,
    NO_USE_GPU_UUID,
    NODE_HANDSHAKE,
    NODE_LOCK,
    NODE_NVIDIA_REGISTER,
    NODE_NVIDIA_SCORE,
    NODE_SCHEDULER_POLICY,
    NUMA_BIND,
    NVIDIA_DEVICE_TYPE,
    SCHEDULER_ROLE_LABEL,
    USE_GPU_TYPE,
    USE_GPU_UUID,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_MIG_ALLOCATIONS,
    VGPU_MODE,
    VGPU_NODE,
    VGPU_TIME,
    WEBHOOK_LABEL,
    WEBHOOK_LABEL_IGNORE,
    BindPhase,
    DeviceMode,
)
from api.hami_annotations.mig_allocations import (
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
)
from api.hami_annotations.node_lock import NodeLock, decode_node_lock, encode_node_lock
from api.hami_annotations.node_register import (
    MigPlacement,
    MigProfile,
    RegisteredDevice,
    decode_node_devices,
    decode_node_devices_json,
    decode_node_devices_legacy,
    encode_node_devices,
)
from api.hami_annotations.pair_scores import decode_pair_scores, encode_pair_scores
from api.hami_annotations.pod_devices import (
    ContainerDevice,
    PodDevices,
    decode_pod_devices,
    encode_pod_devices,
)

__all__ = [
    "BIND_PHASE",
    "BIND_TIME",
    "DEVICE_CORDON",
    "DEVICE_SCORING_WEIGHTS",
    "GPU_SCHEDULER_POLICY",
    "NODE_HANDSHAKE",
    "NODE_LOCK",
    "NODE_NVIDIA_REGISTER",
    "NODE_NVIDIA_SCORE",
    "NODE_SCHEDULER_POLICY",
    "NO_USE_GPU_TYPE",
    "NO_USE_GPU_UUID",
    "NUMA_BIND",
    "NVIDIA_DEVICE_TYPE",
    "SCHEDULER_ROLE_LABEL",
    "USE_GPU_TYPE",
    "USE_GPU_UUID",
    "VGPU_DEVICES_ALLOCATED",
    "VGPU_DEVICES_TO_ALLOCATE",
    "VGPU_MIG_ALLOCATIONS",
    "VGPU_MODE",
    "VGPU_NODE",
    "VGPU_TIME",
    "WEBHOOK_LABEL",
    "WEBHOOK_LABEL_IGNORE",
    "AnnotationDecodeError",
    "BindPhase",
    "ContainerDevice",
    "DeviceMode",
    "Handshake",
    "HandshakePhase",
    "MigAllocation",
    "MigPlacement",
    "MigProfile",
    "NodeLock",
    "PodDevices",
    "RegisteredDevice",
    "annotation_is_true",
    "decode_handshake",
    "decode_mig_allocations",
    "decode_node_devices",
    "decode_node_devices_json",
    "decode_node_devices_legacy",
    "decode_node_lock",
    "decode_pair_scores",
    "decode_pod_devices",
    "encode_handshake",
    "encode_mig_allocations",
    "encode_node_devices",
    "encode_node_lock",
    "encode_pair_scores",
    "encode_pod_devices",
]
