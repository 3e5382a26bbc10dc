"""Build one lightkube client from an explicit kubeconfig, the in-cluster service account, or $KUBECONFIG."""

from __future__ import annotations

import os
from pathlib import Path

import httpx2
import lightkube
import yaml
from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG
from msgspec import MsgspecError

from nodegc.kube.errors import KubeError


def make_client(kubeconfig: Path | None = None, *, timeout: float = 10.0,
                field_manager: str = "nodegc") -> lightkube.Client:
    """Explicit file first, then in-cluster, then KUBECONFIG (its first entry) or ~/.kube/config."""
    try:
        if kubeconfig is not None:
            config = lightkube.KubeConfig.from_file(kubeconfig)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config = lightkube.KubeConfig.from_service_account()
        else:
            env_paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
            config = lightkube.KubeConfig.from_file(env_paths[0] if env_paths else DEFAULT_KUBECONFIG)
        return lightkube.Client(config, timeout=httpx2.Timeout(timeout), field_manager=field_manager)
    except yaml.YAMLError as e:
        # str(e) would quote the offending line, which may hold a token.
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KubeError(f"the Kubernetes client configuration is not valid YAML{where}") from e
    except (lightkube.ConfigError, OSError, KeyError, MsgspecError, TypeError, ValueError,
            AssertionError) as e:
        raise KubeError(f"cannot set up the Kubernetes client: {type(e).__name__}: {e}") from e
