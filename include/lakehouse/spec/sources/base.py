"""What every bronze source declaration shares: the bronze contract (the metadata columns bronze
keeps beside a source's own), schemas as Spark DDL, and :class:`Source`, the base of each kind.

A kind is a declaration (here, Spark-free) and a reader (``lakehouse.sources``, the plan layer)
named by the declaration's ``reader`` string, so a user's own kind plugs in without a registry.
"""

from __future__ import annotations

import inspect
import re
import warnings
from typing import TYPE_CHECKING, ClassVar

from attrs import evolve, frozen

from lakehouse.spec.durations import SpecError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# What bronze keeps beside the parsed columns (the bronze contract; ``lakehouse.sources`` fills it).
PARSE_ERROR = "_parse_error"  # why a line could not be read (the row stays in bronze)
RAW_RECORD = "_raw_record"  # the line as received, when it could not be read
RESCUED = "_rescued_data"  # keys outside the schema, as JSON
SOURCE_FILE = "_source_file"  # the landing file (or table) a row came from
ARRIVAL_TIME = "_arrival_time"  # when it landed: the file's modification time, the Kafka timestamp
INGESTED_AT = "_ingested_at"  # when bronze wrote it
BRONZE_METADATA = (RAW_RECORD, PARSE_ERROR, RESCUED, SOURCE_FILE, ARRIVAL_TIME, INGESTED_AT)
LANDED = (SOURCE_FILE, ARRIVAL_TIME, INGESTED_AT)  # where and when a row landed, not what it says


