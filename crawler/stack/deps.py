"""Java parts fetched from Maven Central into one cache folder: the Kafka broker and connector.

Everything lands under `cache_dir()` (git-ignored), including Maven's own
repository, so a second run reuses it and nothing is written elsewhere.
A download is complete only once its marker file exists, so an interrupted
run is redone rather than trusted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONNECTOR_ARTIFACT = "org.apache.flink:flink-sql-connector-kafka"
_POM_TEMPLATE = Path(__file__).with_name("maven") / "kafka-broker.pom.xml"
_DONE = ".complete"


class DependencyError(RuntimeError):
    """A Java dependency could not be fetched."""


def cache_dir() -> Path:
    """CRAWL_CACHE_DIR, else .cache in a source checkout, else ~/.cache/flink-crawler."""
    if os.environ.get("CRAWL_CACHE_DIR"):
        return Path(os.environ["CRAWL_CACHE_DIR"]).resolve()
    if (PROJECT_ROOT / "pyproject.toml").exists():
        return PROJECT_ROOT / ".cache"
    return Path.home() / ".cache" / "flink-crawler"


def _mvn(args: list[str], cwd: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DependencyError("Maven (mvn) is not on PATH; it fetches the Kafka jars")
    cmd = [mvn, "-B", "-q", f"-Dmaven.repo.local={cache_dir() / 'm2'}", *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-20:]
        raise DependencyError(f"{' '.join(cmd)} failed:\n" + "\n".join(tail))


def kafka_lib_dir(version: str) -> Path:
    return cache_dir() / f"kafka-{version}" / "lib"


def ensure_kafka(version: str) -> Path:
    """The folder of jars that runs an Apache Kafka `version` broker (downloaded once)."""
    lib = kafka_lib_dir(version)
    if (lib / _DONE).exists():
        return lib
    work = lib.parent
    if lib.exists():
        shutil.rmtree(lib)
    work.mkdir(parents=True, exist_ok=True)
    pom = _POM_TEMPLATE.read_text(encoding="utf-8").replace("@KAFKA_VERSION@", version)
    (work / "pom.xml").write_text(pom, encoding="utf-8")
    _mvn(["dependency:copy-dependencies", f"-DoutputDirectory={lib}",
          "-DincludeScope=runtime"], cwd=work)
    if not list(lib.glob(f"kafka_2.13-{version}.jar")):
        raise DependencyError(f"kafka_2.13-{version}.jar missing after download into {lib}")
    (lib / _DONE).write_text(version, encoding="utf-8")
    return lib


def connector_jar_path(version: str) -> Path:
    return cache_dir() / "jars" / f"flink-sql-connector-kafka-{version}.jar"


def ensure_connector(version: str) -> Path:
    """The shaded Flink Kafka connector jar `version` (downloaded once)."""
    jar = connector_jar_path(version)
    marker = jar.with_name(jar.name + _DONE)
    if jar.exists() and marker.exists():
        return jar
    jar.parent.mkdir(parents=True, exist_ok=True)
    _mvn(["dependency:copy", f"-Dartifact={CONNECTOR_ARTIFACT}:{version}",
          f"-DoutputDirectory={jar.parent}"], cwd=jar.parent)
    if not jar.exists():
        raise DependencyError(f"{jar.name} missing after download into {jar.parent}")
    marker.write_text(version, encoding="utf-8")
    return jar
