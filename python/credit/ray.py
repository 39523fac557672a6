"""credit on a Ray cluster: advantages sharded by group, analyses gathered exactly.

    import ray, credit.ray
    ray.init()
    ds = ray.data.read_parquet("/shared/logs/")           # any Dataset of step rows
    adv = credit.ray.advantages(ds, methods="all", preset="verl")   # a ray.data.Dataset
    adv.write_parquet("/shared/advantages/")
    cmp = credit.ray.compare(ds, methods="grpo,gigpo,proxmo")      # == credit.compare(...)
    summary = credit.ray.analyze(ds)                               # == credit.analyze(...)

How it shards: the dataset is hash-partitioned by the unit every planned method needs whole —
the group (`group_id` or its alias, e.g. verl's `uid`) when every method is group-local (grpo,
drgrpo, rloo, gigpo, hgpo, graphgpo), else the training iteration (`iteration`: ProxMO, MGR, SPA,
HISR and EMPG read the whole batch of an iteration; without an `iteration` column the whole log is
one shard). Each partition is one block (what `GroupedData.map_groups` relies on), and each block
goes through the same Rust code as `credit.advantages` in one call, so the per-row results are the
single-process ones, bit for bit. Rows come back in no particular order (sort by the keys).

`compare` runs the methods on the shards too and gathers only what a comparison keeps per row (a
few bytes plus 8 per method), put back in the dataset's row order: rank correlations and
quantiles are then computed exactly on the driver, and equal the single-process figures.
`analyze` gathers the rows to the driver in the dataset's order and summarises them there (the
per-window summary parts of the Rust core are not serialisable yet; see docs/python.md).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence, Union

import pyarrow as pa

import credit
from credit import _credit

_ROW = "__credit_row"


def _key(ds: Any, unit: str, schema: Optional[Mapping[str, str]]) -> Optional[str]:
    """The column of `ds` that feeds `group_id` (or `iteration`), as ingest would pick it."""
    field = "group_id" if unit == "group" else "iteration"
    names = ds.schema().names
    if isinstance(schema, Mapping):
        for source, target in schema.items():
            if target == field and source in names:
                return source
    for name in _credit.aliases(field):
        if name in names:
            return name
    if unit == "group":
        raise credit.CreditError(
            f"no group column in the dataset (looked for {', '.join(_credit.aliases(field))}); "
            "pass key= or schema={'my_column': 'group_id'}"
        )
    return None


def _shuffled(ds: Any, key: Optional[str], num_partitions: Optional[int]) -> Any:
    """`ds` with every value of `key` in one block (as `map_groups` shuffles it)."""
    import ray
    from ray.data.context import ShuffleStrategy

    if key is None:
        return ds.repartition(1)
    # Default: two partitions per CPU of the cluster (Ray's own default is 200).
    n = num_partitions or max(2, min(200, 2 * int(ray.cluster_resources().get("CPU", 1))))
    strategy = ds.context.shuffle_strategy
    hashed = tuple(
        getattr(ShuffleStrategy, s) for s in ("HASH_SHUFFLE", "SHUFFLE_V2", "GPU_SHUFFLE")
        if hasattr(ShuffleStrategy, s)
    )
    if strategy in hashed:
        return ds.repartition(n, keys=[key])
    return ds.sort(key)


def _common(methods, preset, params, schema, lenient, success_threshold) -> dict:
    return dict(
        methods=credit._methods(methods),
        preset=preset,
        params=credit._params(params),
        lenient=lenient,
        success_threshold=success_threshold,
        **credit._schema(schema),
    )


def _advantages_block(block: pa.Table, kwargs: dict) -> pa.Table:
    if block.num_rows == 0:
        return block.slice(0, 0).select([])
    with credit._input(block) as source:
        table, _meta = _credit.advantages(source, **kwargs)
    return pa.table(table)


def advantages(
    ds: Any,
    methods: Union[None, str, Sequence[str]] = "all",
    preset: str = "paper",
    params: Optional[Mapping[str, Any]] = None,
    *,
    key: Optional[str] = None,
    num_partitions: Optional[int] = None,
    schema: Any = None,
    lenient: bool = False,
    success_threshold: float = 0.5,
) -> Any:
    """`credit.advantages` over a `ray.data.Dataset` (or a path / list of Parquet paths): a
    Dataset with the same columns and, row for row, the same values; rows in no particular order."""
    ds = _dataset(ds)
    unit, _labels = _credit.plan_info(
        "advantages", methods=credit._methods(methods), preset=preset, params=credit._params(params)
    )
    key = key or _key(ds, unit, schema if isinstance(schema, Mapping) else None)
    kwargs = _common(methods, preset, params, schema, lenient, success_threshold)
    return _shuffled(ds, key, num_partitions).map_batches(
        _advantages_block, batch_size=None, batch_format="pyarrow", fn_kwargs={"kwargs": kwargs}
    )


def _dataset(source: Any) -> Any:
    import ray

    if isinstance(source, (str, list, tuple)):
        return ray.data.read_parquet(source)
    if isinstance(source, pa.Table):
        return ray.data.from_arrow(source)
    return source


def _with_row_numbers(ds: Any) -> Any:
    """`ds` with `__credit_row`, each row's place in the dataset's order."""
    import ray

    @ray.remote
    def count(block: pa.Table) -> int:
        return block.num_rows

    @ray.remote
    def number(block: pa.Table, first: int) -> pa.Table:
        return block.append_column(_ROW, pa.array(range(first, first + block.num_rows), pa.int64()))

    refs = ds.to_arrow_refs()
    counts = ray.get([count.remote(r) for r in refs])
    firsts, total = [], 0
    for n in counts:
        firsts.append(total)
        total += n
    return ray.data.from_arrow_refs([number.remote(r, f) for r, f in zip(refs, firsts)])


def _compare_block(block: pa.Table, kwargs: dict) -> pa.Table:
    if block.num_rows == 0:
        return block.slice(0, 0).select([])
    block = block.sort_by(_ROW)
    rows = block.column(_ROW)
    with credit._input(block.drop_columns([_ROW])) as source:
        table, meta = _credit.compare_logs(source, compact=True, **kwargs)
    table = pa.table(table)
    seq = table.column("_seq").cast(pa.int64())
    out = table.drop_columns(["_seq"]).append_column(_ROW, rows.take(seq))
    notes = pa.array([meta] + [None] * (out.num_rows - 1), pa.large_string())
    return out.append_column("__credit_meta", notes)


def compare(
    ds: Any,
    methods: Union[None, str, Sequence[str]] = "grpo,gigpo,proxmo",
    preset: str = "paper",
    params: Optional[Mapping[str, Any]] = None,
    *,
    key: Optional[str] = None,
    num_partitions: Optional[int] = None,
    schema: Any = None,
    lenient: bool = False,
    success_threshold: float = 0.5,
) -> dict:
    """`credit.compare` over a Dataset: the methods run on group (or iteration) shards, the
    compact per-row columns are gathered in the dataset's row order and compared on the driver.
    Equal to `credit.compare(<the dataset's rows in order>)`, except that `metadata.notes` holds
    the shards' notes in shard order."""
    import ray

    ds = _dataset(ds)
    unit, labels = _credit.plan_info(
        "compare", methods=credit._methods(methods), preset=preset, params=credit._params(params)
    )
    key = key or _key(ds, unit, schema if isinstance(schema, Mapping) else None)
    kwargs = _common(methods, preset, params, schema, lenient, success_threshold)
    if kwargs["methods"] is None:
        kwargs["methods"] = ",".join(labels)
    numbered = _with_row_numbers(ds)
    parts = _shuffled(numbered, key, num_partitions).map_batches(
        _compare_block, batch_size=None, batch_format="pyarrow", fn_kwargs={"kwargs": kwargs}
    )
    tables = [t for t in ray.get(parts.to_arrow_refs()) if t.num_rows > 0]
    gathered = pa.concat_tables(tables, promote_options="permissive").sort_by(_ROW)
    metadata = None
    notes: list = []
    for text in gathered.column("__credit_meta").drop_null().to_pylist():
        meta = json.loads(text)
        metadata = metadata or meta
        notes.extend(n for n in meta["notes"] if n not in notes)
    metadata["notes"] = notes
    rows = gathered.drop_columns(["__credit_meta", _ROW])
    return json.loads(_credit.compare_rows(rows, labels, json.dumps(metadata)))


def analyze(
    ds: Any,
    *,
    preset: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    schema: Any = None,
    lenient: bool = False,
    success_threshold: float = 0.5,
) -> dict:
    """`credit.analyze` over a Dataset: the rows are gathered to the driver in the dataset's
    order (blocks are read in parallel) and summarised there, so the result is the
    single-process one."""
    import ray

    ds = _dataset(ds)
    tables = [t for t in ray.get(ds.to_arrow_refs()) if t.num_rows > 0]
    table = pa.concat_tables(tables, promote_options="permissive")
    return credit.analyze(
        table,
        preset=preset,
        params=params,
        schema=schema,
        lenient=lenient,
        success_threshold=success_threshold,
    )


__all__ = ["advantages", "compare", "analyze"]
