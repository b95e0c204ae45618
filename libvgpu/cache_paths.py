"""Names of libvgpu shared-region cache files, and the way back from a name to its owner.

libvgpu fixes a region's limits when the first process creates the file, so
every claim (DRA) or container (legacy) gets a directory of its own and every
prepare a fresh file name. Every component placed in a path is validated
first: UIDs and container names come from the API server, and a path is never
built from a value that could hold `/` or `..`.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from enum import StrEnum

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.names import is_dns_label, is_uuid
from libvgpu.settings import LibvgpuPaths

CLAIMS_DIR = "claims"
CONTAINERS_DIR = "containers"
CACHE_SUFFIX = ".cache"

_NONCE = re.compile(r"[0-9a-f]{32}")


class CacheOwnerKind(StrEnum):
    CLAIM = "claim"
    CONTAINER = "container"


@dataclass(frozen=True)
class CacheLocation:
    """A cache directory on the host, where containers see it, and the file libvgpu creates."""

    host_dir: str
    container_dir: str
    file_name: str

    @property
    def container_file(self) -> str:
        return posixpath.join(self.container_dir, self.file_name)

    @property
    def host_file(self) -> str:
        return posixpath.join(self.host_dir, self.file_name)


@dataclass(frozen=True)
class CacheFileKey:
    """Who a cache file belongs to: a claim (uid) or a legacy container (pod uid + name)."""

    kind: CacheOwnerKind
    uid: str
    container: str = ""


def validate_uid(value: str, field: str) -> str:
    """Accept a Kubernetes UID (an RFC 4122 UUID in lower case), nothing else."""
    if not is_uuid(value):
        raise InvalidParameterError(field, f"not a Kubernetes UID: {value!r}")
    return value


def validate_container_name(value: str, field: str = "container") -> str:
    """Accept a container name (an RFC 1123 label); it never holds `_`, so `<uid>_<name>` splits."""
    if not is_dns_label(value):
        raise InvalidParameterError(field, f"not a container name: {value!r}")
    return value


def validate_nonce(value: str) -> str:
    if not isinstance(value, str) or not _NONCE.fullmatch(value):
        raise InvalidParameterError("cacheNonce", f"not 32 lower-case hex digits: {value!r}")
    return value


def claim_cache_location(paths: LibvgpuPaths, claim_uid: str, nonce: str) -> CacheLocation:
    """`<cache root>/claims/<claimUID>/<nonce>.cache`, mounted at the same path (HAMi DRA)."""
    host_dir = posixpath.join(
        paths.cache_root, CLAIMS_DIR, validate_uid(claim_uid, "claim.metadata.uid")
    )
    return CacheLocation(host_dir, host_dir, validate_nonce(nonce) + CACHE_SUFFIX)


def legacy_cache_location(
    paths: LibvgpuPaths, pod_uid: str, container_name: str, nonce: str
) -> CacheLocation:
    """`<cache root>/containers/<podUID>_<ctr>/`, mounted at HAMi's container cache dir."""
    leaf = f"{validate_uid(pod_uid, 'pod.metadata.uid')}_{validate_container_name(container_name)}"
    return CacheLocation(
        posixpath.join(paths.cache_root, CONTAINERS_DIR, leaf),
        paths.legacy_container_cache_dir,
        validate_nonce(nonce) + CACHE_SUFFIX,
    )


def owner_dir_key(cache_root: str, directory: str) -> CacheFileKey | None:
    """The owner of a cache directory, or None when the path is not one of ours."""
    relative = _relative_parts(cache_root, directory)
    if relative is None or len(relative) != 2:
        return None
    return _key_for(relative[0], relative[1])


def cache_file_key(cache_root: str, path: str) -> CacheFileKey | None:
    """The owner of a cache file path, or None for anything else under the root."""
    relative = _relative_parts(cache_root, path)
    if relative is None or len(relative) != 3 or not relative[2].endswith(CACHE_SUFFIX):
        return None
    if relative[2].startswith("."):
        return None
    return _key_for(relative[0], relative[1])


def _relative_parts(cache_root: str, path: str) -> list[str] | None:
    root = posixpath.normpath(cache_root)
    normal = posixpath.normpath(path)
    if not (root.startswith("/") and normal.startswith("/")):
        return None
    if posixpath.commonpath([root, normal]) != root or normal == root:
        return None
    return posixpath.relpath(normal, root).split("/")


def _key_for(area: str, leaf: str) -> CacheFileKey | None:
    if area == CLAIMS_DIR and is_uuid(leaf):
        return CacheFileKey(CacheOwnerKind.CLAIM, leaf)
    if area == CONTAINERS_DIR:
        pod_uid, sep, container = leaf.partition("_")
        if sep and is_uuid(pod_uid) and is_dns_label(container):
            return CacheFileKey(CacheOwnerKind.CONTAINER, pod_uid, container)
    return None
