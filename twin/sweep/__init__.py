"""Scenario sweeps and plan search (see ``twin.sweep.runner`` for the entry points)."""
