"""What the kinds of landing files share: where they land, how a generator drops one, what a
stream's checkpoint says it consumed, and the accounting of each batch of files.

A line of the source's ``max_line_bytes`` or more is never loaded into memory (Hadoop's line
reader skips it); :class:`LandingAccounting` notices the bytes of the file that no row holds and
adds a row saying so, and counts the files that vanished before they could be read. Every row
carries its ``_arrival_time`` (the file's modification time), so a line whose event time could
not be read still belongs to a backfill slice.

The bytes are counted in the same pass that writes the rows (a Spark observation): only a file of
``max_line_bytes`` or more can hold such a line, and only when the bytes of all such files miss a
line's worth is each of them measured apart (a second read) and a row added for what it lost,
in a commit after the batch's. So a batch that lost nothing, nearly every batch, reads its input
once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import unquote, urlsplit

from pyspark.errors import AnalysisException
from pyspark.sql import Observation
from pyspark.sql import functions as F

from lakehouse.sources.protocol import EVERYTHING, Bronze, Cut, Prepared, SourceReader
from lakehouse.spec.sources import ARRIVAL_TIME, INGESTED_AT, PARSE_ERROR, SOURCE_FILE, LandingFiles
from lakehouse.state import storage
from lakehouse.state.objects import atomic_write

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.streaming import DataStreamReader

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table
    from lakehouse.state.checkpoints import Checkpoint

FILE_SIZE, LINE_BYTES = "_file_size", "_line_bytes"  # landing accounting, dropped before writing
BOM_BYTES = 3  # the UTF-8 byte order mark a text reader strips from a file's first line


def landing_path(lake: Lake, pipeline: Pipeline, table: Table) -> str:
    """The directory ``table``'s landing files arrive in."""
    folder = table.source.landing_folder(table.short_name) if table.source is not None else None
    if folder is None:
        raise ValueError(f"{table.name} reads no landing files")
    return lake.landing(pipeline.name, folder)


def ensure_dir(path: str) -> None:
    if "://" not in path:
        Path(path).mkdir(parents=True, exist_ok=True)


def landed_files(spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table) -> list[str]:
    """The files in ``table``'s landing directory now, named as Spark names a row's file (the
    accounting matches them; Spark's file source ignores ``.``/``_`` names)."""
    directory = landing_path(lake, pipeline, table)
    return [
        path for path in storage.files(spark, directory) if not path.rsplit("/", 1)[-1].startswith((".", "_"))
    ]


# --------------------------------------------------------------------------- the file source log


def _log_files(checkpoint: Checkpoint, source: int) -> list[str]:
    directory = f"{checkpoint.path}/sources/{source}"
    names = storage.names(checkpoint.spark, directory)
    compacts = sorted(int(n.removesuffix(".compact")) for n in names if n.endswith(".compact"))
    start = compacts[-1] if compacts else -1
    files = [f"{directory}/{start}.compact"] if compacts else []
    return files + [f"{directory}/{n}" for n in sorted(int(n) for n in names if n.isdigit()) if n > start]


def consumed_files(checkpoint: Checkpoint, source: int = 0) -> list[str]:
    """Every file a file source of the flow has committed, as URIs (``file:///...``).

    The source log holds one entry per file, batch by batch, compacted every few batches
    into ``<n>.compact`` (which keeps all earlier entries).
    """
    last = checkpoint.last_committed()
    paths: list[str] = []
    for file in _log_files(checkpoint, source):
        paths += [
            d["path"] for d in checkpoint.documents(file) if last is None or d.get("batchId", 0) <= last
        ]
    return paths


def batch_files(checkpoint: Checkpoint, batch_id: int, source: int = 0) -> list[str]:
    """The files a file source listed for micro-batch ``batch_id``."""
    directory = f"{checkpoint.path}/sources/{source}"
    documents = checkpoint.documents(f"{directory}/{batch_id}") or checkpoint.documents(
        f"{directory}/{batch_id}.compact"
    )
    return [d["path"] for d in documents if d.get("batchId") == batch_id]


# --------------------------------------------------------------------------- accounting


def same_file(uri: str) -> str:
    """One spelling per file: Spark names a row's file ``file:/tmp/a%20b``, its file stream's log
    ``file:///tmp/a%20b``, Hadoop's listing either (both URL-encoded)."""
    parts = urlsplit(uri)
    return f"{parts.scheme or 'file'}://{parts.netloc}{parts.path}"


def readable(uri: str) -> str:
    """A file as a reader opens it: a source log's URIs are URL-encoded (``a%20b``), which a
    reader would take for the name itself."""
    parts = urlsplit(uri)
    return f"{parts.scheme or 'file'}://{parts.netloc}{unquote(parts.path)}"


@dataclass(frozen=True)
class LandedFile:
    path: str
    size: int | None  # None: the file is gone


