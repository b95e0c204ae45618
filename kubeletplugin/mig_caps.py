"""The minors of a MIG instance's access capabilities, read as the NVIDIA container
toolkit reads them.

The driver exposes each GPU instance's and compute instance's access capability
as `/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>/access` and
`.../gi<gi>/ci<ci>/access`, whose `DeviceFileMinor: <N>` line names the node
`/dev/nvidia-caps/nvidia-cap<N>` a container needs to open the instance.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import DriverError

NVIDIA_CAPABILITIES = Path("/proc/driver/nvidia/capabilities")
_MINOR = "DeviceFileMinor:"


class MigCapabilityError(DriverError):
    """An access capability file is missing or names no minor."""


def mig_cap_minors(
    gpu_minor: int, gpu_instance: int, compute_instance: int, root: Path = NVIDIA_CAPABILITIES
) -> tuple[int, int]:
    """The minors of the GPU instance's and the compute instance's access nodes."""
    gi_dir = root / f"gpu{gpu_minor}" / "mig" / f"gi{gpu_instance}"
    return _minor(gi_dir / "access"), _minor(gi_dir / f"ci{compute_instance}" / "access")


def _minor(path: Path) -> int:
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as error:
        raise MigCapabilityError(f"cannot read MIG capability {path}: {error}") from None
    for line in text.splitlines():
        if line.startswith(_MINOR):
            value = line.removeprefix(_MINOR).strip()
            if value.isdigit():
                return int(value)
    raise MigCapabilityError(f"MIG capability {path} names no {_MINOR} line")
