"""`import credit` against the `credit` command line: same results bit for bit, same errors."""

import json
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import credit
from conftest import ROOT

FIXTURES = ROOT / "fixtures"
REAL = FIXTURES / "real"
# Every fixture log the CLI reads (good and bad ones): results or errors must match.
LOGS = sorted(
    [REAL, FIXTURES / "verl" / "with_uid", FIXTURES / "verl" / "without_uid"]
    + [p for p in (FIXTURES / "formats").iterdir() if p.suffix != ".toml"]
    + sorted((FIXTURES / "spec").iterdir())
    + sorted((FIXTURES / "bad").iterdir()),
    key=str,
)


def bits(v):
    """A value compared bit for bit (floats by their IEEE bits, so NaN == NaN and 0.0 != -0.0)."""
    return struct.pack("<d", v) if isinstance(v, float) else v


def assert_same_table(got: pa.Table, want: pa.Table):
    assert got.column_names == want.column_names
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        a, b = got.column(name), want.column(name)
        if pa.types.is_string(b.type) or pa.types.is_large_string(b.type) or pa.types.is_string_view(b.type):
            a, b = a.cast(pa.large_string()), b.cast(pa.large_string())
        assert a.type == b.type, name
        assert [bits(x) for x in a.to_pylist()] == [bits(x) for x in b.to_pylist()], name


def cli_advantages(cli, tmp_path, source, *flags):
    out = tmp_path / "cli.parquet"
    run = cli("advantages", source, *flags, "-o", out, check=False)
    if run.returncode != 0:
        return None, run.stderr.strip().removeprefix("error: ")
    return pq.read_table(out), json.loads(pq.ParquetFile(out).metadata.metadata[b"credit"])


