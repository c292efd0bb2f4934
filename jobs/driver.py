"""spark-submit entry point: ``spark-submit jobs/driver.py <lakehouse command ...>``.

Airflow submits every driver through this file (see lakehouse.orchestration.submit); it runs
the same ``lakehouse`` CLI a person would, inside the JVM spark-submit started.
"""

from lakehouse.cli import main

if __name__ == "__main__":
    main()
