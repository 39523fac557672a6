"""credit on a Ray cluster: advantages sharded by group or iteration, analyses gathered exactly.

    import ray, credit.ray
    ray.init()
    adv = credit.ray.advantages("/shared/logs/", methods="all", preset="verl")  # a ray.data.Dataset
    adv.write_parquet("/shared/advantages/")
    ds = ray.data.read_parquet("/shared/logs/")           # or any Dataset of step rows
    cmp = credit.ray.compare(ds, methods="grpo,gigpo,proxmo")      # == credit.compare(...)
    summary = credit.ray.analyze(ds)                               # == credit.analyze(...)

How it shards: every planned method needs some unit whole — the group (`group_id` or its alias,
e.g. verl's `uid`) when every method is group-local (grpo, drgrpo, rloo, gigpo, hgpo, graphgpo),
else the training iteration (`iteration`: ProxMO, MGR, SPA, HISR and EMPG read the whole batch of
an iteration; without an `iteration` column the whole log is one shard). No row is shuffled:
- Given local Parquet paths (a folder, files; every node must see them), each file's keys are
  read (that column only); files that share a key are read by one Ray task, and the rest are
  bundled into about `num_partitions` tasks, each reading its files in Rust as `credit.advantages`
  does. verl writes one iteration per file, so every file stands alone. Only the results go
  through Ray.
- Given a Dataset, it is read once into the object store and each block's keys are gathered. A
  block's own keys are computed where the block is, blocks bundled into about `num_partitions`
  calls; only the rows of keys found in two or more blocks are gathered, in the dataset's order,
  into up to `num_partitions` more calls.
Each call goes through the same Rust code as `credit.advantages`, so the per-row results are the
single-process ones on the same rows in the same order, bit for bit (for a Dataset, the order of
its blocks: Ray's Parquet reader may interleave files, which moves ProxMO's last bits). The work
starts when `advantages` is called; rows come back in no particular order (sort by the keys).

`compare` runs the methods on the shards too and gathers only what a comparison keeps per row (a
few bytes plus 8 per method), put back in the dataset's row order: rank correlations and
quantiles are then computed exactly on the driver, and equal the single-process figures.
`analyze` gathers the rows to the driver in the dataset's order and summarises them there (the
per-window summary parts of the Rust core are not serialisable yet; see docs/python.md).
"""

from __future__ import annotations

import heapq
import json
import os
from typing import Any, Mapping, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import credit
from credit import _credit

_ROW = "__credit_row"
# Log files that are not Parquet: `credit.advantages` reads them, Ray Data's Parquet reader not.
_LOG_SUFFIXES = tuple(f".{e}{z}" for e in ("jsonl", "ndjson", "json") for z in ("", ".gz", ".zst"))


def _key(names: Sequence[str], unit: str, schema: Optional[Mapping[str, str]]) -> Optional[str]:
    """The column of `names` that feeds `group_id` (or `iteration`), as ingest would pick it."""
    field = "group_id" if unit == "group" else "iteration"
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


def _partitions(num_partitions: Optional[int]) -> int:
    """`num_partitions`, by default two per CPU of the cluster."""
    import ray

    return num_partitions or max(2, min(200, 2 * int(ray.cluster_resources().get("CPU", 1))))


def _bundles(sizes: Sequence[int], n: int) -> list:
    """The indices of `sizes` in at most `n` bundles of about equal total size, each in order."""
    totals = [(0, b) for b in range(min(n, len(sizes)))]
    bundles: list = [[] for _ in totals]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, b = heapq.heappop(totals)
        bundles[b].append(i)
        heapq.heappush(totals, (total + sizes[i], b))
    return [sorted(b) for b in bundles if b]


def _crossing(uniques: Sequence[pa.Array]) -> pa.Array:
    """The keys found in more than one of `uniques` (each block's or file's distinct keys)."""
    seen = pa.concat_tables([pa.table({"k": u}) for u in uniques], promote_options="permissive")
    counts = pc.value_counts(seen.column("k"))
    return counts.field("values").filter(pc.greater(counts.field("counts"), 1))


def _in(column: Any, values: pa.Array) -> Any:
    return pc.is_in(column, value_set=values.cast(column.type))


def _keys(block: pa.Table, key: str) -> tuple:
    return pc.unique(block.column(key)), block.num_rows


def _run(fn, kwargs: dict, drop: Optional[tuple], *blocks: pa.Table) -> pa.Table:
    """`fn` on `blocks` as one table, less the rows whose key (`drop`: column, values) is computed
    elsewhere."""
    table = blocks[0] if len(blocks) == 1 else pa.concat_tables(blocks, promote_options="permissive")
    if drop is not None:
        moves = _in(table.column(drop[0]), drop[1])
        if pc.any(moves).as_py():
            table = table.filter(pc.invert(moves))
    return fn(table, kwargs)


def _moving(block: pa.Table, key: str, buckets: Sequence[pa.Array]) -> Any:
    """The rows of `block` whose key is in each of `buckets`, in order (one table per bucket)."""
    parts = [block.filter(_in(block.column(key), b)) for b in buckets]
    return parts if len(parts) > 1 else parts[0]


