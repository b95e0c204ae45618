"""resource.k8s.io/v1: what kube-apiserver v1.36 refuses, defaults and rewrites (reference §9).

Normalizers run on every write before validation, as decoding and defaulting do
in the real server: quantities are parsed (a string that is not one is a 400)
and stored canonically, device taints get `timeAdded`, claim requests get
`ExactCount`/`count: 1`, allocation timestamps lose their fractions. Validators
then refuse what the real server refuses, with its field paths and messages.
CEL selectors are compiled with dra_cel, the evaluator the allocators use.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from api.quantity import QuantityError, canonical_quantity, parse_quantity
from dra_driver.objects.api_time import api_time
from dra_driver.objects.dra_cel import CelCompileError, compile_selector
from dra_driver.objects.names import is_uuid

from .errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    too_many,
    undecodable,
    unparsable_quantity,
)
from .validation import dns_label, dns_subdomain, entry_name

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_TAINTS_PER_DEVICE = 16
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALID_VALUES = 10
MAX_REQUESTS = 32
MAX_RESULTS = 32
MAX_RESERVED_FOR = 256
TAINT_EFFECTS = ["NoExecute", "NoSchedule", "None"]
SLICE_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
ATTRIBUTE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
TIME_LAYOUT = "2006-01-02T15:04:05Z07:00"


def _driver_name(path: str, value: Any) -> list[FieldError]:
    if not value:
        return [required(path)]
    return dns_subdomain(path, value, max_length=63)


def _canonical(kind: str, value: Any) -> str:
    """A quantity as stored; one that does not parse fails decoding (400), as in Go."""
    try:
        return canonical_quantity(str(value))
    except QuantityError as error:
        raise unparsable_quantity(kind) from error


def _canonical_map(kind: str, values: Any) -> Any:
    if not isinstance(values, dict):
        return values
    return {name: _canonical(kind, quantity) for name, quantity in values.items()}


def _counters(kind: str, counters: Any) -> None:
    for counter in (counters or {}).values() if isinstance(counters, dict) else ():
        if isinstance(counter, dict) and "value" in counter:
            counter["value"] = _canonical(kind, counter["value"])


# ---- ResourceSlice --------------------------------------------------------------


_JSON_KINDS = {dict: "object", list: "array", str: "string"}


def _shaped(kind: str, path: str, value: Any, expected: type) -> Any:
    """The value if it has the JSON type the Go struct needs; otherwise decoding fails (400)."""
    if value is None:
        return expected()
    if not isinstance(value, expected):
        got = _JSON_KINDS.get(type(value), type(value).__name__)
        raise undecodable(
            kind, "v1", f"{path}: cannot unmarshal {got} into a JSON {_JSON_KINDS[expected]}"
        )
    return value


def normalize_resource_slice(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Canonical quantities everywhere; `timeAdded` on taints (an old one is kept); a field
    of the wrong JSON type is a 400, as a failed decode is."""
    kind = "ResourceSlice"
    spec = obj["spec"] = copy.deepcopy(_shaped(kind, "spec", obj.get("spec"), dict))
    old_taints = _taints_by_device(old)
    for index, device in enumerate(_shaped(kind, "spec.devices", spec.get("devices"), list)):
        path = f"spec.devices[{index}]"
        _shaped(kind, path, device, dict)
        _shaped(kind, f"{path}.attributes", device.get("attributes"), dict)
        capacities = _shaped(kind, f"{path}.capacity", device.get("capacity"), dict)
        for name, capacity in capacities.items():
            where = f"{path}.capacity[{name}]"
            _normalize_capacity(_shaped(kind, where, capacity, dict), where)
        for consumption in device.get("consumesCounters") or []:
            if isinstance(consumption, dict):
                _counters(kind, consumption.get("counters"))
        earlier = old_taints.get(str(device.get("name")), [])
        for position, taint in enumerate(
            _shaped(kind, f"{path}.taints", device.get("taints"), list)
        ):
            _shaped(kind, f"{path}.taints[{position}]", taint, dict)
            if not taint.get("timeAdded"):
                taint["timeAdded"] = _earlier_time(taint, earlier) or api_time()
    for counter_set in spec.get("sharedCounters") or []:
        if isinstance(counter_set, dict):
            _counters(kind, counter_set.get("counters"))


