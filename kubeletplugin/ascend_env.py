"""The vNPU template an Ascend share's container gets: `ASCEND_VNPU_SPECS`.

HAMi's Ascend device plugin (Project-HAMi/ascend-device-plugin, `Allocate`)
gives a container `ASCEND_VISIBLE_DEVICES` (the physical NPU ids) and, on the
hard split, `ASCEND_VNPU_SPECS`: the template name of the first of its NPUs
whose entry in the scheduler's runtime JSON (`huawei.com/<chip>`: UUID, temp,
memory, core) names one. Ascend's docker runtime then creates a vNPU of that
template on the NPU `ASCEND_VISIBLE_DEVICES` names and gives the container the
vNPU instead of the chip, so the template's memory and AI Cores are all it can
use; a share of the whole chip names no template and gets the chip. DRA mode
has no pod annotation for a device plugin to read, so prepare writes the same
variable into the claim's CDI spec.

The template is the one HAMi's `trimMemory` names for the share's memory
(`VnpuChip.trim`), which the published valid values made one of the chip's
template sizes. One vNPU per container: a view of several NPUs with a template
among them is refused, as HAMi refuses a multi-NPU request that is not whole
chips ("vNPU not supported for multiple devices"). Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api.quantity import MIB
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_vendors import ascend_chip
from libvgpu.container_edits import EnvVar

VNPU_SPECS_ENV = "ASCEND_VNPU_SPECS"


@dataclass(frozen=True, slots=True)
class NpuShare:
    """One NPU of a container's view, in the container's device order."""

    uuid: str
    product: str
    memory_bytes: int | None
    """The share's memory; None = the whole chip."""


def vnpu_template(share: NpuShare) -> str:
    """The template the runtime creates for this share; "" for the whole chip or a chip
    HAMi has no templates for."""
    chip = ascend_chip(share.product)
    if chip is None or share.memory_bytes is None:
        return ""
    _, template = chip.trim(share.memory_bytes // MIB)
    return template


def vnpu_env(shares: Sequence[NpuShare], claim: str) -> tuple[EnvVar, ...]:
    """`ASCEND_VNPU_SPECS` for one container's NPUs, or nothing when none is a vNPU;
    InvalidParameterError naming the claim when a vNPU would share the container."""
    templates = [(share, vnpu_template(share)) for share in shares]
    named = [(share, template) for share, template in templates if template]
    if not named:
        return ()
    if len(shares) > 1:
        share, template = named[0]
        raise InvalidParameterError(
            f"claim {claim}",
            f"NPU {share.uuid} is a {template} vNPU share in a container that gets "
            f"{len(shares)} NPUs; the Ascend runtime makes one vNPU per container "
            f"({VNPU_SPECS_ENV}), so a multi-NPU share must take whole chips",
        )
    return (EnvVar(VNPU_SPECS_ENV, named[0][1]),)
