"""The platform inside the Airflow UI: an Airflow plugin (``plugin``) registered through the
``airflow.plugins`` entry point (pyproject.toml)."""
