"""The one kubeconfig loader and the one client factory.

A process builds one lightkube client (one connection pool) and hands it to every part that talks to
the API: the agent's pod watch, its live GETs and its Event writer; the controller's caches, sweeper,
Lease and Events. Configuration: an explicit file first, then the in-cluster service account, then
$KUBECONFIG (several files merged as kubectl merges them) or ~/.kube/config; `context` picks a context
other than the current one, as `kubectl --context` does.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import httpx2
import lightkube
import yaml
from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG
from msgspec import MsgspecError

from nodegc import defaults
from nodegc.api.errors import KubeError
from nodegc.api.streaming import check_lightkube

DEFAULT_TIMEOUT = defaults.REQUEST_TIMEOUT_SECONDS
AGENT_FIELD_MANAGER = "nodegc"
CONTROLLER_FIELD_MANAGER = "nodegc-controller"


def load_config(kubeconfig: Path | None = None, *, context: str | None = None
                ) -> lightkube.KubeConfig | lightkube.SingleConfig:
    """Every failure is a KubeError whose message never quotes the file (it may hold a token)."""
    try:
        if kubeconfig is not None:
            config = lightkube.KubeConfig.from_file(_not_huge(kubeconfig))
        elif os.environ.get("KUBERNETES_SERVICE_HOST") and context is None:
            config = lightkube.KubeConfig.from_service_account()
        else:
            env_paths = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
            config = merged_kubeconfig(env_paths) if env_paths else lightkube.KubeConfig.from_file(
                _not_huge(Path(DEFAULT_KUBECONFIG)))
        if context is None:
            _check_token_file(config)
            return config
        single = config.get(context_name=context)
        if single is None:
            raise lightkube.ConfigError(f"context {context!r} not found")
        _check_token_file(single)
        return single
    except RecursionError as e:
        raise KubeError("the Kubernetes client configuration is not valid YAML: nested too deeply") from e
    except yaml.YAMLError as e:
        # str(e) would quote the offending line, which may hold a token.
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KubeError(f"the Kubernetes client configuration is not valid YAML{where}") from e
    except AttributeError as e:  # lightkube's from_dict given an empty file, a list or a scalar
        raise KubeError("cannot load the Kubernetes client configuration: not a kubeconfig (a mapping of "
                        "clusters, contexts and users)") from e
    except (lightkube.ConfigError, OSError, KeyError, MsgspecError, TypeError, ValueError, AssertionError) as e:
        raise KubeError(f"cannot load the Kubernetes client configuration: {type(e).__name__}: {e}") from e


MAX_KUBECONFIG_BYTES = 16 << 20
"""Far above any kubeconfig (certificates inline and a few hundred contexts are well under a megabyte);
a bigger file is read by nobody."""


def _not_huge(path: Path) -> Path:
    """`path`, once its size is seen to be at most MAX_KUBECONFIG_BYTES; a missing file, or one that is not
    regular, is left for the loader to report as it does."""
    try:
        st = path.expanduser().stat()
    except FileNotFoundError:
        return path
    if stat.S_ISREG(st.st_mode) and st.st_size > MAX_KUBECONFIG_BYTES:
        raise lightkube.ConfigError(f"{path} is {st.st_size} bytes, larger than the {MAX_KUBECONFIG_BYTES} byte "
                                    "limit; not read")
    return path


MAX_TOKEN_FILE_BYTES = 1 << 20
"""A bearer token is a few KiB; lightkube reads the file whole at every request."""


def _check_token_file(config: lightkube.KubeConfig | lightkube.SingleConfig) -> None:
    """lightkube reads a user's tokenFile at every request, whole and blocking: a FIFO there would block
    every request for good, and a device such as /dev/zero would be read until memory runs out. Only a
    regular file (through symlinks: a projected token is one) of at most MAX_TOKEN_FILE_BYTES is handed on;
    a missing one is left for lightkube to report at the request, as before."""
    try:
        single = config if isinstance(config, lightkube.SingleConfig) else config.get()
    except (lightkube.ConfigError, KeyError):
        return  # no usable context: the client's set-up says so
    token_file = single.user.token_file if single is not None and single.user is not None else None
    if not token_file:
        return
    try:
        fd = os.open(token_file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise lightkube.ConfigError(f"tokenFile {token_file} is not a regular file")
    if st.st_size > MAX_TOKEN_FILE_BYTES:
        raise lightkube.ConfigError(f"tokenFile {token_file} is {st.st_size} bytes, larger than the "
                                    f"{MAX_TOKEN_FILE_BYTES} byte limit")


# Fields holding a path, resolved against the file that names them (kubectl does the same), so that a
# relative path in the second file of $KUBECONFIG still means what it meant there.
_PATH_FIELDS = {"clusters": ("cluster", ("certificate-authority",)),
                "users": ("user", ("client-certificate", "client-key", "tokenFile"))}


def merged_kubeconfig(paths: list[Path]) -> lightkube.KubeConfig:
    """$KUBECONFIG's files merged by kubectl's rules: for clusters, users and contexts the first file that
    names an entry wins, and so does the first file that sets current-context; missing files are skipped."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {k: set() for k in merged}
    found: list[Path] = []
    for raw in paths:
        path = raw.expanduser()
        if not path.is_file():
            continue
        found.append(path)
        doc = yaml.safe_load(_not_huge(path).read_text(encoding="utf-8")) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{path} is not a kubeconfig (a mapping)")
        if merged.get("current-context") is None and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for section in ("clusters", "users", "contexts"):
            for entry in doc.get(section) or []:
                name = entry.get("name") if isinstance(entry, dict) else None
                if not isinstance(name, str) or name in seen[section]:
                    continue
                seen[section].add(name)
                merged[section].append(_absolute_paths(section, entry, path.parent))
    if not found:
        raise lightkube.ConfigError(f"none of the $KUBECONFIG files exists: {os.pathsep.join(map(str, paths))}")
    return lightkube.KubeConfig.from_dict(merged, fname=found[0])


def _absolute_paths(section: str, entry: dict[str, Any], base: Path) -> dict[str, Any]:
    if section not in _PATH_FIELDS:
        return entry
    key, fields = _PATH_FIELDS[section]
    body = entry.get(key)
    if not isinstance(body, dict):
        return entry
    fixed = dict(body)
    for f in fields:
        value = fixed.get(f)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            fixed[f] = str(base / value)
    return {**entry, key: fixed}


def make_client(kubeconfig: Path | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                field_manager: str = AGENT_FIELD_MANAGER, context: str | None = None) -> lightkube.Client:
    """One lightkube client; KubeError when the configuration cannot be loaded or used."""
    config = load_config(kubeconfig, context=context)
    try:
        client = lightkube.Client(config, timeout=httpx2.Timeout(timeout), field_manager=field_manager)
    except (lightkube.ConfigError, OSError, KeyError, MsgspecError, TypeError, ValueError, AssertionError) as e:
        raise KubeError(f"cannot set up the Kubernetes client: {type(e).__name__}: {e}") from e
    # Before its first request: each connection keeps the network backend it was made with.
    check_lightkube(client)
    return client