def names(value: str | Sequence[str]) -> tuple[str, ...]:
    """Converter of name lists: one name or several, stored as a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


@frozen
class Column:
    name: str
    type: str
    required: bool


def ddl_columns(ddl: str) -> tuple[Column, ...]:
    """Top-level columns of a Spark DDL schema string (``NOT NULL`` marks a required field)."""
    parts, depth, current = [], 0, []
    for char in ddl:
        depth += char in "<("
        depth -= char in ">)"
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    columns = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        tokens = part.split(None, 1)
        if len(tokens) != 2:
            raise SpecError(f"schema column {part!r} needs a name and a type, e.g. 'signal DOUBLE'")
        name, rest = tokens[0].strip("`"), tokens[1].strip()
        required = bool(re.search(r"\bNOT\s+NULL\s*$", rest, re.IGNORECASE))
        type_ = re.sub(r"\s+NOT\s+NULL\s*$", "", rest, flags=re.IGNORECASE)
        columns.append(Column(name, type_, required))
    return tuple(columns)


DEBEZIUM_SOURCE = "lsn BIGINT, ts_ms BIGINT"
UNLIMITED_FILES = 2**31 - 1  # maxFilesPerTrigger is an int: no limit
MAX_LINE_BYTES = 16 * 1024 * 1024  # a text line longer than this is not loaded (see JsonFiles)


def debezium_schema(row: str, source: str = DEBEZIUM_SOURCE) -> str:
    """The schema (Spark DDL) of a Debezium change event whose row has the columns of ``row``
    (DDL), as the JSON converter writes it without schemas: ``op``, ``before`` and ``after`` (the
    row before and after the change), ``source`` (its fields in ``source``, DDL: the position in
    the source's log and the commit time by default) and ``ts_ms``. Bronze tables of change feeds
    declare it as their source schema; ``Scd1``/``Scd2`` tables read them."""
    image = ", ".join(f"`{c.name}`: {c.type}" for c in ddl_columns(row))
    origin = ", ".join(f"`{c.name}`: {c.type}" for c in ddl_columns(source))
    return f"op STRING, before STRUCT<{image}>, after STRUCT<{image}>, source STRUCT<{origin}>, ts_ms BIGINT"


class Source:
    """A bronze source declaration: the base of every kind (``JsonFiles``, ``KafkaTopic``, ...).

    A kind sets ``kind`` (its name: ``LAKEHOUSE_INGEST`` picks among a table's alternatives by
    it, and the cockpit shows it) and ``reader`` (``"module:Class"``, its plan-side
    implementation, a ``lakehouse.sources.SourceReader``), and has a ``schema`` (Spark DDL).
    """

    __slots__ = ()
    kind: ClassVar[str]
    reader: ClassVar[str]
    schema: str

    @property
    def columns(self) -> tuple[Column, ...]:
        return ddl_columns(self.schema)

    def landing_folder(self, table: str) -> str | None:
        """The folder under ``<root>/landing/<pipeline>/`` its files land in (``table``: the
        table's short name), or ``None``: it reads no landing files."""
        return None

    @property
    def location(self) -> str:
        """Where it reads, as a flow's checkpoint records its input (a change of it is a new
        input): every kind says it."""
        raise NotImplementedError(f"{type(self).__name__} does not say where it reads (Source.location)")

    def label(self, pipeline: str, table: str) -> str:
        """Where it reads, in a word or a path (the cockpit's graph node)."""
        folder = self.landing_folder(table)
        return f"landing/{pipeline}/{folder}" if folder is not None else self.kind

    def lineage_inputs(self, label: str, landing: str | None) -> dict[str, str]:
        """Where it reads, as lineage names its input datasets: label -> location (a path or
        URI; ``landing``: the path of its landing folder, if it reads one)."""
        return {label: landing if landing is not None else self.location}

    def configured(self, deployment: Mapping[str, str]) -> Source:
        """This source as a deployment runs it: ``deployment`` holds the deployment's settings by
        name (e.g. ``kafka_bootstrap_servers``, which a Kafka source without its own brokers
        takes); a kind reads those it needs."""
        return self

    def unlimited(self) -> Source:
        """This source without its per-micro-batch rate limit: a new flow's first catch-up reads
        all its input in one batch (a limit is a read option, not kept in the checkpoint, so
        later runs keep theirs). A kind with a limit overrides it."""
        return self

    def check_schema(self) -> None:
        """A declaration error unless ``schema`` names at least one column."""
        if not ddl_columns(self.schema):
            raise SpecError(
                f"{type(self).__name__}.schema is empty; give a DDL string like 'id STRING NOT NULL'"
            )


class LandingFiles(Source):
    """A source of files dropped in ``<root>/landing/<pipeline>/<path or table>/``."""

    __slots__ = ()
    path: str | None
    max_files_per_trigger: int

    def landing_folder(self, table: str) -> str | None:
        return self.path or table

    @property
    def location(self) -> str:
        return self.path or "landing"

    def unlimited(self) -> Source:
        return evolve(self, max_files_per_trigger=UNLIMITED_FILES)

    def check_files(self) -> None:
        self.check_schema()
        if self.max_files_per_trigger < 1:
            raise SpecError(f"{type(self).__name__}.max_files_per_trigger must be a positive number of files")

    def check_line_limit(self, max_line_bytes: int) -> None:
        """A kind of text lines: a line limit Hadoop's line reader can take."""
        if not 0 < max_line_bytes < 2**31:
            raise SpecError(f"{type(self).__name__}.max_line_bytes must be between 1 byte and 2 GiB")


def sources(value: Source | Sequence[Source] | None) -> tuple[Source, ...]:
    """Converter of ``Ingest(source=...)``: one source, or alternatives (the first is the default)."""
    if value is None:
        return ()
    found = (value,) if isinstance(value, Source) else tuple(value)
    for source in found:
        if not isinstance(source, Source):
            raise SpecError(
                f"source {source!r} is not a source declaration: give JsonFiles(...), KafkaTopic(...), "
                "CsvFiles(...), ParquetFiles(...), AvroFiles(...), DeltaTable(...) or your own lakehouse.spec.Source"
            )
    return found


def deployed(
    alternatives: tuple[Source, ...], ingest: str, deployment: Mapping[str, str]
) -> tuple[Source, ...]:
    """A table's sources as one deployment runs them: the one of kind ``ingest`` first (else the
    declared default), configured for the ``deployment`` (see :meth:`Source.configured`)."""
    chosen = next((s for s in alternatives if s.kind == ingest), alternatives[0])
    others = tuple(s for s in alternatives if s is not chosen)
    return (_configure(chosen, deployment), *others)


def _configure(source: Source, deployment: Mapping[str, str]) -> Source:
    """``source.configured(deployment)``; a kind of one's own written for the previous release,
    ``configured(self, *, kafka_servers)``, still runs, with a warning naming the new form."""
    if "kafka_servers" in inspect.signature(source.configured).parameters:
        warnings.warn(
            f"{type(source).__name__}.configured(self, *, kafka_servers) is deprecated: define "
            "configured(self, deployment), deployment['kafka_bootstrap_servers'] holding the brokers "
            "(removed in the release after next)",
            DeprecationWarning,
            stacklevel=3,
        )
        return source.configured(kafka_servers=deployment.get(KAFKA_SERVERS))  # type: ignore[call-arg]
    return source.configured(deployment)


KAFKA_SERVERS = "kafka_bootstrap_servers"  # the deployment setting naming Kafka's brokers
