"""credit.ray on a local Ray cluster (2 CPUs, data in >= 4 blocks) gives the single-process results."""

import os
import subprocess
import sys

import pyarrow as pa
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
