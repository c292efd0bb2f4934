"""Run one generated DAG with ``dag.test()``; print its state, data interval and each task's state
and return value as one JSON line. The tests run it in a subprocess with their own AIRFLOW_HOME
(a migrated SQLite DB) and ``AIRFLOW_CONN_SPARK_DEFAULT``.

Usage: python run_dag.py DAG_ID [RUN_CONF_JSON] [LOGICAL_DATE]
"""

from __future__ import annotations

import json
import sys
from datetime import datetime

MARKER = "DAG-TEST-RESULT "


def main() -> None:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from lakehouse.orchestration.dags import build_all

    dag_id = sys.argv[1]
    run_conf = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    kwargs = {"logical_date": datetime.fromisoformat(sys.argv[3])} if len(sys.argv) > 3 else {}
    run = build_all()[dag_id].test(run_conf=run_conf, **kwargs)
    tasks = {}
    with create_session() as session:
        for ti in run.get_task_instances(session=session):
            query = XComModel.get_many(
                run_id=run.run_id, dag_ids=dag_id, task_ids=ti.task_id, key="return_value"
            )
            row = session.scalars(query).first()
            value = XComModel.deserialize_value(row) if row is not None else None
            tasks[ti.task_id] = {"state": str(ti.state), "value": value}
    interval = [str(run.data_interval_start), str(run.data_interval_end)]
    print(MARKER + json.dumps({"state": str(run.state), "interval": interval, "tasks": tasks}), flush=True)


if __name__ == "__main__":
    main()
