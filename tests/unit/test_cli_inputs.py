"""The rule: a bad command-line argument is one line and exit 2, before anything starts.

Every subcommand gets bad inputs here. A tripwire replaces everything a command could
start (services, clusters, Kafka clients, processes, the crawl, the simulation) with
something that records the attempt and fails, so "nothing started" is checked, not hoped.
"""

import os
import subprocess

import kafka
import kafka.admin
import pytest

import crawler.run
import crawler.stack.cluster
import crawler.stack.deps
import crawler.stack.local
import crawler.testkit.simulate
import crawler.testkit.synthetic_web
import udfs.core.capacity
import udfs.storage.bodies
import udfs.wire.avro
from crawler.cli import build_parser, main

# What a command may start, by module attribute.
STARTERS = [
    (crawler.stack.local, "LocalStack"), (crawler.stack.local, "ensure_topics"),
    (crawler.stack.local, "ensure_bucket"), (crawler.stack.cluster, "Cluster"),
    (crawler.stack.deps, "ensure_kafka"), (crawler.stack.deps, "ensure_connector"),
    (kafka, "KafkaProducer"), (kafka, "KafkaConsumer"), (kafka.admin, "KafkaAdminClient"),
    (subprocess, "Popen"), (subprocess, "run"),
    (crawler.testkit.synthetic_web, "SyntheticWeb"), (crawler.run, "run"),
    (crawler.run, "publish_seeds"), (crawler.testkit.simulate, "main_line"),
    (udfs.core.capacity, "plan"), (udfs.wire.avro, "check_registry"),
    (udfs.storage.bodies, "open_store"),
]


@pytest.fixture
def started(monkeypatch):
    """Names of the starters a command called (each also fails the command)."""
    calls: list[str] = []
    for module, name in STARTERS:
        def trip(*args, _name=f"{module.__name__}.{name}", **kwargs):
            calls.append(_name)
            raise AssertionError(f"{_name} was started by a command with a bad input")

        monkeypatch.setattr(module, name, trip)
    return calls


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    # The developer's own configuration must not decide these tests.
    for name in list(os.environ):
        if name.startswith("CRAWL__") or name in ("CRAWL_CONFIG", "FLINK_REST"):
            monkeypatch.delenv(name)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "comments.txt").write_text("# only a comment\n\n   \n")
    (tmp_path / "not-urls.txt").write_text("ftp://example.com/\nmailto:a@b.c\n")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00https://example.com/\n")
    (tmp_path / "bad.yaml").write_text("kafka: [1\n  x: 2\n")
    (tmp_path / "unknown.yaml").write_text("nonsense: 1\n")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "folder").mkdir()
    (tmp_path / "half-build" / "jobs").mkdir(parents=True)
    (tmp_path / "half-build" / "udfs").mkdir()
    build = tmp_path / "no-frontier-build"
    for d in ("jobs", "udfs", "schemas"):
        (build / d).mkdir(parents=True)
    return tmp_path


