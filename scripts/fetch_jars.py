"""Fetch the JVM jars Spark needs beyond pip's pyspark (Delta Lake, Kafka connector, S3A).

Maven resolves ``scripts/jars/pom.xml`` into ``--dest`` and ``scripts/jars/s3a/pom.xml`` (Hadoop's
S3A connector, which only drivers of an ``s3a://`` lake load) into ``--dest``/s3a; downloads are
cached in ``~/.m2``. Each keeps only the artifacts pyspark (and, for S3A, the first set) does not
already ship, so Spark's own versions of shared libraries (Jackson, Hadoop, Parquet, Scala) are
the only ones on the classpath.

Usage: ``python scripts/fetch_jars.py [--dest .jars/spark]`` (``make jars`` calls it).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_VERSION = re.compile(r"-\d[\w.\-]*$")


def artifact_name(jar: Path) -> str:
    """``jackson-core-2.21.2.jar`` -> ``jackson-core``."""
    return _VERSION.sub("", jar.stem)


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def resolve(pom: Path, into: Path) -> list[Path]:
    """Copy the pom's runtime dependency closure into ``into`` with Maven."""
    cmd = [
        "mvn",
        "-B",
        "-q",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={into}",
        "-DincludeScope=runtime",
    ]
    print("fetching jars:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return sorted(into.glob("*.jar"))


def fetch(pom: Path, dest: Path, shipped: set[str]) -> list[Path]:
    """Resolve ``pom`` into a fresh ``dest``, keeping the jars whose artifact is not ``shipped``."""
    with tempfile.TemporaryDirectory() as tmp:
        resolved = resolve(pom, Path(tmp))
        extra = [j for j in resolved if artifact_name(j) not in shipped]
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for jar in extra:
            shutil.copy2(jar, dest / jar.name)
    print(f"{len(extra)} jars in {dest} ({len(resolved) - len(extra)} already shipped):")
    for jar in extra:
        print("  ", jar.name)
    return extra


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=ROOT / ".jars/spark")
    args = parser.parse_args()

    shipped = {artifact_name(j) for j in pyspark_jars_dir().glob("*.jar")}
    base = fetch(ROOT / "scripts/jars/pom.xml", args.dest, shipped)
    fetch(ROOT / "scripts/jars/s3a/pom.xml", args.dest / "s3a", shipped | {artifact_name(j) for j in base})
    return 0


if __name__ == "__main__":
    sys.exit(main())
