"""The session factory: Delta on, UTC, and Python workers running the project's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from lakehouse.core.config import Settings
from lakehouse.state.session import (
    LOCAL_FILE_CONTEXT,
    POLLING_DELAY,
    S3A_LOG_STORE,
    MissingJarsError,
    class_archive,
    jar_globs,
    jars,
    spark_conf,
)


def test_conf_pins_python_workers_to_this_interpreter_and_user_conf_wins() -> None:
    conf = spark_conf(Settings(root="/tmp/lake", spark_conf={"spark.pyspark.python": "/opt/py"}))
    assert conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.pyspark.python"] == "/opt/py"
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_pandas_udfs_run_in_the_virtualenv(spark) -> None:
    """Workers import pandas: they run this virtualenv's Python, not the first python3 on PATH."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def interpreter(values: pd.Series) -> pd.Series:
        import sys as worker_sys

        return values.map(lambda _: worker_sys.executable)

    rows = spark.range(1).select(interpreter("id").alias("python")).collect()
    assert rows[0].python == sys.executable


def test_an_idle_stream_looks_for_input_ten_times_a_second_not_a_hundred(spark) -> None:
    """Spark's 10 ms polling made each idle flow with a 0-second trigger list its input 100 times
    a second (a quarter to two thirds of a core per flow on 2 cores)."""
    assert spark.conf.get("spark.sql.streaming.pollingDelay") == POLLING_DELAY == "100ms"


