"""What runc keeps of a reclaimed task bundle's container outside it (its state dir under the runc root, its
empty cgroups under the cgroup root) was looked for at the executor's built-in paths only: a node whose runc
root or cgroup hierarchies live elsewhere (another containerd state dir, a cgroup tree bind-mounted into the
agent's container at another path) could not say so, and those pieces were never found. `--runc-root` and
`--cgroup-root` (clean and agent, and their config file) now name them, `none` leaves them untouched, and a
path that is not absolute is refused as a usage error, as a deletion root must never depend on the working
directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegc.config import ConfigError, apply
from nodegc.flags import build_parser
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.settings import Roots
from nodegc.wiring import agent_from_args, clean_from_args, make_executor


def executor(argv: list[str]) -> HostExecutor:
    s = clean_from_args(build_parser().parse_args(["clean", *argv]))
    made = make_executor(Roots(), dry_run=False, timeout=5.0, runtime_endpoint=None,
                         runtime_state_dir=s.safety.runtime_state_dir, runc_root=s.safety.runc_root,
                         cgroup_root=s.safety.cgroup_root)
    assert isinstance(made, HostExecutor)
    return made


def test_the_defaults_are_containerds_and_the_kernels() -> None:
    x = executor([])
    assert x.runc_root == Path("/run/containerd/runc") and x.cgroup_root == Path("/sys/fs/cgroup")


def test_the_flags_reach_the_executor() -> None:
    x = executor(["--runc-root", "/run/k3s/containerd/runc", "--cgroup-root", "/host/sys/fs/cgroup"])
    assert x.runc_root == Path("/run/k3s/containerd/runc") and x.cgroup_root == Path("/host/sys/fs/cgroup")


def test_none_leaves_them_untouched() -> None:
    x = executor(["--runc-root", "none", "--cgroup-root", "none"])
    assert x.runc_root is None and x.cgroup_root is None


@pytest.mark.parametrize("flag", ["--runc-root", "--cgroup-root"])
@pytest.mark.parametrize("value", ["run/containerd/runc", "./cg", ""])
def test_a_path_that_is_not_absolute_is_a_usage_error(flag: str, value: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["agent", f"{flag}={value}"])
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_the_agent_config_file_takes_them(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("kind: AgentConfig\nruncRoot: /run/other/runc\ncgroupRoot: none\n")
    parser = build_parser()
    argv = ["agent", "--config", str(cfg)]
    args = parser.parse_args(argv)
    apply(parser, "agent", argv, args, cfg)
    s = agent_from_args(args)
    assert s.safety.runc_root == Path("/run/other/runc") and s.safety.cgroup_root is None
    cfg.write_text("kind: AgentConfig\nruncRoot: relative/runc\n")
    args = parser.parse_args(argv)
    with pytest.raises(ConfigError, match="runcRoot"):
        apply(parser, "agent", argv, args, cfg)
