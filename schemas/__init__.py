"""Avro schemas of every topic record and state record (the contract between the jobs).

Files are `<name>.v<N>.avsc`. A published version is never edited: a change is a
new version that can read everything written with the earlier ones, and
`fingerprints.lock` records each published version (tests enforce both).
"""

from pathlib import Path

SCHEMA_DIR = Path(__file__).parent