def test_only_drivers_of_a_lake_on_s3a_load_the_s3a_connector(tmp_path: Path) -> None:
    """Its 40 jars cost every JVM start about 2 CPU-s: a local lake's drivers go without."""
    for name in (
        "delta-spark_4.2_2.13-4.4.0.jar",
        "kafka-clients-3.9.2.jar",
        "lakehouse-serving.jar",
        "s3a/hadoop-aws-3.5.0.jar",
        "s3a/s3-2.57.8.jar",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    local = Settings(root=str(tmp_path / "lake"), jars_dir=tmp_path)
    on_s3a = Settings(root="s3a://bucket/lake", jars_dir=tmp_path)
    asked = Settings(root=str(tmp_path / "lake"), jars_dir=tmp_path, s3a_connector=True)
    shipped = ["delta-spark_4.2_2.13-4.4.0.jar", "kafka-clients-3.9.2.jar", "lakehouse-serving.jar"]
    assert [j.name for j in jars(local)] == shipped
    for settings in (on_s3a, asked):
        assert [j.name for j in jars(settings)][3:] == ["hadoop-aws-3.5.0.jar", "s3-2.57.8.jar"]
    assert jar_globs(local) == f"{tmp_path}/*.jar"
    assert jar_globs(on_s3a) == f"{tmp_path}/*.jar,{tmp_path}/s3a/*.jar"
    assert Settings(s3a_connector=True).to_env()["LAKEHOUSE_S3A_CONNECTOR"] == "true"
    (tmp_path / "s3a/hadoop-aws-3.5.0.jar").unlink()
    with pytest.raises(MissingJarsError, match=r"s3a:// but .*/s3a has no hadoop-aws jar: run `make jars`"):
        jars(on_s3a)
    assert len(jars(local)) == 3
    (tmp_path / "s3a/hadoop-aws-3.5.0.jar").write_bytes(b"")
    (tmp_path / "lakehouse-serving.jar").unlink()  # Delta's log store for s3a:// is in it
    with pytest.raises(MissingJarsError, match=r"has no lakehouse-serving.jar .*: run `make bootstrap`"):
        jars(on_s3a)


def test_delta_commits_on_s3a_with_the_conditional_log_store_and_elsewhere_with_deltas_own() -> None:
    """Delta's default S3 store is exclusive only inside one JVM; the platform's commits with
    ``If-None-Match`` (tests/lakehouse/platform/test_objectstore.py runs it on a real store)."""
    key = "spark.delta.logStore.s3a.impl"
    assert spark_conf(Settings(root="s3a://bucket/lake"))[key] == "lakehouse.state.S3ConditionalLogStore"
    assert spark_conf(Settings(root="/tmp/lake", s3a_connector=True))[key] == S3A_LOG_STORE
    assert key not in spark_conf(Settings(root="/tmp/lake"))


def test_drivers_map_the_class_archive_once_built_and_start_without_it_before(tmp_path: Path) -> None:
    settings = Settings(root=str(tmp_path / "lake"), jars_dir=tmp_path / "jars")
    options = spark_conf(settings)["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in options and "-Dderby.system.home=" in options  # none built yet
    class_archive(settings).parent.mkdir()
    class_archive(settings).write_bytes(b"built by make jars")
    options = spark_conf(settings)["spark.driver.extraJavaOptions"].split()
    assert f"-XX:SharedArchiveFile={tmp_path / 'jars' / 'classes.jsa'}" in options
    assert "-Xshare:auto" in options, "a JVM that cannot use the archive must start anyway"
    assert any(o.startswith("-Dderby.system.home=") for o in options)


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_the_archive_make_jars_built_maps_into_this_sessions_jvm(spark, spark_settings: Settings) -> None:
    """The archive is only worth its minute of bootstrap if a driver's JVM can map it: same JDK,
    same class path (``-Xshare:on`` makes a JVM fail where ``auto`` silently goes without)."""
    archive = class_archive(spark_settings)
    assert archive.is_file(), f"no {archive}: `make jars` builds it (scripts/build_class_archive.py)"
    jvm = spark.sparkContext._jvm  # noqa: SLF001  # the JVM this session started
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in arguments, arguments
    java = Path(jvm.System.getProperty("java.home")) / "bin" / "java"
    class_path = jvm.System.getProperty("java.class.path")
    mapped = subprocess.run(
        [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-Xlog:cds", "-cp", class_path, "-version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert "Mapped dynamic region" in mapped.stdout, mapped.stdout[-3000:]


def test_a_local_master_gets_the_task_slots_a_real_time_lane_holds_and_others_stay_as_they_are() -> None:
    from lakehouse.state.session import with_more_slots

    cores = os.cpu_count() or 1
    assert with_more_slots("local[2]", 2) == "local[4]"
    assert with_more_slots("local[*]", 3) == f"local[{cores + 3}]"
    assert with_more_slots("local", 2) == "local[3]"
    assert with_more_slots("local[2,4]", 1) == "local[3,4]"  # its task retries kept
    assert with_more_slots("local[2]", 0) == "local[2]"
    assert with_more_slots("spark://master:7077", 2) == "spark://master:7077"  # the executors' cores decide


def _process_starts(spark, work: Callable[[], None], marker: str) -> list[str]:
    """The commands this session's JVM started while ``work`` ran whose command line names
    ``marker``, as the JVM's own flight recorder saw them (an oracle independent of Hadoop)."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    recording = jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    try:
        work()
    finally:
        recording.stop()
    with tempfile.TemporaryDirectory() as folder:
        dump = jvm.java.io.File(f"{folder}/starts.jfr").toPath()
        recording.dump(dump)
        recording.close()
        events = jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(dump)
    commands = [str(event.getString("command")) for event in events]
    return [command for command in commands if marker in command]


HADOOPS_LOCAL_FILE_CONTEXT = "org.apache.hadoop.fs.local.LocalFs"


def test_checkpoints_and_delta_commits_on_local_paths_start_no_process(spark, tmp_path: Path) -> None:
    """Hadoop's local FileContext runs `readlink` twice per rename and `chmod` per created file
    (no native library in pyspark); the platform's does both in the JVM. A stream's checkpoint
    and Delta's log start none, while Hadoop's own, on the same work, does."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    assert conf.get("fs.AbstractFileSystem.file.impl") == LOCAL_FILE_CONTEXT

    def stream_and_commit(root: Path) -> None:
        spark.range(3).write.format("delta").save(str(root / "source"))
        query = (
            spark.readStream.format("delta")
            .load(str(root / "source"))
            .writeStream.format("delta")
            .option("checkpointLocation", str(root / "checkpoint"))
            .trigger(availableNow=True)
            .start(str(root / "sink"))
        )
        query.awaitTermination(120)
        assert spark.read.format("delta").load(str(root / "sink")).count() == 3

    ours = _process_starts(spark, lambda: stream_and_commit(tmp_path / "ours"), str(tmp_path))
    assert [command for command in ours if command.startswith("readlink")] == []
    assert [command for command in ours if "/_delta_log/0" in command or "/checkpoint" in command] == []
    # what is left: `chmod` of data files and folders (the FileSystem API, see LOCAL_FILE_CONTEXT)
    assert {command.split()[0] for command in ours} <= {"chmod"}, ours

    conf.set("fs.AbstractFileSystem.file.impl", HADOOPS_LOCAL_FILE_CONTEXT)
    try:
        hadoops = _process_starts(spark, lambda: stream_and_commit(tmp_path / "hadoops"), str(tmp_path))
    finally:
        conf.set("fs.AbstractFileSystem.file.impl", LOCAL_FILE_CONTEXT)
    assert any(command.startswith("readlink") for command in hadoops), hadoops  # the oracle sees them


def test_the_local_file_context_answers_as_hadoops_own(spark, tmp_path: Path) -> None:
    """Permissions, link status and put-if-absent renames as Hadoop's own local FileContext
    answers them, on the same files (and the permission bits as the operating system reads them)."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    gateway = spark.sparkContext._gateway  # noqa: SLF001
    hadoop = jvm.org.apache.hadoop
    contexts = {}
    for name, implementation in (("ours", LOCAL_FILE_CONTEXT), ("hadoops", HADOOPS_LOCAL_FILE_CONTEXT)):
        conf = hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())  # noqa: SLF001
        conf.set("fs.AbstractFileSystem.file.impl", implementation)
        contexts[name] = hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    assert contexts["ours"].getDefaultFileSystem().getClass().getName() == LOCAL_FILE_CONTEXT
    no_replace = gateway.new_array(hadoop.fs.Options.Rename, 1)
    no_replace[0] = hadoop.fs.Options.Rename.NONE

    def answers(name: str) -> dict[str, object]:
        context, folder = contexts[name], tmp_path / name
        folder.mkdir()

        def path(file: str) -> object:
            return hadoop.fs.Path(f"file://{folder / file}")

        def link_status(file: str) -> tuple[bool, int] | str:
            try:
                status = context.getFileLinkStatus(path(file))
            except Exception as error:  # the exception's class is the answer
                return str(error).split(":", 2)[1].strip().rsplit(".", 1)[-1]
            return status.isSymlink(), status.getLen()

        (folder / "file").write_text("x")
        context.setPermission(path("file"), hadoop.fs.permission.FsPermission(jvm.java.lang.Short(0o640)))
        created = context.create(
            path("created"),
            jvm.java.util.EnumSet.of(hadoop.fs.CreateFlag.CREATE),
            gateway.new_array(hadoop.fs.Options.CreateOpts, 0),
        )
        created.close()
        (folder / "link").symlink_to(folder / "file")
        (folder / "other").write_text("yy")
        try:
            context.rename(path("other"), path("file"), no_replace)
            replaced = "replaced"
        except Exception as error:
            replaced = "FileAlreadyExistsException" in str(error) and "refused"
        context.rename(path("other"), path("renamed"), no_replace)
        return {
            "chmod": oct((folder / "file").stat().st_mode & 0o7777),
            "created": oct((folder / "created").stat().st_mode & 0o7777),
            "file": link_status("file"),
            "link": link_status("link"),
            "absent": link_status("absent"),
            "onto an existing file": replaced,
            "contents": {f.name: f.read_text() for f in sorted(folder.iterdir()) if not f.is_symlink()},
        }

    ours = answers("ours")
    assert ours["chmod"] == "0o640" and ours["created"] == "0o644"  # 0666 less Hadoop's umask 022
    assert ours["onto an existing file"] == "refused" and ours["absent"] == "FileNotFoundException"
    assert ours == answers("hadoops")
