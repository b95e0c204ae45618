"""HAMi's device config (`device-config.yaml`) and the scheduler's flags.

A cluster that swaps HAMi's scheduler for ours keeps its ConfigMap, so the file
is read in HAMi's format: camelCase keys under one section per vendor
(`nvidia:`, `hygon:`, `iluvatars:`, ...), each read by its vendor backend
(`dra_driver.engine.vendor_backends.registry`); keys this side does not use
are ignored. Values are checked and a wrong one names its key. Reference:
hami-protocol.md §1, §9; hami-vendors.md. `nvidia.migProfileAllowlist` is checked
and otherwise unused, as in HAMi's scheduler: the device plugin filters the MIG
profiles it registers by it, and Fit reads what the node registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from dra_driver.engine.engine import EngineSettings
from dra_driver.engine.vendor_backends.nvidia import CorePolicy, NvidiaConfig
from dra_driver.engine.vendor_backends.registry import (
    FAMILIES,
    BackendRegistry,
    build_backends,
    read_sections,
)
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.objects.mig_allowlist import parse_mig_allowlist
from dra_driver.objects.node_lock import DEFAULT_LOCK_TIMEOUT
from dra_driver.objects.yaml_files import read_yaml_document

DEFAULT_SCHEDULER_NAME = "hami-scheduler"
"""The chart's `--scheduler-name`."""


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """The whole file: the `nvidia:` section and every vendor section, validated."""

    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    sections: Mapping[str, Any] | None = None
    """Validated vendor sections by name (`nvidia` included); None when no file was
    given, so that HAMi's default device config applies."""

    def backends(self, enabled_flags: frozenset[str] = frozenset()) -> BackendRegistry:
        """The vendor backends this config and the `--enable-*` flags select."""
        return build_backends(self.sections, enabled_flags)


def _file_model() -> type[BaseModel]:
    """The file's shape as one model, a field per vendor section (the first family of a
    section that several share), for the generated configuration reference."""
    fields: dict[str, Any] = {}
    for family in FAMILIES:
        if family.section not in fields:
            empty = list if getattr(family.model, "__origin__", None) is list else family.model
            fields[family.section] = (family.model, Field(default_factory=empty))
    return create_model(
        "DeviceConfigFile",
        __config__=ConfigDict(extra="ignore"),
        __doc__="HAMi's device-config.yaml: one section per vendor; a section left out "
        "leaves its vendor off (NVIDIA keeps its defaults); no file at all is HAMi's "
        "built-in default config.",
        **fields,
    )


DeviceConfigFile = _file_model()


def parse_device_config(document: Any, source: str = "device config") -> DeviceConfig:
    """Validate a loaded YAML document; an error names the key and the reason."""
    sections = read_sections(document, source)
    if sections is None:
        return DeviceConfig()
    parse_mig_allowlist(document, source)
    return DeviceConfig(nvidia=sections["nvidia"], sections=sections)


def load_device_config(path: Path | None) -> DeviceConfig:
    """Read `device-config.yaml`; None means HAMi's defaults."""
    if path is None:
        return DeviceConfig()
    return parse_device_config(read_yaml_document(path), str(path))


@dataclass(frozen=True, slots=True)
class CallerAuthSettings:
    """Who may call /filter, /bind, /preempt and /webhook (HAMi#3030: anyone could bind).

    The extender's and the webhook's callers are told apart: kube-scheduler calls the first
    two, the API server's admission client the third, and the API server sends a client
    certificate only where its administrator configures one (never on EKS, GKE or AKS)."""

    enabled: bool = True
    """Off only for a loopback simulator or a test that does not exercise it."""
    allowed_callers: frozenset[str] = frozenset()
    """Usernames a TokenReview may answer and client-certificate CNs let into /filter and
    /bind (kube-scheduler's)."""
    allowed_webhook_callers: frozenset[str] = frozenset()
    """The same for /webhook (the API server's admission client)."""
    open_webhook: bool = False
    """/webhook answers any caller, for API servers that cannot present a client
    certificate: its answer has no side effect and goes back only to its caller
    (docs/security.md). /filter, /bind and /preempt stay authenticated."""
    token_review_ttl: timedelta = timedelta(seconds=10)
    """How long a TokenReview answer is reused, so /filter does not wait on the API server
    every call; short, so a revoked token stops working soon."""


@dataclass(frozen=True, slots=True)
class LegacySettings:
    """Everything the extender and webhook are told (HAMi's scheduler flags + device config)."""

    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    engine: EngineSettings = field(default_factory=EngineSettings)
    node_lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
    node_lock_retry_timeout: timedelta = timedelta(seconds=20)
    """How long a Bind waits for a node lock another pod holds (released by its Allocate)
    before failing; below kube-scheduler's extender httpTimeout (30 s in HAMi's chart)."""
    force_overwrite_default_scheduler: bool = True
    handshake_timeout: timedelta = timedelta(seconds=60)
    """A Requesting handshake older than this, with no allocatable GPUs, means the node's
    device plugin is gone (HAMi's CheckHealth)."""
    health_interval_s: float = 15.0
    """How often handshake ages are re-evaluated (HAMi's registration ticker)."""
    node_label_selector: str | None = None
    """Only nodes matching it are read (HAMi's `--node-label-selector`); others are unregistered."""
    caller_auth: CallerAuthSettings = field(default_factory=CallerAuthSettings)
    enforcement_opt_out_namespaces: frozenset[str] = frozenset()
    """Namespaces whose GPU containers may set `CUDA_DISABLE_CONTROL` and
    `GPU_CORE_UTILIZATION_POLICY` themselves: turning HAMi-core's enforcement off is an
    administrator's decision, so everywhere else the webhook refuses both."""
    mixed_mode: bool = False
    """The nodes also serve their GPUs to DRA claims: count the claims' allocations (by
    GPU uuid) in Filter and check again under the node lock at Bind."""
    enabled_vendor_flags: frozenset[str] = frozenset()
    """The `--enable-<vendor>` flags given (e.g. `enable-iluvatar`), without dashes."""

    @property
    def nvidia(self) -> NvidiaConfig:
        return self.device_config.nvidia

    def backends(self) -> BackendRegistry:
        """Every enabled vendor backend, NVIDIA first."""
        return self.device_config.backends(self.enabled_vendor_flags)

    def vendors(self) -> VendorRegistry:
        return self.backends().vendors()


__all__ = [
    "CallerAuthSettings",
    "CorePolicy",
    "DeviceConfig",
    "DeviceConfigFile",
    "LegacySettings",
    "NvidiaConfig",
    "load_device_config",
    "parse_device_config",
]
