"""The shape of a Pod that arrives over HTTP, checked before any rule reads it.

kube-scheduler and kube-apiserver send well-formed pods, but the extender and
webhook are HTTP endpoints: anything can arrive. Checking the few parts the
rules walk (metadata maps, container lists, resources, env, envFrom, volume
mounts) turns a malformed document into a 400 naming the field, instead of an
error deep in the rules.
"""

from __future__ import annotations

from typing import Any

from dra_driver.errors import InvalidParameterError


def _mapping(value: Any, where: str, *, strings: bool = False) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise InvalidParameterError(where, "expected an object")
    if strings and not all(isinstance(v, str) for v in value.values()):
        raise InvalidParameterError(where, "values must be strings")


def _sequence(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidParameterError(where, "expected a list")
    return value


def _objects(value: Any, where: str) -> None:
    """A list whose items are objects (env entries, envFrom sources, volume mounts)."""
    for index, item in enumerate(_sequence(value, where)):
        if not isinstance(item, dict):
            raise InvalidParameterError(f"{where}[{index}]", "expected an object")


def check_pod_shape(pod: Any, where: str = "Pod") -> None:
    """Raise InvalidParameterError naming the first part of `pod` with the wrong type."""
    if not isinstance(pod, dict):
        raise InvalidParameterError(where, "expected a Pod object")
    metadata = pod.get("metadata")
    _mapping(metadata, f"{where}.metadata")
    for key in ("annotations", "labels"):
        _mapping((metadata or {}).get(key), f"{where}.metadata.{key}", strings=True)
    for key in ("name", "namespace", "uid"):
        if not isinstance((metadata or {}).get(key, ""), str):
            raise InvalidParameterError(f"{where}.metadata.{key}", "expected a string")
    spec = pod.get("spec")
    _mapping(spec, f"{where}.spec")
    for key in ("initContainers", "containers"):
        for index, container in enumerate(_sequence((spec or {}).get(key), f"{where}.spec.{key}")):
            at = f"{where}.spec.{key}[{index}]"
            _mapping(container, at)
            if container is None:
                raise InvalidParameterError(at, "expected a container object")
            resources = container.get("resources")
            _mapping(resources, f"{at}.resources")
            for kind in ("limits", "requests"):
                _mapping((resources or {}).get(kind), f"{at}.resources.{kind}")
            _mapping(container.get("securityContext"), f"{at}.securityContext")
            for part in ("env", "envFrom", "volumeMounts"):
                _objects(container.get(part), f"{at}.{part}")
    _mapping(pod.get("status"), f"{where}.status")
