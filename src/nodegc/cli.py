"""`nodegc` command line: parse the flags, set up logging, hand typed settings to one command.

Light on purpose: `--help` and `--version` import only the flag definitions (nodegc/flags.py). The
settings are built by nodegc/wiring.py; the commands live in nodegc/commands.py, agent.py and
controller.py, and none of them imports this module. Installed as `nodegc` and as `kubectl-nodegc`
(the name kubectl looks for, so `kubectl nodegc scan` works).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence

from nodegc.exitcodes import (
    EXIT_BLOCKED,
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NODE_UNSEEN,
    EXIT_RESIDUE,
    EXIT_SOURCE,
    EXIT_USAGE,
)
from nodegc.flags import build_parser

__all__ = ["EXIT_BLOCKED", "EXIT_CLEAN", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_NODE_UNSEEN", "EXIT_RESIDUE",
           "EXIT_SOURCE", "EXIT_USAGE", "build_parser", "main"]


def prog_name(argv0: str) -> str:
    """`kubectl nodegc` when kubectl runs us as its plugin, else `nodegc`."""
    return "kubectl nodegc" if os.path.basename(argv0).startswith("kubectl-") else "nodegc"


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    parser.prog = prog_name(sys.argv[0] if argv is None else "nodegc")
    args = parser.parse_args(words)
    # Text that is not valid Unicode (a lone surrogate in a name) is printed escaped, never a crash.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    if args.command == "completion":
        from nodegc.completion import script

        sys.stdout.write(script(args.shell))
        return EXIT_CLEAN
    if getattr(args, "config", None) is not None:
        from nodegc.config import ConfigError, apply

        try:
            apply(parser, args.command, words, args, args.config)
        except ConfigError as e:
            print(f"nodegc: {e}", file=sys.stderr)
            return EXIT_USAGE
    from nodegc.observe.logs import configure_logging

    fmt = {"auto": None, "json": True, "console": False}[args.log_format]
    # One-shot commands print what went wrong themselves (once, with a hint): their logs stay quiet by default.
    level = args.log_level or ("info" if args.command in ("agent", "controller") else "error")
    configure_logging(level, json_output=fmt)
    if args.command not in ("agent", "controller"):  # those make them themselves (and log them)
        from nodegc.hostio.libc import tune_malloc

        # Before any thread, as the agent does: a scan of a big node frees buffers of MBs (an iptables dump, a
        # list page) that glibc's adaptive threshold would keep in the heap after. The operator's MALLOC_*
        # and GLIBC_TUNABLES win.
        tune_malloc()
    try:
        return _dispatch(args.command, args)
    except KeyboardInterrupt:
        print("nodegc: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(command: str, args: argparse.Namespace) -> int:
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
