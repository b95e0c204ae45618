"""What the plugin's start finds on disk that its checkpoint does not name, and may remove.

A claim's CDI spec and cache dir are written after its PrepareStarted record
and removed before the record goes, so a spec or cache dir without a record
is what a reboot (the checkpoint of another boot reads empty) or a crash of
an older build left: start rolls it back. Each carries its own schema:

- A CDI spec file is the driver's by its name (`cdi.naming`:
  `k8s.vgpu.hami.io-claim_<claim uid>.json`) and says its format in
  `cdiVersion`. Only a spec this release would have written (a JSON object of
  our kind and a `cdiVersion` in `RECOGNISED_CDI_VERSIONS`, as 0.1.0 and this
  release write) is removed as an orphan. Anything else under our name (a
  newer release's spec of a later `cdiVersion`, a file edited or damaged) is
  left where it is and logged, and so is the claim's cache dir: deleting a spec
  a running container's restart needs is worse than leaving a stray file.
- A cache dir is `<cache root>/claims/<claim uid>/`, its libvgpu region file
  named by the record's `cache_nonce`, and the region's layout carries its own
  header version (libvgpu's). Entries of `claims/` not named by a claim uid
  are not the driver's and are left alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from pathlib import Path

from cdi.naming import CDI_KIND
from cdi.spec import CDI_VERSION
from cdi.writer import CdiSpecWriter
from dra_driver.objects.names import is_uuid
from libvgpu.cache_paths import CLAIMS_DIR

log = logging.getLogger(__name__)

RECOGNISED_CDI_VERSIONS = frozenset({CDI_VERSION})
"""The `cdiVersion`s of the specs this release and 0.1.0 write."""


def orphan_claims(known: Collection[str], cdi: CdiSpecWriter, cache_root: str) -> list[str]:
    """Claims with a spec or cache dir here but no record, whose files are certainly the
    driver's, for roll back (blocking: run it in a thread)."""
    strays = {uid for uid in cdi.list_claim_specs() if uid not in known}
    left = set()
    for uid in sorted(strays):
        path = cdi.spec_path(uid)
        problem = unrecognised_spec(path)
        if problem is not None:
            left.add(uid)
            log.warning(
                "CDI spec without a checkpoint record left alone: not one this release writes",
                extra={"claim_uid": uid, "path": str(path), "problem": problem},
            )
    strays.update(uid for uid in cache_dir_uids(Path(cache_root) / CLAIMS_DIR) if uid not in known)
    return sorted(strays - left)


def unrecognised_spec(path: Path) -> str | None:
    """Why the spec at `path` is not one this release writes; None when it is."""
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        return f"not readable as JSON: {error}"
    if not isinstance(document, dict):
        return "not a JSON object"
    if document.get("kind") != CDI_KIND:
        return f"kind {document.get('kind')!r}, not {CDI_KIND}"
    version = document.get("cdiVersion")
    if version not in RECOGNISED_CDI_VERSIONS:
        known = ", ".join(sorted(RECOGNISED_CDI_VERSIONS))
        return f"cdiVersion {version!r}, not one this release writes ({known})"
    return None


def cache_dir_uids(claims_dir: Path) -> list[str]:
    """The claim uids that name a directory in `claims_dir`."""
    if not claims_dir.is_dir():
        return []
    uids = []
    for entry in claims_dir.iterdir():
        if is_uuid(entry.name):
            uids.append(entry.name)
        else:
            log.info(
                "entry of the claims cache dir left alone: not named by a claim uid",
                extra={"path": str(entry)},
            )
    return uids
