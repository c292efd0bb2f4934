"""The kind of flow of one's own in docs/extending.md, run for real: its module is
``union_flow.py`` beside this test, which the page shows verbatim. Streamed to completion and
backfilled over a slice, in two lakes, against the rows the test landed."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakehouse.core.lake import Lake
from lakehouse.flows import kind_of
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.spec import Ingest, JsonFiles, Pipeline, StreamingTable

HERE = Path(__file__).resolve().parent
PAGE = HERE.parents[2] / "docs" / "extending.md"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
SCHEMA = "id STRING NOT NULL, ts TIMESTAMP NOT NULL, amount DOUBLE"


def test_the_page_shows_the_module_as_it_is() -> None:
    block = re.search(r"<!-- file: union_flow.py -->\n```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert block, "docs/extending.md shows no union_flow.py"
    assert block.group(1) == (HERE / "union_flow.py").read_text()


@pytest.fixture
def regions(monkeypatch: pytest.MonkeyPatch) -> Pipeline:
    monkeypatch.syspath_prepend(str(HERE))  # the module importable as a user's would be
    return Pipeline(
        name="sales",
        tables=[
            *(Ingest(f"bronze.{r}", source=JsonFiles(schema=SCHEMA), event_time="ts") for r in ("eu", "us")),
            StreamingTable(
                "gold.all_sales",
                upstreams=["bronze.eu", "bronze.us"],
                event_time="ts",
                flow="union_flow:UnionFlow",
            ),
        ],
    )


def land(lake: Lake, region: str, rows: list[tuple[str, int, float]]) -> None:
    folder = Path(lake.root) / "landing" / "sales" / region
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"id": i, "ts": (T0 + timedelta(hours=h)).isoformat(), "amount": a}) for i, h, a in rows
    ]
    (folder / "part-0.json").write_text("\n".join(lines) + "\n")


LANDED = {
    "eu": [("e1", 1, 10.0), ("e2", 5, 20.0), ("e3", 30, 5.5)],
    "us": [("u1", 2, 7.0), ("u2", 29, 1.0)],
}


def expected(within: Slice) -> list[tuple[str, str, float]]:
    """The test's own record: every landed row in ``within``, with its table."""
    return sorted(
        (i, f"bronze.{r}", a)
        for r, rows in LANDED.items()
        for i, h, a in rows
        if (within.start is None or T0 + timedelta(hours=h) >= within.start)
        and (within.end is None or T0 + timedelta(hours=h) < within.end)
    )


def test_a_kind_of_ones_own_streams_and_backfills_as_the_table_names_it(spark, regions, tmp_path) -> None:
    gold = regions.table("gold.all_sales")
    assert type(kind_of(gold)).__name__ == "UnionFlow" and gold.transform is None
    streamed, backfilled = Lake(str(tmp_path / "streamed")), Lake(str(tmp_path / "backfilled"))
    for lake in (streamed, backfilled):
        for region, rows in LANDED.items():
            land(lake, region, rows)

    def held(lake: Lake) -> list[tuple[str, str, float]]:
        rows = spark.read.format("delta").load(lake.table(gold.name)).collect()
        return sorted((r.id, r.region, r.amount) for r in rows)

    with StreamRunner(spark, streamed, regions) as runner:
        runner.run_incremental(regions.ordered())
    assert held(streamed) == expected(ALL_TIME)

    day_one = Slice(T0, T0 + timedelta(days=1))
    backfill(spark, backfilled, regions, ALL_TIME, flows=["bronze.eu", "bronze.us"])
    backfill(spark, backfilled, regions, day_one, flows=["gold.all_sales"])
    assert held(backfilled) == expected(day_one)
    backfill(spark, backfilled, regions, ALL_TIME, flows=["gold.all_sales"])
    assert held(backfilled) == held(streamed)  # stream = batch
