"""The benches' process comparison: interleaved pairs and their figures, on hand-written seconds."""

from __future__ import annotations


def test_pairs_alternate_who_runs_first(bench_script) -> None:
    harness = bench_script("harness")
    calls: list[tuple[str, int]] = []

    def plain(i: int) -> float:
        calls.append(("plain", i))
        return 10.0 + i

    def cli(i: int) -> float:
        calls.append(("cli", i))
        return 20.0 + i

    plains, clis = harness.interleaved(3, plain, cli)
    assert calls == [("plain", 0), ("cli", 0), ("cli", 1), ("plain", 1), ("plain", 2), ("cli", 2)]
    assert (plains, clis) == ([10.0, 11.0, 12.0], [20.0, 21.0, 22.0])  # each run's, in run order


def test_figures_are_medians_with_each_pairs_ratio_and_their_spread(bench_script) -> None:
    figures = bench_script("harness").process_figures([10.0, 12.0, 11.0], [8.0, 12.0, 10.0], rows=1000)
    # by hand: pairs 10/8 = 1.25, 12/12 = 1.0, 11/10 = 1.1; medians 11 s and 10 s; 2 cores
    assert figures == {
        "process_runs": 3,
        "plain_batch_process_seconds": 11.0,
        "cli_backfill_seconds": 10.0,
        "cli_backfill_ratio": 1.1,
        "cli_backfill_ratio_spread": [1.0, 1.25],
        "cli_backfill_ratio_pairs": [1.25, 1.0, 1.1],
        "plain_batch_process_seconds_all": [10.0, 12.0, 11.0],
        "cli_backfill_seconds_all": [8.0, 12.0, 10.0],
        "plain_batch_process_rows_per_s_per_core": 45.5,
        "cli_backfill_rows_per_s_per_core": 50.0,
    }
