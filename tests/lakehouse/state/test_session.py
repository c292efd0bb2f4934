"""The session factory: Delta on, UTC, and Python workers running the project's interpreter."""

from __future__ import annotations

import sys

import pandas as pd

from lakehouse.core.config import Settings
from lakehouse.state.session import POLLING_DELAY, spark_conf


def test_conf_pins_python_workers_to_this_interpreter_and_user_conf_wins() -> None:
    conf = spark_conf(Settings(root="/tmp/lake", spark_conf={"spark.pyspark.python": "/opt/py"}))
    assert conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.pyspark.python"] == "/opt/py"
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_pandas_udfs_run_in_the_virtualenv(spark) -> None:
    """Workers import pandas: they run this virtualenv's Python, not the first python3 on PATH."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def interpreter(values: pd.Series) -> pd.Series:
        import sys as worker_sys

        return values.map(lambda _: worker_sys.executable)

    rows = spark.range(1).select(interpreter("id").alias("python")).collect()
    assert rows[0].python == sys.executable


def test_an_idle_stream_looks_for_input_ten_times_a_second_not_a_hundred(spark) -> None:
    """Spark's 10 ms polling made each idle flow with a 0-second trigger list its input 100 times
    a second (a quarter to two thirds of a core per flow on 2 cores)."""
    assert spark.conf.get("spark.sql.streaming.pollingDelay") == POLLING_DELAY == "100ms"
