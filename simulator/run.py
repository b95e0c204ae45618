"""`dra-driver simulate`: run the chosen mode's simulation, then report.

Progress goes to stderr so `-o json` on stdout stays machine-readable.
"""

from __future__ import annotations

import asyncio
import json
import sys

from rich.console import Console

from simulator.dra_simulation import simulate
from simulator.legacy import simulate_legacy
from simulator.mixed import simulate_mixed
from simulator.progress import progress_display
from simulator.report import render_report
from simulator.settings import Mode, SimulationSettings
from simulator.workloads import load_scenario

PIPED_WIDTH = 160


def run_simulation(settings: SimulationSettings, output: str) -> int:
    """Exit status: 0 when every pod started or was refused with a reason and every tamper
    attempt was refused or neutralised with a reason, 1 otherwise."""
    simulations = {
        Mode.DRA: simulate,
        Mode.DRA_SCHEDULER: simulate,
        Mode.LEGACY: simulate_legacy,
        Mode.MIXED: simulate_mixed,
    }
    simulation = simulations[settings.mode]
    scenario = load_scenario(
        settings.workload_files(), settings.mode.value, tuple(mode.value for mode in Mode)
    )
    with progress_display(sys.stderr) as progress:
        report = asyncio.run(simulation(settings, scenario, progress))
    if output == "json":
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        width = None if sys.stdout.isatty() else PIPED_WIDTH
        render_report(report, Console(file=sys.stdout, width=width))
    unexplained = [pod for pod in report.refused if not pod.reason]
    return 1 if unexplained or report.bypasses else 0
