"""Answer a human-in-the-loop task the way an operator's browser does: through Airflow's own REST
API (``PATCH .../taskInstances/{task}/-1/hitlDetails``), served in this process by Airflow's
FastAPI app on the run's metadata database. ``dag.test()`` waits for such an answer.

Usage: python answer_hitl.py DAG_ID TASK_ID OPTION [TIMEOUT_SECONDS]

Waits for the task's pending request, answers ``OPTION`` and prints the request as one JSON line
(its subject and body, as the operator saw them) after ``MARKER``.
"""

from __future__ import annotations

import json
import sys
import time

MARKER = "HITL-REQUEST "


def brief(exc: BaseException) -> str:
    """An error's first line, short: a SQLAlchemy error's repr carries its whole statement."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


def main() -> None:
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    dag_id, task_id, option = sys.argv[1:4]
    deadline = time.monotonic() + float(sys.argv[4] if len(sys.argv) > 4 else 600)
    while True:  # the app reads the run's database as it starts: busy under load, retried
        try:
            client = TestClient(create_app("core"))
            break
        except Exception as exc:
            if time.monotonic() > deadline:
                raise
            print(f"starting the API: {brief(exc)}; retrying", flush=True)
            time.sleep(1)

    def call(method: str, path: str, **kwargs: object) -> dict:
        """The API's answer; a failure (SQLite busy while the run writes, under load) is retried
        until the deadline: an operator who gave up would leave the run waiting for ever."""
        while True:
            try:
                response = client.request(method, path, **kwargs)
                response.raise_for_status()
                return response.json()
            except Exception as exc:  # printed, retried, fatal only at the deadline
                if time.monotonic() > deadline:
                    raise
                print(f"{method} {path}: {brief(exc)}; retrying", flush=True)
                time.sleep(1)

    polls = 0
    while True:
        details = call("GET", f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails")
        if polls % 30 == 0:  # what it sees, for a run left waiting (printed if the test fails)
            seen = [(d["task_instance"]["dag_run_id"], d["task_instance"]["task_id"], d["response_received"])
                    for d in details["hitl_details"]]  # fmt: skip
            print(f"{time.strftime('%X')} requests seen: {seen}", flush=True)
        polls += 1
        pending = [
            d
            for d in details["hitl_details"]
            if d["task_instance"]["task_id"] == task_id and not d["response_received"]
        ]
        if pending:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"no pending request of {dag_id}.{task_id}: {details}")
        time.sleep(1)
    [request] = pending
    run_id = request["task_instance"]["dag_run_id"]
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
    answered = call("PATCH", path, json={"chosen_options": [option], "params_input": {}})
    seen = {k: request[k] for k in ("subject", "body", "options")}
    print(MARKER + json.dumps({**seen, "chosen": answered["chosen_options"]}), flush=True)
    # The answer resumes the task (its state leaves awaiting input): say so, for a run left waiting.
    task_path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
    for _ in range(60):
        state = call("GET", task_path)["state"]
        if state != "awaiting_input":
            break
        time.sleep(1)
    print(f"{time.strftime('%X')} answered {option!r} to run {run_id}; the task is now {state}", flush=True)


if __name__ == "__main__":
    main()
