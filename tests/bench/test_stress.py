"""A small seeded fault-injection run (``make stress N=100`` runs a large one): a real continuous
driver is SIGKILLed at random moments, some while a micro-batch is being committed, restarted,
and raced by backfills; every landed line and event must end exactly once where it belongs, and
every table must hold what an oracle of its own computes from the generator's record of what it
wrote (``bench/stress_oracle.py``, plain Python)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


@pytest.mark.slow
def test_random_kills_restarts_and_backfills_keep_every_event_exactly_once(
    spark, bench_script, tmp_path: Path
) -> None:
    stress = bench_script("stress")
    figures = stress.stress(
        spark, str(tmp_path / "lake"), steps=5, seed=3, events_per_hour=120, progress=True
    )
    assert figures.violations == []
    assert figures.kills >= 1 and figures.kills_in_flight >= 1, figures
    assert figures.restarts >= 2 and figures.backfills >= 1, figures
    assert figures.silver_rows > 0 and figures.silver_quarantined > 0, figures
    assert figures.gold_windows > 0 and figures.gold_devices > 0, figures


ORACLE = Path(__file__).parents[2] / "bench" / "stress_oracle.py"
# what the oracle must not use: the platform, the reference pipelines, or any engine of theirs
PLATFORM = ("lakehouse", "pipelines", "pyspark", "delta", "deltalake", "great_expectations", "polars")


def test_the_stress_oracle_owes_nothing_to_the_platform() -> None:
    """The stress run's truth is computed in plain Python from the generator's record: an import
    of the platform, its pipelines or their engines (also through ``importlib``) would let a bug
    of the platform agree with itself."""
    tree = ast.parse(ORACLE.read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported, "the oracle's imports were not found"
    assert not [name for name in imported if name.split(".")[0] in PLATFORM], imported
    assert "importlib" not in imported and "__import__" not in ORACLE.read_text()
