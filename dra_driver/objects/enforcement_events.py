"""Event reasons that say whether a share's libvgpu enforcement is on, shared by writer and readers.

The kubelet plugin records one of them on a claim whenever a prepare meets an
opt-out (`disableControl`, `coreLimitPolicy: disable`); `dra-driver status` reads
them back to mark the shares that run without limits, so both must spell them alike.
"""

from __future__ import annotations

ENFORCEMENT_DISABLED = "VGPUEnforcementDisabled"
"""Normal: an opt-out was honoured; the message names the fields and who allowed it."""
OPT_OUT_IGNORED = "VGPUConfigOptOutIgnored"
"""Warning: a claim's own opt-out was dropped and its limits stay."""
