"""The continuous flows' DAGs: ``<pipeline>_stream_deploy`` (manual), ``_stream_monitor``
(every few minutes: restart dead drivers, report each flow's health) and ``_stream_stop``.

Task bodies import the operations when they run (DAG files parse without them).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, AssetAlias, Param, TriggerRule, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from lakehouse.core.config import Settings, settings
from lakehouse.core.lake import Lake
from lakehouse.orchestration.dags.kit import doc, flows_param, pipeline_dag, table_asset, tables_doc
from lakehouse.orchestration.submit import SPARK_CONN_ID, driver_spec, ensure_connection
from lakehouse.spec import Pipeline, parse_duration

log = logging.getLogger("lakehouse.dags")


def deploy_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    names = list(pipeline.table_names)
    with pipeline_dag(
        pipeline, "stream_deploy",
        description=f"Plan, then start {pipeline.name}'s continuous flows (an incompatible change waits for approval)",
        doc_md=doc("stream_deploy", pipeline=pipeline, spark_conn_id=SPARK_CONN_ID, tables=tables_doc(pipeline)),
        schedule=None,
        tags=("streaming",),
        task_args={"execution_timeout": timedelta(minutes=20)},
        params={
            "flows": flows_param(pipeline, "deploy"),
            "interval": Param(
                conf.trigger_interval, type="string", pattern=r"^\d+ (second|minute|hour)s?$",
                description="Micro-batch interval, e.g. '5 seconds' or '1 minute'.",
            ),
            "isolate": Param(
                False, type="boolean",
                description="One driver (JVM) per flow instead of one for all selected flows.",
            ),
            "on_incompatible": Param(
                "ask", type="string", enum=["ask", "refuse"],
                description="A change a flow's checkpoint cannot take: ask for approval of its reset and "
                            "rebuild (a task waits for an operator), or refuse the deploy with the plan.",
            ),
        },
    ) as dag:  # fmt: skip

        @task(task_id="plan")
        def plan_flows() -> dict[str, Any]:
            """What the deploy does to each flow (``lakehouse plan``); nothing starts yet."""
            from lakehouse.orchestration import operations  # deferred: polars (DAG files parse without it)

            context = get_current_context()
            ensure_connection(SPARK_CONN_ID, default_master=None)
            run = f"{context['dag'].dag_id} {context['run_id']}"
            found = operations.plan(settings(), pipeline, context["params"]["flows"], run)
            for line in operations.plan_markdown(found).splitlines():
                log.info("%s", line)
            return found

        @task.branch(task_id="decide")
        def decide(found: dict[str, Any]) -> str:
            """Straight to the deploy, or to an operator's approval when a flow cannot restart on
            its checkpoint (``on_incompatible=refuse``: fail with the plan)."""
            from lakehouse.orchestration import operations  # deferred: polars (as above)

            context = get_current_context()
            broken = operations.incompatible(found)
            if not broken:
                return "deploy"
            text = operations.plan_markdown(found)
            if context["params"]["on_incompatible"] == "refuse":
                raise AirflowFailException(
                    f"not deployed: {', '.join(broken)} cannot restart on their checkpoints "
                    f"(on_incompatible=refuse); reset them (the {pipeline.name}_reset DAG) or deploy "
                    f"with on_incompatible=ask.\n{text}"
                )
            context["ti"].xcom_push(key="incompatible", value=broken)
            context["ti"].xcom_push(
                key="body",
                value=f"The new code of {', '.join(broken)} cannot restart on the state its checkpoint "
                "holds (the plan below says why). Approve: stop those flows and the ones that read them, "
                "archive their tables and checkpoints, rebuild them from their upstreams with the new code, "
                "then deploy. Reject: deploy nothing.\n\n" + text,
            )
            return "approve"

        approve = ApprovalOperator(
            task_id="approve",
            subject=f"{pipeline.name}: reset and rebuild {{{{ ti.xcom_pull(task_ids='decide', "
            "key='incompatible') | join(', ') }} for an incompatible change?",
            body="{{ ti.xcom_pull(task_ids='decide', key='body') }}",
            ignore_downstream_trigger_rules=True,  # a rejection skips the deploy too
            defaults=[ApprovalOperator.REJECT],  # what an unanswered request becomes
            response_timeout=timedelta(days=1),
            execution_timeout=None,  # the wait is the response timeout's
        )

        @task(task_id="stop_for_reset")
        def stop_for_reset() -> dict[str, str]:
            """Stop the flows the reset rebuilds, and those reading them (the reset's driver
            cannot reach Airflow to do it); the interval of each that was deployed."""
            from lakehouse.orchestration import operations  # deferred: polars (as above)

            broken = get_current_context()["ti"].xcom_pull(task_ids="decide", key="incompatible")
            return operations.stop_for_reset(settings(), pipeline, broken)

        args = ["reset", pipeline.name, "--downstream", "--flow",
                "{{ ti.xcom_pull(task_ids='decide', key='incompatible') | join(',') }}"]  # fmt: skip
        reset = SparkSubmitOperator(
            task_id="reset", outlets=[table_asset(conf, t) for t in names], retries=0, execution_timeout=timedelta(hours=2),
            priority_weight=10,  # an operator waits for it: first in the drivers' pool
            **driver_spec(conf, f"lakehouse-{pipeline.name}-reset", args).operator_kwargs(),
        )  # fmt: skip

        @task(task_id="deploy", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        def deploy_flows(found: dict[str, Any]) -> dict[str, str]:
            """Start the flows that do not run; restart those whose code changed compatibly; deploy
            again the reset flows that were deployed (and not selected), with their interval."""
            from lakehouse.orchestration import operations  # deferred: polars (as above)

            context = get_current_context()
            params = context["params"]
            run_conf = settings()
            ensure_connection(SPARK_CONN_ID, default_master=None)
            launcher = operations.spark_submit_launcher(run_conf, pipeline)
            for flow, message in operations.restart_changed(run_conf, pipeline, found).items():
                log.info("%s: stopped to restart with its new code: %s", flow, message)
            selected = [t.name for t in pipeline.select(params["flows"])]
            messages = operations.deploy(run_conf, pipeline, selected, launcher,
                                         interval=params["interval"], isolate=params["isolate"])  # fmt: skip
            stopped = context["ti"].xcom_pull(task_ids="stop_for_reset") or {}
            for interval in sorted(set(stopped.values())):
                again = [f for f, i in stopped.items() if i == interval and f not in selected]
                if again:
                    messages |= operations.deploy(run_conf, pipeline, again, launcher, interval=interval)
            for flow, message in messages.items():
                log.info("%s: %s", flow, message)
            return messages

        found = plan_flows()
        chosen = decide(found)
        deploy = deploy_flows(found)
        chosen >> [deploy, approve]
        approve >> stop_for_reset() >> reset >> deploy
    return [dag]


def monitor_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    alias = AssetAlias(f"{pipeline.name}_stream_updates")
    with pipeline_dag(
        pipeline, "stream_monitor",
        description=f"Restart dead drivers of {pipeline.name}; health of each flow",
        doc_md=doc("stream_monitor", pipeline=pipeline, alias=alias.name),
        schedule=parse_duration(pipeline.monitor_interval, "monitor_interval"),
        tags=("streaming", "monitoring"),
        task_args={"retry_delay": timedelta(seconds=30), "execution_timeout": timedelta(minutes=15)},
        dagrun_timeout=timedelta(minutes=20),
        params={
            "restart": Param(
                True, type="boolean", description="Restart dead flows (false: only report their health)."
            )
        },
    ) as dag:  # fmt: skip

        @task(task_id="check_flows", outlets=[alias], multiple_outputs=False)
        def check_flows() -> dict[str, dict[str, str]]:
            """Restart dead flows, then check every flow: one task, so a run costs one task
            process however many flows the pipeline has (seconds on a busy 2-core machine)."""
            from lakehouse.monitoring.status import (
                table_stats,  # deferred: delta-rs (DAG files parse without it)
            )
            from lakehouse.orchestration import operations  # deferred: polars (as above)

            context = get_current_context()
            run_conf = settings()
            restarted: dict[str, str] = {}
            problems: list[str] = []  # what fails the run, after every flow was checked
            history = operations.recent_progress(run_conf)  # read once: the progress table is the cost
            if not context["params"]["restart"]:
                log.info("params.restart is false: not restarting anything")
            else:
                ensure_connection(SPARK_CONN_ID, default_master=None)
                launcher = operations.spark_submit_launcher(run_conf, pipeline)
                try:
                    restarted = operations.restart_dead(run_conf, pipeline, launcher, history=history)
                except operations.OperationFailed as exc:  # still check (and report) every flow
                    log.exception("restarting dead flows failed")
                    problems.append(f"restart failed: {exc}")
                for flow, message in restarted.items():
                    log.warning("%s: %s", flow, message)
                log.info("restarted %d flow(s)", len(restarted))
                if restarted:  # their new drivers' first progress is in the table now
                    history = operations.recent_progress(run_conf)
            lake = Lake.from_settings(run_conf)
            states = operations.health(run_conf, pipeline, history=history)
            for health in states:
                text = operations.report(health)
                log.log(logging.ERROR if health.failed else logging.INFO, "%s", text)
                if health.failed:
                    problems.append(text.splitlines()[0])  # "<flow>: <STATE> - <why>"
                stats = table_stats(lake, health.flow)
                if operations.table_advanced(run_conf, pipeline, health.flow, stats):
                    context["outlet_events"][alias].add(
                        table_asset(run_conf, health.flow), extra={"version": stats.version}
                    )
            try:  # alerted, not failed: a failed task emits no asset events (see check_freshness)
                operations.check_freshness(run_conf, pipeline, context)
            except Exception:
                log.exception("measuring the freshness objectives of %s failed", pipeline.name)
            if problems:
                raise AirflowFailException("\n".join(problems))
            return {"restarted": restarted, "health": {h.flow: h.state for h in states}}

        check_flows()
    return [dag]


def stop_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    with pipeline_dag(
        pipeline, "stream_stop",
        description=f"Stop {pipeline.name}'s continuous flows gracefully",
        doc_md=doc("stream_stop", pipeline=pipeline),
        schedule=None,
        tags=("streaming",),
        task_args={"execution_timeout": timedelta(minutes=15)},
        params={"flows": flows_param(pipeline, "stop")},
    ) as dag:  # fmt: skip

        @task(task_id="stop")
        def stop_flows() -> dict[str, str]:
            from lakehouse.orchestration import operations  # deferred: polars (DAG files parse without it)

            messages = operations.stop(settings(), pipeline, get_current_context()["params"]["flows"])
            for flow, message in messages.items():
                log.info("%s: %s", flow, message)
            return messages

        stop_flows()
    return [dag]
