import os
import socket
from pathlib import Path

import pytest
import yaml

from crawler.cli import build_parser, main
from crawler.stack.local import LocalStack, ServiceStatus, StackError, _loopback_host_port
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


# -- every way of configuring reaches the jobs `crawl run` starts ------------------------


class _RunningStack:
    """A LocalStack that is already up: `crawl run` starts and stops nothing of it."""

    def __init__(self, cfg, state_dir=None):
        self.state_dir = Path(state_dir)

    def status(self):
        return [ServiceStatus("kafka", True, 1, "127.0.0.1:19092")]

    def up(self, log=print):
        pass

    def down(self, log=print):  # pragma: no cover - the stack was running
        raise AssertionError("run stopped a stack it did not start")


def test_run_gives_the_jobs_the_config_files_and_the_overrides(tmp_path, monkeypatch):
    import crawler.run
    import crawler.stack.local

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("fetch:\n  bundle_size: 50\n")
    (tmp_path / "seeds.txt").write_text("https://example.com/\n")
    commands = []

    def interrupt(*a, **kw):  # the crawl ends as soon as the jobs are started
        raise KeyboardInterrupt

    monkeypatch.setattr(crawler.stack.local, "LocalStack", _RunningStack)
    monkeypatch.setattr(crawler.stack.local, "ensure_topics", lambda cfg: [])
    monkeypatch.setattr(crawler.run.JobProcess, "start",
                        lambda job: commands.append(job.command()))
    monkeypatch.setattr(crawler.run, "publish_seeds", interrupt)
    monkeypatch.setattr(crawler.run.signal, "signal", lambda *a: None)  # pytest's stay
    rc = main(["--config", "mine.yaml", "run", "--set", "politeness.min_gap_s=2",
               "--seeds", "seeds.txt", "--state-dir", str(tmp_path / "state")])
    assert rc == 130
    assert [c[2] for c in commands] == ["jobs.frontier", "jobs.fetcher"]
    for cmd in commands:
        args = cmd[3:]
        pairs = list(zip(args[::2], args[1::2], strict=True))
        # The file by its absolute path (the job need not run where we do), then the
        # overrides: the run's topics and the user's --set, which wins over the file.
        assert pairs[0] == ("--config", str(tmp_path / "mine.yaml"))
        assert ("--set", "politeness.min_gap_s=2") in pairs
        assert all(flag == "--set" for flag, _ in pairs[1:])
        assert any(v.startswith("topics.index.name=run-") for _, v in pairs)


def test_job_process_inherits_the_environment(tmp_path, monkeypatch):
    import subprocess

    from crawler.run import JobProcess

    seen = {}

    class FakePopen:
        def __init__(self, argv, **kwargs):
            seen.update(kwargs, argv=argv)

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setenv("CRAWL__FLINK__PARALLELISM", "3")
    monkeypatch.setenv("FLINK_LOG_DIR", "/elsewhere")
    JobProcess("fetcher", ["flink.parallelism=2"], tmp_path / "fetcher.log",
               config_files=["a.yaml"]).start()
    # CRAWL_CONFIG and CRAWL__* reach the job as the CLI saw them; Flink's log goes to a
    # folder of the job's own, beside its log.
    assert seen["env"] == {**os.environ, "FLINK_LOG_DIR": str(tmp_path / "fetcher-flink")}
    assert seen["env"]["CRAWL__FLINK__PARALLELISM"] == "3"
    assert seen["argv"][-4:] == ["--config", str(Path("a.yaml").resolve()),
                                 "--set", "flink.parallelism=2"]


def test_a_job_report_says_how_it_ended_its_log_and_its_checkpoints(tmp_path):
    import subprocess
    import sys

    from crawler.run import JobProcess

    job = JobProcess("frontier", [], tmp_path / "frontier.log")
    assert job.report().startswith("job frontier: not started; its log ends:\n(no log)")
    job.log_path.write_text("x" * 50 + "Traceback: the job failed\n")
    job.flink_log_dir.mkdir()
    (job.flink_log_dir / "flink-u-python-h.log").write_text("\n".join([
        "12:00:01,000 INFO  CheckpointCoordinator [] - Triggering checkpoint 1 @ 1 for job j.",
        "12:00:01,100 INFO  CheckpointCoordinator [] - Completed checkpoint 1 for job j.",
        "12:00:02,000 INFO  CheckpointCoordinator [] - Triggering checkpoint 2 @ 2 for job j.",
        "12:00:02,500 WARN  MetricGroup [] - Name collision: Group already contains it.",
        "12:00:03,000 WARN  KafkaWriter [] - a warning",
        "12:00:03,500 INFO  CheckpointCoordinator [] - Checkpoint 2 of job j expired before "
        "completing.",
        "12:00:04,000 ERROR Task [] - an error"]))
    job.proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    job.proc.wait(30)
    lines = job.report(chars=30, flink_lines=3).splitlines()
    assert lines == [
        "job frontier: ended with 3; its log ends:", "x" * 5 + "Traceback: the job failed",
        "Flink's log (at most its last 4 MB): 2 checkpoints triggered, 1 completed",
        "12:00:02,000 INFO  CheckpointCoordinator [] - Triggering checkpoint 2 @ 2 for job j.",
        "12:00:01,100 INFO  CheckpointCoordinator [] - Completed checkpoint 1 for job j.",
        "its last 3 warnings, errors and checkpoint failures:",
        "12:00:03,000 WARN  KafkaWriter [] - a warning",
        "12:00:03,500 INFO  CheckpointCoordinator [] - Checkpoint 2 of job j expired before "
        "completing.", "12:00:04,000 ERROR Task [] - an error"]


