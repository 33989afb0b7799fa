"""Deterministic simulation of a raft cluster: one seed decides the whole run.

Test-only: production code never imports this package. See README.md.
"""

from rayjet.sim.checker import Checker, Violation
from rayjet.sim.runner import Result, Simulation, run_seed

__all__ = ["Checker", "Result", "Simulation", "Violation", "run_seed"]