@dataclass
class LandingAccounting:
    """Per batch of landing files (a micro-batch, or a backfill's read): a row for each file with
    bytes no row holds (a line of ``max_line_bytes`` or more was skipped), and the files that vanished
    before they were read. Needs the whole batch (every line of a file), so streams run it in
    ``foreachBatch`` and backfills on their read: the same rows either way. ``max_line_bytes``
    ``None``: a kind read whole (Parquet), only vanished files are counted."""

    max_line_bytes: int | None
    vanished: list[str] = field(default_factory=list)

    def prepare(
        self, rows: DataFrame, files: list[LandedFile], measure: Callable[[], DataFrame | None]
    ) -> Prepared:
        """``rows`` of these ``files`` ready to write (without the accounting columns), counting as
        they are written the bytes of the files that can hold a line too long to read; settled
        after the write: when those files miss a line's worth of bytes, each is measured apart
        (``measure``: their lines read apart, see :meth:`lost`) and a row for what it lost is
        added. (A file misses bytes without losing a line too: blank lines and ``\\r`` before
        a break hold no row, a byte order mark 3; it is only measured then.)"""
        self.vanished = [f.path for f in files if f.size is None]
        out = rows.drop(FILE_SIZE, LINE_BYTES)
        limit = self.max_line_bytes
        large = self.may_lose_lines(files)
        if limit is None or not large:
            return Prepared(out, tuple(self.vanished))
        counted = Observation(f"landing bytes {uuid.uuid4().hex[:8]}")
        observed = rows.observe(
            counted, F.sum(F.when(F.col(FILE_SIZE) >= limit, F.col(LINE_BYTES))).alias("bytes")
        )

        def settle() -> DataFrame | None:
            # Without a lost line, a file is at most one byte over (a last line without its
            # break); a lost line alone misses ``limit - 1`` bytes or more
            read = observed_bytes(counted)
            if read is not None and sum(f.size or 0 for f in large) - read < limit - 1 - len(large):
                return None
            return self.lost(rows, files, measure())

        return Prepared(observed.drop(FILE_SIZE, LINE_BYTES), tuple(self.vanished), settle)

    def lost(
        self, rows: DataFrame, files: list[LandedFile], lines: DataFrame | None = None
    ) -> DataFrame | None:
        """A row for each of these ``files`` with bytes no row of ``rows`` holds (a line of
        ``max_line_bytes`` or more was skipped), ``None`` if none. ``lines``: the same files'
        lines read apart (their file, arrival time and size are all this needs), else the sizes
        are summed over ``rows`` (which hold neither blank lines nor a ``\\r`` before a break:
        more may seem missing than is)."""
        limit = self.max_line_bytes
        assert limit is not None
        measured = rows if lines is None else lines
        read = {  # by file, spelled as its rows spell it
            same_file(r[SOURCE_FILE]): (r[SOURCE_FILE], int(r["bytes"] or 0))
            for r in measured.groupBy(SOURCE_FILE).agg(F.sum(LINE_BYTES).alias("bytes")).collect()
        }
        short = [
            (f.path, spelled, f.size - bytes_read)
            for f in files
            if f.size is not None
            for spelled, bytes_read in [read.get(same_file(f.path), (f.path, 0))]
        ]
        # A skipped line held ``limit`` bytes or more with its break (the reader skips a line whose
        # bytes reach the limit); without one, a file misses at most a byte order mark the reader
        # strips (3 bytes) and is one over for a last line without its break.
        short = [entry for entry in short if entry[2] >= max(limit - 1, BOM_BYTES + 1)]
        spark = rows.sparkSession
        if short:  # a file deleted after it was listed was not read: it vanished, lost no line
            gone = {f.path for f in self.list_files(spark, [path for path, _, _ in short]) if f.size is None}
            self.vanished += sorted(gone)
            short = [entry for entry in short if entry[0] not in gone]
        if not short:
            return None
        lost = spark.createDataFrame(
            [(spelled, missing) for _, spelled, missing in short], f"{SOURCE_FILE} STRING, missing BIGINT"
        ).select(
            F.col(SOURCE_FILE),
            F.concat(
                F.lit(f"a line of {limit:,} bytes or more (max_line_bytes) was skipped; "),
                F.format_number("missing", 0),
                F.lit(" bytes of the file are in no row"),
            ).alias(PARSE_ERROR),
        )
        times = measured.select(SOURCE_FILE, ARRIVAL_TIME).dropDuplicates([SOURCE_FILE])
        lost = lost.join(times, SOURCE_FILE, "left").withColumn(INGESTED_AT, F.current_timestamp())
        return rows.drop(FILE_SIZE, LINE_BYTES).limit(0).unionByName(lost, allowMissingColumns=True)

    def may_lose_lines(self, files: list[LandedFile]) -> list[LandedFile]:
        """The ``files`` of which a line can have been skipped: only a file of ``max_line_bytes``
        or more can hold a line that reaches it (the others need no count: no read)."""
        limit = self.max_line_bytes
        return [f for f in files if limit is not None and f.size is not None and f.size >= limit]

    def list_files(self, spark: SparkSession, paths: list[str]) -> list[LandedFile]:
        """Sizes of ``paths`` now (``None`` for those that are gone)."""
        return [LandedFile(path, storage.file_size(spark, path)) for path in paths]


