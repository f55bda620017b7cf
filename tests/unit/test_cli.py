import socket

import pytest
import yaml

from crawler.cli import build_parser, main
from crawler.local import LocalStack, StackError, _loopback_host_port
from udfs.config import load_config

COMMANDS = ["local", "deps", "topics", "config", "schemas", "plan", "simulate", "seed",
            "run"]


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in COMMANDS:
        assert f"    {cmd}" in out


@pytest.mark.parametrize("cmd", COMMANDS)
def test_each_command_has_help(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    assert len(capsys.readouterr().out.splitlines()) > 3


def test_local_requires_an_action():
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["local", "sideways"])
    assert exc.value.code == 2


def test_config_show_applies_overrides(capsys, monkeypatch):
    monkeypatch.setenv("CRAWL__FLINK__RESTART_ATTEMPTS", "4")
    assert main(["--set", "flink.parallelism=6", "config", "show"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["flink"]["parallelism"] == 6 and shown["flink"]["restart_attempts"] == 4


def test_config_error_exits_2_naming_the_key(capsys):
    assert main(["--set", "kafka.nonsense=1", "config", "check"]) == 2
    assert "kafka.nonsense" in capsys.readouterr().err


def test_schemas_check_passes(capsys):
    assert main(["schemas"]) == 0
    assert "discovered" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["10.0.0.5:9092", "a:1,b:2", "broker.internal:9092",
                                   "127.0.0.1"])
def test_local_stack_refuses_non_loopback_or_multiple_brokers(value):
    with pytest.raises(StackError, match="only serves one loopback host:port"):
        _loopback_host_port(value, "kafka.bootstrap_servers")


def test_local_stack_accepts_loopback():
    assert _loopback_host_port("localhost:19092", "k") == ("127.0.0.1", 19092)
    assert _loopback_host_port("http://127.0.0.1:18333", "k") == ("127.0.0.1", 18333)


def test_taken_port_is_named_before_anything_starts(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = load_config(env={}, overrides=[f"kafka.bootstrap_servers=127.0.0.1:{port}"])
        stack = LocalStack(cfg, state_dir=tmp_path)
        with pytest.raises(StackError, match=f"port {port} .*kafka.bootstrap_servers"):
            stack.services[0].start(timeout_s=5)
        assert not (tmp_path / "kafka" / "kafka.pid").exists()
        # The CLI turns it into one line and exit code 1.
        rc = main(["--set", f"kafka.bootstrap_servers=127.0.0.1:{port}", "local", "up",
                   "--state-dir", str(tmp_path)])
        assert rc == 1 and f"port {port}" in capsys.readouterr().err


def test_status_of_a_fresh_state_folder(tmp_path, capsys):
    assert main(["local", "status", "--state-dir", str(tmp_path)]) == 3
    out = capsys.readouterr().out
    assert "kafka  stopped" in out and "s3     stopped" in out


def test_stale_pid_file_is_not_trusted(tmp_path):
    stack = LocalStack(load_config(env={}), state_dir=tmp_path)
    kafka = stack.services[0]
    kafka.dir.mkdir(parents=True)
    # PID 1 runs, but its command line does not name our state folder: not ours.
    kafka.pidfile.write_text("1\n")
    assert kafka.pid() is None
    assert kafka.status().detail == "stale PID file"
    assert "removed stale PID file" in kafka.stop()
    assert not kafka.pidfile.exists()
