"""Airflow orchestration: the DAG factory and the tasks it schedules (deploy, monitor, stop)."""
