"""HAMi's `migProfileAllowlist`: which MIG profiles the device plugin registers per card model.

Read from the `nvidia:` section of HAMi's `device-config.yaml`, the file HAMi's
device plugin and scheduler read too. Checked as HAMi's `ValidateMigProfileAllowlist`
checks it (every entry names models and profiles; a profile is `<n>g.<rest>`), and a
wrong entry names its field. An entry applies to a card whose model contains
one of its `models` (HAMi's `containsModel`); the first such entry alone
decides (HAMi stops at it). The device plugin filters what it registers by it;
the legacy scheduler, as HAMi's (`InitNvidiaDevice`), only refuses an invalid one
at start: its Fit reads the profiles the node registered. Pure apart from
`load_mig_allowlist`'s file read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.yaml_files import read_yaml_document

FIELD = "nvidia.migProfileAllowlist"


@dataclass(frozen=True, slots=True)
class AllowedMigProfiles:
    """One allowlist entry (Go `device.AllowedMigProfiles`)."""

    models: tuple[str, ...]
    profiles: tuple[str, ...]


MigAllowlist = tuple[AllowedMigProfiles, ...]


def allowed_profiles(allowlist: MigAllowlist | None, model: str) -> tuple[str, ...] | None:
    """The profile names allowed on a card of `model`: None when no allowlist is configured
    (every discovered profile), empty when no entry names the model."""
    if allowlist is None:
        return None
    for entry in allowlist:
        if any(name in model for name in entry.models):
            return entry.profiles
    return ()


def parse_mig_allowlist(document: Any, source: str = "device config") -> MigAllowlist | None:
    """The allowlist of a loaded device-config document; None when it sets none."""
    section = document.get("nvidia") if isinstance(document, dict) else None
    if not isinstance(section, dict) or section.get("migProfileAllowlist") is None:
        return None
    raw = section["migProfileAllowlist"]
    if not isinstance(raw, list):
        raise InvalidParameterError(f"{source}: {FIELD}", "must be a list of {models, profiles}")
    return tuple(_entry(item, f"{source}: {FIELD}[{i}]") for i, item in enumerate(raw))


def load_mig_allowlist(path: Path | None) -> MigAllowlist | None:
    """The allowlist of `device-config.yaml`; None without a file or without the key."""
    if path is None:
        return None
    return parse_mig_allowlist(read_yaml_document(path), str(path))


def _entry(item: Any, where: str) -> AllowedMigProfiles:
    if not isinstance(item, dict):
        raise InvalidParameterError(where, "must be a mapping with models and profiles")
    models = _names(item.get("models"), f"{where}.models")
    profiles = _names(item.get("profiles"), f"{where}.profiles")
    for position, profile in enumerate(profiles):
        _check_profile(profile, f"{where}.profiles[{position}]")
    return AllowedMigProfiles(models, profiles)


def _names(value: Any, where: str) -> tuple[str, ...]:
    """A non-empty list of strings (HAMi: "must define models and profiles")."""
    if not isinstance(value, list) or not value:
        raise InvalidParameterError(where, "must be a non-empty list")
    if not all(isinstance(name, str) for name in value):
        raise InvalidParameterError(where, "must list strings")
    return tuple(value)


def _check_profile(profile: str, where: str) -> None:
    """HAMi's rule: a `.` splits the name, and the part before it is at least two
    characters ending in `g` (`1g`, `3g`)."""
    head, dot, _ = profile.partition(".")
    if not dot or len(head) < 2 or not head.endswith("g"):
        raise InvalidParameterError(where, f"invalid MIG profile {profile!r}")