def _sharded(refs: list, key: Optional[str], num_partitions: Optional[int], fn, kwargs: dict) -> list:
    """`fn(table, kwargs)` over the blocks `refs`, each call seeing every row of its keys in the
    dataset's order (ProxMO's sums over an iteration follow the row order); the refs of the
    results.

    A key whose rows all lie in one block is computed with that block, and the blocks are bundled
    into about `num_partitions` calls: a shuffle would move every row's text, which costs more
    than the methods. Only the rows of keys found in two or more blocks (Ray's readers cut files
    into blocks) are gathered, into up to `num_partitions` more calls; without a key the whole log
    is one call."""
    import ray

    if not refs:
        return []
    run = ray.remote(_run)
    if key is None:
        return [run.remote(fn, kwargs, None, *refs)]
    n = _partitions(num_partitions)
    keys = ray.get([ray.remote(_keys).remote(r, key) for r in refs])
    moving = _crossing([u for u, _ in keys])
    drop = (key, moving) if len(moving) else None
    out = [
        run.remote(fn, kwargs, drop, *[refs[i] for i in bundle])
        for bundle in _bundles([rows for _, rows in keys], n)
    ]
    if drop is None:
        return out
    m = min(n, len(moving))
    buckets = [moving[b * len(moving) // m:(b + 1) * len(moving) // m] for b in range(m)]
    split = ray.remote(_moving).options(num_returns=m)
    parts = [split.remote(r, key, buckets) for r, (u, _) in zip(refs, keys) if pc.any(_in(u, moving)).as_py()]
    if m == 1:
        parts = [[p] for p in parts]
    return out + [run.remote(fn, kwargs, None, *[p[b] for p in parts]) for b in range(m)]


def _files(source: Any) -> Optional[list]:
    """The Parquet files a local path or list of paths names, as `credit.advantages` reads them
    (folders walked in name order, a file named twice read once); None for anything else (a
    Dataset, a URI, JSONL logs), which Ray Data reads."""
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    if not isinstance(source, (list, tuple)) or not all(isinstance(p, (str, os.PathLike)) for p in source):
        return None
    found = []
    for path in map(os.fspath, source):
        if "://" in path:
            return None
        if os.path.isdir(path):
            walked = []
            for root, dirs, names in os.walk(path):
                dirs.sort()
                walked.extend(os.path.join(root, name) for name in sorted(names))
            if any(p.endswith(_LOG_SUFFIXES) for p in walked):
                return None
            found.extend(p for p in walked if p.endswith(".parquet"))
        elif path.endswith(".parquet"):
            found.append(path)
        else:
            return None
    files, seen = [], set()
    for path in found:
        stat = os.stat(path)
        if (stat.st_dev, stat.st_ino) not in seen:
            seen.add((stat.st_dev, stat.st_ino))
            files.append(path)
    return files or None


def _file_keys(paths: Sequence[str], key: str) -> list:
    """Each file's distinct keys and row count, reading only the key column."""
    return [(t.column(key).unique(), t.num_rows) for t in (pq.read_table(p, columns=[key]) for p in paths)]


def _advantages_files(paths: Sequence[str], kwargs: dict) -> pa.Table:
    table, _meta = _credit.advantages(list(paths), **kwargs)
    return pa.table(table)


def _by_files(files: list, key: Optional[str], num_partitions: Optional[int], kwargs: dict) -> list:
    """`credit.advantages` over Parquet files, each Ray task reading its files in Rust as the
    single process does (no row goes through Ray but the results): files that share a key are
    read by the same task, and the rest are bundled into about `num_partitions` tasks."""
    import ray

    run = ray.remote(_advantages_files)
    if key is None:
        return [run.remote(files, kwargs)]
    n = _partitions(num_partitions)
    step = -(-len(files) // n)
    read = ray.remote(_file_keys)
    keys = [k for part in ray.get([read.remote(files[i:i + step], key) for i in range(0, len(files), step)])
            for k in part]
    moving = _crossing([u for u, _ in keys])
    # Files joined by a key they share form one component, read by one task.
    root = list(range(len(files)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    first: dict = {}
    for i, (u, _) in enumerate(keys if len(moving) else []):
        for k in u.filter(_in(u, moving)).to_pylist():
            root[find(i)] = find(first.setdefault(k, i))
    components: dict = {}
    for i in range(len(files)):
        components.setdefault(find(i), []).append(i)
    parts = list(components.values())
    sizes = [sum(keys[i][1] for i in part) for part in parts]
    return [
        run.remote([files[i] for i in sorted(i for c in bundle for i in parts[c])], kwargs)
        for bundle in _bundles(sizes, n)
    ]


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
    import ray

    unit, _labels = _credit.plan_info(
        "advantages", methods=credit._methods(methods), preset=preset, params=credit._params(params)
    )
    columns = schema if isinstance(schema, Mapping) else None
    kwargs = credit._options(methods, preset, params, schema, lenient, success_threshold)
    files = _files(ds)
    if files is not None:
        key = key or _key(pq.read_schema(files[0]).names, unit, columns)
        return ray.data.from_arrow_refs(_by_files(files, key, num_partitions, kwargs))
    ds = _dataset(ds)
    key = key or _key(ds.schema().names, unit, columns)
    refs = _sharded(ds.to_arrow_refs(), key, num_partitions, _advantages_block, kwargs)
    return ray.data.from_arrow_refs(refs)


def _dataset(source: Any) -> Any:
    import ray

    if isinstance(source, (str, list, tuple)):
        return ray.data.read_parquet(source)
    if isinstance(source, pa.Table):
        return ray.data.from_arrow(source)
    return source


def _with_row_numbers(ds: Any) -> list:
    """The blocks of `ds` with `__credit_row`, each row's place in the dataset's order."""
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
    return [number.remote(r, f) for r, f in zip(refs, firsts)]


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
    key = key or _key(ds.schema().names, unit, schema if isinstance(schema, Mapping) else None)
    kwargs = credit._options(methods, preset, params, schema, lenient, success_threshold)
    if kwargs["methods"] is None:
        kwargs["methods"] = ",".join(labels)
    parts = _sharded(_with_row_numbers(ds), key, num_partitions, _compare_block, kwargs)
    tables = [t for t in ray.get(parts) if t.num_rows > 0]
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
