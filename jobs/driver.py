"""spark-submit entry point: ``spark-submit jobs/driver.py <lakehouse command ...>``.

Airflow submits every driver through this file (see lakehouse.orchestration.submit); it runs
the same ``lakehouse`` CLI a person would, as the Python driver of the JVM spark-submit started,
and never outlives that JVM (see lakehouse.core.processes.die_with_parent).
"""

from lakehouse.core.processes import die_with_parent

if __name__ == "__main__":
    die_with_parent()
    from lakehouse.cli import main

    main()
