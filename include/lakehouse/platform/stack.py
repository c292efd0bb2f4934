"""The production topology, natively: ``make stack-up`` / ``make stack-down``.

The same services as ``docker-compose.yml``, as plain processes on 127.0.0.1 (each compose
service names its twin here, checked by tests/lakehouse/platform/test_compose.py):

- ``object-store``: S3Proxy (``lakehouse.platform.objectstore``) with generated credentials: the
  lake (landing, tables, checkpoints, ops, quality, models) and the control plane live on it, at
  ``s3a://lake/lake``, unless ``LAKEHOUSE_ROOT`` names another place;
- ``postgres``: PostgreSQL from Debian packages, Airflow's metadata database;
- ``kafka``: an Apache Kafka broker in KRaft mode (broker + controller, no ZooKeeper), from
  Kafka's jars on Maven Central (``scripts/kafka/pom.xml``, copied into ``.jars/kafka``);
- ``spark-master`` / ``spark-worker``: a Spark standalone cluster (``spark-class`` of pip's pyspark);
- ``airflow``: Airflow on Postgres with LocalExecutor (scheduler, dag-processor, api-server,
  triggerer), ``spark_default`` -> ``spark://127.0.0.1:<master port>``, IoT ingesting from Kafka;
- ``sql-server`` (the Thrift server) and ``generator-iot`` (producing to Kafka), as in compose.

Everything lives under ``LAKEHOUSE_STACK_DIR`` (default ``.stack/``): ``ports.json`` (free ports
chosen at the first ``up``, then kept), ``passwords.json`` (generated), ``env.sh`` (the
variables that point the CLI and Airflow's CLI at the stack), data, logs and pids. Processes are
started and stopped like ``make up``'s (:class:`lakehouse.platform.services.Platform`): each in its own
process group, stopped in reverse order, nothing left behind.

Usage: ``python -m lakehouse.platform.stack up [--only SERVICE ...] | down | status | env``
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg2
import pyspark
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from lakehouse.core.config import PROJECT_ROOT, Settings, settings
from lakehouse.platform.embedded import stop_drivers
from lakehouse.platform.objectstore import answers, hadoop_conf, s3proxy_command, write_config
from lakehouse.platform.services import (
    BIN,
    Platform,
    Service,
    airflow_banner,
    airflow_ready,
    free_port,
    port_in_use,
    report,
    sql_server_ready,
    wait_ready,
    write_secret,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

KAFKA_POM = PROJECT_ROOT / "scripts" / "kafka" / "pom.xml"
KAFKA_JARS = PROJECT_ROOT / ".jars" / "kafka"
INSTALL_POSTGRES = PROJECT_ROOT / "scripts" / "install_postgres.sh"
PORT_NAMES = (
    "object_store",
    "postgres",
    "kafka",
    "kafka_controller",
    "spark_master",
    "spark_master_ui",
    "spark_worker",
    "spark_worker_ui",
    "airflow",
    "sql",
    "worker_logs",
    "trigger_logs",
)
SERVICE_PORTS = {
    "object-store": ("object_store",),
    "postgres": ("postgres",),
    "kafka": ("kafka", "kafka_controller"),
    "spark-master": ("spark_master", "spark_master_ui"),
    "spark-worker": ("spark_worker", "spark_worker_ui"),
    "airflow": ("airflow",),
    "sql-server": ("sql",),
}
AIRFLOW_DB = "airflow"
LAKE_BUCKET = "lake"  # the stack's lake: s3a://lake/lake on its object store
POSTGRES_OS_USER = "postgres"
WORKER_CORES = int(os.environ.get("LAKEHOUSE_STACK_WORKER_CORES", "2"))
WORKER_MEMORY = os.environ.get("LAKEHOUSE_STACK_WORKER_MEMORY", "2g")


# --------------------------------------------------------------------------- bootstrap


def kafka_jars() -> Path:
    """Kafka's broker jars, fetched from Maven Central on first use (cached in ~/.m2)."""
    if not any(KAFKA_JARS.glob("kafka_2.13-*.jar")):
        print("fetching the Kafka broker jars from Maven Central ...", flush=True)
        subprocess.run(
            ["mvn", "-q", "-f", str(KAFKA_POM), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={KAFKA_JARS}"],
            check=True,
        )  # fmt: skip
    return KAFKA_JARS


def format_kafka_storage(properties: Path, cluster_id: str) -> None:
    """Format the KRaft log directories of ``properties`` for a new cluster ``cluster_id``."""
    # `--cluster-id=ID`, not `-t ID`: a random id starting with "-" (1 in 64) is otherwise read by
    # Kafka's argument parser as an option, and the format fails
    formatted = subprocess.run(
        ["java", "-cp", f"{kafka_jars()}/*", "kafka.tools.StorageTool", "format",
         f"--cluster-id={cluster_id}", "-c", str(properties), "--standalone"],
        capture_output=True, text=True,
    )  # fmt: skip
    if formatted.returncode != 0:
        raise SystemExit(
            f"formatting Kafka's storage for {properties} failed: {formatted.stderr or formatted.stdout}"
        )


def postgres_bin() -> Path:
    """Directory of PostgreSQL's server binaries; installs Debian's package when there is none."""

    def find() -> Path | None:
        if found := shutil.which("initdb"):
            return Path(found).parent
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        return versions[-1].parent if versions else None

    if (found := find()) is None:
        subprocess.run(["bash", str(INSTALL_POSTGRES)], check=True)
        found = find()
    if found is None:
        raise SystemExit("PostgreSQL is not installed: apt-get install postgresql")
    return found


def as_postgres_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: root runs it as the ``postgres`` system user."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", POSTGRES_OS_USER, "--", *argv]


