"""bench.partitions' pure helpers: balanced run ids, inputs per partition, the aggregate row and its table."""

from __future__ import annotations

import pytest

from bench.partitions import (
    Process,
    Row,
    balanced_runs,
    cpu_bound,
    inputs_per_partition,
    make_row,
    median_row,
    ratio,
    run_of,
    table,
    trial_order,
)
from bernstein.schemas.partitioning import partition_for


def test_balanced_runs_sit_in_turn_on_every_partition() -> None:
    runs = balanced_runs("bench-run", 4, 4)
    assert len(runs) == 16 and len(set(runs)) == 16
    assert [partition_for(run.encode(), 4) for run in runs] == [0, 1, 2, 3] * 4


@pytest.mark.parametrize("divisor", [1, 2, 4])
def test_balanced_runs_are_balanced_for_every_divisor(divisor: int) -> None:
    runs = balanced_runs("x", 4, 3)
    per = [0] * divisor
    for run in runs:
        per[partition_for(run.encode(), divisor)] += 1
    assert per == [12 // divisor] * divisor


def test_balanced_runs_are_deterministic_and_take_the_first_fitting_candidates() -> None:
    runs = balanced_runs("p", 2, 1)
    assert runs == balanced_runs("p", 2, 1)
    first = {p: next(f"p-{n}" for n in range(100) if partition_for(f"p-{n}".encode(), 2) == p) for p in (0, 1)}
    assert runs == [first[0], first[1]]


def test_balanced_runs_refuse_nothing_to_balance() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        balanced_runs("p", 0, 1)
    with pytest.raises(ValueError, match="one run per partition"):
        balanced_runs("p", 2, 0)


def test_inputs_per_partition_follow_run_of() -> None:
    runs = balanced_runs("bench-run", 4, 4)
    for count in (16, 40_000, 40_007):
        for partitions in (1, 2, 4):
            expected = [0] * partitions
            for i in range(count):
                expected[partition_for(run_of(runs, i).encode(), partitions)] += 1
            assert inputs_per_partition(runs, count, partitions) == expected
    assert inputs_per_partition(runs, 40_000, 4) == [10_000] * 4
    assert inputs_per_partition(runs, 40_007, 4) == [10_002, 10_002, 10_002, 10_001]


def test_make_row_aggregates_over_the_longest_span() -> None:
    row = make_row(2, [Process(1000, 0.5, 0.1, 90.0), Process(3000, 2.0, 0.2, 95.0)], 0.4, (1.5, 1.0, 0.5))
    assert (row.partitions, row.processes, row.records, row.seconds) == (2, 2, 4000, 2.0)
    assert row.aggregate == 2000.0
    assert row.per_process == (2000.0, 1500.0)
    assert row.per_process_mean == 1750.0
    assert row.scheduler_cpu_seconds == pytest.approx(0.3)
    assert row.cores_busy == pytest.approx(0.35)


def _row(partitions: int, records: int, seconds: float) -> Row:
    return make_row(partitions, [Process(records, seconds, 0.0, 0.0)], None, (0.0, 0.0, 0.0))


def test_ratio_is_the_median_of_the_per_trial_ratios() -> None:
    trials = [
        {1: _row(1, 1000, 1.0), 4: _row(4, 1500, 1.0)},  # 1.5
        {1: _row(1, 500, 1.0), 4: _row(4, 1000, 1.0)},  # 2.0
        {1: _row(1, 2000, 1.0), 4: _row(4, 1000, 1.0)},  # 0.5
    ]
    assert ratio(trials, 4, 1) == 1.5


def test_table_has_a_header_a_rule_and_a_row_per_k() -> None:
    rows = [
        make_row(1, [Process(40_000, 4.0, 3.0, 100.0)], 2.0, (3.25, 2.0, 1.0)),
        make_row(4, [Process(10_000, 2.0, 1.0, 100.0)] * 4, None, (4.0, 2.0, 1.0)),
    ]
    lines = table(rows)
    assert len(lines) == 4
    assert lines[0].split("|")[1].strip() == "partitions"
    assert set(lines[1]) == {"|", "-", ":"}
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert cells == ["1", "1", "40000", "4.00", "10000", "10000", "75", "50", "1.25", "3.25"]
    cells = [cell.strip() for cell in lines[3].strip("|").split("|")]
    assert cells == ["4", "4", "40000", "2.00", "20000", "5000", "100", "-", "-", "4.00"]
    assert len({len(line) for line in lines}) == 1


def test_cpu_bound_is_the_cores_over_the_cpu_per_record() -> None:
    row = make_row(1, [Process(10_000, 1.0, 0.8, 0.0)], 0.7, (0.0, 0.0, 0.0))  # 150 us per record
    assert cpu_bound(row, 2) == pytest.approx(2 / 150e-6)
    assert cpu_bound(make_row(1, [Process(10_000, 1.0, 0.8, 0.0)], None, (0.0, 0.0, 0.0)), 2) is None


def test_trial_order_alternates() -> None:
    assert [trial_order([1, 2, 4], t) for t in range(3)] == [[1, 2, 4], [4, 2, 1], [1, 2, 4]]


def test_median_row_takes_the_middle_trial_of_each_k() -> None:
    trials = [{1: _row(1, n, 1.0)} for n in (300, 100, 200, 400)]
    assert median_row(trials, 1).records == 200
    assert median_row(trials[:3], 1).records == 200
