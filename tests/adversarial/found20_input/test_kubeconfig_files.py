"""A kubeconfig is parsed by nodegc (the $KUBECONFIG merge) and by lightkube (one explicit file); either way
a bad one must end in a KubeError naming the problem, never a traceback or a hang. A document nested deeper
than the YAML parser's recursion raised RecursionError through both paths (a crash of every command that
talks to the API), and a tokenFile that is a FIFO or a device was handed to lightkube, which reads it at
every request without a bound: the request blocked for good, or read /dev/zero until memory ran out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodegc.api.client import load_config, make_client
from nodegc.api.errors import KubeError
from tests.adversarial.found20_input.bombs import deep


def _nested(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(f"clusters: {deep(5000)}\ncontexts: []\n")
    return path


def test_a_deeply_nested_kubeconfig_is_a_kube_error(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="nested too deeply"):
        load_config(_nested(tmp_path))


def test_a_deeply_nested_file_of_kubeconfig_env_is_a_kube_error(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(_nested(tmp_path)))
    with pytest.raises(KubeError, match="nested too deeply"):
        load_config()


def _with_token_file(tmp_path: Path, token_file: str) -> Path:
    path = tmp_path / "config"
    path.write_text("current-context: c\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"
                    f"contexts:\n- name: c\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n"
                    f"  user: {{tokenFile: '{token_file}'}}\n")
    return path


def test_a_token_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "token")
    with pytest.raises(KubeError, match="not a regular file"):
        make_client(_with_token_file(tmp_path, str(tmp_path / "token")))


def test_a_token_file_that_is_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="not a regular file"):
        make_client(_with_token_file(tmp_path, "/dev/zero"))


def test_a_huge_token_file_is_refused(tmp_path: Path) -> None:
    with (tmp_path / "token").open("wb") as f:
        f.truncate(64 << 20)
    with pytest.raises(KubeError, match="byte limit"):
        make_client(_with_token_file(tmp_path, str(tmp_path / "token")))


def test_a_token_file_reached_through_a_symlink_is_taken(tmp_path: Path) -> None:
    """A projected service account token is a symlink into ..data; a missing one is lightkube's to report."""
    (tmp_path / "..data").mkdir()
    (tmp_path / "..data" / "token").write_text("abc\n")
    (tmp_path / "token").symlink_to("..data/token")
    make_client(_with_token_file(tmp_path, str(tmp_path / "token"))).close()


@pytest.mark.parametrize("text", ["", "# nothing\n", "- a\n", "just text\n", "clusters:\n- 5\ncontexts: []\n"])
def test_a_kubeconfig_that_is_not_a_mapping_is_a_kube_error(tmp_path: Path, text: str) -> None:
    """Found by the kubeconfig fuzz target: an empty file (None), a list or a scalar crashed lightkube's
    from_dict with AttributeError, a traceback of every command given that file."""
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(KubeError, match="cannot load the Kubernetes client configuration"):
        load_config(path)


@pytest.mark.parametrize("through_env", [False, True])
def test_a_huge_kubeconfig_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             through_env: bool) -> None:
    """A kubeconfig was read whole, whatever its size (a sparse file of gigabytes is memory of gigabytes)."""
    path = tmp_path / "config"
    with path.open("wb") as f:
        f.truncate(64 << 20)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(KubeError, match="byte limit"):
        load_config(None if through_env else path)
