"""A list answer's JSON, built from each object's own encoding, kept per object version.

Encoding a 10,000-pod list anew on every request made the emulator spend most of a
`dra-driver status` answer in `json.dumps`; a real kube-apiserver serves lists from its
watch cache. An object's JSON is fixed by what it shows as (the resource's presenter:
core or events.k8s.io Events) and its uid and resourceVersion, since every change makes
a new version; so each version is encoded once, and a list is the page's head with the
encoded items joined in. Bounded: past `max_entries` the table starts afresh.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any


def dumps(obj: Any) -> bytes:
    """Compact JSON, as the server writes every answer."""
    return json.dumps(obj, separators=(",", ":")).encode()


class ListEncoder:
    """Per (resource, uid, resourceVersion): the object's JSON; lists assembled from it."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self._encoded: dict[tuple[Hashable, str, str], bytes] = {}
        self._max_entries = max_entries

    def encode(self, resource_key: Hashable, page: dict[str, Any]) -> bytes:
        """The page as `dumps(page)` would write it, items last."""
        head = dumps({key: value for key, value in page.items() if key != "items"})
        items = b",".join(self._item(resource_key, obj) for obj in page.get("items") or [])
        return head[:-1] + b',"items":[' + items + b"]}"

    def _item(self, resource_key: Hashable, obj: dict[str, Any]) -> bytes:
        metadata = obj.get("metadata") or {}
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if not uid or not version:
            return dumps(obj)
        key = (resource_key, str(uid), str(version))
        encoded = self._encoded.get(key)
        if encoded is None:
            if len(self._encoded) >= self._max_entries:
                self._encoded.clear()
            encoded = self._encoded[key] = dumps(obj)
        return encoded
