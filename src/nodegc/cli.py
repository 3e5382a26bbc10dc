"""`nodegc` command line: parse the flags, set up logging, hand typed settings to one command.

Light on purpose: `--help` and `--version` import only the flag definitions (nodegc/flags.py). The
settings are built by nodegc/wiring.py; the commands live in nodegc/commands.py, agent.py and
controller.py, and none of them imports this module.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence

from nodegc.exitcodes import (
    EXIT_BLOCKED,
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_RESIDUE,
    EXIT_SOURCE,
    EXIT_USAGE,
)
from nodegc.flags import build_parser

__all__ = ["EXIT_BLOCKED", "EXIT_CLEAN", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_RESIDUE", "EXIT_SOURCE",
           "EXIT_USAGE", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Text that is not valid Unicode (a lone surrogate in a name) is printed escaped, never a crash.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    from nodegc.observe.logs import configure_logging

    fmt = {"auto": None, "json": True, "console": False}[args.log_format]
    level = args.log_level or ("info" if args.command in ("agent", "controller") else "warning")
    configure_logging(level, json_output=fmt)
    try:
        return _dispatch(args.command, args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _dispatch(command: str, args: object) -> int:
    import argparse

    assert isinstance(args, argparse.Namespace)
    from nodegc import wiring

    if command == "scan":
        from nodegc.commands import cmd_scan

        return cmd_scan(wiring.scan_from_args(args))
    if command == "clean":
        from nodegc.commands import cmd_clean

        return cmd_clean(wiring.clean_from_args(args))
    if command == "agent":
        from nodegc.agent import cmd_agent

        return cmd_agent(wiring.agent_from_args(args))
    if command == "history":
        from nodegc.commands import cmd_history

        return cmd_history(wiring.history_from_args(args))
    if command == "explain":
        from nodegc.commands import cmd_explain

        return cmd_explain(wiring.explain_from_args(args))
    if command == "controller":
        from nodegc.controller import cmd_controller

        return cmd_controller(args)
    print(f"nodegc: unknown command {command}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
