"""Spark session factory: Delta enabled, ``local[*]`` unless configured otherwise.

:func:`spark_conf` is pure Python (no pyspark import) so that Airflow's spark-submit tasks pass
exactly the configuration an in-process session gets. Drivers started by ``spark-submit`` take
the master and jars from it; anything else starts an embedded ``local[*]`` JVM with the jars.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from typing import TYPE_CHECKING

from lakehouse.core.config import read_properties
from lakehouse.core.errors import UsageError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
POLLING_DELAY = "100ms"  # spark.sql.streaming.pollingDelay, see spark_conf
# Delta commits on s3a:// as conditional creates (include/lakehouse/state/java), so that drivers on
# several hosts (a stream and a backfill, a frozen lease holder and its successor) never replace
# each other's commit: Delta's default S3 store is safe only with every writer in one JVM.
S3A_LOG_STORE = "lakehouse.state.S3ConditionalLogStore"
PLATFORM_JAR = "lakehouse-serving.jar"  # the platform's own Java (lakehouse.serving.jvm builds it)
# Hadoop's local file system runs `chmod` for each file it creates and `readlink` twice per rename
# (pyspark ships no native library): four to six processes per checkpoint file or Delta commit,
# about 35 a second in a test session. The platform's (include/lakehouse/state/java) does both in
# the JVM and leaves the rest to Hadoop. For the FileContext API only (Spark's checkpoints and state
# stores, Delta's log on local paths): spark-submit resolves --jars through the FileSystem API before
# it loads them, so `fs.file.impl` cannot name a class of theirs.
LOCAL_FILE_CONTEXT = "lakehouse.state.ForklessLocalFs"


class MissingJarsError(UsageError):
    pass


def jars(settings: Settings) -> list[Path]:
    """The extra JVM jars (Delta, Kafka; S3A for a lake on s3a://); fails clearly when ``make
    jars`` has not run."""
    found = sorted(settings.jars_dir.glob("*.jar"))
    if not any(j.name.startswith("delta-spark") for j in found):
        raise MissingJarsError(
            f"no Delta jars in {settings.jars_dir}: run `make jars` (or set LAKEHOUSE_JARS_DIR)"
        )
    if settings.loads_s3a:
        s3a = sorted(s3a_jars_dir(settings).glob("*.jar"))
        if not any(j.name.startswith("hadoop-aws") for j in s3a):
            raise MissingJarsError(
                f"the lake is on s3a:// but {s3a_jars_dir(settings)} has no hadoop-aws jar: run `make jars`"
            )
        if not (settings.jars_dir / PLATFORM_JAR).is_file():
            raise MissingJarsError(
                f"the lake is on s3a:// but {settings.jars_dir} has no {PLATFORM_JAR} (its Delta log "
                "store): run `make bootstrap`"
            )
        found += s3a
    return found


def s3a_jars_dir(settings: Settings) -> Path:
    """Hadoop's S3A connector and the AWS SDK modules it loads (``scripts/jars/s3a/pom.xml``)."""
    return settings.jars_dir / "s3a"


def jar_globs(settings: Settings) -> str:
    """:func:`jars` as spark-submit's ``--jars`` globs, which it expands: listing the directory
    instead would scan files at DAG parse time."""
    globs = [f"{settings.jars_dir}/*.jar"]
    if settings.loads_s3a:
        globs.append(f"{s3a_jars_dir(settings)}/*.jar")
    return ",".join(globs)


def spark_conf(settings: Settings) -> dict[str, str]:
    """Every Spark setting the platform relies on, user overrides (LAKEHOUSE_SPARK_CONF) last."""
    conf = {
        # Python workers (UDFs, pandas functions) use this interpreter, i.e. the project's
        # virtualenv, not whatever `python3` is first on PATH. Override for cluster nodes.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        # Several upstreams' watermarks: stateful operators run on the slowest one's (Spark's
        # default, stated because docs/concepts.md promises it: no upstream's rows dropped as
        # late because another one ran ahead).
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        # Small tables: Delta's default 50-way snapshot reconstruction dominates latency.
        "spark.databricks.delta.snapshotPartitions": str(max(2, settings.shuffle_partitions)),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # How long an idle query waits before it looks for new input again. Spark's 10 ms makes
        # a query with a 0-second trigger list its landing directory or Delta log 100 times a
        # second: 0.25-0.31 (Delta source) and 0.51-0.67 (1,000 landing files) of a core per idle flow on
        # 2 cores (bench/idle.py). At 100 ms: about 0.05 and 0.2, for at most 0.1 s more per
        # hop (250 ms: 0.03 and 0.12, but up to 0.75 s more through three layers).
        "spark.sql.streaming.pollingDelay": POLLING_DELAY,
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.ui.killEnabled": "false",  # nobody stops a flow's jobs from a web page
        "spark.sql.warehouse.dir": f"{settings.root}/warehouse",
    }
    if settings.loads_s3a:
        conf["spark.delta.logStore.s3a.impl"] = S3A_LOG_STORE
    if (settings.jars_dir / PLATFORM_JAR).is_file():
        conf["spark.hadoop.fs.AbstractFileSystem.file.impl"] = LOCAL_FILE_CONTEXT
    if settings.bind_host:  # drivers listen on loopback unless told otherwise
        conf["spark.driver.host"] = settings.bind_host
        conf["spark.driver.bindAddress"] = settings.bind_host
    java_options = class_archive_options(settings)
    if settings.is_local_root:  # keep Derby's metastore_db/derby.log out of the working directory
        java_options.append(f"-Dderby.system.home={settings.root}/warehouse")
    java_options += shlex.split(settings.driver_java_options)
    if java_options:
        conf["spark.driver.extraJavaOptions"] = " ".join(shlex.quote(o) for o in java_options)
    conf.update(settings.spark_conf)
    return conf


def class_archive(settings: Settings) -> Path:
    """Where ``make jars`` puts the drivers' class-data archive (scripts/build_class_archive.py)."""
    return settings.jars_dir / "classes.jsa"


def class_archive_options(settings: Settings) -> list[str]:
    """JVM options that map the class-data archive, if built: a driver's JVM then loads Spark's
    and Delta's classes from it instead of from the jars (a quarter less CPU to start). A JVM
    that cannot use it (another JDK or class path) ignores it without a word."""
    archive = class_archive(settings)
    if not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def launched_by_spark_submit() -> bool:
    """True inside a driver started by spark-submit (PythonRunner hands us its JVM gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def with_more_slots(master: str, extra: int) -> str:
    """A ``local`` master with ``extra`` more task slots (threads); any other master as it is."""
    found = re.fullmatch(r"local(?:\[(\*|\d+)(,\d+)?\])?", master.strip())
    if not found or extra <= 0:
        return master
    slots = os.cpu_count() or 1 if found[1] == "*" else int(found[1] or 1)
    return f"local[{slots + extra}{found[2] or ''}]"


def spark_session(settings: Settings, app_name: str = "lakehouse", held_slots: int = 0) -> SparkSession:
    """The process's SparkSession, created on first call with the platform configuration.

    ``held_slots``: task slots queries of this driver hold for as long as they run (a real-time
    lane's tasks never end), added to a ``local`` master's so that the rest still runs."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession  # deferred: spark_conf() serves DAG files, which parse without Spark

    conf = spark_conf(settings)
    # An in-process SparkContext takes its workers' interpreter from the environment only, and
    # binds its UI to SPARK_LOCAL_IP (else to every interface).
    os.environ.setdefault("PYSPARK_PYTHON", conf["spark.pyspark.python"])
    if settings.bind_host:
        os.environ.setdefault("SPARK_LOCAL_IP", settings.bind_host)
    if settings.spark_properties_file and not launched_by_spark_submit():
        conf = {**read_properties(settings.spark_properties_file), **conf}
    builder = SparkSession.builder.appName(app_name)
    if settings.spark_master:
        builder = builder.master(settings.spark_master)
    elif not launched_by_spark_submit():
        builder = builder.master("local[*]")
    if held_slots:
        master = settings.spark_master or "local[*]"
        if launched_by_spark_submit() and not settings.spark_master:  # spark-submit's --master, in its JVM
            SparkContext._ensure_initialized()  # noqa: SLF001 (the gateway spark-submit started)
            master = SparkConf().get("spark.master", master)
        if with_more_slots(master, held_slots) != master:
            builder = builder.master(with_more_slots(master, held_slots))
        else:
            log.warning(
                "%d task slot(s) are held by real-time lanes: give %s the cores for them", held_slots, master
            )
    if not launched_by_spark_submit():
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars(settings)))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark_log_level)
    return spark