def test_a_failed_jobs_report_says_why_not_where(tmp_path):
    """A job that failed in the JVM ends its log with pages of Java stack frames after the
    messages that say why: the report keeps the messages."""
    from crawler.run import JobProcess

    job = JobProcess("fetcher", [], tmp_path / "fetcher.log")
    frames = [f"\tat org.apache.flink.Frame{i}.call(Frame{i}.java:{i})" for i in range(300)]
    job.log_path.write_text("\n".join([
        "Traceback (most recent call last):", "py4j.protocol.Py4JJavaError: An error occurred",
        "org.apache.flink.runtime.client.JobExecutionException: Job execution failed.",
        *frames, "Caused by: java.io.IOException: No space left on device", *frames[:40],
        "\t... 12 more"]) + "\n")
    log = job.report(chars=400).split("its log ends:\n", 1)[1]
    assert "Job execution failed." in log and "No space left on device" in log
    assert "Frame" not in log and "more" not in log


def test_the_job_sees_the_clis_precedence(tmp_path):
    """defaults < CRAWL_CONFIG < --config files < CRAWL__ variables < --set, read from the
    job's own command line and the inherited environment as the job reads them."""
    from crawler.run import JobProcess

    env_file, cli_file = tmp_path / "env.yaml", tmp_path / "cli.yaml"
    keys = ["flink.restart_attempts", "flink.restart_delay_ms", "flink.parallelism",
            "flink.checkpoint_interval_ms"]
    # Each layer sets the keys from its position on: the key a layer sets last shows it won.
    env_file.write_text("flink: {restart_attempts: 1, restart_delay_ms: 1, parallelism: 1,"
                        " checkpoint_interval_ms: 1001}\n")
    cli_file.write_text("flink: {restart_delay_ms: 2, parallelism: 2,"
                        " checkpoint_interval_ms: 1002}\n")
    env = {"CRAWL_CONFIG": str(env_file), "CRAWL__FLINK__PARALLELISM": "3",
           "CRAWL__FLINK__CHECKPOINT_INTERVAL_MS": "1003"}
    argv = JobProcess("frontier", ["flink.checkpoint_interval_ms=1004"], tmp_path / "f.log",
                      config_files=[cli_file]).command()[3:]
    files = [v for k, v in zip(argv[::2], argv[1::2], strict=True) if k == "--config"]
    sets = [v for k, v in zip(argv[::2], argv[1::2], strict=True) if k == "--set"]
    cfg = load_config(files, env=env, overrides=sets)  # as jobs/*.py main() does
    assert [cfg[k] for k in keys] == [1, 2, 3, 1004]


