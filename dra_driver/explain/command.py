"""`dra-driver explain`: the flags of the offline explain and its exit status.

Owns the subcommand's parser and handler. May import `dra_driver.cli` (the
registration contract) at module level and, inside the handler, the engine and
`dra_driver.explain`'s inventory and explanation modules.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dra_driver.cli.registration import EXIT_BAD_INPUT, Subcommands

EXIT_PLACED = 0
EXIT_REFUSED = 1
"""Every node refused the workload; the output says why."""


def register(commands: Subcommands) -> None:
    explain = commands.add_parser(
        "explain",
        help="where would this pod or claim go, and why not elsewhere?",
        description=(
            "Run the HAMi allocation engine over an inventory file for one Pod or "
            "ResourceClaim; print the chosen node and devices, or each node's refusal. "
            "Exit status: 0 placed, 1 refused everywhere, 2 bad input."
        ),
    )
    explain.add_argument(
        "-i",
        "--inventory",
        type=Path,
        env="EXPLAIN_INVENTORY",
        help="inventory file (YAML or JSON)",
    )
    explain.add_argument(
        "-w", "--workload", type=Path, env="EXPLAIN_WORKLOAD", help="Pod or ResourceClaim manifest"
    )
    explain.add_argument(
        "-o", "--output", choices=("text", "json"), env="EXPLAIN_OUTPUT", default="text"
    )
    explain.add_argument(
        "--print-schema",
        action="store_true",
        env="EXPLAIN_PRINT_SCHEMA",
        help="print the inventory JSON Schema and exit",
    )
    explain.set_defaults(handler=_explain)


def _explain(args: argparse.Namespace) -> int:
    from dra_driver.engine.vendors import VendorRegistry
    from dra_driver.explain.explanation import explain, render
    from dra_driver.explain.inventory_file import inventory_schema, load_inventory
    from dra_driver.objects.dra_engine_vendors import dra_vendor_registry
    from dra_driver.objects.yaml_files import read_yaml_document

    if args.print_schema:
        print(json.dumps(inventory_schema(), indent=2))
        return EXIT_PLACED
    if args.inventory is None or args.workload is None:
        print("dra-driver explain: --inventory and --workload are required", file=sys.stderr)
        return EXIT_BAD_INPUT
    workload = read_yaml_document(args.workload)
    # A claim names a DeviceClass, so any DRA family; a pod is read as before.
    is_claim = isinstance(workload, dict) and workload.get("kind") != "Pod"
    vendors = dra_vendor_registry() if is_claim else VendorRegistry()
    inventory = load_inventory(args.inventory, vendors)
    explanation = explain(inventory, workload, vendors)
    print(render(explanation, args.output))
    return EXIT_PLACED if explanation.decision.placement is not None else EXIT_REFUSED
