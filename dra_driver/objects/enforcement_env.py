"""HAMi-core's environment variables that turn a container's enforcement off.

Defined below `libvgpu` (which re-exports them from `libvgpu.settings`) because
`dra-driver status` reads them from legacy pods' env and the layering keeps
`dra_driver` from importing `libvgpu`; the webhook, the device plugin, the CDI
env builder and status must spell them alike.
"""

from __future__ import annotations

DISABLE_CONTROL_ENV = "CUDA_DISABLE_CONTROL"
"""Read by HAMi's device plugin: a Go-true value skips the `ld.so.preload` mount, so
libvgpu is never loaded and no limit holds."""
CORE_POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"
"""Read by libvgpu, case-insensitively: `force` always throttles, `disable` never does."""
CORE_POLICY_DISABLE = "disable"
"""The `GPU_CORE_UTILIZATION_POLICY` value that lifts the core limit."""
