"""The `dra-driver` command: thin argument parsing over the library's entry points."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from dra_driver.errors import DriverError

EXIT_PLACED = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def _explain(args: argparse.Namespace) -> int:
    from dra_driver.engine.vendors import VendorRegistry
    from dra_driver.explain import explain, render
    from dra_driver.inventory_file import inventory_schema, load_inventory, read_document

    if args.print_schema:
        print(json.dumps(inventory_schema(), indent=2))
        return EXIT_PLACED
    if args.inventory is None or args.workload is None:
        print("dra-driver explain: --inventory and --workload are required", file=sys.stderr)
        return EXIT_BAD_INPUT
    vendors = VendorRegistry()
    inventory = load_inventory(args.inventory, vendors)
    explanation = explain(inventory, read_document(args.workload), vendors)
    print(render(explanation, args.output))
    return EXIT_PLACED if explanation.decision.placement is not None else EXIT_REFUSED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-driver",
        description="Shared-GPU Kubernetes driver (HAMi-compatible, DRA and device plugin).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser(
        "explain",
        help="where would this pod or claim go, and why not elsewhere?",
        description=(
            "Run the HAMi allocation engine over an inventory file for one Pod or "
            "ResourceClaim; print the chosen node and devices, or each node's refusal. "
            "Exit status: 0 placed, 1 refused everywhere, 2 bad input."
        ),
    )
    explain.add_argument("-i", "--inventory", type=Path, help="inventory file (YAML or JSON)")
    explain.add_argument("-w", "--workload", type=Path, help="Pod or ResourceClaim manifest")
    explain.add_argument("-o", "--output", choices=("text", "json"), default="text")
    explain.add_argument(
        "--print-schema", action="store_true", help="print the inventory JSON Schema and exit"
    )
    explain.set_defaults(handler=_explain)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except DriverError as error:
        print(f"dra-driver {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
