"""resource.k8s.io/v1 ResourceSlice: what kube-apiserver v1.36 refuses and rewrites.

Owns the ResourceSlice normalizer (canonical quantities in capacities, request
policies and counters; `timeAdded` on device taints, an earlier one kept; a field of
the wrong JSON type is a 400, as a failed decode is) and its validator (pool, node
choice, device limits, attributes, capacities and their requestPolicy, taints,
partitionable devices: shared counter sets and what devices consume of them), in
the server's order and wording (pkg/apis/resource/validation/validation.go:
`validateResourceSliceSpec`, `validateCounterSet`, `validateDeviceCounterConsumption`).
Pure; shared decoding helpers come from rules_resource.py.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from api.quantity import parse_quantity
from dra_driver.objects.api_time import api_time

from .errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    too_many,
)
from .rules_resource import canonical, driver_name_errors, shaped
from .validation import dns_label, dns_subdomain, entry_name

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_TAINTS_PER_DEVICE = 16
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALID_VALUES = 10
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_COUNTERS_PER_CONSUMPTION = 32
TAINT_EFFECTS = ["NoExecute", "NoSchedule", "None"]
SLICE_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
ATTRIBUTE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
LIST_ATTRIBUTE_KINDS = ("ints", "bools", "strings", "versions")
ONE_OF_COUNTERS_OR_DEVICES = "only one of `sharedCounters` or `devices` is allowed"


def _counters(kind: str, counters: Any) -> None:
    for counter in (counters or {}).values() if isinstance(counters, dict) else ():
        if isinstance(counter, dict) and "value" in counter:
            counter["value"] = canonical(kind, counter["value"])


def normalize_resource_slice(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Canonical quantities everywhere; `timeAdded` on taints (an old one is kept); a field
    of the wrong JSON type is a 400, as a failed decode is."""
    kind = "ResourceSlice"
    spec = obj["spec"] = copy.deepcopy(shaped(kind, "spec", obj.get("spec"), dict))
    old_taints = _taints_by_device(old)
    for index, device in enumerate(shaped(kind, "spec.devices", spec.get("devices"), list)):
        path = f"spec.devices[{index}]"
        shaped(kind, path, device, dict)
        shaped(kind, f"{path}.attributes", device.get("attributes"), dict)
        capacities = shaped(kind, f"{path}.capacity", device.get("capacity"), dict)
        for name, capacity in capacities.items():
            where = f"{path}.capacity[{name}]"
            _normalize_capacity(shaped(kind, where, capacity, dict), where)
        for consumption in device.get("consumesCounters") or []:
            if isinstance(consumption, dict):
                _counters(kind, consumption.get("counters"))
        earlier = old_taints.get(str(device.get("name")), [])
        for position, taint in enumerate(
            shaped(kind, f"{path}.taints", device.get("taints"), list)
        ):
            shaped(kind, f"{path}.taints[{position}]", taint, dict)
            if not taint.get("timeAdded"):
                taint["timeAdded"] = _earlier_time(taint, earlier) or api_time()
    for counter_set in spec.get("sharedCounters") or []:
        if isinstance(counter_set, dict):
            _counters(kind, counter_set.get("counters"))


