"""Per-type validation and defaulting where the real server refuses or fills in.

Only the rules the driver (and the stand-ins around it) can trip are modelled:
the resource.k8s.io/v1 fields it writes, pod binding fields, namespace shape.
Each validator takes the new object and the stored one (None on create).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dra_driver.names import is_uuid

from .errors import (
    FieldError,
    duplicate,
    forbidden,
    immutable,
    invalid,
    not_supported,
    required,
    too_many,
)
from .validation import dns_label, dns_subdomain

Validator = Callable[[dict[str, Any], dict[str, Any] | None], list[FieldError]]
Defaulter = Callable[[dict[str, Any]], None]

MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_REQUESTS = 32
MAX_RESULTS = 32
MAX_RESERVED_FOR = 256
SLICE_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def _driver_name(path: str, value: Any) -> list[FieldError]:
    if not value:
        return [required(path)]
    return dns_subdomain(path, value, max_length=63)


# ---- pods -------------------------------------------------------------------


def default_pod(pod: dict[str, Any]) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    for container in spec.get("containers") or []:
        if isinstance(container, dict):
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            image = str(container.get("image", ""))
            tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
            container.setdefault("imagePullPolicy", "IfNotPresent" if tagged else "Always")
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}


def validate_pod(pod: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = pod.get("spec") or {}
    errors: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append(required("spec.containers"))
    names: set[str] = set()
    for index, container in enumerate(containers):
        path = f"spec.containers[{index}]"
        name = container.get("name")
        if not name:
            errors.append(required(f"{path}.name"))
        else:
            errors += dns_label(f"{path}.name", name)
            if name in names:
                errors.append(duplicate(f"{path}.name", name))
            names.add(name)
        if not container.get("image") and old is None:
            errors.append(required(f"{path}.image"))
    if old is not None and spec.get("nodeName") != (old.get("spec") or {}).get("nodeName"):
        errors.append(forbidden("spec", POD_UPDATE_FORBIDDEN))
    return errors


# ---- namespaces ---------------------------------------------------------------


def default_namespace(namespace: dict[str, Any]) -> None:
    meta = namespace["metadata"]
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace["status"] = {"phase": "Active"}


def clear_status(obj: dict[str, Any]) -> None:
    obj.pop("status", None)


# ---- resource.k8s.io/v1 -------------------------------------------------------


def validate_resource_slice(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors = _driver_name("spec.driver", spec.get("driver"))
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        errors.append(required("spec.pool.name"))
    else:
        for segment in str(pool["name"]).split("/"):
            errors += dns_subdomain("spec.pool.name", segment)
    generation = pool.get("generation")
    if not isinstance(generation, int) or generation < 0:
        errors.append(
            invalid("spec.pool.generation", generation, "must be greater than or equal to 0")
        )
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count <= 0:
        errors.append(invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"))
    chosen = [f for f in SLICE_NODE_FIELDS if spec.get(f) not in (None, False, "")]
    wanted = "exactly one of " + ", ".join(f"`{f}`" for f in SLICE_NODE_FIELDS) + " is required"
    if not chosen:
        errors.append(required("spec", wanted))
    elif len(chosen) > 1:
        errors.append(
            invalid(
                "spec",
                "{" + ", ".join(f"`{f}`" for f in chosen) + "}",
                wanted + ", but multiple fields are set",
            )
        )
    if spec.get("nodeName"):
        errors += dns_subdomain("spec.nodeName", spec["nodeName"])
    devices = spec.get("devices") or []
    if devices and spec.get("sharedCounters"):
        errors.append(invalid("spec", None, "only one of Devices and SharedCounters can be set"))
    if len(devices) > MAX_DEVICES_PER_SLICE:
        errors.append(too_many("spec.devices", len(devices), MAX_DEVICES_PER_SLICE))
    seen: set[str] = set()
    for index, device in enumerate(devices):
        path = f"spec.devices[{index}]"
        name = device.get("name")
        if not name:
            errors.append(required(f"{path}.name"))
        else:
            errors += dns_label(f"{path}.name", name)
            if name in seen:
                errors.append(duplicate(f"{path}.name", name))
            seen.add(name)
        attributes = device.get("attributes") or {}
        capacity = device.get("capacity") or {}
        if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
            errors.append(
                too_many(
                    f"{path}.attributes",
                    len(attributes) + len(capacity),
                    MAX_ATTRIBUTES_AND_CAPACITIES,
                )
            )
        for key, value in attributes.items():
            kinds = [
                k
                for k in (
                    "int",
                    "bool",
                    "string",
                    "version",
                    "ints",
                    "bools",
                    "strings",
                    "versions",
                )
                if k in (value or {})
            ]
            if len(kinds) != 1:
                errors.append(
                    invalid(
                        f"{path}.attributes[{key}]", value, "exactly one value must be specified"
                    )
                )
        for key, value in capacity.items():
            if "value" not in (value or {}):
                errors.append(required(f"{path}.capacity[{key}].value"))
    if old is not None and spec.get("driver") != old["spec"].get("driver"):
        errors.append(invalid("spec.driver", spec.get("driver"), "field is immutable"))
    return errors


def _validate_requests(requests: list[Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if len(requests) > MAX_REQUESTS:
        errors.append(too_many(path, len(requests), MAX_REQUESTS))
    names: set[str] = set()
    for index, request in enumerate(requests):
        rpath = f"{path}[{index}]"
        name = request.get("name")
        if not name:
            errors.append(required(f"{rpath}.name"))
        else:
            errors += dns_label(f"{rpath}.name", name)
            if name in names:
                errors.append(duplicate(f"{rpath}.name", name))
            names.add(name)
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (not first):
            errors.append(
                required(rpath, "exactly one of `exactly` or `firstAvailable` is required")
            )
        if exactly is not None:
            errors += _validate_exact(exactly, f"{rpath}.exactly")
        for sub_index, sub in enumerate(first or []):
            spath = f"{rpath}.firstAvailable[{sub_index}]"
            if not sub.get("name"):
                errors.append(required(f"{spath}.name"))
            else:
                errors += dns_label(f"{spath}.name", sub["name"])
            errors += _validate_exact(sub, spath)
    return errors


def _validate_exact(request: dict[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not request.get("deviceClassName"):
        errors.append(required(f"{path}.deviceClassName"))
    else:
        errors += dns_subdomain(f"{path}.deviceClassName", request["deviceClassName"])
    mode = request.get("allocationMode")
    if mode is not None and mode not in ("ExactCount", "All"):
        errors.append(not_supported(f"{path}.allocationMode", mode, ["All", "ExactCount"]))
    count = request.get("count")
    if count is not None and (not isinstance(count, int) or count <= 0):
        errors.append(invalid(f"{path}.count", count, "must be greater than zero"))
    return errors


def validate_resource_claim(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    requests = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
    errors = _validate_requests(requests, "spec.devices.requests")
    if old is not None and obj.get("spec") != old.get("spec"):
        errors.append(invalid("spec", obj.get("spec"), "field is immutable"))
    return errors


def validate_claim_template(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    inner = (obj.get("spec") or {}).get("spec") or {}
    errors = _validate_requests(
        (inner.get("devices") or {}).get("requests") or [], "spec.spec.devices.requests"
    )
    if old is not None and obj.get("spec") != old.get("spec"):
        errors.append(invalid("spec", obj.get("spec"), "field is immutable"))
    return errors


def validate_claim_status(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    status = obj.get("status") or {}
    allocation = status.get("allocation")
    errors: list[FieldError] = []
    before = (old or {}).get("status", {}).get("allocation")
    if before is not None and allocation is not None and before != allocation:
        errors.append(immutable("status.allocation"))
    if allocation is not None:
        results = (allocation.get("devices") or {}).get("results") or []
        if len(results) > MAX_RESULTS:
            errors.append(too_many("status.allocation.devices.results", len(results), MAX_RESULTS))
        for index, result in enumerate(results):
            path = f"status.allocation.devices.results[{index}]"
            if not result.get("request"):
                errors.append(required(f"{path}.request"))
            errors += _driver_name(f"{path}.driver", result.get("driver"))
            if not result.get("pool"):
                errors.append(required(f"{path}.pool"))
            if not result.get("device"):
                errors.append(required(f"{path}.device"))
            else:
                errors += dns_label(f"{path}.device", result["device"])
            share = result.get("shareID")
            if share is not None and not is_uuid(share):
                errors.append(
                    invalid(
                        f"{path}.shareID", share, "must be a lowercase UUID in 8-4-4-4-12 format"
                    )
                )
    reserved = status.get("reservedFor") or []
    if reserved and allocation is None:
        errors.append(
            forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
        )
    if len(reserved) > MAX_RESERVED_FOR:
        errors.append(too_many("status.reservedFor", len(reserved), MAX_RESERVED_FOR))
    uids: set[str] = set()
    for index, ref in enumerate(reserved):
        path = f"status.reservedFor[{index}]"
        for key in ("resource", "name", "uid"):
            if not ref.get(key):
                errors.append(required(f"{path}.{key}"))
        if ref.get("uid") in uids:
            errors.append(duplicate(f"{path}.uid", ref.get("uid")))
        uids.add(ref.get("uid"))
    for index, device in enumerate(status.get("devices") or []):
        path = f"status.devices[{index}]"
        for key in ("driver", "pool", "device"):
            if not device.get(key):
                errors.append(required(f"{path}.{key}"))
    return errors


def validate_device_class(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    for index, selector in enumerate(spec.get("selectors") or []):
        if not (selector.get("cel") or {}).get("expression"):
            errors.append(required(f"spec.selectors[{index}].cel.expression"))
    for index, config in enumerate(spec.get("config") or []):
        opaque = config.get("opaque") or {}
        errors += _driver_name(f"spec.config[{index}].opaque.driver", opaque.get("driver"))
    return errors
