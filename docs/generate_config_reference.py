"""Write docs/configuration.md from the pydantic models that read each configuration file.

    python docs/generate_config_reference.py           # rewrite the file
    python docs/generate_config_reference.py --check   # exit 1 when it is stale

The models are the only definition of what each file accepts, so the reference
is generated from them and a test fails when someone changes a model without
regenerating it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from api.vgpu_config import VGPUConfig
from controller.legacy.config import DeviceConfigFile
from kubeletplugin.gpus import MockGpuFile
from kubeletplugin.node_config import NodeConfig

TARGET = Path(__file__).with_name("configuration.md")


@dataclass(frozen=True)
class Section:
    title: str
    model: type[BaseModel]
    where: str


SECTIONS = (
    Section(
        "VGPUConfig: claim and DeviceClass parameters",
        VGPUConfig,
        "`spec.devices.config[].opaque.parameters` of a ResourceClaim (or its template) or"
        " `spec.config[].opaque.parameters` of a DeviceClass, with `driver: vgpu.hami.io`."
        " Class entries apply first, then the claim's; a field left out is not set.",
    ),
    Section(
        "Kubelet plugin node config",
        NodeConfig,
        "The file named by `dra-driver kubelet-plugin --config` (YAML or JSON). It is"
        " watched: a change republishes the node's ResourceSlices. Keys override the flags.",
    ),
    Section(
        "Mock GPU file",
        MockGpuFile,
        "The file named by `--mock-gpus` (kubelet plugin, device plugin, simulator): GPUs"
        " to publish instead of NVML's. Watched like the node config.",
    ),
    Section(
        "Legacy device config (HAMi's `device-config.yaml`)",
        DeviceConfigFile,
        "Key `device-config.yaml` of the `hami-scheduler-device` ConfigMap, read by"
        " `dra-driver scheduler|extender|webhook --device-config-file`,"
        " in HAMi's own format so an existing HAMi ConfigMap works unchanged.",
    ),
)


def _type_text(schema: dict[str, Any], definitions: dict[str, Any]) -> str:
    if "$ref" in schema:
        return _type_text(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    if "enum" in schema:
        return " | ".join(f"`{value}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = [_type_text(part, definitions) for part in schema[key]]
            return " or ".join(part for part in parts if part != "null") or "null"
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type_text(schema.get('items', {}), definitions)}"
    if kind == "object" and "properties" in schema:
        return "object (below)"
    return str(kind or "any")


def _limits(schema: dict[str, Any]) -> str:
    for part in schema.get("anyOf", ()):
        if _limits(part):
            return _limits(part)
    names = {
        "minimum": "≥",
        "exclusiveMinimum": ">",
        "maximum": "≤",
        "exclusiveMaximum": "<",
        "minLength": "length ≥",
    }
    return ", ".join(f"{sign} {schema[key]}" for key, sign in names.items() if key in schema)


def _default_text(field: dict[str, Any]) -> str:
    if "default" not in field:
        return ""
    default = field["default"]
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if default in ("", [], {}):
        return "empty"
    return f"`{default}`"


def _rows(
    schema: dict[str, Any], definitions: dict[str, Any], prefix: str = ""
) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, field in (schema.get("properties") or {}).items():
        resolved = field
        optional = [part for part in field.get("anyOf", ()) if part.get("type") != "null"]
        if len(optional) == 1 and "$ref" in optional[0]:
            resolved = definitions[optional[0]["$ref"].rsplit("/", 1)[-1]]
        if "$ref" in field:
            resolved = definitions[field["$ref"].rsplit("/", 1)[-1]]
        description = " ".join(
            (field.get("description") or resolved.get("description") or "").split()
        )
        limits = _limits(field)
        if limits:
            description = f"{description} ({limits})" if description else limits
        default_text = _default_text(field)
        rows.append(
            (f"`{prefix}{name}`", _type_text(field, definitions), default_text, description)
        )
        if resolved.get("type") == "object" and "properties" in resolved:
            rows.extend(_rows(resolved, definitions, f"{prefix}{name}."))
        items = resolved.get("items") or {}
        if resolved.get("type") == "array" and "$ref" in items:
            element = definitions[items["$ref"].rsplit("/", 1)[-1]]
            rows.extend(_rows(element, definitions, f"{prefix}{name}[]."))
    return rows


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated by `python docs/generate_config_reference.py` from the pydantic models",
        "that read each file; a test fails when this page is stale. Command-line flags are",
        "listed by `dra-driver <command> --help` (every flag also has an environment variable).",
        "",
    ]
    for section in SECTIONS:
        schema = section.model.model_json_schema(by_alias=True)
        definitions = schema.get("$defs", {})
        lines += [f"## {section.title}", "", section.where, ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for row in _rows(schema, definitions):
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(
                f"{TARGET} is stale: run python docs/generate_config_reference.py", file=sys.stderr
            )
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