def _normalize_capacity(capacity: dict[str, Any], path: str) -> None:
    kind = "ResourceSlice"
    if "value" in capacity:
        capacity["value"] = _canonical(kind, capacity["value"])
    if capacity.get("requestPolicy") is None:
        return
    policy = _shaped(kind, f"{path}.requestPolicy", capacity["requestPolicy"], dict)
    if policy.get("default") is not None:
        policy["default"] = _canonical(kind, policy["default"])
    if policy.get("validValues") is not None:
        values = _shaped(kind, f"{path}.requestPolicy.validValues", policy["validValues"], list)
        policy["validValues"] = [_canonical(kind, v) for v in values]
    if policy.get("validRange") is not None:
        valid_range = _shaped(kind, f"{path}.requestPolicy.validRange", policy["validRange"], dict)
        for key in ("min", "max", "step"):
            if valid_range.get(key) is not None:
                valid_range[key] = _canonical(kind, valid_range[key])


def _taints_by_device(old: dict[str, Any] | None) -> dict[str, list[dict[str, Any]]]:
    devices = ((old or {}).get("spec") or {}).get("devices") or []
    return {str(d.get("name")): list(d.get("taints") or []) for d in devices}


def _earlier_time(taint: dict[str, Any], earlier: list[dict[str, Any]]) -> str | None:
    same = ("key", "value", "effect")
    for before in earlier:
        if all(before.get(k) == taint.get(k) for k in same):
            return before.get("timeAdded")
    return None


