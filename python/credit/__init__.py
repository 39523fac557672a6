"""credit: credit assignment diagnostics for multi-turn LLM-agent RL, from Python.

The same ingest, methods and analyses as the `credit` command line, over Arrow tables:

    import credit
    logs = credit.read_logs("fixtures/real")                       # pyarrow.Table
    adv = credit.advantages("fixtures/real", methods="grpo,gigpo", preset="verl",
                            params={"gigpo.omega": 0.5})           # as `credit advantages … -o`
    summary = credit.analyze("fixtures/real")                      # as `credit analyze --format json`
    cmp = credit.compare(logs, methods="all")                      # as `credit compare --format json`
    figures = credit.metrics(batch_rows, preset="verl")            # summary.json's headline, flat

`data` is a path, a list of paths (files or folders: JSONL, .jsonl.gz, .jsonl.zst, Parquet), or a
table: a pyarrow.Table, a polars or pandas DataFrame, or anything with `__arrow_c_stream__`.
Parameters are the CLI's `--set` keys: `params={"gigpo.omega": 0.5, "gamma": 0.9}` (`gamma`,
`invalid_penalty` and `seed` without a method apply to every method that has them, as the
`--gamma`, `--invalid-penalty`, `--seed` flags do). Keywords left out take `credit.toml`'s values
(the project file of the working folder, read as the CLI reads it), else the CLI's defaults: a
notebook and the CLI in the same folder give the same numbers. Errors raise `credit.CreditError` (a
`ValueError`) with the CLI's message (file, line or row, column; a table is named `<table>`, its
rows 0-based) and, for bad input, the `location` dict and `reason` of the CLI's JSON error.

Results carry the preset, every parameter and the notes in the Arrow schema metadata (as the CLI's
Parquet output does); `credit.metadata(table)` reads them back. `polars.from_arrow` and
`Table.to_pandas` drop schema metadata: read it from the pyarrow table first.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any, Mapping, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.parquet as pq

from credit import _credit
from credit._credit import CreditError, __version__

__all__ = [
    "CreditError", "read_logs", "advantages", "analyze", "compare", "report", "metrics", "metadata",
    "__version__",
]

# Errors raised before any input is read (a bad argument) have no location either.
CreditError.location = None
CreditError.reason = None

Data = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]], Any]
Schema = Union[None, str, "os.PathLike[str]", Mapping[str, str]]


def _source(data: Data) -> Any:
    if isinstance(data, (str, os.PathLike)):
        return [os.fspath(data)]
    if isinstance(data, (list, tuple)) and all(isinstance(p, (str, os.PathLike)) for p in data):
        return [os.fspath(p) for p in data]
    if not hasattr(data, "__arrow_c_stream__"):
        raise TypeError(
            "expected a path, a list of paths, or a table (pyarrow.Table, polars.DataFrame, "
            f"pandas.DataFrame, …), got {type(data).__name__}"
        )
    return data if isinstance(data, pa.Table) else pa.table(data)


@contextlib.contextmanager
def _input(data: Data):
    """The paths the engine reads: a table is written to a temporary Parquet file (pyarrow's
    writer keeps every Arrow type as the CLI would find it in a Parquet log), and named `<table>`
    in error messages."""
    source = _source(data)
    if not isinstance(source, pa.Table):
        yield source
        return
    with tempfile.TemporaryDirectory(prefix="credit-py-") as folder:
        path = os.path.join(folder, "table.parquet")
        pq.write_table(source, path, compression="none")
        try:
            yield [path]
        except CreditError as err:
            renamed = CreditError(str(err).replace(path, "<table>"))
            renamed.location = err.location
            if isinstance(renamed.location, dict) and renamed.location.get("path") == path:
                renamed.location = {**renamed.location, "path": "<table>"}
            renamed.reason = err.reason
            raise renamed from None


def _schema(schema: Schema) -> dict:
    if schema is None:
        return {}
    if isinstance(schema, (str, os.PathLike)):
        return {"schema_file": os.fspath(schema)}
    return {"columns": [(str(k), str(v)) for k, v in dict(schema).items()]}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _params(params: Optional[Mapping[str, Any]]) -> list:
    return [(str(k), _text(v)) for k, v in (params or {}).items()]


def _methods(methods: Union[None, str, Sequence[str]]) -> Optional[str]:
    if methods is None or isinstance(methods, str):
        return methods
    return ",".join(methods)


def _options(methods, preset, params, schema, lenient, success_threshold) -> dict:
    """The keywords every run of the engine takes, as the public functions name them."""
    return dict(
        methods=_methods(methods),
        preset=preset,
        params=_params(params),
        lenient=lenient,
        success_threshold=success_threshold,
        **_schema(schema),
    )


def _table(result: Any, metadata: Optional[str] = None) -> pa.Table:
    table = pa.table(result)
    if metadata is not None:
        table = table.replace_schema_metadata({"credit": metadata})
    return table


def metadata(table: pa.Table) -> dict:
    """What credit wrote into a result's schema metadata, as a dict: the preset, every method's
    parameters, the version and the notes (`advantages`), or ingest's notes and report
    (`read_logs`). Read it from the pyarrow table: `polars.from_arrow` and `to_pandas` drop it."""
    raw = (table.schema.metadata or {}).get(b"credit")
    if raw is None:
        raise CreditError("this table carries no credit metadata (was it converted, e.g. by polars?)")
    return json.loads(raw)


def read_logs(
    paths: Data,
    *,
    schema: Schema = None,
    lenient: bool = False,
    success_threshold: Optional[float] = None,
) -> pa.Table:
    """The logs as credit reads them: one row per step, canonical column names (`group_id`,
    `traj_id`, `step`, `reward`, …, after aliases and `schema`), rows in input order. Ingest's
    notes and report are in the schema metadata under `credit` (JSON)."""
    with _input(paths) as source:
        table, meta = _credit.read_logs(
            source, lenient=lenient, success_threshold=success_threshold, **_schema(schema)
        )
    return _table(table, meta)


def advantages(
    data: Data,
    methods: Union[None, str, Sequence[str]] = None,
    preset: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    *,
    schema: Schema = None,
    lenient: bool = False,
    success_threshold: Optional[float] = None,
) -> pa.Table:
    """Per-step advantages, as `credit advantages DATA --methods METHODS --preset PRESET
    --set K=V … -o out.parquet` writes them: `group_id`, `traj_id`, `step` (and `iteration`), then
    every method's columns, rows in input order. The metadata the CLI writes into the Parquet file
    is in the table's schema metadata under `credit` (JSON text)."""
    with _input(data) as source:
        table, meta = _credit.advantages(
            source,
            **_options(methods, preset, params, schema, lenient, success_threshold),
        )
    return _table(table, meta)


