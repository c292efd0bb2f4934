"""Fetch the JVM jars Spark needs beyond pip's pyspark (Delta Lake, Kafka connector).

Maven resolves ``scripts/jars/pom.xml`` (downloads are cached in ``~/.m2``); we then keep only
the artifacts pyspark does not already ship, so Spark's own versions of shared libraries
(Jackson, Hadoop, Parquet, Scala) are the only ones on the classpath.

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pom", type=Path, default=ROOT / "scripts/jars/pom.xml")
    parser.add_argument("--dest", type=Path, default=ROOT / ".jars/spark")
    args = parser.parse_args()

    shipped = {artifact_name(j) for j in pyspark_jars_dir().glob("*.jar")}
    with tempfile.TemporaryDirectory() as tmp:
        resolved = resolve(args.pom, Path(tmp))
        extra = [j for j in resolved if artifact_name(j) not in shipped]
        if args.dest.exists():
            shutil.rmtree(args.dest)
        args.dest.mkdir(parents=True)
        for jar in extra:
            shutil.copy2(jar, args.dest / jar.name)
    print(f"{len(extra)} jars in {args.dest} ({len(resolved) - len(extra)} already in pyspark):")
    for jar in extra:
        print("  ", jar.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