# --------------------------------------------------------------------------- the shared reader


class LandingFilesReader(SourceReader):
    """What every kind of landing files does alike; a kind says how to load and parse them
    (:meth:`load`) and how long a line may be (:meth:`max_line_bytes`)."""

    source: LandingFiles
    working_columns: ClassVar[tuple[str, ...]] = (FILE_SIZE, LINE_BYTES)

    def max_line_bytes(self) -> int | None:
        return None

    def load(self, reader: DataStreamReader, paths: str | list[str]) -> DataFrame:
        """The parsed rows of ``paths`` read with ``reader`` (a stream or a batch reader)."""
        raise NotImplementedError

    def line_sizes(self, reader: DataFrameReader, paths: list[str]) -> DataFrame | None:
        """Every line of ``paths`` (blank ones too) as its file, arrival time and bytes with its
        break, for ``LandingAccounting``; ``None``: a kind read whole (no line to skip)."""
        return None

    def _accounted(
        self, spark: SparkSession, accounting: LandingAccounting, rows: DataFrame, paths: list[str]
    ) -> Prepared:
        """``rows`` of ``paths`` through ``accounting``, a stream's micro-batch or a backfill's
        read alike. A file that may have lost a line is measured from the file read apart: file
        names and line lengths, no parse, every line with its break counted (summing over a
        micro-batch, foreachBatch's executed plan, which Spark cannot prune, parsed every line
        once more: 4.4 s of a 12 s batch of 1M JSON lines)."""
        files = accounting.list_files(spark, paths)
        return accounting.prepare(rows, files, lambda: self._line_sizes(spark, files))

    def _line_sizes(self, spark: SparkSession, files: list[LandedFile]) -> DataFrame | None:
        """:meth:`line_sizes` of the ``files`` still there, ``None`` if one vanished meanwhile (a
        reader refuses a named file that does not exist: the rows' own sizes are summed then)."""
        present = [readable(f.path) for f in files if f.size is not None]
        if not present:
            return None
        try:
            return self.line_sizes(spark.read, present)
        except AnalysisException:
            return None

    def read(self, bronze: Bronze, *, streaming: bool, cut: Cut = EVERYTHING) -> DataFrame:
        spark = bronze.spark
        path = landing_path(bronze.lake, bronze.pipeline, bronze.table)
        ensure_dir(path)
        if streaming:
            reader = spark.readStream.option("maxFilesPerTrigger", self.source.max_files_per_trigger)
        else:
            reader = spark.read
        # a file gone before it is read is counted by LandingAccounting, not an error
        reader = reader.option("ignoreMissingFiles", "true")
        files = cut.consumed
        if files is not None and not files:  # nothing consumed: an empty read
            return self.load(reader, path).where(F.lit(False))
        return self.load(reader, [readable(f) for f in files] if files else path)

    def consumed(self, checkpoint: Checkpoint) -> Cut:
        # (no commit: the stream found nothing yet)
        return Cut(tuple(consumed_files(checkpoint)) if checkpoint.exists else ())

    def account(self, bronze: Bronze, rows: DataFrame, cut: Cut) -> Prepared:
        files = cut.consumed
        paths = (
            list(files)
            if files is not None
            else landed_files(bronze.spark, bronze.lake, bronze.pipeline, bronze.table)
        )
        return self._accounted(bronze.spark, LandingAccounting(self.max_line_bytes()), rows, paths)

    def micro_batches(self, bronze: Bronze, checkpoint: Checkpoint) -> Callable[[DataFrame, int], Prepared]:
        accounting = LandingAccounting(self.max_line_bytes())

        def prepare(batch: DataFrame, batch_id: int) -> Prepared:
            return self._accounted(bronze.spark, accounting, batch, batch_files(checkpoint, batch_id))

        return prepare

    def deliver(
        self, lake: Lake, pipeline: Pipeline, table: Table, name: str, lines: Iterable[str]
    ) -> Path | str:
        """One landing file of ``lines``, written atomically (a local lake or ``s3a://``)."""
        return atomic_write(
            f"{landing_path(lake, pipeline, table)}/{name}", "".join(f"{line}\n" for line in lines)
        )


def observed_bytes(observation: Observation) -> int | None:
    """What ``observation`` counted, if the plan it watches has run (a micro-batch replayed after
    a crash may skip its write, and with it the count): never waits."""
    if not observation._jo.future().isCompleted():  # noqa: SLF001 (pyspark's get would wait)
        return None
    counted = observation.get.get("bytes")
    return 0 if counted is None else int(counted)


def file_metadata(frame: DataFrame) -> list[Column]:
    """The columns every landing row carries: its file, the file's modification time and size."""
    return [
        F.col("_metadata.file_path").alias(SOURCE_FILE),
        F.col("_metadata.file_modification_time").alias(ARRIVAL_TIME),
        F.col("_metadata.file_size").alias(FILE_SIZE),
    ]
