"""credit.ray on a local Ray cluster (2 CPUs, data in >= 4 blocks) gives the single-process results."""

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import credit
from conftest import ROOT

ray = pytest.importorskip("ray")
import credit.ray  # noqa: E402

REAL = ROOT / "fixtures" / "real"
KEYS = ["group_id", "traj_id", "step"]


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def same(got: pa.Table, want: pa.Table):
    got, want = got.sort_by([(k, "ascending") for k in KEYS]), want.sort_by([(k, "ascending") for k in KEYS])
    assert got.column_names == want.column_names
    for name in want.column_names:
        a, b = got.column(name), want.column(name)
        if pa.types.is_large_string(b.type) or pa.types.is_string(b.type):
            a, b = a.cast(pa.large_string()), b.cast(pa.large_string())
        assert a.equals(b), name


def logs_table(path):
    """The step rows of a log folder as one table (what a user would hand to Ray)."""
    return credit.read_logs(path).replace_schema_metadata(None)


def check(table: pa.Table, methods, preset):
    ds = ray.data.from_arrow(table).repartition(4)
    assert ds.materialize().num_blocks() >= 4
    want = credit.advantages(table, methods=methods, preset=preset)
    got = pa.concat_tables(
        [t for t in ray.get(credit.ray.advantages(ds, methods=methods, preset=preset).to_arrow_refs()) if t.num_rows],
        promote_options="permissive",
    )
    same(got, want.replace_schema_metadata(None))
    assert credit.ray.compare(ds, methods=methods, preset=preset) == credit.compare(table, methods=methods, preset=preset)


@pytest.mark.parametrize("preset", ["paper", "verl"])
def test_fixtures_group_local_methods(cluster, preset):
    # Group-local methods: sharded by group.
    check(logs_table(REAL), "grpo,drgrpo,rloo,gigpo,graphgpo", preset)


@pytest.mark.parametrize("preset", ["paper", "verl"])
def test_fixtures_all_methods(cluster, preset):
    # ProxMO and MGR read the whole iteration: sharded by iteration (one shard without one).
    check(logs_table(REAL), "all", preset)


def test_fixtures_analyze(cluster):
    table = logs_table(REAL)
    ds = ray.data.from_arrow(table).repartition(4)
    assert credit.ray.analyze(ds) == credit.analyze(table)


def test_200k_synthetic_log(cluster, tmp_path):
    rows = int(os.environ.get("CREDIT_RAY_ROWS", "200000"))
    out = tmp_path / "synth.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench" / "synth_scale.py"), "--rows", str(rows),
                    "--out", str(out), "--parquet", str(tmp_path / "synth.parquet")], check=True,
                   capture_output=True)
    table = pq.read_table(tmp_path / "synth.parquet")
    check(table, "grpo,gigpo,rloo", "verl")
    check(table, "all", "paper")


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """A small verl-style log (`uid`, `iteration`): 8 rollouts per group, 16 groups per iteration."""
    out = tmp_path_factory.mktemp("synth")
    subprocess.run([sys.executable, str(ROOT / "bench" / "synth_scale.py"), "--rows", "12000",
                    "--out", str(out / "synth.jsonl"), "--parquet", str(out / "synth.parquet")], check=True,
                   capture_output=True)
    return pq.read_table(out / "synth.parquet")


def crossing(monkeypatch):
    """The keys `credit.ray` found in two or more blocks or files, per call."""
    found = []
    real = credit.ray._crossing

    def record(uniques):
        keys = real(uniques)
        found.append(sorted(keys.to_pylist()))
        return keys

    monkeypatch.setattr(credit.ray, "_crossing", record)
    return found


def pieces(table: pa.Table, column: str, cut_group: bool):
    """`table` in 4 pieces along the values of `column` (as verl writes one file per iteration);
    with `cut_group`, the cut between the first two pieces falls inside a group instead."""
    values = pc.unique(table.column(column)).to_pylist()
    bounds = [values[len(values) * i // 4] for i in range(1, 4)]
    starts = [table.column(column).to_pylist().index(b) for b in bounds]
    if cut_group:
        group = table.column("uid")[starts[0]].as_py()
        starts[0] += table.column("uid").to_pylist().count(group) // 2
    starts = [0] + starts + [table.num_rows]
    return [table.slice(a, b - a) for a, b in zip(starts, starts[1:])]


def gathered(ds) -> pa.Table:
    tables = [t for t in ray.get(ds.to_arrow_refs()) if t.num_rows]
    return pa.concat_tables(tables, promote_options="permissive")


@pytest.mark.parametrize("methods,column", [("grpo,gigpo,rloo", "uid"), ("all", "iteration")])
@pytest.mark.parametrize("cut_group", [False, True])
def test_blocks_without_and_with_crossing_keys(cluster, monkeypatch, synth, methods, column, cut_group):
    # A block per piece; the unit's rows move only when a piece cuts one (a group cut in two also
    # cuts its iteration).
    found = crossing(monkeypatch)
    parts = pieces(synth, column, cut_group)
    ds = ray.data.from_arrow(parts)
    assert ds.num_blocks() == 4
    want = credit.advantages(synth, methods=methods, preset="verl").replace_schema_metadata(None)
    same(gathered(credit.ray.advantages(ds, methods=methods, preset="verl")), want)
    cut = parts[1].column(column)[0].as_py()
    assert found == [[cut] if cut_group else []]
    want = credit.compare(synth, methods=methods, preset="verl")
    assert credit.ray.compare(ds, methods=methods, preset="verl") == want


@pytest.mark.parametrize("methods,column", [("grpo,gigpo,rloo", "uid"), ("all", "iteration")])
@pytest.mark.parametrize("cut_group", [False, True])
def test_files_without_and_with_crossing_keys(cluster, monkeypatch, synth, tmp_path, methods, column,
                                              cut_group):
    # A Parquet file per piece, read in Rust by the Ray tasks; files sharing a key go to one task.
    found = crossing(monkeypatch)
    parts = pieces(synth, column, cut_group)
    for i, part in enumerate(parts):
        pq.write_table(part, tmp_path / f"part-{i}.parquet")
    want = credit.advantages(tmp_path, methods=methods, preset="verl").replace_schema_metadata(None)
    got = credit.ray.advantages(str(tmp_path), methods=methods, preset="verl", num_partitions=4)
    same(gathered(got), want)
    cut = parts[1].column(column)[0].as_py()
    assert found == [[cut] if cut_group else []]
