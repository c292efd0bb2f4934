"""The plan layer: what a flow computes, before anything runs. ``flow`` (a flow's DataFrame
plan), ``generators`` (test data into a source), ``changes`` (change-feed rows), ``purity``
(transforms kept pure); the source kinds are in ``lakehouse.sources``."""