def _normalize_capacity(capacity: dict[str, Any], path: str) -> None:
    kind = "ResourceSlice"
    if "value" in capacity:
        capacity["value"] = canonical(kind, capacity["value"])
    if capacity.get("requestPolicy") is None:
        return
    policy = shaped(kind, f"{path}.requestPolicy", capacity["requestPolicy"], dict)
    if policy.get("default") is not None:
        policy["default"] = canonical(kind, policy["default"])
    if policy.get("validValues") is not None:
        values = shaped(kind, f"{path}.requestPolicy.validValues", policy["validValues"], list)
        policy["validValues"] = [canonical(kind, v) for v in values]
    if policy.get("validRange") is not None:
        valid_range = shaped(kind, f"{path}.requestPolicy.validRange", policy["validRange"], dict)
        for key in ("min", "max", "step"):
            if valid_range.get(key) is not None:
                valid_range[key] = canonical(kind, valid_range[key])


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
    errors = driver_name_errors("spec.driver", spec.get("driver"))
    errors += _validate_pool(spec.get("pool") or {})
    errors += _validate_node_choice(spec)
    devices = spec.get("devices") or []
    if spec.get("devices") is not None and spec.get("sharedCounters") is not None:
        errors.append(invalid("spec", "", ONE_OF_COUNTERS_OR_DEVICES))
    limited = any(_advanced(d) for d in devices)
    limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if limited else MAX_DEVICES_PER_SLICE
    if len(devices) > limit:
        errors.append(too_many("spec.devices", len(devices), limit))
    seen: set[str] = set()
    for index, device in enumerate(devices):
        path = f"spec.devices[{index}]"
        errors += entry_name(path, device.get("name"), seen, duplicate_at=path)
        errors += _validate_device(device, path)
    errors += _validate_counter_sets(spec.get("sharedCounters") or [])
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
    errors += _validate_consumption(
        device.get("consumesCounters") or [], f"{path}.consumesCounters"
    )
    return errors


def _advanced(device: dict[str, Any]) -> bool:
    """Taints, counter consumption or list attributes: the slice holds at most 64 devices."""
    if device.get("taints") or device.get("consumesCounters"):
        return True
    attributes = device.get("attributes") or {}
    return any(
        isinstance(value, dict) and any(kind in value for kind in LIST_ATTRIBUTE_KINDS)
        for value in attributes.values()
    )


def _validate_counter_sets(counter_sets: list[Any]) -> list[FieldError]:
    """`spec.sharedCounters`: at most 8 sets, each named by a DNS label, unique, with 1 to
    32 counters named by DNS labels (a bad name is reported at the map, as the server does)."""
    path = "spec.sharedCounters"
    if len(counter_sets) > MAX_COUNTER_SETS:
        return [too_many(path, len(counter_sets), MAX_COUNTER_SETS)]
    errors: list[FieldError] = []
    for index, counter_set in enumerate(counter_sets):
        entry = counter_set if isinstance(counter_set, dict) else {}
        where = f"{path}[{index}]"
        name = entry.get("name")
        errors += dns_label(f"{where}.name", name) if name else [required(f"{where}.name")]
        errors += _counter_map(entry.get("counters"), f"{where}.counters", MAX_COUNTERS_PER_SET)
    errors += _duplicates(path, [(c or {}).get("name") for c in counter_sets])
    return errors


def _validate_consumption(consumptions: list[Any], path: str) -> list[FieldError]:
    """A device's `consumesCounters`: at most 2 entries, one per counter set (a DNS label),
    each with 1 to 32 counters named by DNS labels."""
    if len(consumptions) > MAX_CONSUMPTIONS_PER_DEVICE:
        return [too_many(path, len(consumptions), MAX_CONSUMPTIONS_PER_DEVICE)]
    errors: list[FieldError] = []
    for index, consumption in enumerate(consumptions):
        entry = consumption if isinstance(consumption, dict) else {}
        where = f"{path}[{index}]"
        counter_set = entry.get("counterSet")
        errors += (
            dns_label(f"{where}.counterSet", counter_set)
            if counter_set
            else [required(f"{where}.counterSet")]
        )
        errors += _counter_map(
            entry.get("counters"), f"{where}.counters", MAX_COUNTERS_PER_CONSUMPTION
        )
    errors += _duplicates(path, [(c or {}).get("counterSet") for c in consumptions])
    return errors


def _counter_map(counters: Any, path: str, limit: int) -> list[FieldError]:
    if not counters:
        return [required(path)]
    if len(counters) > limit:
        return [too_many(path, len(counters), limit)]
    errors: list[FieldError] = []
    for name in counters:
        errors += dns_label(path, name)
    return errors


def _duplicates(path: str, keys: list[Any]) -> list[FieldError]:
    seen: set[Any] = set()
    errors: list[FieldError] = []
    for index, key in enumerate(keys):
        if key in seen:
            errors.append(duplicate(f"{path}[{index}]", key))
        seen.add(key)
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
