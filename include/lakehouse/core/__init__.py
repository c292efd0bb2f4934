"""The bottom layer, Spark-free (Airflow parses DAGs with it): ``config`` (settings), ``lake``
(paths), ``times``, ``errors``, ``processes``."""
