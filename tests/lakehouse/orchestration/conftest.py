"""Real Airflow for the orchestration tests: a temporary AIRFLOW_HOME with a migrated SQLite DB,
``spark_default`` from ``AIRFLOW_CONN_SPARK_DEFAULT``, and DAG runs with ``dag.test()`` in a
subprocess (``run_dag.py``). Drivers a test leaves behind are killed at teardown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lakehouse import registry
from lakehouse.core.lake import Lake
from lakehouse.state.control import FlowControl

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
RUN_DAG = Path(__file__).with_name("run_dag.py")
ANSWER_HITL = Path(__file__).with_name("answer_hitl.py")
MARKER = "DAG-TEST-RESULT "
STACK_BUCKET = "stack-lake"


def airflow_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


@pytest.fixture
def dag_env(airflow_home: Path, cli_env: dict[str, str]) -> dict[str, str]:
    """Environment of a ``dag.test()`` run: this test's lake, Spark through the connection."""
    env = {**cli_env, **airflow_env(airflow_home)}
    env.pop("LAKEHOUSE_SPARK_MASTER")  # the connection decides where drivers run
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    env["LAKEHOUSE_ROOT"] = cli_env["LAKEHOUSE_ROOT"]
    return env


@dataclass(frozen=True)
class Helper:
    """A process a DAG run waits for (an operator answering its approval), printing to a file:
    a pipe nobody reads until the end fills up and stops a chatty helper mid-print."""

    process: subprocess.Popen[str]
    printed: Path

    @classmethod
    def start(cls, args: list[str], env: dict[str, str]) -> Helper:
        printed = Path(tempfile.mkstemp(prefix="dag-helper-", suffix=".log")[1])
        with printed.open("w") as out:
            process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        return cls(process, printed)

    def failed(self) -> bool:
        return self.process.poll() not in (None, 0)

    def output(self) -> str:
        return self.printed.read_text(errors="replace")

    def finish(self, timeout: float = 120) -> str:
        """Its whole output once it has ended (killed after ``timeout`` seconds)."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        output = self.output()
        self.printed.unlink(missing_ok=True)
        return output


@pytest.fixture
def answer_later(dag_env: dict[str, str]):
    """``answer_later(dag_id, task_id, option)`` -> :class:`Helper`: an operator who answers
    ``option`` to ``task_id``'s request once it is pending, through Airflow's REST API on the
    run's database (``answer_hitl.py``); pass it to ``airflow_run(..., helper=)``."""
    env = {**dag_env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}

    def start(dag_id: str, task_id: str, option: str) -> Helper:
        return Helper.start([sys.executable, str(ANSWER_HITL), dag_id, task_id, option, "1200"], env)

    return start


@dataclass(frozen=True)
class DagRunResult:
    state: str
    interval: list[str]
    tasks: dict[str, dict[str, Any]]
    output: str

    def task(self, task_id: str) -> dict[str, Any]:
        assert task_id in self.tasks, f"no task {task_id}: {sorted(self.tasks)}"
        return self.tasks[task_id]

    def value(self, task_id: str) -> Any:
        task = self.task(task_id)
        assert task["state"] == "success", f"{task_id} is {task['state']}:\n{self.output[-6000:]}"
        return task["value"]


def run_dag(
    env: dict[str, str],
    dag_id: str,
    conf: dict | None = None,
    logical_date: str | None = None,
    helper: Helper | None = None,
) -> DagRunResult:
    """Run ``dag_id`` once with ``dag.test()``; its state and each task's state and return value.

    ``helper`` is a process the run waits for (an operator answering its approval): if it fails,
    the run would wait for ever, so the run is stopped at once and both outputs are shown."""
    args = [sys.executable, str(RUN_DAG), dag_id, json.dumps(conf or {})]
    args += [logical_date] if logical_date else []
    with tempfile.TemporaryFile("w+") as printed:
        process = subprocess.Popen(
            args, env=env, stdout=printed, stderr=subprocess.STDOUT, text=True, cwd=REPO
        )
        deadline, why = time.monotonic() + 1200, ""
        while process.poll() is None and not why:
            if time.monotonic() > deadline:
                why = "did not end within 1200 s"
            elif helper is not None and helper.failed():
                why = f"waits for a helper that failed (exit {helper.process.returncode}):\n{helper.output()[-4000:]}"
            else:
                time.sleep(1)
        if why:
            process.kill()
            process.wait()
            if helper is not None:  # what the helper saw meanwhile, and whether it answered
                state = (
                    "still running, stopped"
                    if helper.process.poll() is None
                    else f"exit {helper.process.returncode}"
                )
                why += f"\nits helper ({state}) had printed:\n{helper.finish(timeout=0.1)[-4000:]}"
        printed.seek(0)
        output = printed.read()
    if why:  # what the run was doing is the only clue: show its end
        pytest.fail(f"dag.test() of {dag_id} {why}\nthe run's last output:\n{output[-12000:]}")
    lines = [line for line in output.splitlines() if line.startswith(MARKER)]
    assert lines, f"dag.test() of {dag_id} printed no result (exit {process.returncode}):\n{output[-6000:]}"
    data = json.loads(lines[-1][len(MARKER) :])
    return DagRunResult(data["state"], data["interval"], data["tasks"], output)


