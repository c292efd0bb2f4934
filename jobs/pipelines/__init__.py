"""Pipelines: each sub-package declares one pipeline in its ``pipeline.py`` (see README, "Add a pipeline")."""