# (argv, what the one line must name). {d} is a folder of test files; {d}/state must
# not exist afterwards.
BAD = [
    (["local", "up", "--state-dir", "{d}/a-file"], "--state-dir {d}/a-file: not a directory"),
    (["--config", "{d}/missing.yaml", "local", "status"], "--config {d}/missing.yaml: no such"),
    (["cluster", "up", "--taskmanagers", "0"], "--taskmanagers 0: must be at least 1"),
    (["cluster", "up", "--taskmanagers", "17"], "--taskmanagers 17: cluster.taskmanagers"),
    (["submit", "frontier", "--parallelism", "0"], "--parallelism 0: must be at least 1"),
    (["submit", "fetcher", "--parallelism", "-3"], "--parallelism -3: must be at least 1"),
    (["submit", "frontier", "--build", "{d}/missing"], "--build {d}/missing: no such dir"),
    (["submit", "frontier", "--build", "{d}/half-build"], "--build {d}/half-build: lacks "
     "schemas/"),
    (["submit", "frontier", "--from-savepoint", "{d}/sp-1"], "--from-savepoint {d}/sp-1: no"),
    (["submit", "frontier", "--from-savepoint", "file://{d}/sp-2"], "file://{d}/sp-2: no such"),
    (["savepoint", "frontier", "--set", "flink.parallelism=0"], "flink.parallelism"),
    (["--config", "{d}/folder", "savepoint", "fetcher"], "--config {d}/folder: is a directory"),
    (["upgrade", "frontier", "--build", "{d}/no-frontier-build"], "no jobs/frontier.py"),
    (["upgrade", "fetcher", "--build", "{d}/a-file"], "--build {d}/a-file: no such directory"),
    (["rescale", "frontier", "0"], "parallelism 0: must be at least 1"),
    (["rescale", "fetcher", "100001"], "parallelism 100001: flink.parallelism"),
    (["deps", "--set", "kafka.nonsense=1"], "kafka.nonsense"),
    (["topics", "create", "--config", "{d}/unknown.yaml"], "'nonsense'"),
    (["topics", "list", "--set", "kafka.bootstrap_servers=nohost"], "kafka.bootstrap_servers"),
    (["config", "check", "--config", "{d}/bad.yaml"], "{d}/bad.yaml is not valid YAML"),
    (["--set", "no-equals-sign", "schemas"], "'no-equals-sign'"),
    (["host", "set", "http://a.test", "politeness.min_gap_s=-2"], "politeness.min_gap_s"),
    (["host", "pause", "a.test"], "HOST_KEY 'a.test': give the host as scheme://host"),
    (["host", "show", "http://a.test", "--run", "x", "--timeout", "0"], "--timeout"),
    (["status", "--interval", "-1"], "--interval -1: must be 0 to 60 seconds"),
    (["status", "--interval", "nan"], "--interval nan: must be 0 to 60 seconds"),
    (["status", "--json", "--set", "metrics.fetcher_port=80"], "metrics.fetcher_port"),
    (["status", "--set", "flink.local_rest_port=22"], "flink.local_rest_port"),
    (["url", "show", "ftp://a.test/x"], "URL ftp://a.test/x: not an http(s) URL"),
    (["audit", "ftp://example.com/"], "URL ftp://example.com/: not an http(s) URL"),
    (["audit", "example"], "URL example: not an http(s) URL"),
    (["audit", "https://example.com/", "--days", "0"], "--days 0: must be at least 1"),
    (["audit", "https://example.com/", "--days", "3661"], "--days 3661: must be at most"),
    (["audit", "https://example.com/", "--set", "storage.backend=ftp"], "storage.backend"),
    (["warc", "get"], "get needs a URL"),
    (["warc", "get", "ftp://a.test/x"], "URL ftp://a.test/x: not an http(s) URL"),
    (["warc", "ls", "http://a.test/"], "ls takes no URL (got http://a.test/)"),
    (["warc", "verify", "--raw"], "--raw is for get, not verify"),
    (["warc", "recover", "http://a.test/"], "recover takes no URL"),
    (["warc", "ls", "--set", "warc.prefix=no-slash"], "warc.prefix"),
    (["warc", "verify", "--set", "warc.max_file_age_s=0"], "warc.max_file_age_s"),
    (["reparse", "--since", "20261"], "--since '20261': give a UTC time as YYYY"),
    (["reparse", "--since", "2026", "--until", "2025"], "--since 2026 is after --until 2025"),
    (["reparse", "--file", "warc/a.warc.gz"], "--file 'warc/a.warc.gz': give a WARC file's"),
    (["reparse", "--dry-run", "--set", "parse.max_links=-1"], "parse.max_links"),
    (["plan", "--assumptions", "{d}/missing.yaml"], "--assumptions {d}/missing.yaml: no such"),
    (["plan", "--assumptions", "{d}/bad.yaml"], "--assumptions {d}/bad.yaml: not valid YAML"),
    (["plan", "--assumptions", "{d}/unknown.yaml"], "unknown assumptions ['nonsense']"),
    (["simulate", "--hosts", "0"], "--hosts 0: must be at least 1"),
    (["simulate", "--fetches", "-1"], "--fetches -1: must be at least 1"),
    (["simulate", "--faults", "lost_completion,gremlins"], "unknown faults ['gremlins']"),
    (["seed"], "give URLs, --file F or --sitemap URL"),
    (["seed", "https://example.com/", "ftp://example.com/"], "URL ftp://example.com/: not an"),
    (["seed", "--sitemap", "sitemap.xml"], "--sitemap sitemap.xml: not an http(s) URL"),
    (["seed", "--file", "{d}/missing.txt"], "--file {d}/missing.txt: no such file"),
    (["seed", "--file", "{d}/comments.txt"], "--file {d}/comments.txt: no http(s) URL"),
    (["seed", "--file", "{d}/binary.txt"], "--file {d}/binary.txt: not UTF-8 text"),
    (["run", "--seeds", "missing.txt"], "--seeds missing.txt: no such file"),
    (["run", "--seeds", "{d}/folder"], "--seeds {d}/folder: is a directory"),
    (["run", "--seeds", "{d}/not-urls.txt"], "--seeds {d}/not-urls.txt: no http(s) URL"),
    (["run", "--sitemaps", "{d}/missing.txt"], "--sitemaps {d}/missing.txt: no such file"),
    (["run", "--sitemaps", "{d}/comments.txt"], "--sitemaps {d}/comments.txt: no http(s)"),
    (["run", "--max-pages", "0"], "--max-pages 0: must be at least 1"),
    (["run", "--max-pages", "-1"], "--max-pages -1: must be at least 1"),
    (["run", "--duration", "0"], "--duration 0: must be a positive number of seconds"),
    (["run", "--duration", "-5"], "--duration -5: must be a positive number of seconds"),
    (["run", "--duration", "nan"], "--duration nan: must be a positive number"),
    (["run", "--duration", "inf"], "--duration inf: must be a positive number"),
    (["run", "--sites", "0"], "--sites 0: must be at least 1"),
    (["run", "--state-dir", "{d}/a-file"], "--state-dir {d}/a-file: not a directory"),
    (["--config", "{d}/missing.yaml", "run"], "--config {d}/missing.yaml: no such file"),
    (["run", "--config", "{d}/unknown.yaml"], "unknown configuration key 'nonsense'"),
    (["run", "--set", "politeness.min_gap_s=-1"], "politeness.min_gap_s"),
]


