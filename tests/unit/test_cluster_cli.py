"""What a failed `flink` command says (its cause, not the tail of its stack frames), and
what an upgrade does when the resubmission's client fails."""

from __future__ import annotations

import pytest

from crawler.stack.cluster import Cluster, FlinkCommandError, cli_failure
from crawler.stack.local import LocalStack, StackError
from udfs.config import load_config

FRAMES = "".join(f"\tat org.apache.flink.Frame{i}.call(Frame{i}.java:{i})\n" for i in range(400))

OUTPUT = (
    "Traceback (most recent call last):\n"
    '  File "/srv/jobs/frontier.py", line 40, in <module>\n'
    "    main()\n"
    "py4j.protocol.Py4JJavaError: An error occurred while calling o12.attachAsDataStream.\n"
    ": org.apache.flink.table.api.ValidationException: Unable to create a source\n"
    + FRAMES +
    "Caused by: java.util.zip.ZipException: zip file is empty\n"
    + FRAMES + "\t... 14 more\n"
    "org.apache.flink.client.program.ProgramAbortException: java.lang.RuntimeException: "
    "Python process exits with code: 1\n" + FRAMES)


def test_a_failed_command_keeps_its_messages_and_causes_without_the_frames():
    text = cli_failure(OUTPUT)
    assert "Frame" not in text and "more" not in text
    assert text.splitlines() == [
        "Traceback (most recent call last):",
        '  File "/srv/jobs/frontier.py", line 40, in <module>',
        "    main()",
        "py4j.protocol.Py4JJavaError: An error occurred while calling o12.attachAsDataStream.",
        ": org.apache.flink.table.api.ValidationException: Unable to create a source",
        "Caused by: java.util.zip.ZipException: zip file is empty",
        "org.apache.flink.client.program.ProgramAbortException: "
        "java.lang.RuntimeException: Python process exits with code: 1"]
    # The old error kept the last 3,000 characters: frames only, here.
    assert "ZipException" not in OUTPUT[-3000:]


def test_a_long_failure_keeps_its_newest_lines():
    text = cli_failure("\n".join(f"line {i}" for i in range(5000)), limit=100)
    assert len(text) <= 100 and text.endswith("line 4999")


class Flaky(Cluster):
    """A cluster whose `flink` client fails `failures` times, then submits; none of its
    methods reaches a real cluster (a unit test of what upgrade does with the failures)."""

    def __init__(self, tmp_path, failures: int, running: str | None = None) -> None:
        cfg = load_config(env={}, overrides=[f"local.state_dir={tmp_path}"])
        super().__init__(cfg, LocalStack(cfg, state_dir=tmp_path))
        self.failures, self.running, self.calls = failures, running, []

    def submit(self, job, job_args, *, parallelism=None, savepoint=None, build=None):
        self.calls.append((job, savepoint, parallelism))
        if len(self.calls) <= self.failures:
            raise FlinkCommandError("flink run -d failed (31):\nCaused by: boom")
        return "jid-2"

    def running_job(self, job):
        return self.running

    def job_detail(self, jid):
        return {"vertices": [{"parallelism": 1}]}

    def job_taskmanagers(self, job):
        return []

    def stop_with_savepoint(self, job):
        return "file:///sp/savepoint-1"


def test_a_failed_client_is_tried_once_more_when_no_job_runs(tmp_path):
    said = []
    cluster = Flaky(tmp_path, failures=1)
    assert cluster.resubmit("frontier", [], "file:///sp/1", parallelism=2, build=None,
                            log=said.append) == "jid-2"
    assert cluster.calls == [("frontier", "file:///sp/1", 2)] * 2
    assert len(said) == 1 and "attempt 1 of 2" in said[0] and "boom" in said[0]


def test_no_second_submission_while_a_job_of_that_name_runs(tmp_path):
    cluster = Flaky(tmp_path, failures=1, running="jid-1")
    with pytest.raises(FlinkCommandError, match="boom"):
        cluster.resubmit("frontier", [], "file:///sp/1", parallelism=None, build=None,
                         log=lambda line: None)
    assert len(cluster.calls) == 1


def test_an_upgrade_that_cannot_resubmit_says_how_to_start_from_its_savepoint(tmp_path):
    cluster = Flaky(tmp_path, failures=2)
    with pytest.raises(StackError) as raised:
        cluster.upgrade("frontier", [], parallelism=2, build=tmp_path / "v2",
                        log=lambda line: None)
    text = str(raised.value)
    assert "stopped with savepoint file:///sp/savepoint-1" in text and "boom" in text
    assert (f"crawl submit frontier --from-savepoint file:///sp/savepoint-1 --parallelism 2"
            f" --build {tmp_path / 'v2'}") in text
    assert len(cluster.calls) == 2
