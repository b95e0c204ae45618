"""resource.k8s.io/v1 ResourceClaim and ResourceClaimTemplate: defaults and refusals.

Owns the claim and template normalizers (request defaults `ExactCount`/`count: 1`,
toleration operator `Equal`, canonical quantities, allocation timestamps in whole
seconds UTC, empty `apiGroup` dropped, a status field of the wrong JSON type is a
400) and validators: requests, the immutable spec, and the status (allocation,
reservedFor, device statuses), with the v1.36 server's field paths and messages.
Pure; shared decoding helpers and selector checks come from rules_resource.py.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from dra_driver.objects.names import is_uuid

from .errors import FieldError, duplicate, forbidden, invalid, not_supported, required, too_many
from .rules_resource import canonical_map, driver_name_errors, selector_errors, shaped
from .validation import dns_label, dns_subdomain, entry_name

MAX_REQUESTS = 32
MAX_RESULTS = 32
MAX_RESERVED_FOR = 256
TIME_LAYOUT = "2006-01-02T15:04:05Z07:00"


def _default_request(request: dict[str, Any]) -> None:
    """SetDefaults for one exact request or subrequest: ExactCount, count 1, Equal."""
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in request.get("tolerations") or []:
        if isinstance(toleration, dict):
            toleration.setdefault("operator", "Equal")
    capacity = request.get("capacity")
    if isinstance(capacity, dict) and "requests" in capacity:
        capacity["requests"] = canonical_map("ResourceClaim", capacity["requests"])


def _normalize_claim_spec(spec: dict[str, Any]) -> None:
    for request in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                _default_request(sub)


def _normalize_timestamp(value: Any) -> Any:
    """RFC 3339 in any offset or precision -> seconds in UTC with Z; anything else is left
    for validation to refuse."""
    if not isinstance(value, str):
        return value
    try:
        moment = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return value
    if moment.tzinfo is None or "T" not in value.upper():
        return value
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_resource_claim(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Request defaults, canonical quantities and timestamps, empty `apiGroup` dropped; a
    status field of the wrong JSON type is a 400."""
    kind = "ResourceClaim"
    if isinstance(obj.get("spec"), dict):
        obj["spec"] = copy.deepcopy(obj["spec"])
        _normalize_claim_spec(obj["spec"])
    if obj.get("status") is None:
        return
    status = obj["status"] = copy.deepcopy(shaped(kind, "status", obj["status"], dict))
    reserved = shaped(kind, "status.reservedFor", status.get("reservedFor"), list)
    for index, reference in enumerate(reserved):
        shaped(kind, f"status.reservedFor[{index}]", reference, dict)
        if reference.get("apiGroup") == "":
            del reference["apiGroup"]
    for index, device in enumerate(shaped(kind, "status.devices", status.get("devices"), list)):
        shaped(kind, f"status.devices[{index}]", device, dict)
    if status.get("allocation") is None:
        return
    allocation = shaped(kind, "status.allocation", status["allocation"], dict)
    if "allocationTimestamp" in allocation:
        allocation["allocationTimestamp"] = _normalize_timestamp(allocation["allocationTimestamp"])
    devices = shaped(kind, "status.allocation.devices", allocation.get("devices"), dict)
    path = "status.allocation.devices.results"
    for index, result in enumerate(shaped(kind, path, devices.get("results"), list)):
        shaped(kind, f"{path}[{index}]", result, dict)
        if "consumedCapacity" in result:
            result["consumedCapacity"] = canonical_map(kind, result["consumedCapacity"])
        for toleration in result.get("tolerations") or []:
            if isinstance(toleration, dict):
                toleration.setdefault("operator", "Equal")


def normalize_claim_template(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    template = obj.get("spec")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        obj["spec"] = copy.deepcopy(template)
        _normalize_claim_spec(obj["spec"]["spec"])


def empty_status(obj: dict[str, Any]) -> None:
    """A create drops any status sent and answers `status: {}`, as the real server does."""
    obj["status"] = {}


def _validate_requests(requests: list[Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if len(requests) > MAX_REQUESTS:
        errors.append(too_many(path, len(requests), MAX_REQUESTS))
    names: set[str] = set()
    for index, request in enumerate(requests):
        rpath = f"{path}[{index}]"
        errors += entry_name(rpath, request.get("name"), names)
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
    errors += selector_errors(request.get("selectors"), f"{path}.selectors")
    return errors


def _immutable_spec(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    if old is not None and obj.get("spec") != old.get("spec"):
        return [invalid("spec", obj.get("spec"), "field is immutable")]
    return []


def validate_resource_claim(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    requests = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
    return _validate_requests(requests, "spec.devices.requests") + _immutable_spec(obj, old)


def validate_claim_template(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    inner = (obj.get("spec") or {}).get("spec") or {}
    requests = (inner.get("devices") or {}).get("requests") or []
    return _validate_requests(requests, "spec.spec.devices.requests") + _immutable_spec(obj, old)


def validate_claim_status(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    status = obj.get("status") or {}
    allocation = status.get("allocation")
    errors: list[FieldError] = []
    before = ((old or {}).get("status") or {}).get("allocation")
    if before is not None and allocation is not None and before != allocation:
        errors.append(invalid("status.allocation", allocation, "field is immutable"))
    if allocation is not None:
        errors += _validate_allocation(allocation)
    errors += _validate_reserved_for(status.get("reservedFor") or [], allocation)
    errors += _validate_device_statuses(status.get("devices") or [], allocation)
    return errors


def _validate_allocation(allocation: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    stamp = allocation.get("allocationTimestamp")
    if stamp is not None and not _is_seconds_time(stamp):
        errors.append(
            invalid(
                "status.allocation.allocationTimestamp",
                stamp,
                f"parsing time {stamp!r} as {TIME_LAYOUT!r}: not an RFC 3339 time",
            )
        )
    results = (allocation.get("devices") or {}).get("results") or []
    if len(results) > MAX_RESULTS:
        errors.append(too_many("status.allocation.devices.results", len(results), MAX_RESULTS))
    for index, result in enumerate(results):
        path = f"status.allocation.devices.results[{index}]"
        if not result.get("request"):
            errors.append(required(f"{path}.request"))
        errors += driver_name_errors(f"{path}.driver", result.get("driver"))
        if not result.get("pool"):
            errors.append(required(f"{path}.pool"))
        if not result.get("device"):
            errors.append(required(f"{path}.device"))
        else:
            errors += dns_label(f"{path}.device", result["device"])
        share = result.get("shareID")
        if share is not None and not is_uuid(share):
            errors.append(
                invalid(f"{path}.shareID", share, "must be a lowercase UUID in 8-4-4-4-12 format")
            )
    return errors


def _is_seconds_time(value: Any) -> bool:
    try:
        datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return False
    return True


def _validate_reserved_for(
    reserved: list[dict[str, Any]], allocation: dict[str, Any] | None
) -> list[FieldError]:
    errors: list[FieldError] = []
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
    return errors


def _device_key(entry: dict[str, Any]) -> tuple[Any, ...]:
    return (entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID"))


def _validate_device_statuses(
    devices: list[dict[str, Any]], allocation: dict[str, Any] | None
) -> list[FieldError]:
    errors: list[FieldError] = []
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    allocated = {_device_key(r) for r in results}
    for index, device in enumerate(devices):
        path = f"status.devices[{index}]"
        missing = [key for key in ("driver", "pool", "device") if not device.get(key)]
        errors += [required(f"{path}.{key}") for key in missing]
        if not missing and _device_key(device) not in allocated:
            errors.append(invalid(path, device, "must be an allocated device in the claim"))
    return errors
