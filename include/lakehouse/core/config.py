"""Platform configuration: the one typed place that reads ``LAKEHOUSE_*`` environment variables.

Everything else receives a :class:`Settings` object; nothing else reads the environment.
Embedded defaults (``local[*]`` Spark, a lake directory on disk) need no variable at all;
a cluster or object storage is a matter of setting a few of these.
"""

from __future__ import annotations

import json
from datetime import datetime  # noqa: TC003 (pydantic reads the annotations at runtime)
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from collections.abc import Mapping

PROJECT_ROOT = Path(__file__).resolve().parents[3]


class Settings(BaseSettings):
    """Settings read from ``LAKEHOUSE_<FIELD>`` variables (e.g. ``LAKEHOUSE_ROOT``)."""

    model_config = SettingsConfigDict(env_prefix="LAKEHOUSE_", extra="ignore", frozen=True)

    root: str = Field(
        default="./lakehouse",
        description="Lake root: a local directory or a Hadoop URI (s3a://bucket/lake). "
        "Holds the landing zone, tables, checkpoints and ops tables.",
    )
    spark_master: str | None = Field(
        default=None,
        description="Spark master URL. Unset: spark-submit's master, else local[*].",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description='Extra Spark conf as JSON, e.g. {"spark.executor.memory": "2g"}.',
    )
    shuffle_partitions: int = Field(
        default=4,
        ge=1,
        description="spark.sql.shuffle.partitions. Fixed per checkpoint once a stateful stream "
        "has started, so choose it before the first run.",
    )
    jars_dir: Path = Field(
        default=PROJECT_ROOT / ".jars" / "spark",
        description="Directory of extra JVM jars (Delta, Kafka connector); `make jars` fills it.",
    )
    s3a_connector: bool = Field(
        default=False,
        description="Load Hadoop's S3A connector (`make jars` puts it in <jars_dir>/s3a) into "
        "drivers whose lake is not on s3a:// too, e.g. to read a source on S3. A lake on s3a:// "
        "always loads it; other drivers do not, as its 40 jars cost each JVM start 2 CPU-s.",
    )
    pipelines_package: str = Field(
        default="pipelines",
        description="Python package whose sub-packages each declare one pipeline.",
    )
    trigger_interval: str = Field(
        default="5 seconds",
        description="Processing-time interval of continuous flows.",
    )
    spark_ui: bool = Field(default=True, description="Start the Spark UI in drivers.")
    bind_host: str = Field(
        default="127.0.0.1",
        description="Interface Spark drivers and their UIs bind to. Loopback by default: nothing of "
        "a driver is reachable from other hosts. On a cluster whose executors run on other hosts, "
        "set the host's address; empty for YARN/Kubernetes cluster mode (the cluster decides).",
    )
    spark_properties_file: Path | None = Field(
        default=None,
        description="Spark properties every driver loads (spark-submit --properties-file), e.g. "
        "spark.authenticate and its secret for the stack's standalone cluster; kept out of "
        "command lines and environments.",
    )
    spark_log_level: str = Field(default="WARN", description="Log level of Spark's JVM loggers.")
    driver_java_options: str = Field(
        default="",
        description="More JVM options for drivers and SQL servers, after the platform's own (its "
        "class-data archive). E.g. `-XX:TieredStopAtLevel=1` for drivers that live minutes: "
        "without the optimising compiler an iot incremental run used 46 CPU-s instead of 78 "
        "on 2 cores (the test suite's setting); long-running streams are better without it.",
    )
    control_dir: str | None = Field(
        default=None,
        description="Where the control plane keeps leases, stop/pause requests and deployments "
        "(default <root>/control): a local or shared POSIX directory, or an s3a:// prefix (hosts "
        "that share only the object store; conditional writes).",
    )
    platform_dir: Path = Field(
        default=PROJECT_ROOT / ".platform",
        description="State of the embedded platform (`make up`): Airflow home, pids, logs, password.",
    )
    airflow_port: int = Field(default=8080, description="Port of the embedded Airflow UI and API.")
    vacuum_retention_hours: float = Field(
        default=168.0,
        ge=0,
        description="Hours of removed files VACUUM keeps for time travel (Delta's default, 7 days); "
        "raised automatically for streams that lag behind.",
    )
    vacuum_margin_hours: float = Field(
        default=1.0,
        ge=0,
        description="Hours VACUUM keeps on top of the lag of the slowest reader (stream or backfill), "
        "for readers that start between the check and the VACUUM.",
    )
    ops_retention_days: float = Field(
        default=30.0,
        gt=0,
        description="Days of rows the platform's ops.* tables keep (progress, quality results, alerts).",
    )
    lease_ttl_seconds: float = Field(
        default=30.0,
        gt=2,
        description="A driver's lease on its flows expires this long after its last renewal.",
    )
    lease_skew_seconds: float = Field(
        default=60.0,
        ge=0,
        description="How far the clocks of two hosts may disagree: another host's expired lease "
        "is taken over only this long after its expiry.",
    )
    alert_conn_id: str = Field(
        default="lakehouse_alerts",
        description="Airflow connection through which failed tasks notify people (an `smtp` "
        "connection with `to` in its extra, or an `http` webhook). Absent: alerts are only "
        "recorded in `ops.alerts` and the task logs.",
    )
    metrics_token_file: Path | None = Field(
        default=None,
        description="File holding a bearer token that may read the cockpit's Prometheus endpoint "
        "(`/lakehouse/metrics`) without an Airflow login; Prometheus sends it with "
        "`authorization: {credentials_file: ...}`. Unset: only Airflow logins may read it.",
    )
    driver_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="OS scheduling priority (nice) of the Spark drivers the platform starts (continuous "
        "flows, scheduled runs, backfills, quality checks, maintenance): on a host they share with "
        "Airflow, the cockpit or the SQL server, those stay responsive while the drivers take every "
        "spare cycle. It costs the drivers nothing on an idle host; 0: the same priority as the rest.",
    )
    driver_pool: str | None = Field(
        default=None,
        description="Airflow pool of the tasks that run a Spark driver (incremental runs, "
        "backfills, quality checks, maintenance): at most its slots of them run at once, so a "
        "small machine is not swamped when many schedules fall due together. Unset: Airflow's "
        "default_pool. `make up` and `make stack-up` use `lakehouse_drivers`, one slot per two cores.",
    )
    schedules_start: datetime | None = Field(
        default=None,
        description="No scheduled batch run (incremental, backfill, maintenance) falls due before "
        "this instant: `make up` sets it to the platform's first start, so a new platform does not "
        "start a Spark driver per DAG at once for time before it existed. Unset: each DAG's "
        "schedule starts at its pipeline's `start_date`.",
    )
    stale_checks_before_kill: int = Field(
        default=3,
        ge=1,
        description="The monitor stops (SIGTERM, then SIGKILL) a driver whose flow stayed stale for "
        "this many consecutive checks, then restarts its flows from their checkpoints.",
    )

    # -- Kafka sources (see lakehouse.spec.KafkaTopic and the production topology) ----------
    kafka_bootstrap_servers: str | None = Field(
        default=None,
        description="Kafka brokers of KafkaTopic sources and Kafka generators, e.g. kafka:9092.",
    )
    stack_dir: Path = Field(
        default=PROJECT_ROOT / ".stack",
        description="State of the native production topology (`make stack-up`): data, logs, "
        "pids, ports.json and passwords of Kafka, Spark standalone, Postgres and Airflow.",
    )
    ingest: Literal["files", "kafka", "csv", "parquet", "avro", "delta"] = Field(
        default="files",
        description="Which of a bronze table's alternative sources to read, by kind: landing "
        "files (JSON lines), kafka, csv, parquet, avro or delta; a table without one of that kind reads "
        "its first (the IoT pipeline offers files and kafka; generators follow the same switch).",
    )

    # -- serving (lakehouse sql / serve; see lakehouse.serving) ------------------------------
    serve_host: str = Field(
        default="127.0.0.1", description="Interface the JDBC/Thrift server (`lakehouse serve`) binds to."
    )
    serve_port: int = Field(default=10000, ge=1, le=65535, description="Port of the JDBC/Thrift server.")
    serve_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HiveServer2 settings of the Thrift server as JSON, e.g. authentication: "
        '{"hive.server2.authentication": "LDAP", "hive.server2.authentication.ldap.url": "ldap://..."}.',
    )
    catalog_refresh_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How often `lakehouse serve` re-registers the tables from the pipeline specs.",
    )
    sql_statement_timeout: int = Field(
        default=300,
        ge=0,
        description="Seconds an analyst's SQL statement (`lakehouse sql`, the SQL server) may run "
        "before it is cancelled and its client told why; 0: no limit.",
    )
    sql_statements_per_user: int = Field(
        default=8,
        ge=0,
        description="Statements one user may run at once on the SQL server; the next one is "
        "refused with the reason until one ends (one analyst's burst cannot queue the others); 0: no limit.",
    )
    sql_max_result_mb: int = Field(
        default=128,
        ge=0,
        description="MiB of (compressed) rows a statement may return to the SQL server or `lakehouse sql` "
        "(spark.driver.maxResultSize): a larger result fails with the reason instead of exhausting the "
        "server's memory for everyone; aggregate, filter or LIMIT it; 0: no cap.",
    )
    sql_max_result_rows: int = Field(
        default=1_000_000,
        ge=0,
        le=2_000_000_000,
        description="Rows a statement may return to the SQL server or `lakehouse sql`, counted in the "
        "server's JVM: a statement with more fails with the reason instead of gathering them in the "
        "memory every session shares; aggregate, filter or LIMIT it; 0: no cap.",
    )
    sql_max_result_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="Bytes of values (uncompressed: strings as UTF-8, numbers and times 8 bytes each) a "
        "statement may return to the SQL server or `lakehouse sql`, counted in the server's JVM; 64 MiB "
        "by default, which the server's 1 GiB driver heap holds several times over (rows as Java "
        "objects take 2-4 times their bytes); 0: no cap.",
    )
    sql_grants_file: Path | None = Field(
        default=None,
        description="JSON file of what each SQL login may read, by pipeline, schema or table "
        '(`{"*": {"schemas": ["gold"]}, "alice": {"pipelines": ["iot"]}}`; docs/query.md); '
        "re-read while the server runs. Unset: every login reads every table.",
    )
    serve_password_file: Path | None = Field(
        default=None,
        description="Users and password hashes of the SQL server (`lakehouse users add NAME`). "
        "Set: `lakehouse serve` requires a user name and password (HiveServer2 CUSTOM auth).",
    )
    metastore_uri: str | None = Field(
        default=None,
        description="Shared Hive metastore of the serving catalog: thrift://host:9083 (a metastore "
        "service) or a JDBC URL of its database. Unset: every serving process keeps an in-memory "
        "catalog built from the specs (no Derby, no shared state).",
    )

    @field_validator("root")
    @classmethod
    def _absolute_root(cls, value: str) -> str:
        """Local roots become absolute so that every process agrees on them."""
        if "://" in value:
            return value.rstrip("/")
        return str(Path(value).expanduser().resolve())

    @field_validator("metastore_uri")
    @classmethod
    def _metastore_kind(cls, value: str | None) -> str | None:
        if value and not value.startswith(("thrift://", "jdbc:")):
            raise ValueError(
                f"metastore_uri {value!r} must be thrift://host:port (a Hive metastore service) "
                "or a jdbc: URL of the metastore database"
            )
        return value or None

    @property
    def is_local_root(self) -> bool:
        return "://" not in self.root

    def spark_settings(self) -> dict[str, str]:
        """The Spark settings every driver gets from the operator: the properties file's, then
        ``spark_conf``'s (the platform's own come on top, ``lakehouse.state.session``)."""
        found = read_properties(self.spark_properties_file) if self.spark_properties_file else {}
        return {**found, **self.spark_conf}

    @property
    def loads_s3a(self) -> bool:
        """Whether drivers load Hadoop's S3A connector (see ``s3a_connector``)."""
        return self.s3a_connector or self.root.startswith("s3a://")

    @property
    def control_path(self) -> str:
        return self.control_dir or f"{self.root}/control"

    def to_env(self) -> dict[str, str]:
        """These settings as ``LAKEHOUSE_*`` variables, to hand to a child process."""
        env = {
            "LAKEHOUSE_ROOT": self.root,
            "LAKEHOUSE_SHUFFLE_PARTITIONS": str(self.shuffle_partitions),
            "LAKEHOUSE_JARS_DIR": str(self.jars_dir),
            "LAKEHOUSE_PIPELINES_PACKAGE": self.pipelines_package,
            "LAKEHOUSE_TRIGGER_INTERVAL": self.trigger_interval,
            "LAKEHOUSE_SPARK_UI": str(self.spark_ui).lower(),
            "LAKEHOUSE_BIND_HOST": self.bind_host,
            "LAKEHOUSE_SPARK_LOG_LEVEL": self.spark_log_level,
            "LAKEHOUSE_LEASE_TTL_SECONDS": str(self.lease_ttl_seconds),
            "LAKEHOUSE_LEASE_SKEW_SECONDS": str(self.lease_skew_seconds),
            "LAKEHOUSE_PLATFORM_DIR": str(self.platform_dir),
            "LAKEHOUSE_STACK_DIR": str(self.stack_dir),
            "LAKEHOUSE_AIRFLOW_PORT": str(self.airflow_port),
        }
        env["LAKEHOUSE_SERVE_HOST"] = self.serve_host
        env["LAKEHOUSE_SERVE_PORT"] = str(self.serve_port)
        env["LAKEHOUSE_CATALOG_REFRESH_SECONDS"] = str(self.catalog_refresh_seconds)
        env["LAKEHOUSE_SQL_STATEMENT_TIMEOUT"] = str(self.sql_statement_timeout)
        env["LAKEHOUSE_SQL_STATEMENTS_PER_USER"] = str(self.sql_statements_per_user)
        env["LAKEHOUSE_SQL_MAX_RESULT_MB"] = str(self.sql_max_result_mb)
        env["LAKEHOUSE_SQL_MAX_RESULT_ROWS"] = str(self.sql_max_result_rows)
        env["LAKEHOUSE_SQL_MAX_RESULT_BYTES"] = str(self.sql_max_result_bytes)
        if self.serve_conf:
            env["LAKEHOUSE_SERVE_CONF"] = json.dumps(self.serve_conf)
        if self.metastore_uri:
            env["LAKEHOUSE_METASTORE_URI"] = self.metastore_uri
        if self.serve_password_file:
            env["LAKEHOUSE_SERVE_PASSWORD_FILE"] = str(self.serve_password_file)
        if self.sql_grants_file:
            env["LAKEHOUSE_SQL_GRANTS_FILE"] = str(self.sql_grants_file)
        if self.control_dir:
            env["LAKEHOUSE_CONTROL_DIR"] = self.control_dir
        if self.s3a_connector:
            env["LAKEHOUSE_S3A_CONNECTOR"] = "true"
        if self.driver_java_options:
            env["LAKEHOUSE_DRIVER_JAVA_OPTIONS"] = self.driver_java_options
        env["LAKEHOUSE_DRIVER_NICE"] = str(self.driver_nice)
        if self.driver_pool:
            env["LAKEHOUSE_DRIVER_POOL"] = self.driver_pool
        if self.schedules_start:
            env["LAKEHOUSE_SCHEDULES_START"] = self.schedules_start.isoformat()
        if self.kafka_bootstrap_servers:
            env["LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS"] = self.kafka_bootstrap_servers
        env["LAKEHOUSE_INGEST"] = self.ingest
        if self.spark_master:
            env["LAKEHOUSE_SPARK_MASTER"] = self.spark_master
        if self.spark_conf:
            env["LAKEHOUSE_SPARK_CONF"] = json.dumps(self.spark_conf)
        if self.spark_properties_file:
            env["LAKEHOUSE_SPARK_PROPERTIES_FILE"] = str(self.spark_properties_file)
        return env


