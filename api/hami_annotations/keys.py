"""HAMi's annotation and label keys, and the fixed values some of them take.

Owns the names only: every key HAMi's scheduler, device plugin and monitor
read or write on nodes and pods, spelled once so that no component can
drift from HAMi's spelling. Calls nothing; the codecs next to it import it.
"""

from __future__ import annotations

from enum import StrEnum

# Node annotations.
NODE_NVIDIA_REGISTER = "hami.io/node-nvidia-register"
NODE_HANDSHAKE = "hami.io/node-handshake"
NODE_NVIDIA_SCORE = "hami.io/node-nvidia-score"
NODE_LOCK = "hami.io/mutex.lock"
DEVICE_CORDON = "hami.io/device-cordon"

# Pod annotations written by the scheduler extender and the device plugin.
VGPU_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
VGPU_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
VGPU_MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"

# Pod annotations a user sets to steer placement.
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"
USE_GPU_TYPE = "nvidia.com/use-gputype"
NO_USE_GPU_TYPE = "nvidia.com/nouse-gputype"
USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NO_USE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
NUMA_BIND = "nvidia.com/numa-bind"
VGPU_MODE = "nvidia.com/vgpu-mode"

# Labels.
WEBHOOK_LABEL = "hami.io/webhook"
WEBHOOK_LABEL_IGNORE = "ignore"
SCHEDULER_ROLE_LABEL = "hami.io/scheduler-role"

# The device type HAMi's NVIDIA backend writes into pod device lists.
NVIDIA_DEVICE_TYPE = "NVIDIA"


class BindPhase(StrEnum):
    """Values of `hami.io/bind-phase`."""

    ALLOCATING = "allocating"
    SUCCESS = "success"
    FAILED = "failed"


class DeviceMode(StrEnum):
    """Values of a registered device's `mode`."""

    HAMI_CORE = "hami-core"
    MIG = "mig"
    MPS = "mps"