# Control planes on the object store a test's topology uses (``topology``), for ``reap_drivers``.
STORE_CONTROLS: list[str] = []


@pytest.fixture
def reap_drivers(cli_env: dict[str, str]):
    """Kill, at teardown, every driver still holding a lease in this test's lake (or, for a lake
    on the object store, one of the iot pipeline's leases)."""
    yield
    control_root = Path(cli_env["LAKEHOUSE_ROOT"]) / "control"
    controls = [
        (
            FlowControl(control_root, pipeline.name),
            [f.name.removesuffix(".lease") for f in pipeline.glob("*.lease")],
        )
        for pipeline in control_root.glob("*")
    ]
    controls += [
        (FlowControl(root, "iot"), registry.get("pipelines", "iot").configured("files").table_names)
        for root in STORE_CONTROLS
    ]
    STORE_CONTROLS.clear()
    for control, flows in controls:
        for flow in flows:
            lease = control.lease(flow)
            if lease and lease.live():
                with contextlib.suppress(ProcessLookupError):
                    if lease.jvm_pid:  # launched detached: the JVM leads its own process group
                        os.killpg(lease.jvm_pid, signal.SIGKILL)
                    os.kill(lease.pid, signal.SIGKILL)


@pytest.fixture
def airflow_run(dag_env: dict[str, str]):
    """``airflow_run(dag_id, conf=None, logical_date=None, helper=None)`` -> :class:`DagRunResult`."""

    def run(
        dag_id: str,
        conf: dict | None = None,
        logical_date: str | None = None,
        helper: Helper | None = None,
    ) -> DagRunResult:
        return run_dag(dag_env, dag_id, conf, logical_date, helper)

    return run


@pytest.fixture(scope="session")
def stack_airflow_db(stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Airflow's metadata database on the stack's Postgres, migrated once per session."""
    env = {**airflow_env(tmp_path_factory.mktemp("stack-airflow")),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": stack.database_url}  # fmt: skip
    result = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return stack.database_url


@dataclass(frozen=True)
class Topology:
    """Where a test's DAG runs keep their metadata and where its drivers run."""

    name: str
    env: dict[str, str]
    spark_master_ui: int | None = None
    store: Path | None = None  # the object store's data directory, when the lake is on it

    @property
    def lake(self) -> Lake:
        return Lake(self.env["LAKEHOUSE_ROOT"])

    def local(self, path: str) -> str:
        """Where ``path`` of the lake is on this machine's disk: for a lake on the object store,
        the file S3Proxy keeps for the object (what a test watches or reads as its truth; the
        platform itself reads through S3)."""
        if self.store is None or not path.startswith("s3a://"):
            return path
        return str(self.store / path.removeprefix("s3a://"))

    def cluster_apps(self) -> list[dict[str, Any]]:
        """Applications running on the Spark standalone cluster (none embedded)."""
        if self.spark_master_ui is None:
            return []
        url = f"http://127.0.0.1:{self.spark_master_ui}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)["activeapps"]


@pytest.fixture(params=["embedded", "stack"])
def topology(request: pytest.FixtureRequest, dag_env: dict[str, str]) -> Topology:
    """``embedded``: SQLite, drivers on ``local[2]``, the lake and the control plane on local disk.
    ``stack``: the production topology, natively: Airflow's metadata on Postgres, ``spark_default``
    -> the Spark standalone master, the lake and the control plane on the object store (S3Proxy)."""
    if request.param == "embedded":
        return Topology("embedded", dag_env)
    stack = request.getfixturevalue("stack")
    store = request.getfixturevalue("object_store")
    bucket = request.getfixturevalue("s3a_env")(STACK_BUCKET)  # this process reads the lake too
    root = f"{bucket}/{Path(dag_env['LAKEHOUSE_ROOT']).parent.name}/lake"
    STORE_CONTROLS.append(f"{root}/control")
    env = {
        **dag_env,
        "LAKEHOUSE_ROOT": root,
        "LAKEHOUSE_SPARK_CONF": os.environ["LAKEHOUSE_SPARK_CONF"],  # S3A settings of the bucket
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": request.getfixturevalue("stack_airflow_db"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": "spark://127.0.0.1", "port": stack.port["spark_master"]}
        ),
        "LAKEHOUSE_SPARK_PROPERTIES_FILE": str(stack.spark_properties),  # the cluster's shared secret
    }
    return Topology("stack", env, stack.port["spark_master_ui"], store.home / "data")


@pytest.fixture
def topology_run(topology: Topology):
    """``airflow_run`` on the test's :func:`topology`."""

    def run(dag_id: str, conf: dict | None = None, logical_date: str | None = None) -> DagRunResult:
        return run_dag(topology.env, dag_id, conf, logical_date)

    return run
