"""The agent's config file (YAML): every agent flag under its camelCase name
(a repeatable flag under the plural, as a list); a flag given on the command
line overrides the file, the file overrides the defaults.

    apiVersion: nodegc.io/v1alpha1
    kind: AgentConfig
    interval: 30s
    consecutiveScans: 3
    grace: 2m
    markRules: ["volume_mount=5,10m"]
    dryRun: true

Each value goes through the flag's own type, so the file and the command line accept and refuse the same
values; an error names the file, the key (with its index in a list) and the line.
"""

from __future__ import annotations

import argparse
import copy
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

API_VERSION = "nodegc.io/v1alpha1"
KIND = "AgentConfig"
# Flags that make no sense in a file: the file itself, and test-only hooks.
NOT_IN_FILE = frozenset({"config", "max_cycles", "help"})
MAX_CONFIG_BYTES = 1 << 20
"""A config of flags is a few hundred bytes; a bigger file is a mistake, and is not read into memory."""


class ConfigError(ValueError):
    """A config file that cannot be read or holds a bad value; the message says where."""


def camel(dest: str) -> str:
    head, *rest = dest.split("_")
    return head + "".join(w.capitalize() for w in rest)


def subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def explicit_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The settings the command line gave explicitly (a default does not count)."""
    quiet = copy.deepcopy(parser)
    stack = [quiet]
    while stack:
        p = stack.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                stack.extend(a.choices.values())
            elif a.dest != "command":
                a.default = argparse.SUPPRESS
        p._defaults = {}
    return set(vars(quiet.parse_args(list(argv))))


def keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """camelCase key -> the flag's action, for the agent's flags; a repeatable flag takes a list under the
    plural (--mark-rule: markRules)."""
    return {camel(a.dest) + ("s" if isinstance(a, argparse._AppendAction) else ""): a for a in parser._actions
            if a.option_strings and a.dest not in NOT_IN_FILE and a.help != argparse.SUPPRESS}


def load(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """The mapping and the line of each top-level key (1-based)."""
    import yaml

    try:
        text = _read(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except RecursionError as e:
        raise ConfigError(f"{path}: not valid YAML: nested too deeply") from e
    except ValueError as e:  # an integer of more digits than Python converts, raised by the constructor
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from e
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{path}: expected a mapping of settings (kind: {KIND}), got {type(data).__name__}")
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    return data, lines


def _read(path: Path) -> bytes:
    """The file's bytes, followed through symlinks (a ConfigMap mounts it as one), but only a regular file
    of at most MAX_CONFIG_BYTES: O_NONBLOCK keeps a FIFO from blocking the open, and fstat checks the file
    that is read, so a FIFO or a device such as /dev/zero is refused, not read without end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise OSError(0, f"{st.st_size} bytes, larger than the {MAX_CONFIG_BYTES} byte limit")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_CONFIG_BYTES:
                raise OSError(0, f"grew beyond the {MAX_CONFIG_BYTES} byte limit while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def shown(value: Any) -> str:
    """A value as an error quotes it: a list or a mapping by its type only (an alias bomb of a few hundred
    bytes stands for billions of leaves, and its repr takes minutes and gigabytes), a scalar cut short."""
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def apply(parser: argparse.ArgumentParser, command: str, argv: Sequence[str], args: argparse.Namespace,
          path: Path) -> list[str]:
    """Fill `args` from the file for every setting the command line did not give; the keys applied."""
    sub = subcommand_parser(parser, command)
    data, lines = load(path)
    known = keys(sub)
    given = explicit_dests(parser, argv)
    applied: list[str] = []
    for key, value in data.items():
        where = f"{path}: {key}" + (f" (line {lines[key]})" if key in lines else "")
        if key == "apiVersion":
            if value != API_VERSION:
                raise ConfigError(f"{where}: expected {API_VERSION}, got {shown(value)}")
            continue
        if key == "kind":
            if value != KIND:
                raise ConfigError(f"{where}: expected {KIND}, got {shown(value)}")
            continue
        if not isinstance(key, str) or key not in known:
            hint = _closest(str(key), known)
            raise ConfigError(f"{where}: unknown setting" + (f"; did you mean {hint}?" if hint else
                              f"; known: {', '.join(sorted(known))}"))
        action = known[key]
        converted = _convert(action, value, where)
        if action.dest in given:
            continue
        setattr(args, action.dest, converted)
        applied.append(key)
    return applied


def _convert(action: argparse.Action, value: Any, where: str) -> Any:
    flag = action.option_strings[-1]
    if isinstance(action, argparse.BooleanOptionalAction):
        flag = action.option_strings[0]  # --watch-pod-dirs, not its --no- form: true turns it on
    if action.nargs == 0:  # store_true
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false (as {flag}), got {shown(value)}")
        return value
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list (as repeated {flag}), got {shown(value)}")
        return [_one(action, v, f"{where.split(' (line', maxsplit=1)[0]}[{i}]", flag) for i, v in enumerate(value)]
    return _one(action, value, where, flag)


def _one(action: argparse.Action, value: Any, where: str, flag: str) -> Any:
    if value is None or isinstance(value, (dict, list)):
        raise ConfigError(f"{where}: expected a single value (as {flag}), got {shown(value)}")
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if "\0" in text:  # YAML can spell one ("\0"), a command line cannot: a path holding it fails every use
        raise ConfigError(f"{where}: a NUL byte, which no value of {flag} can hold")
    if action.choices is not None and text not in [str(c) for c in action.choices]:
        raise ConfigError(f"{where}: expected one of {', '.join(map(str, action.choices))}, got {shown(value)}")
    convert = action.type
    if convert is None:
        return text
    try:
        return convert(text)  # type: ignore[operator]
    except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
        raise ConfigError(f"{where}: {e} (as {flag})") from e


def _closest(key: str, known: dict[str, argparse.Action]) -> str | None:
    import difflib

    found = difflib.get_close_matches(key, list(known), n=1, cutoff=0.7)
    return found[0] if found else None
