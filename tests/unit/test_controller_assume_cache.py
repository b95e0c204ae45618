"""The assume cache: own writes are visible before the watch delivers them, never after."""

from __future__ import annotations

from typing import Any

from dra_driver.kube.assume import AssumeCache
from dra_driver.kube.informer import Informer


def claim(version: str, allocated: bool = False) -> dict[str, Any]:
    status = {"allocation": {"nodeSelector": {}}} if allocated else {}
    return {
        "metadata": {"name": "c", "namespace": "ns", "resourceVersion": version},
        "status": status,
    }


def deliver(informer: Informer, kind: str, obj: dict[str, Any]) -> None:
    """What the informer does on a watch event: update the store, then call handlers."""
    if kind == "DELETED":
        informer.store.pop("ns/c", None)
    else:
        informer.store["ns/c"] = obj
    for handler in informer.handlers:
        handler(kind, obj)


def make() -> tuple[Informer, AssumeCache]:
    informer = Informer(client=None, path="/claims")  # type: ignore[arg-type]
    return informer, AssumeCache(informer)


def test_an_assumed_write_shadows_the_older_stored_object() -> None:
    informer, cache = make()
    deliver(informer, "ADDED", claim("5"))
    cache.assume(claim("7", allocated=True))
    assert cache.get("ns/c")["metadata"]["resourceVersion"] == "7"
    assert [o["metadata"]["resourceVersion"] for o in cache.values()] == ["7"]
    assert cache.pending == 1


def test_the_watch_catching_up_drops_the_overlay() -> None:
    informer, cache = make()
    deliver(informer, "ADDED", claim("5"))
    cache.assume(claim("7", allocated=True))
    deliver(informer, "MODIFIED", claim("6"))
    assert cache.get("ns/c")["metadata"]["resourceVersion"] == "7"
    deliver(informer, "MODIFIED", claim("8"))
    assert cache.pending == 0
    assert cache.get("ns/c")["metadata"]["resourceVersion"] == "8"


def test_a_deletion_drops_the_overlay_and_an_older_write_is_not_assumed() -> None:
    informer, cache = make()
    deliver(informer, "ADDED", claim("9"))
    cache.assume(claim("7", allocated=True))
    assert cache.pending == 0 and cache.get("ns/c")["metadata"]["resourceVersion"] == "9"
    cache.assume(claim("10", allocated=True))
    deliver(informer, "DELETED", claim("9"))
    assert cache.pending == 0 and cache.get("ns/c") is None


def test_forget_returns_to_the_stored_object() -> None:
    informer, cache = make()
    deliver(informer, "ADDED", claim("5"))
    cache.assume(claim("7", allocated=True))
    cache.forget("ns/c")
    assert cache.get("ns/c")["metadata"]["resourceVersion"] == "5"
