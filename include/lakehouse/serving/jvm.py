"""The platform's own Java, compiled at bootstrap into ``lakehouse-serving.jar``
(``python -m lakehouse.serving.jvm build``, run by ``make bootstrap``), which every driver loads:

- ``PasswordFileAuthenticator``: HiveServer2 ``CUSTOM`` logins against ``lakehouse users``' file;
- ``ReadOnlySqlExtension``: analysts' SQL may only read (a Spark session extension: an
  allow-list of parsed statements before analysis, and a check of every analyzed plan);
- ``lakehouse.state.S3ConditionalLogStore`` (``state/java``): Delta commits on ``s3a://`` as
  conditional creates, safe with several writing JVMs (see :mod:`lakehouse.state.session`);
- ``lakehouse.state.ForklessLocalFs`` (``state/java``): Hadoop's local file system
  without a ``chmod`` or ``readlink`` process per created or renamed file;
- ``lakehouse.sources.UnknownJsonKeys`` (``sources/java``): a line's keys outside a schema, if it
  holds exactly one JSON object (see :mod:`lakehouse.sources.parse`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pyspark

from lakehouse.state import storage
from lakehouse.state.session import PLATFORM_JAR

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings

JAR_NAME = PLATFORM_JAR
SOURCES = tuple(Path(__file__).parents[1] / package / "java" for package in ("serving", "state", "sources"))
READ_ONLY = "lakehouse.serving.ReadOnlySqlExtension"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
ALLOW_WRITES = "spark.lakehouse.sql.allowWrites"


def jar_path(settings: Settings) -> Path:
    return settings.jars_dir / JAR_NAME


def build_jar(destination: Path) -> Path:
    """Compile every ``java/*.java`` of :data:`SOURCES` against pyspark's jars and the Delta jars
    beside ``destination`` (``make jars``; needs a JDK's ``javac``)."""
    classpath = os.pathsep.join(
        [str(Path(pyspark.__file__).parent / "jars" / "*"), str(destination.parent / "*")]
    )
    sources = [str(path) for folder in SOURCES for path in sorted(folder.glob("*.java"))]
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "--release", "17", "-cp", classpath, "-d", classes, *sources], check=True)
        destination.parent.mkdir(parents=True, exist_ok=True)
        # written beside it, then renamed over it: a running JVM reads classes from the jar it
        # opened as it needs them, and one rewritten in place under it fails to load the next
        partial = destination.with_name(f".{destination.name}.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            for path in sorted(Path(classes).rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        partial.replace(destination)
    return destination


def read_only_conf(extensions: str | None, *, allow_writes: bool) -> dict[str, str]:
    """Spark settings of a serving process: the read-only extension listed after Delta's (it
    must wrap Delta's parser), and the operator's switch, fixed at launch.

    Read-only, ``${env:...}`` and ``${system:...}`` in a statement stay text: Spark would replace
    them with the server's environment (cloud credentials, often) before any guard sees the
    statement, and analysts may not turn substitution back on (it is not a settable key)."""
    listed = [
        e.strip() for e in (extensions or DELTA_EXTENSION).split(",") if e.strip() and e.strip() != READ_ONLY
    ]
    conf = {"spark.sql.extensions": ",".join([*listed, READ_ONLY]), ALLOW_WRITES: str(allow_writes).lower()}
    if not allow_writes:
        conf["spark.sql.variable.substitute"] = "false"
    return conf


def read_only_installed(spark: SparkSession) -> bool:
    """Whether ``spark``'s JVM enforces read-only SQL (its first session listed the extension)."""
    try:
        return bool(storage.jvm(spark).lakehouse.serving.ReadOnlySqlExtension.isInstalled(_java(spark)))
    except Exception:  # py4j: the class is not on the class path
        return False


def trust(spark: SparkSession) -> None:
    """Let ``spark`` (the serving process's own session, which keeps the catalog) write."""
    storage.jvm(spark).lakehouse.serving.ReadOnlySqlExtension.trust(_java(spark))


def _java(spark: SparkSession) -> object:
    return spark._jsparkSession  # noqa: SLF001  # the extension works on the JVM session


if __name__ == "__main__":
    from lakehouse.core.config import settings

    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python -m lakehouse.serving.jvm build")
    print(f"built {build_jar(jar_path(settings()))}")