def analyze(
    data: Data,
    *,
    preset: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    schema: Schema = None,
    lenient: bool = False,
    success_threshold: Optional[float] = None,
) -> dict:
    """What is in the logs: the JSON of `credit analyze --format json`, as a dict. `preset` and
    `params` (`hisr.*`) only choose how HISR's segment statistics segment the logs."""
    with _input(data) as source:
        text = _credit.analyze(
            source,
            preset=preset,
            params=_params(params),
            lenient=lenient,
            success_threshold=success_threshold,
            **_schema(schema),
        )
    return json.loads(text)


def compare(
    data: Data,
    methods: Union[None, str, Sequence[str]] = None,
    preset: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    *,
    schema: Schema = None,
    lenient: bool = False,
    success_threshold: Optional[float] = None,
) -> dict:
    """The methods side by side: the JSON of `credit compare --format json`, as a dict."""
    with _input(data) as source:
        _, text = _credit.compare_logs(
            source,
            **_options(methods, preset, params, schema, lenient, success_threshold),
        )
    return json.loads(text)


def report(
    data: Data,
    out: Union[str, "os.PathLike[str]"],
    methods: Union[None, str, Sequence[str]] = None,
    preset: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    *,
    check: Union[None, str, "os.PathLike[str]"] = None,
    baseline: Union[None, str, "os.PathLike[str]", Mapping[str, Any]] = None,
    explore: Sequence[str] = (),
    explore_max: int = 12,
    schema: Schema = None,
    lenient: bool = False,
    success_threshold: Optional[float] = None,
) -> dict:
    """`credit report DATA --out OUT`: writes report.html, report.md, summary.json and figures/
    into the folder `out` (new, empty, or credit's own earlier report: the CLI's output rule) and
    returns summary.json as a dict. `check` is a thresholds file (its outcome is `["checks"]`,
    `passed` False when a rule fails); `baseline` an earlier summary.json (a path or the dict)."""
    if baseline is not None and not isinstance(baseline, Mapping):
        with open(os.fspath(baseline), encoding="utf-8") as f:
            baseline = json.load(f)
    with _input(data) as source:
        text = _credit.report(
            source,
            os.fspath(out),
            check=None if check is None else os.fspath(check),
            baseline=None if baseline is None else json.dumps(baseline),
            explore=list(explore),
            explore_max=explore_max,
            **_options(methods, preset, params, schema, lenient, success_threshold),
        )
    return json.loads(text)


def metrics(
    batch: Any,
    methods: Union[None, str, Sequence[str]] = None,
    preset: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    *,
    schema: Schema = None,
    lenient: bool = False,
    success_threshold: Optional[float] = None,
) -> dict:
    """The report's headline figures on these rows as flat keys for a trainer's logger (verl's
    `Tracking`: wandb, tensorboard, console): `credit/singleton_step_share`,
    `credit/degenerate_group_share`, `credit/invalid_positive_share/<method>`,
    `credit/spearman/<a>~<b>`, … — the numbers of `credit.report(batch, …)["headline"]` (and its
    `compare.pairwise` ρ), computed by the same code; figures these rows do not have (the
    headline's `not_applicable`) are left out. `batch` is a table of step rows (as `data`
    elsewhere, paths too), a dict of columns, or a list of row dicts (verl-agent's batch fields:
    `integrations/verl_agent_dump.py`'s `metrics_from_batch` builds them from its `DataProto`)."""
    if isinstance(batch, Mapping):
        batch = pa.table(dict(batch))
    elif isinstance(batch, list) and batch and isinstance(batch[0], Mapping):
        batch = pa.Table.from_pylist(batch)
    with _input(batch) as source:
        text = _credit.metrics(
            source, **_options(methods, preset, params, schema, lenient, success_threshold)
        )
    return json.loads(text)
