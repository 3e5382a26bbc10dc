"""The one kubeconfig loader and the one client factory.

A process builds one lightkube client (one connection pool) and hands it to every part that talks to
the API: the agent's pod watch, its live GETs and its Event writer; the controller's caches, sweeper,
Lease and Events. Configuration: an explicit file first, then the in-cluster service account, then
$KUBECONFIG (its first entry) or ~/.kube/config.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx2
import lightkube
import yaml
from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG
from msgspec import MsgspecError

from nodegc import defaults
from nodegc.api.errors import KubeError

DEFAULT_TIMEOUT = defaults.REQUEST_TIMEOUT_SECONDS
AGENT_FIELD_MANAGER = "nodegc"
CONTROLLER_FIELD_MANAGER = "nodegc-controller"


def load_config(kubeconfig: Path | None = None) -> lightkube.KubeConfig:
    """Every failure is a KubeError whose message never quotes the file (it may hold a token)."""
    try:
        if kubeconfig is not None:
            return lightkube.KubeConfig.from_file(kubeconfig)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return lightkube.KubeConfig.from_service_account()
        env_paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        return lightkube.KubeConfig.from_file(env_paths[0] if env_paths else DEFAULT_KUBECONFIG)
    except yaml.YAMLError as e:
        # str(e) would quote the offending line, which may hold a token.
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KubeError(f"the Kubernetes client configuration is not valid YAML{where}") from e
    except (lightkube.ConfigError, OSError, KeyError, MsgspecError, TypeError, ValueError, AssertionError) as e:
        raise KubeError(f"cannot load the Kubernetes client configuration: {type(e).__name__}: {e}") from e


def make_client(kubeconfig: Path | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                field_manager: str = AGENT_FIELD_MANAGER) -> lightkube.Client:
    """One lightkube client; KubeError when the configuration cannot be loaded or used."""
    config = load_config(kubeconfig)
    try:
        return lightkube.Client(config, timeout=httpx2.Timeout(timeout), field_manager=field_manager)
    except (lightkube.ConfigError, OSError, KeyError, MsgspecError, TypeError, ValueError, AssertionError) as e:
        raise KubeError(f"cannot set up the Kubernetes client: {type(e).__name__}: {e}") from e