def read_properties(path: Path) -> dict[str, str]:
    """A Spark properties file (``key value`` or ``key=value`` per line, ``#`` comments)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.replace("=", " ", 1).partition(" ")
            found[key.strip()] = value.strip()
    return found


# S3A's settings (spark.hadoop.fs.s3a.[bucket.<b>.]<key>) and delta-rs's names for them
_S3A_TO_DELTA_RS = {
    "access.key": "AWS_ACCESS_KEY_ID",
    "secret.key": "AWS_SECRET_ACCESS_KEY",
    "session.token": "AWS_SESSION_TOKEN",
    "endpoint.region": "AWS_REGION",
}


def delta_rs_options(spark_conf: Mapping[str, str], bucket: str) -> dict[str, str]:
    """delta-rs's storage options for ``bucket``, from the S3A settings Spark uses (per-bucket
    ones first, as S3A reads them): one configuration for both engines. Commits are conditional
    puts (``If-None-Match``), so concurrent writers of one table never overwrite each other's
    commit. Settings S3A does not name (credentials from the environment or an instance role)
    are found by delta-rs the same way."""

    def get(key: str) -> str | None:
        specific = spark_conf.get(f"spark.hadoop.fs.s3a.bucket.{bucket}.{key}")
        return specific if specific is not None else spark_conf.get(f"spark.hadoop.fs.s3a.{key}")

    options = {"conditional_put": "etag"}
    if endpoint := get("endpoint"):
        if "://" not in endpoint:
            secure = (get("connection.ssl.enabled") or "true").lower() != "false"
            endpoint = f"{'https' if secure else 'http'}://{endpoint}"
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
        if (get("path.style.access") or "").lower() == "false":
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "true"
    for key, option in _S3A_TO_DELTA_RS.items():
        if value := get(key):
            options[option] = value
    return options


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
