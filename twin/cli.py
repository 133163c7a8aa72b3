"""The ``twin`` command. Each verb lives in its own module under ``twin.commands``.

A command module exposes ``register(subparsers)``, which adds its sub-parser and sets
``func`` (taking the parsed arguments, returning the exit status). Domain errors print a
one-line message naming the field and exit 2; nothing prints a traceback for bad input. A verb
whose optional dependencies (an extra) are missing says which extra to install and exits 2;
the verbs import those dependencies only when they run, so every verb is listed by ``--help``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from twin import __version__
from twin.core.errors import (
    InfeasibleError,
    MissingExtraError,
    NotFoundError,
    PluginError,
    SpecError,
    TooLargeError,
    TwinError,
)

COMMANDS = (
    "twin.commands.cmd_predict",
    "twin.commands.cmd_plugins",
    "twin.commands.cmd_validate",
    "twin.commands.cmd_fleet",
    "twin.commands.cmd_telemetry",
    "twin.commands.cmd_failures",
    "twin.commands.cmd_serve",
    "twin.commands.cmd_catalog",
    "twin.commands.cmd_demo",
    "twin.commands.cmd_sweep",
    "twin.commands.cmd_plan",
    "twin.commands.cmd_plot",
    "twin.commands.cmd_export",
    "twin.commands.cmd_import",
)

EXIT_BAD_INPUT = 2
# A command whose extra is not installed cannot run as invoked here, like a usage error (argparse's 2).
EXIT_MISSING_EXTRA = 2
EXIT_NOT_FOUND = 3
EXIT_INFEASIBLE = 4


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every command registered."""
    parser = argparse.ArgumentParser(
        prog="twin", description="Fabric Twin: a digital twin of AI training cluster interconnects.")
    parser.add_argument("--version", action="version", version=f"twin {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``twin`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return int(args.func(args) or 0)
    except MissingExtraError as err:  # before InfeasibleError, its base class
        print(f"twin: error: {err}", file=sys.stderr)
        return EXIT_MISSING_EXTRA
    except (SpecError, TooLargeError) as err:
        print(f"twin: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NotFoundError as err:
        print(f"twin: error: {err}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except InfeasibleError as err:
        print(f"twin: infeasible: {err}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except (PluginError, TwinError) as err:
        print(f"twin: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
