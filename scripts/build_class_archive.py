"""Build the class-data archive of the drivers' JVM (``make jars`` runs this once per machine).

A driver's JVM spends most of its first seconds loading and verifying Spark's, Delta's and
Scala's classes. Java 17 can dump the classes a run loaded into an archive that later JVMs with
the same JDK and class path map instead (AppCDS, ``-XX:ArchiveClassesAtExit``): measured here on
2 cores, a driver that starts, writes and merges a Delta table used 31 s of CPU instead of 39,
the stress test (one session and its drivers) 201 instead of 230.
The platform passes the archive to every driver it starts (``lakehouse.state.session``); a JVM
that cannot use it (another JDK, another class path) starts as before, silently.

The archive records what the iot pipeline's flows load: an incremental run of four flows over a
small generated landing (JSON files, watermarks, windows in RocksDB state, MERGE, quarantine).
About a minute on 2 cores, once per machine (the JVM writes 200 MiB as it exits).

Usage: python -P scripts/build_class_archive.py [--help]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path


def main() -> int:
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        print(__doc__)
        return 0
    from lakehouse import registry
    from lakehouse.core.config import Settings
    from lakehouse.core.lake import Lake
    from lakehouse.plan.generators import Landing
    from lakehouse.run.stream import StreamRunner
    from lakehouse.state.session import class_archive, spark_session

    try:  # an optimisation: a reference pipeline a user broke must not stop a bootstrap
        from pipelines.iot.generator import generate

        iot = registry.get("pipelines", "iot").configured("files")
        registry.check_transforms(iot)
    except Exception as exc:
        print(
            f"no class archive: the iot pipeline it runs cannot be loaded ({exc}); drivers start without one"
        )
        return 0
    began = time.monotonic()
    archive = class_archive(Settings())
    work = Path(tempfile.mkdtemp(prefix="lakehouse-class-archive-"))
    dumped = work / archive.name
    settings = Settings(
        root=str(work / "lake"),
        spark_master="local[2]",
        shuffle_partitions=2,
        spark_ui=False,
        spark_log_level="ERROR",
        # replaces the platform's driver options: no archive is mapped while one is dumped; no C2
        # either, which only compiles code the archive does not keep (69 s instead of 77)
        spark_conf={
            "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={dumped} -Xlog:cds=off -XX:TieredStopAtLevel=1"
        },
    )
    print(f"building {archive}: the classes an iot run loads (about a minute, once)", flush=True)
    try:
        spark = spark_session(settings, app_name="class-archive")
        print(f"  JVM up ({time.monotonic() - began:.0f} s)", flush=True)
        lake = Lake(settings.root)
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
        generate(Landing(lake, iot), events=100, files=1, seed=1, start=start, malformed_fraction=0.02)
        try:
            with StreamRunner(spark, lake, iot) as runner:
                runner.run_incremental(iot.ordered()[:4])  # the scores' flow adds a model, not classes
        except Exception as exc:  # e.g. a transform of iot a user changed fails: no archive, no failure
            print(f"no class archive: the iot run failed ({exc}); drivers start without one")
            return 0
        print(f"  ran the flows ({time.monotonic() - began:.0f} s); the JVM writes the archive", flush=True)
        jvm = spark.sparkContext._gateway.proc  # noqa: SLF001  # the JVM dumps the archive as it exits
        spark.stop()
        jvm.stdin.close()  # PySpark's JVM exits when its stdin closes
        jvm.wait(timeout=300)
        if not dumped.is_file():
            print(f"no archive was written (JVM exit {jvm.returncode}); drivers start without one")
            return 0  # an optimisation: its absence must not stop a bootstrap
        os.replace(dumped, archive)
        print(f"{archive}: {archive.stat().st_size >> 20} MiB in {time.monotonic() - began:.0f} s")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