def test_set_and_config_also_follow_the_command(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("flink: {parallelism: 3}\n")
    (tmp_path / "b.yaml").write_text("flink: {parallelism: 5, restart_attempts: 7}\n")
    argv = ["--config", str(tmp_path / "a.yaml"), "--set", "flink.restart_attempts=2",
            "config", "show", "--config", str(tmp_path / "b.yaml"),
            "--set", "flink.restart_attempts=9"]
    assert main(argv) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["flink"]["parallelism"] == 5  # the later file wins
    assert shown["flink"]["restart_attempts"] == 9  # and the later --set


# -- sitemap seeds -------------------------------------------------------------------------


class RecordingProducer:
    sent: list[tuple[str, bytes, bytes]] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def send(self, topic, value, key=None):
        RecordingProducer.sent.append((topic, value, key))

    def flush(self):
        pass

    def close(self):
        pass


@pytest.fixture
def producer(monkeypatch):
    import kafka

    RecordingProducer.sent = []
    monkeypatch.setattr(kafka, "KafkaProducer", RecordingProducer)
    return RecordingProducer.sent


def test_publish_seeds_sends_sitemaps_as_seed_sitemap_one_record_per_host(producer):
    from crawler.run import publish_seeds
    from udfs.wire.avro import registry

    cfg = load_config(env={})
    sent, bad = publish_seeds(cfg, ["https://a.example/sitemap.xml", "ftp://x.example/",
                                    "# a comment", "https://B.example/s.xml.gz",
                                    "https://a.example/news-sitemap.xml"],
                              source="SEED_SITEMAP")
    assert (sent, bad) == (3, ["ftp://x.example/"])
    assert [(topic, key) for topic, _, key in producer] == [
        (cfg.topic("discovered"), b"https://a.example"),
        (cfg.topic("discovered"), b"https://b.example")]
    records = [registry().decode("discovered", value) for _, value, _ in producer]
    assert {r["source"] for r in records} == {"SEED_SITEMAP"}
    assert [link["url"] for link in records[0]["links"]] == [
        "https://a.example/sitemap.xml", "https://a.example/news-sitemap.xml"]
    assert records[0]["host_key"] == "https://a.example" and records[0]["depth"] == 0


def test_publish_seeds_connects_only_with_something_to_send(monkeypatch):
    import kafka

    from crawler.run import publish_seeds

    monkeypatch.setattr(kafka, "KafkaProducer", None)  # would fail if constructed
    assert publish_seeds(load_config(env={}), ["# nothing", "mailto:x@y"]) == (0, ["mailto:x@y"])
    with pytest.raises(ValueError, match="source"):
        publish_seeds(load_config(env={}), ["https://a.example/"], source="LINK")


def test_crawl_seed_sends_pages_and_sitemaps(producer, tmp_path, capsys, monkeypatch):
    from udfs.wire.avro import registry

    monkeypatch.delenv("CRAWL_CONFIG", raising=False)
    (tmp_path / "urls.txt").write_text("# pages\nhttps://c.example/\nnot-a-url\n")
    assert main(["seed", "https://a.example/", "--file", str(tmp_path / "urls.txt"),
                 "--sitemap", "https://a.example/sitemap.xml"]) == 0
    out, err = capsys.readouterr()
    assert "seeded 2 URLs and 1 sitemaps" in out
    assert err == "not an http(s) URL, skipped: not-a-url\n"
    records = [(key, registry().decode("discovered", value)) for _, value, key in producer]
    assert [(k, r["source"]) for k, r in records] == [
        (b"https://a.example", "SEED"), (b"https://c.example", "SEED"),
        (b"https://a.example", "SEED_SITEMAP")]


def test_url_lines_skips_blanks_and_comments(tmp_path):
    from crawler.run import url_lines

    (tmp_path / "f").write_bytes(b"\xef\xbb\xbf  https://a.example/  \n\n# no\n  # indented "
                                 b"comment\r\nx\n")
    assert url_lines(tmp_path / "f") == ["https://a.example/", "x"]


# -- dead letters in the progress line and the summary ------------------------------------


def test_watcher_counts_dead_letters_by_error_type(monkeypatch):
    from types import SimpleNamespace

    import kafka

    from crawler.run import Watcher
    from udfs.wire.avro import load_examples, registry
    from udfs.wire.deadletter import dead_letter

    reg = registry()
    cfg = load_config(env={})

    def dead(error_type):
        return SimpleNamespace(topic=cfg.topic("deadletter"), value=dead_letter(
            reg, stage="frontier.intake", reason="why", error_type=error_type,
            payload=b"x", now_ms=1))

    completion = load_examples(reg.latest("completion"))[0]
    messages = [dead("ADDRESS_BLOCKED"), dead("AvroDecodeError"), dead("ADDRESS_BLOCKED"),
                SimpleNamespace(topic=cfg.topic("completions"),
                                value=reg.encode("completion", completion))]

    class FakeConsumer:
        def __init__(self, *topics, **kwargs):
            assert cfg.topic("deadletter") in topics
            self.batch = list(messages)

        def __iter__(self):
            batch, self.batch = self.batch, []
            return iter(batch)

    monkeypatch.setattr(kafka, "KafkaConsumer", FakeConsumer)
    progress = Watcher(cfg).poll()
    assert progress.refused == {"ADDRESS_BLOCKED": 2, "AvroDecodeError": 1}
    assert progress.completions == 1
    line = progress.line(0)
    assert "  refused 3  politeness violations 0" in line and "throttled" in line
    summary = progress.summary({"gap": 0})
    assert summary.startswith("summary: 0 pages indexed from 0 hosts in ")
    assert "; outcomes {" in summary
    assert "; refused {'ADDRESS_BLOCKED': 2, 'AvroDecodeError': 1}" in summary
    assert summary.endswith("; politeness violations {'gap': 0}")


@pytest.mark.parametrize("argv", [["warc", "ls"], ["reparse"], ["host", "pause", "http://a.test"]])
def test_a_command_on_a_crawl_that_is_not_running_is_one_line_and_exit_2(argv, capsys):
    assert main([*argv, "--run", "20000101-000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"crawl {argv[0]}: ") and "20000101-000000" in err
    assert len(err.splitlines()) == 1


def test_a_report_reads_only_the_end_of_a_long_flink_log(tmp_path):
    from crawler.run import _tail_lines

    log = tmp_path / "flink.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))  # 8 or 9 bytes a line
    assert _tail_lines(log, 10_000) == [f"line {i}" for i in range(1000)]
    # The last 20 bytes begin inside "line 997": that piece is dropped.
    assert _tail_lines(log, 20) == ["line 998", "line 999"]