# --------------------------------------------------------------------------- the stack


@dataclass(frozen=True)
class Stack(Platform):
    """The native topology: :class:`Platform`'s process handling, the stack's own services."""

    @property
    def dir(self) -> Path:
        return self.conf.stack_dir

    @cached_property
    def port(self) -> dict[str, int]:
        return self.ports()

    def ports(self, fresh: bool = False) -> dict[str, int]:
        """Free ports chosen at the first ``up`` and kept (``ports.json``): tests read them here."""
        path = self.dir / "ports.json"
        known = {} if fresh or not path.exists() else json.loads(path.read_text())
        if missing := [name for name in PORT_NAMES if name not in known]:  # new services get theirs
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**known, **{name: free_port() for name in missing}}, indent=2))
        return json.loads(path.read_text())

    def secret(self, name: str) -> str:
        """A generated secret (``secrets.json``, mode 600), e.g. the database password. Airflow's
        admin login is :meth:`password` (``passwords.json``), as for ``make up``."""
        path = self.dir / "secrets.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        if name not in known:
            known[name] = secrets.token_urlsafe(16)
            write_secret(path, json.dumps(known))
        return known[name]

    @property
    def database_secret(self) -> Path:
        """Airflow's database URL (with its password): only Airflow reads it (``_CMD``), no
        service gets it in its environment."""
        return write_secret(self.dir / "secrets" / "airflow-db", self.database_url)

    @property
    def spark_properties(self) -> Path:
        """Spark's shared secret (``spark.authenticate``) and the S3A settings of the lake's bucket
        on the stack's object store: the master, its workers, every driver and the platform's
        delta-rs and obstore clients read them from this file (never on a command line)."""
        s3a = hadoop_conf(LAKE_BUCKET, self.object_store_endpoint, *self.object_store_keys)
        lines = ["spark.authenticate true", f"spark.authenticate.secret {self.secret('spark')}"]
        lines += [f"spark.hadoop.{key} {value}" for key, value in sorted(s3a.items())]
        return write_secret(self.dir / "secrets" / "spark-auth.properties", "\n".join(lines) + "\n")

    @property
    def object_store_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port['object_store']}"

    @property
    def object_store_keys(self) -> tuple[str, str]:
        """The object store's generated access key and secret key."""
        return f"lake-{self.secret('s3_access')[:10]}", self.secret("s3_secret")

    @classmethod
    def open(cls, conf: Settings) -> Stack:
        """The stack of ``conf.stack_dir``: its ports and Kafka in the settings every service gets."""
        ports = cls(conf).ports()
        # The lake and the control plane live on the stack's object store, unless LAKEHOUSE_ROOT says
        # otherwise (tests give each their own lake and start the engines alone).
        lake = {} if "root" in conf.model_fields_set else {"root": f"s3a://{LAKE_BUCKET}/lake"}
        return cls(
            conf.model_copy(
                update={
                    **lake,
                    "platform_dir": conf.stack_dir,
                    "airflow_port": ports["airflow"],
                    "serve_port": ports["sql"],
                    "kafka_bootstrap_servers": f"127.0.0.1:{ports['kafka']}",
                    "ingest": "kafka",
                }
            )
        )

    @property
    def spark_master(self) -> str:
        return f"spark://127.0.0.1:{self.port['spark_master']}"

    @property
    def kafka_servers(self) -> str:
        return f"127.0.0.1:{self.port['kafka']}"

    @property
    def database_url(self) -> str:
        return (
            f"postgresql+psycopg2://airflow:{self.secret('postgres')}@127.0.0.1:"
            f"{self.port['postgres']}/{AIRFLOW_DB}"
        )

    def env(self) -> dict[str, str]:
        """The embedded platform's environment, pointed at Postgres, the cluster and Kafka."""
        env = super().env()
        env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS")  # SQLite's, not Postgres's
        env.update(
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD=f"cat {self.database_secret}",
            LAKEHOUSE_SPARK_PROPERTIES_FILE=str(self.spark_properties),
            AIRFLOW_CONN_SPARK_DEFAULT=json.dumps(
                {"conn_type": "spark", "host": "spark://127.0.0.1", "port": self.port["spark_master"]}
            ),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    # ------------------------------------------------------------------ preparation
    def prepare(self, services: list[Service]) -> None:
        """One-time set-up of what the chosen services need: jars, storage, database cluster."""
        names = {s.name for s in services}
        self.dir.mkdir(parents=True, exist_ok=True)
        self.password()
        self.analyst_password()
        if "object-store" in names:
            write_config(self.dir / "objectstore", self.port["object_store"], *self.object_store_keys)
            (self.dir / "objectstore" / "data" / LAKE_BUCKET).mkdir(exist_ok=True)
        if "kafka" in names:
            self._prepare_kafka()
        if "postgres" in names:
            self._prepare_postgres()
        self.write_env_file()

    def _prepare_kafka(self) -> None:
        kafka_jars()
        home = self.dir / "kafka"
        home.mkdir(parents=True, exist_ok=True)
        properties = home / "server.properties"
        properties.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.bootstrap.servers=127.0.0.1:{self.port['kafka_controller']}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port['kafka']},"
                    f"CONTROLLER://127.0.0.1:{self.port['kafka_controller']}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port['kafka']}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    f"log.dirs={home / 'data'}",
                    "num.partitions=2",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "",
                ]
            )
        )
        if not (home / "data" / "meta.properties").exists():
            format_kafka_storage(
                properties, base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            )

    def _prepare_postgres(self) -> None:
        data = self.dir / "postgres"
        if (data / "PG_VERSION").exists():
            return
        pg = postgres_bin()
        data.mkdir(parents=True, exist_ok=True)
        pwfile = self.dir / "postgres.pw"
        pwfile.write_text(self.secret("postgres") + "\n")
        if os.geteuid() == 0:  # the server runs as `postgres`: it must reach and own its files
            if subprocess.run(["id", POSTGRES_OS_USER], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--system", "--no-create-home", POSTGRES_OS_USER], check=True)
            self.dir.chmod(self.dir.stat().st_mode | 0o011)
            shutil.chown(data, POSTGRES_OS_USER)
            shutil.chown(pwfile, POSTGRES_OS_USER)
        try:
            subprocess.run(
                as_postgres_user([str(pg / "initdb"), "-D", str(data), "-U", "airflow",
                                  "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8"]),
                check=True, capture_output=True, text=True,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(data, ignore_errors=True)
            raise SystemExit(f"initdb failed: {exc.stderr or exc.stdout}") from None
        finally:
            pwfile.unlink(missing_ok=True)

    def create_database(self) -> None:
        """Airflow's database, once Postgres serves (idempotent)."""

        connection = psycopg2.connect(
            host="127.0.0.1", port=self.port["postgres"], user="airflow",
            password=self.secret("postgres"), dbname="postgres",
        )  # fmt: skip
        connection.autocommit = True  # CREATE DATABASE runs outside transactions
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (AIRFLOW_DB,))
                if cursor.fetchone() is None:
                    cursor.execute(f"CREATE DATABASE {AIRFLOW_DB}")
        finally:
            connection.close()

    def write_env_file(self) -> Path:
        """``env.sh``: ``source .stack/env.sh`` points the lakehouse and airflow CLIs at the stack."""
        keep = ("AIRFLOW", "LAKEHOUSE")
        lines = [f"export {k}='{v}'" for k, v in sorted(self.env().items()) if k.startswith(keep)]
        return write_secret(self.dir / "env.sh", "\n".join(lines) + "\n")


# --------------------------------------------------------------------------- services


def _object_store_ready(stack: Stack) -> str | None:
    return None if answers(stack.object_store_endpoint) else "not answering yet"


def _postgres_command(stack: Stack) -> list[str]:
    pg = postgres_bin()
    return as_postgres_user(
        [str(pg / "postgres"), "-D", str(stack.dir / "postgres"), "-p", str(stack.port["postgres"]),
         "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=200"]
    )  # fmt: skip


def _postgres_ready(stack: Stack) -> str | None:  # type: ignore[return]

    try:
        stack.create_database()
    except psycopg2.Error as exc:
        return f"postgres not answering yet ({str(exc).strip()})"


def _kafka_command(stack: Stack) -> list[str]:
    return [
        "java",
        "-Xmx512m",
        "-cp",
        f"{KAFKA_JARS}/*",
        "kafka.Kafka",
        str(stack.dir / "kafka" / "server.properties"),
    ]


def _kafka_ready(stack: Stack) -> str | None:

    if not port_in_use(stack.port["kafka"]):
        return "Kafka port not open yet"
    try:
        KafkaAdminClient(bootstrap_servers=stack.kafka_servers, request_timeout_ms=5000).close()
    except KafkaError as exc:
        return f"Kafka not answering yet ({exc})"
    return None


def _spark_class(*args: str) -> list[str]:

    return [str(Path(pyspark.__file__).parent / "bin" / "spark-class"), *args]


def _master_command(stack: Stack) -> list[str]:
    return _spark_class(
        "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
        "--properties-file", str(stack.spark_properties),
        "--port", str(stack.port["spark_master"]), "--webui-port", str(stack.port["spark_master_ui"]),
    )  # fmt: skip


def _worker_command(stack: Stack) -> list[str]:
    work = stack.dir / "spark" / "work"
    work.mkdir(parents=True, exist_ok=True)
    return _spark_class(
        "org.apache.spark.deploy.worker.Worker", stack.spark_master, "--host", "127.0.0.1",
        "--properties-file", str(stack.spark_properties),
        "--port", str(stack.port["spark_worker"]), "--webui-port", str(stack.port["spark_worker_ui"]),
        "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--work-dir", str(work),
    )  # fmt: skip


def master_state(stack: Stack) -> dict:
    """The master's JSON status (workers, applications), from its web UI."""
    url = f"http://127.0.0.1:{stack.port['spark_master_ui']}/json/"
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def _master_ready(stack: Stack) -> str | None:
    try:
        master_state(stack)
    except OSError as exc:
        return f"Spark master UI not answering ({exc})"
    return None


def _worker_ready(stack: Stack) -> str | None:
    try:
        workers = [w for w in master_state(stack)["workers"] if w["state"] == "ALIVE"]
    except OSError as exc:
        return f"Spark master UI not answering ({exc})"
    return None if workers else "no worker registered with the master yet"


def _banner(stack: Stack) -> str:
    return (
        f"Spark        {stack.spark_master}   UI http://127.0.0.1:{stack.port['spark_master_ui']}\n"
        f"  Kafka        {stack.kafka_servers}\n"
        f"  Postgres     127.0.0.1:{stack.port['postgres']} (Airflow's metadata database)\n"
        f"  shell        source {stack.dir}/env.sh   # lakehouse / airflow CLIs against the stack"
    )


SERVICES: list[Service] = [
    Service(
        "object-store",
        lambda stack: s3proxy_command(stack.dir / "objectstore" / "s3proxy.conf"),
        _object_store_ready,  # type: ignore[arg-type]
        lambda stack: (
            f"object store {stack.object_store_endpoint} (S3; keys in {stack.dir}/secrets.json), "
            f"the lake at {stack.conf.root}"
        ),
    ),
    Service("postgres", _postgres_command, _postgres_ready),  # type: ignore[arg-type]
    Service("kafka", _kafka_command, _kafka_ready),  # type: ignore[arg-type]
    Service("spark-master", _master_command, _master_ready, _banner),  # type: ignore[arg-type]
    Service("spark-worker", _worker_command, _worker_ready),  # type: ignore[arg-type]
    Service("airflow", lambda stack: [str(BIN / "airflow"), "standalone"], airflow_ready, airflow_banner),
    Service("sql-server", lambda stack: [str(BIN / "lakehouse"), "serve"], sql_server_ready),
    Service(
        "generator-iot",
        lambda stack: [
            str(BIN / "lakehouse"),
            "generate",
            "iot",
            "--continuous",
            "--events",
            "50",
            "--every",
            "5",
        ],
    ),
]
"""What ``make stack-up`` runs, in start order (``make stack-down`` stops them in reverse)."""


def select(only: list[str] | None) -> list[Service]:
    if not only:
        return SERVICES
    unknown = set(only) - {s.name for s in SERVICES}
    if unknown:
        raise SystemExit(f"unknown service(s) {sorted(unknown)}; the stack has {[s.name for s in SERVICES]}")
    return [s for s in SERVICES if s.name in only]


ENGINES = ["postgres", "kafka", "spark-master", "spark-worker"]
"""The engines alone (what tests start): Airflow and the generator then run as the test wants."""


@contextlib.contextmanager
def running(conf: Settings, only: list[str] | None = None) -> Iterator[Stack]:
    """The stack of ``conf.stack_dir`` (or only some services), stopped on exit whatever happens."""
    stack = Stack.open(conf)
    try:
        up(stack, select(only))
        yield stack
    finally:
        down(stack)


def up(stack: Stack, services: list[Service], timeout: float = 600) -> None:
    print(f"Starting the production topology natively (state in {stack.dir}):", flush=True)
    stack.prepare(services)
    for service in services:
        if stack.running(service.name) is None:
            busy = [n for n in SERVICE_PORTS.get(service.name, ()) if port_in_use(stack.port[n])]
            if busy:
                raise SystemExit(f"{service.name}: port(s) {busy} in use; remove {stack.dir}/ports.json")
        stack.start(service)
        wait_ready(stack, [service], timeout)  # in order: Airflow needs Postgres, the worker its master
    banners = "\n".join(f"  {s.banner(stack)}" for s in services if s.banner)
    print(f"\nThe stack is up.\n{banners}\n  stop         make stack-down\n", flush=True)


def down(stack: Stack) -> None:
    """Stop the deployed flows gracefully (they stay deployed), then every service."""
    print(f"Stopping the stack (state in {stack.dir}):", flush=True)
    on_store = str(stack.conf.root).startswith("s3a://")
    if not on_store or stack.running("object-store") is not None:  # the lake (and its leases) reachable
        for line in stop_drivers(
            stack.conf.model_copy(update={"spark_properties_file": stack.spark_properties})
        ):
            print(f"  {line}", flush=True)
    for service in reversed(SERVICES):
        stack.stop(service.name)
    print("Stopped.")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakehouse.platform.stack", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    parser.add_argument("--only", nargs="+", metavar="SERVICE", help="start only these services")
    args = parser.parse_args()
    stack = Stack.open(settings())
    if args.command == "up":
        up(stack, select(args.only))
    elif args.command == "down":
        # The platform's clients of the lake (the control records, delta-rs) read its S3A settings
        # from this process's settings: the stack's, as every service of it has them.
        os.environ.update({k: v for k, v in stack.env().items() if k.startswith("LAKEHOUSE_")})
        settings.cache_clear()
        down(stack)
    elif args.command == "status":
        return report(stack, SERVICES)
    else:
        print(stack.write_env_file().read_text(), end="")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    time.sleep(0)
