"""Flag validation, durations, the agent's config file, help and completion: the command line as users meet it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodegc import defaults
from nodegc.cli import main
from nodegc.config import ConfigError, apply
from nodegc.flags import build_parser, parse_duration
from nodegc.model.resources import Kind
from nodegc.wiring import AgentSettings, agent_from_args

# (command, flag, a bad value): each must exit 2 with a message naming the flag.
BAD_VALUES = [
    ("agent", "--interval", "0"),
    ("agent", "--interval", "-5"),
    ("agent", "--interval", "nan"),
    ("agent", "--interval", "inf"),
    ("agent", "--max-share", "2"),
    ("agent", "--max-share", "0"),
    ("agent", "--max-share", "nan"),
    ("clean", "--max-share", "1.5"),
    ("agent", "--grace", "-1"),
    ("agent", "--grace", "nan"),
    ("agent", "--consecutive-scans", "0"),
    ("agent", "--consecutive-scans", "two"),
    ("agent", "--min-age", "-1"),
    ("scan", "--min-age", "inf"),
    ("agent", "--command-timeout", "0"),
    ("scan", "--command-timeout", "-1"),
    ("clean", "--reclaims-per-minute", "0"),
    ("clean", "--reclaims-per-minute", "inf"),
    ("clean", "--max-desired-age", "0"),
    ("agent", "--max-desired-age", "nan"),
    ("agent", "--metrics-address", ":0"),
    ("agent", "--metrics-address", ":65536"),
    ("agent", "--metrics-address", "9808"),
    ("agent", "--mark-rule", "volume_mount=0,60"),
    ("agent", "--mark-rule", "volume_mount=3,-1"),
    ("agent", "--mark-rule", "nosuchkind=3,60"),
    ("history", "--limit", "0"),
    ("history", "--since", "1x"),
    ("history", "--since", "-1h"),
    ("controller", "--interval", "0"),
    ("controller", "--interval", "inf"),
    ("controller", "--lease-duration", "nan"),
    ("controller", "--max-patches-per-pass", "-1"),
    ("controller", "--events-per-minute", "0"),
    ("controller", "--metrics-address", ":99999"),
]


@pytest.mark.parametrize(("command", "flag", "value"), BAD_VALUES, ids=str)
def test_a_bad_value_exits_2_naming_the_flag(command: str, flag: str, value: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, f"{flag}={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err, err
    assert err.count("error:") == 1, err  # printed once
    assert len(err.splitlines()) == 2, err  # the error and where help is, no usage dump


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("1.5m", 90.0), ("1h30m", 5400.0), ("2d", 172800.0), ("500ms", 0.5),
    ("1h0m30s", 3630.0), ("0", 0.0), (".5s", 0.5),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "1h30", "m1", "1 h", "nan", "inf", "-inf", "1e999"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_duration_flags_take_units() -> None:
    args = build_parser().parse_args(["agent", "--interval", "1m", "--grace", "1h30m", "--min-age", "90s",
                                      "--mark-rule", "volume_mount=5,10m"])
    s = agent_from_args(args)
    assert (s.interval, s.phases.grace_seconds, s.safety.min_age_seconds) == (60.0, 5400.0, 90.0)
    assert s.phases.per_kind == {Kind.VOLUME_MOUNT: (5, 600.0)}


# -- the agent's config file ---------------------------------------------------------------------


def _agent(argv: list[str], config: Path) -> tuple[AgentSettings, list[str]]:
    parser = build_parser()
    full = ["agent", "--config", str(config), *argv]
    args = parser.parse_args(full)
    applied = apply(parser, "agent", full, args, config)
    return agent_from_args(args), applied


def test_config_file_sets_the_agent_and_flags_override_it(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("apiVersion: nodegc.io/v1alpha1\nkind: AgentConfig\ninterval: 1m\nconsecutiveScans: 5\n"
                   "grace: 10m\ndryRun: true\nmaxShare: 0.25\nmarkRules: [\"volume_mount=5,10m\"]\n"
                   "cniBinDirs: [/usr/lib/cni, /opt/cni/bin]\nmetricsAddress: \"127.0.0.1:9000\"\n")
    s, applied = _agent(["--interval", "45s", "--consecutive-scans", "3"], cfg)
    assert s.interval == 45.0 and s.phases.consecutive_scans == 3  # the command line wins
    assert s.phases.grace_seconds == 600.0 and s.dry_run and s.safety.max_share == 0.25
    assert s.phases.per_kind == {Kind.VOLUME_MOUNT: (5, 600.0)}
    assert s.roots.cni_bin_dirs == (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
    assert s.metrics_address == "127.0.0.1:9000"
    assert "interval" not in applied and "grace" in applied


def test_pod_dir_watching_is_on_unless_turned_off(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("kind: AgentConfig\n")
    assert _agent([], cfg)[0].watch_pod_dirs is defaults.WATCH_POD_DIRS is True
    assert _agent(["--no-watch-pod-dirs"], cfg)[0].watch_pod_dirs is False
    cfg.write_text("kind: AgentConfig\nwatchPodDirs: false\n")
    assert _agent([], cfg)[0].watch_pod_dirs is False
    assert _agent(["--watch-pod-dirs"], cfg)[0].watch_pod_dirs is True  # the command line wins
    from nodegc.wiring import agent_engine_settings

    off = _agent(["--no-watch-pod-dirs"], cfg)[0]
    assert agent_engine_settings(off.safety, off.phases, watch_pod_dirs=off.watch_pod_dirs).scan.watch_pod_dirs is False


def test_config_file_defaults_stay_when_absent(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("kind: AgentConfig\n")
    s, _ = _agent([], cfg)
    assert s.interval == defaults.AGENT_INTERVAL_SECONDS and s.phases.consecutive_scans == defaults.CONSECUTIVE_SCANS


@pytest.mark.parametrize(("text", "expected"), [
    ("interval: 0\n", "interval (line 1): must be > 0"),
    ("kind: AgentConfig\nmaxShare: 2\n", "maxShare (line 2): must be in (0, 1]"),
    ("grace: .nan\n", "grace (line 1): not a finite duration"),
    ("intervall: 30s\n", "intervall (line 1): unknown setting; did you mean interval?"),
    ("markRules: [\"volume_mount=5,10m\", \"pod_dir=0,1\"]\n", "markRules[1]: expected KIND=K,DURATION"),
    ("markRules: volume_mount=5,10m\n", "markRules (line 1): expected a list"),
    ("dryRun: yes please\n", "dryRun (line 1): expected true or false"),
    ("watchPodDirs: \"no\"\n", "watchPodDirs (line 1): expected true or false (as --watch-pod-dirs)"),
    ("kind: Pod\n", "kind (line 1): expected AgentConfig"),
    ("apiVersion: v1\n", "apiVersion (line 1): expected nodegc.io/v1alpha1"),
    ("- interval\n", "expected a mapping"),
    ("interval: [1\n", "not valid YAML at line"),
    ("logLevel: loud\n", "logLevel (line 1): expected one of debug, info, warning, error"),
    ("consecutiveScans: {a: 1}\n", "consecutiveScans (line 1): expected a single value"),
])
def test_config_errors_say_where(tmp_path: Path, text: str, expected: str) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        _agent([], cfg)
    assert str(exc.value).startswith(f"{cfg}: ")
    assert expected in str(exc.value), str(exc.value)


def test_a_bad_config_exits_2_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("interval: 0\n")
    assert main(["agent", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interval (line 1): must be > 0" in err and "--interval" in err


def test_a_missing_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


# -- help and completion ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["scan", "clean", "agent", "history", "explain", "controller", "completion"])
def test_help_has_examples_and_defaults(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "examples:" in out
    if command in ("scan", "clean", "agent"):
        assert "(default: 60.0)" in out  # --min-age
        assert "(default: /var/lib/kubelet)" in out


def test_top_help_lists_every_command_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("scan", "clean", "agent", "controller", "history", "explain", "completion"):
        assert any(line.strip().startswith(command + " ") for line in out.splitlines()), command
    assert "exit status:" in out


def _script(shell: str) -> str:
    out = subprocess.run([sys.executable, "-m", "nodegc", "completion", shell], capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout


@pytest.mark.parametrize(("shell", "check"), [
    ("bash", ["bash", "-n"]), ("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"]),
])
def test_completion_scripts_parse(shell: str, check: list[str], tmp_path: Path) -> None:
    text = _script(shell)
    assert "consecutive-scans" in text and "clean" in text and "max-share" in text
    if shutil.which(check[0]) is None:
        pytest.skip(f"{check[0]} is not installed")
    path = tmp_path / f"nodegc.{shell}"
    path.write_text(text)
    result = subprocess.run([*check, str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_bash_completion_completes(tmp_path: Path) -> None:
    """Run the bash function the way bash does on <TAB>."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    path = tmp_path / "nodegc.bash"
    path.write_text(_script("bash"))
    probe = (f"source {path}\n"
             "COMP_WORDS=(nodegc cl); COMP_CWORD=1; _nodegc; echo \"${COMPREPLY[*]}\"\n"
             "COMP_WORDS=(nodegc scan -o ''); COMP_CWORD=3; _nodegc; echo \"${COMPREPLY[*]}\"\n"
             "COMP_WORDS=(nodegc agent --consec); COMP_CWORD=2; _nodegc; echo \"${COMPREPLY[*]}\"\n")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    lines = out.stdout.splitlines()
    assert lines == ["clean", "table json yaml", "--consecutive-scans"], out.stdout + out.stderr


@pytest.mark.parametrize("command", ["scan", "clean", "agent", "history", "explain", "controller"])
def test_no_flag_states_its_default_twice(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for chunk in out.split(" --")[1:]:
        assert chunk.count("default:") <= 1, chunk