@pytest.mark.parametrize("preset", ["paper", "verl"])
@pytest.mark.parametrize("log", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_advantages_match_the_cli(cli, tmp_path, log, preset):
    want, meta = cli_advantages(cli, tmp_path, log, "--methods", "all", "--preset", preset)
    if want is None:  # the CLI refuses this log: the package raises the same message
        with pytest.raises(credit.CreditError) as err:
            credit.advantages(log, methods="all", preset=preset)
        assert str(err.value) == meta
        return
    got = credit.advantages(log, methods="all", preset=preset)
    assert_same_table(got, want)
    assert json.loads(got.schema.metadata[b"credit"]) == meta


def test_parameters_are_the_cli_set_keys(cli, tmp_path):
    flags = ["--methods", "grpo,gigpo,mgr", "--set", "gigpo.omega=0.25", "--gamma", "0.9",
             "--set", "mgr.seed=7"]
    want, meta = cli_advantages(cli, tmp_path, REAL, *flags)
    got = credit.advantages(REAL, methods=["grpo", "gigpo", "mgr"],
                            params={"gigpo.omega": 0.25, "gamma": 0.9, "mgr.seed": 7})
    assert_same_table(got, want)
    assert json.loads(got.schema.metadata[b"credit"]) == meta


def test_tables_in_give_the_same_results(tmp_path):
    """A pyarrow table (and a polars DataFrame) of the log gives what the file gives."""
    for name in ["textworld.parquet", "sokoban.with-obs.parquet"]:
        path = FIXTURES / "formats" / name
        table = pq.read_table(path)
        want = credit.advantages(path, preset="verl")
        assert_same_table(credit.advantages(table, preset="verl"), want)
        assert credit.compare(table) == credit.compare(path)
        summary = credit.analyze(table)
        assert summary == credit.analyze(path)
        try:
            import polars as pl
        except ImportError:
            continue
        assert_same_table(credit.advantages(pl.read_parquet(path), preset="verl"), want)


@pytest.mark.parametrize("command", ["analyze", "compare"])
@pytest.mark.parametrize("log", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_analyses_match_the_cli_json(cli, log, command):
    flags = ["--methods", "all"] if command == "compare" else []
    run = cli(command, log, *flags, "--format", "json", check=False)
    kwargs = {"methods": "all"} if flags else {}
    if run.returncode != 0:  # `--format json` errors are JSON too: the same message
        with pytest.raises(credit.CreditError) as err:
            getattr(credit, command)(log, **kwargs)
        assert str(err.value) == json.loads(run.stderr)["error"]["message"]
        return
    assert getattr(credit, command)(log, **kwargs) == json.loads(run.stdout)


def test_read_logs_gives_canonical_columns():
    logs = credit.read_logs(REAL)
    assert logs.num_rows == 1482
    assert logs.column_names[:4] == ["group_id", "traj_id", "step", "reward"]


def test_bad_inputs_raise_with_locations(cli):
    bad = FIXTURES / "bad" / "wrong-type.jsonl"
    with pytest.raises(credit.CreditError) as err:
        credit.advantages(bad)
    assert str(err.value) == cli("advantages", bad, "-o", "/tmp/x.parquet", check=False).stderr.strip().removeprefix("error: ")
    assert f"{bad}:2:" in str(err.value) and "(reward)" in str(err.value)
    # A table names itself `<table>`, with the row and the column.
    table = pq.read_table(FIXTURES / "bad" / "wrong-type.parquet")
    with pytest.raises(credit.CreditError) as err:
        credit.analyze(table)
    assert "<table>" in str(err.value) and "row" in str(err.value), str(err.value)
    with pytest.raises(credit.CreditError, match="unknown method `gipgo`") as err:
        credit.advantages(REAL, params={"gipgo.omega": 0.5})
    assert err.value.location is None and err.value.reason is None
    with pytest.raises(credit.CreditError, match="unknown preset"):
        credit.advantages(REAL, preset="verl-agent")
    with pytest.raises(TypeError):
        credit.advantages(42)


def test_errors_are_value_errors_with_the_cli_json_location_and_reason(cli):
    bad = FIXTURES / "bad" / "wrong-type.jsonl"
    want = json.loads(cli("analyze", bad, "--format", "json", check=False).stderr)["error"]
    with pytest.raises(ValueError) as err:
        credit.analyze(bad)
    assert isinstance(err.value, credit.CreditError)
    assert err.value.location == want["location"]
    assert err.value.reason == want["reason"]
    assert want["location"]["line"] == 2 and want["location"]["field"] == "reward"
    # A table's location names `<table>`, as its message does.
    with pytest.raises(credit.CreditError) as err:
        credit.analyze(pq.read_table(FIXTURES / "bad" / "wrong-type.parquet"))
    assert err.value.location["path"] == "<table>"
    assert err.value.reason == want["reason"]


def test_metadata_reads_back_the_preset_and_parameters(cli, tmp_path):
    _, meta = cli_advantages(cli, tmp_path, REAL, "--methods", "grpo,gigpo", "--preset", "verl")
    table = credit.advantages(REAL, methods="grpo,gigpo", preset="verl")
    got = credit.metadata(table)
    assert got == meta
    assert got["preset"] == "verl" and "gigpo" in got["params"]
    # Converting drops schema metadata: said plainly, not a KeyError.
    with pytest.raises(credit.CreditError, match="no credit metadata"):
        credit.metadata(table.replace_schema_metadata(None))
    # read_logs' options are keyword-only, like the other functions'.
    with pytest.raises(TypeError):
        credit.read_logs(REAL, None, True)


def test_report_writes_what_the_cli_writes(cli, tmp_path):
    rules = ROOT / "fixtures" / "thresholds.toml"
    cli("report", REAL, "--preset", "verl", "--out", tmp_path / "cli", "--check", rules)
    got = credit.report(REAL, tmp_path / "py", preset="verl", check=rules)
    want = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert got == json.loads((tmp_path / "py" / "summary.json").read_text())
    for key in ["headline", "analyze", "compare", "checks"]:
        assert got[key] == want[key], key
    assert got["checks"]["passed"] is True
    for name in ["report.html", "report.md", "figures/success.png"]:
        assert (tmp_path / "py" / name).stat().st_size > 0, name
    # The output rule holds here too: never into the logs' folder.
    with pytest.raises(credit.CreditError, match="credit never writes over, into or around its inputs"):
        credit.report(REAL, REAL)



def assert_metrics_are_the_headline(metrics, summary):
    """`credit.metrics` against a report's summary.json: every headline figure that applies,
    every per-method figure, every pair's ρ, nothing else."""
    headline = summary["headline"]
    skipped = {key.removeprefix("headline.") for key in headline.get("not_applicable", {})}
    want = {}
    for key, value in headline.items():
        if key in skipped or key == "not_applicable":
            continue
        if isinstance(value, dict):
            want.update({f"credit/{key}/{m}": v for m, v in value.items()})
        elif value is not None:
            want[f"credit/{key}"] = value
    for pair in summary["compare"]["pairwise"]:
        if pair["spearman"] is not None:
            want[f"credit/spearman/{pair['a']}~{pair['b']}"] = pair["spearman"]
    assert metrics == pytest.approx(want, rel=0, abs=0)
    assert all(isinstance(v, float) for v in metrics.values())


@pytest.mark.parametrize("log", [REAL, FIXTURES / "verl" / "with_uid"], ids=["real", "verl"])
def test_metrics_are_the_report_headline(tmp_path, log):
    summary = credit.report(log, tmp_path / "report", preset="verl")
    assert_metrics_are_the_headline(credit.metrics(log, preset="verl"), summary)
    # A table of the same rows gives the same figures. (Methods named: a single-turn dump's
    # defaults are told from its raw columns, which the canonical table no longer has.)
    methods = "grpo,drgrpo,rloo"
    assert credit.metrics(credit.read_logs(log), methods, preset="verl") == credit.metrics(
        log, methods, preset="verl"
    )
    assert "credit/spearman/grpo~gigpo" in credit.metrics(REAL, preset="verl")


def test_metrics_from_a_verl_agent_batch(tmp_path):
    """`metrics_from_batch` on a batch shaped like verl-agent's `DataProto` (as tests/verl.rs
    builds it): the figures of the report on the rows `dump_steps` writes from it."""
    import sys

    sys.path.insert(0, str(ROOT / "integrations"))
    from verl_agent_dump import dump_steps, metrics_from_batch

    class Batch:
        def __init__(self, batch, non_tensor_batch):
            self.batch, self.non_tensor_batch = batch, non_tensor_batch

    class Tokenizer:
        def batch_decode(self, ids, skip_special_tokens=True):
            return ["text " + " ".join(str(t) for t in row) for row in ids]

    lengths = {"t1": 3, "t2": 2, "t3": 1, "t4": 2}
    group = {"t1": "g1", "t2": "g1", "t3": "g2", "t4": "g2"}
    won = {"t1": True, "t2": False, "t3": True, "t4": False}
    rows = [(t, k) for t in ["t1", "t2", "t3", "t4"] for k in range(lengths[t])]
    nt = {
        "uid": [group[t] for t, _ in rows],
        "traj_uid": [t for t, _ in rows],
        "anchor_obs": [f"room {k} of {group[t]}" for t, k in rows],
        "rewards": [10.0 if won[t] and k == lengths[t] - 1 else 0.0 for t, k in rows],
        "is_action_valid": [k != 1 for t, k in rows],
        "episode_rewards": [10.0 if won[t] else 0.0 for t, _ in rows],
        "episode_lengths": [float(lengths[t]) for t, _ in rows],
        "data_source": ["alfworld" for _ in rows],
    }
    batch = Batch({"prompts": [[1, 2]] * len(rows), "responses": [[k, 7] for _, k in rows]}, nt)
    got = metrics_from_batch(batch, Tokenizer(), 5, methods="grpo,gigpo,mgr", preset="verl")
    path = dump_steps(batch, Tokenizer(), 5, tmp_path / "logs")
    summary = credit.report(path, tmp_path / "report", methods="grpo,gigpo,mgr", preset="verl")
    assert_metrics_are_the_headline(got, summary)
    assert got["credit/rows"] == len(rows)
    assert "credit/invalid_positive_share/mgr" in got
