"""The lake's file system as Spark sees it (local, s3a, ...), through Hadoop's ``FileSystem``.

The one module that reaches into the JVM gateway (py4j's private ``_jvm``/``_jsc``): everything
else asks here, so the same code works on a local lake and on object storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def jvm(spark: SparkSession) -> Any:
    """The py4j view of the driver JVM (``jvm.org.apache...``)."""
    return spark.sparkContext._jvm  # noqa: SLF001  # PySpark exposes the gateway only privately


def filesystem(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's ``(FileSystem, Path)`` for ``path``."""
    target = jvm(spark).org.apache.hadoop.fs.Path(path)
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001  # (as above)
    return target.getFileSystem(conf), target


def exists(spark: SparkSession, path: str) -> bool:
    fs, target = filesystem(spark, path)
    return bool(fs.exists(target))


def names(spark: SparkSession, directory: str) -> list[str]:
    """The entries of ``directory`` (empty when it does not exist)."""
    fs, target = filesystem(spark, directory)
    if not fs.exists(target):
        return []
    return [str(status.getPath().getName()) for status in fs.listStatus(target)]


def files(spark: SparkSession, directory: str) -> list[str]:
    """The files in ``directory`` as URL-encoded URIs, as Spark names them in a row's
    ``_metadata.file_path`` and in a file stream's log (up to ``file:/`` for ``file:///``:
    ``lakehouse.sources.landing.same_file``); empty when it does not exist."""
    fs, target = filesystem(spark, directory)
    if not fs.exists(target):
        return []
    return [str(status.getPath().toUri().toString()) for status in fs.listStatus(target) if status.isFile()]


def glob(spark: SparkSession, pattern: str) -> list[str]:
    """Paths matching a Hadoop glob pattern (``<root>/tables/*/*/_delta_log``)."""
    fs, target = filesystem(spark, pattern)
    return [str(status.getPath().toString()) for status in fs.globStatus(target) or []]


def remove_tree(spark: SparkSession, path: str) -> None:
    fs, target = filesystem(spark, path)
    fs.delete(target, True)


def move(spark: SparkSession, source: str, target: str) -> bool:
    """Rename ``source`` to ``target`` (its parent created); False when ``source`` does not exist."""
    fs, path = filesystem(spark, source)
    if not fs.exists(path):
        return False
    destination = jvm(spark).org.apache.hadoop.fs.Path(target)
    fs.mkdirs(destination.getParent())
    if not fs.rename(path, destination):
        raise OSError(f"could not move {source} to {target}")
    return True


def read_text(spark: SparkSession, path: str) -> str | None:
    """A small file's text, or ``None`` when it does not exist."""
    fs, target = filesystem(spark, path)
    if not fs.exists(target):
        return None
    stream = fs.open(target)
    try:
        return str(jvm(spark).org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small file (replacing it), creating its directory."""
    fs, target = filesystem(spark, path)
    stream = fs.create(target, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def size(spark: SparkSession, path: str) -> tuple[int, int]:
    """(files, bytes) under ``path``; (0, 0) when absent."""
    fs, target = filesystem(spark, path)
    if not fs.exists(target):
        return 0, 0
    summary = fs.getContentSummary(target)
    return int(summary.getFileCount()), int(summary.getLength())


def file_size(spark: SparkSession, path: str) -> int | None:
    """The size of a file in bytes, or ``None`` when it does not exist; ``path`` a plain path or
    a URL-encoded URI (``file:/tmp/a%20b``, as Spark names files)."""
    if path.startswith("file:") or "://" in path:
        target = jvm(spark).org.apache.hadoop.fs.Path(jvm(spark).java.net.URI(path))
        fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # noqa: SLF001
    else:
        fs, target = filesystem(spark, path)
    try:
        return int(fs.getFileStatus(target).getLen())
    except Exception as exc:  # py4j wraps the JVM's FileNotFoundException
        if "FileNotFoundException" in str(exc):
            return None
        raise
