"""What a failed `flink` command's error says: its cause, not the tail of its stack frames."""

from __future__ import annotations

from crawler.stack.cluster import cli_failure

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
