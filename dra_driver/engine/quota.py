"""Namespace quota as HAMi enforces it: ResourceQuota `limits.<memory>` and
`limits.<cores>` of a vendor, checked against what the namespace already holds."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class NamespaceQuota:
    """Limits in MiB and core percent (None = unlimited) and current use."""

    memory_limit_mib: int | None = None
    cores_limit: int | None = None
    memory_used_mib: int = 0
    cores_used: int = 0

    def fits(self, memory_mib: int, cores: int) -> bool:
        if self.memory_limit_mib is not None and (
            self.memory_used_mib + memory_mib > self.memory_limit_mib
        ):
            return False
        return self.cores_limit is None or self.cores_used + cores <= self.cores_limit


@dataclass(slots=True)
class QuotaLedger:
    """Quotas by (namespace, vendor); namespaces without one are unlimited."""

    quotas: dict[tuple[str, str], NamespaceQuota] = field(default_factory=dict)

    def fits(self, namespace: str, vendor: str, memory_mib: int, cores: int) -> bool:
        quota = self.quotas.get((namespace, vendor))
        return quota is None or quota.fits(memory_mib, cores)

    def charge(self, namespace: str, vendor: str, memory_mib: int, cores: int) -> None:
        quota = self.quotas.get((namespace, vendor))
        if quota is not None:
            quota.memory_used_mib += memory_mib
            quota.cores_used += cores