@pytest.mark.parametrize("argv, names", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(
        argv, names, files, started, capsys, monkeypatch):
    monkeypatch.chdir(files)
    argv = [a.format(d=files) for a in argv]
    state = files / "state"
    if argv[0] in ("local", "run") and "--state-dir" not in argv:
        argv += ["--state-dir", str(state)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"crawl {next(a for a in argv if a in COMMANDS)}: ")
    assert names.format(d=files) in err
    assert out == ""
    assert started == []
    assert not state.exists()


COMMANDS = sorted(build_parser()._subparsers._group_actions[0].choices)


def test_every_command_has_a_bad_input():
    assert {next(a for a in argv if a in COMMANDS) for argv, _ in BAD} == set(COMMANDS)


def test_crawl_config_environment_file_is_checked_for_every_command(
        monkeypatch, started, capsys):
    monkeypatch.setenv("CRAWL_CONFIG", "/nonexistent/crawl.yaml")
    for cmd in (["schemas"], ["plan"], ["simulate"], ["deps"], ["run"]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert err == f"crawl {cmd[0]}: CRAWL_CONFIG=/nonexistent/crawl.yaml: no such file\n"
    monkeypatch.setenv("CRAWL_CONFIG", "")
    monkeypatch.setenv("CRAWL__FLINK__PARALLELISM", "0")
    assert main(["simulate"]) == 2
    assert "environment variable CRAWL__FLINK__PARALLELISM" in capsys.readouterr().err
    assert started == []


def test_argparse_errors_stay_usage_and_one_error_line(started, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--max-pages", "many"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: crawl run") and err[-1].startswith("crawl run: error:")
    assert "--max-pages" in err[-1] and started == []


def test_good_inputs_pass_the_checks_and_reach_the_tripwire(files, started):
    # The tripwire is real: valid arguments get as far as starting something.
    (files / "seeds.txt").write_text("# mine\nhttps://example.com/\nnot a url\n")
    with pytest.raises(AssertionError, match="crawler.run.run"):
        main(["run", "--seeds", str(files / "seeds.txt"), "--sitemaps",
              str(files / "seeds.txt"), "--max-pages", "1", "--duration", "0.5"])
    with pytest.raises(AssertionError, match="publish_seeds"):
        main(["seed", "--file", str(files / "seeds.txt"), "--sitemap",
              "https://example.com/sitemap.xml"])
    with pytest.raises(AssertionError, match="crawler.stack.cluster.Cluster"):
        main(["rescale", "frontier", "2"])
    with pytest.raises(AssertionError, match="main_line"):
        main(["simulate", "--hosts", "1", "--fetches", "1", "--faults", "none"])
    with pytest.raises(AssertionError, match="open_store"):
        main(["audit", "https://example.com/", "--days", "3", "--json"])
    with pytest.raises(AssertionError, match="open_store"):
        main(["warc", "get", "https://example.com/", "--raw"])
    assert started == ["crawler.run.run", "crawler.run.publish_seeds",
                       "crawler.stack.cluster.Cluster", "crawler.testkit.simulate.main_line",
                       "udfs.storage.bodies.open_store", "udfs.storage.bodies.open_store"]