def validate_resource_slice(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors = _driver_name("spec.driver", spec.get("driver"))
    errors += _validate_pool(spec.get("pool") or {})
    errors += _validate_node_choice(spec)
    devices = spec.get("devices") or []
    if devices and spec.get("sharedCounters"):
        errors.append(invalid("spec", None, "only one of Devices and SharedCounters can be set"))
    limited = any(d.get("taints") or d.get("consumesCounters") for d in devices)
    limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if limited else MAX_DEVICES_PER_SLICE
    if len(devices) > limit:
        errors.append(too_many("spec.devices", len(devices), limit))
    seen: set[str] = set()
    for index, device in enumerate(devices):
        path = f"spec.devices[{index}]"
        errors += entry_name(path, device.get("name"), seen, duplicate_at=path)
        errors += _validate_device(device, path)
    if old is not None and spec.get("driver") != old["spec"].get("driver"):
        errors.append(invalid("spec.driver", spec.get("driver"), "field is immutable"))
    return errors


def _validate_pool(pool: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
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
    return errors


def _validate_node_choice(spec: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
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
    return errors


def _validate_device(device: dict[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        errors.append(
            invalid(
                path,
                total,
                "the total number of attributes and capacities must not exceed "
                f"{MAX_ATTRIBUTES_AND_CAPACITIES}",
            )
        )
    for key, value in attributes.items():
        if len([k for k in ATTRIBUTE_KINDS if k in (value or {})]) != 1:
            errors.append(
                invalid(f"{path}.attributes[{key}]", value, "exactly one value must be specified")
            )
    multiple = device.get("allowMultipleAllocations") is True
    for key, entry in capacity.items():
        cpath = f"{path}.capacity[{key}]"
        if "value" not in (entry or {}):
            errors.append(required(f"{cpath}.value"))
            continue
        policy = entry.get("requestPolicy")
        if policy is None:
            continue
        if not multiple:
            errors.append(
                forbidden(f"{cpath}.requestPolicy", "allowMultipleAllocations must be true")
            )
        errors += _validate_request_policy(policy, entry["value"], f"{cpath}.requestPolicy")
    taints = device.get("taints") or []
    if len(taints) > MAX_TAINTS_PER_DEVICE:
        errors.append(too_many(f"{path}.taints", len(taints), MAX_TAINTS_PER_DEVICE))
    for index, taint in enumerate(taints):
        tpath = f"{path}.taints[{index}]"
        if not taint.get("key"):
            errors.append(required(f"{tpath}.key"))
        effect = taint.get("effect")
        if not effect:
            errors.append(required(f"{tpath}.effect"))
        elif effect not in TAINT_EFFECTS:
            errors.append(not_supported(f"{tpath}.effect", effect, TAINT_EFFECTS))
    return errors


def _validate_request_policy(policy: dict[str, Any], value: str, path: str) -> list[FieldError]:
    """The capacity requestPolicy rules of the v1.36 server, in its order and wording."""
    valid_values, valid_range = policy.get("validValues"), policy.get("validRange")
    if valid_values and valid_range is not None:
        return [forbidden(path, "exactly one policy can be specified")]
    maximum = parse_quantity(value)
    default = policy.get("default")
    if valid_values:
        return _validate_valid_values(valid_values, default, maximum, path)
    if valid_range is not None:
        return _validate_valid_range(valid_range, default, maximum, path)
    return []


def _validate_valid_values(
    values: list[str], default: str | None, maximum: Decimal, path: str
) -> list[FieldError]:
    errors: list[FieldError] = []
    if len(values) > MAX_VALID_VALUES:
        errors.append(too_many(f"{path}.validValues", len(values), MAX_VALID_VALUES))
    amounts = [parse_quantity(v) for v in values]
    for index, amount in enumerate(amounts):
        vpath = f"{path}.validValues[{index}]"
        if amount > maximum:
            errors.append(invalid(vpath, values[index], "option is larger than capacity value"))
        if index and amounts[index - 1] >= amount:
            errors.append(invalid(vpath, values[index], "must be sorted and unique"))
    if default is not None and parse_quantity(default) not in amounts:
        errors.append(_default_not_valid(path, default))
    return errors


def _validate_valid_range(
    valid_range: dict[str, Any], default: str | None, maximum: Decimal, path: str
) -> list[FieldError]:
    rpath = f"{path}.validRange"
    if valid_range.get("min") is None:
        return [required(f"{rpath}.min", "required when validRange is defined")]
    errors: list[FieldError] = []
    low = parse_quantity(valid_range["min"])
    high = parse_quantity(valid_range["max"]) if valid_range.get("max") is not None else None
    step_text = valid_range.get("step")
    step = parse_quantity(step_text) if step_text is not None else None
    if low > maximum:
        errors.append(invalid(f"{rpath}.min", valid_range["min"], "min is larger than capacity"))
    if high is not None and low > high:
        errors.append(invalid(rpath, valid_range, "min is larger than max"))
    if high is not None and high > maximum:
        errors.append(invalid(f"{rpath}.max", valid_range["max"], "max is larger than capacity"))
    if step is not None and step <= 0:
        errors.append(invalid(f"{rpath}.step", step_text, "must be greater than zero"))
        step = None
    if step is not None and low + step > maximum:
        errors.append(invalid(f"{rpath}.step", step_text, "one step is larger than capacity"))

    def off_step(amount: Decimal) -> bool:
        return step is not None and (amount - low) % step != 0

    def step_error(field_path: str, text: str) -> FieldError:
        return invalid(
            field_path,
            text,
            f"value is not a multiple of a given step ({step_text}) from ({valid_range['min']})",
        )

    if high is not None and off_step(high):
        errors.append(step_error(f"{rpath}.max", valid_range["max"]))
    if default is not None:
        amount = parse_quantity(default)
        if amount < low or (high is not None and amount > high):
            errors.append(_default_not_valid(path, default))
        elif off_step(amount):
            errors.append(step_error(f"{path}.default", default))
    return errors


def _default_not_valid(path: str, default: str) -> FieldError:
    return invalid(
        f"{path}.default", default, "default value is not valid according to the requestPolicy"
    )


# ---- DeviceClass ----------------------------------------------------------------


def _validate_selectors(selectors: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, selector in enumerate(selectors or []):
        spath = f"{path}[{index}].cel.expression"
        expression = (selector.get("cel") or {}).get("expression")
        if not expression:
            errors.append(required(spath))
            continue
        try:
            compile_selector(str(expression))
        except CelCompileError as error:
            errors.append(invalid(spath, expression, error.reason))
    return errors


def validate_device_class(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors = _validate_selectors(spec.get("selectors"), "spec.selectors")
    for index, config in enumerate(spec.get("config") or []):
        opaque = config.get("opaque") or {}
        errors += _driver_name(f"spec.config[{index}].opaque.driver", opaque.get("driver"))
    return errors


# ---- ResourceClaim and ResourceClaimTemplate ---------------------------------------


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
        capacity["requests"] = _canonical_map("ResourceClaim", capacity["requests"])


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
    status = obj["status"] = copy.deepcopy(_shaped(kind, "status", obj["status"], dict))
    reserved = _shaped(kind, "status.reservedFor", status.get("reservedFor"), list)
    for index, reference in enumerate(reserved):
        _shaped(kind, f"status.reservedFor[{index}]", reference, dict)
        if reference.get("apiGroup") == "":
            del reference["apiGroup"]
    for index, device in enumerate(_shaped(kind, "status.devices", status.get("devices"), list)):
        _shaped(kind, f"status.devices[{index}]", device, dict)
    if status.get("allocation") is None:
        return
    allocation = _shaped(kind, "status.allocation", status["allocation"], dict)
    if "allocationTimestamp" in allocation:
        allocation["allocationTimestamp"] = _normalize_timestamp(allocation["allocationTimestamp"])
    devices = _shaped(kind, "status.allocation.devices", allocation.get("devices"), dict)
    path = "status.allocation.devices.results"
    for index, result in enumerate(_shaped(kind, path, devices.get("results"), list)):
        _shaped(kind, f"{path}[{index}]", result, dict)
        if "consumedCapacity" in result:
            result["consumedCapacity"] = _canonical_map(kind, result["consumedCapacity"])
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
    errors += _validate_selectors(request.get("selectors"), f"{path}.selectors")
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
