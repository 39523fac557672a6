#!/usr/bin/env python3
"""Writes fixtures/formats/pages-v1.parquet and pages-v2.parquet (data pages v1 and v2): a step
log whose text columns come in every page layout credit reads from the pages itself (plain and
dictionary pages, a dictionary that falls back to plain pages, nulls, a required column, zstd,
snappy and no compression, three row groups of small pages) and one it leaves to polars
(`env_feedback`, DELTA_BYTE_ARRAY). Deterministic: `python3 scripts/fixture-pages.py`."""
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "formats")

random.seed(7)
n = 3000
words = ["kitchen", "cabinet 1", "drawer", "café", "naïve ✓", "", "x" * 40, "go to desk 2", "a\nb"]


def text(i):
    kind = random.randrange(6)
    if kind == 0:
        return None
    if kind == 1:
        return random.choice(words)
    if kind == 2:
        return f"You arrive at {random.choice(words)}. Step {i}."
    return " ".join(random.choice(words) for _ in range(random.randrange(1, 60)))


columns = {
    "uid": ([f"g{i // 160}" for i in range(n)], pa.string(), False),
    "traj_uid": ([f"g{i // 160}-t{i % 160 // 20}" for i in range(n)], pa.string(), False),
    "step": ([i % 20 for i in range(n)], pa.int64(), False),
    "reward": ([float(i % 20 == 19) for i in range(n)], pa.float64(), False),
    "anchor_obs": ([text(i) for i in range(n)], pa.string(), True),
    "action": ([random.choice(words[:5]) if i % 7 else None for i in range(n)], pa.string(), True),
    "task": ([random.choice(["pick", "look", "cool"]) for _ in range(n)], pa.string(), False),
    "env_feedback": ([f"id-{i:06d}-{random.choice(words)}" for i in range(n)], pa.string(), False),
}
schema = pa.schema([pa.field(k, t, nullable=null) for k, (_, t, null) in columns.items()])
table = pa.table({k: pa.array(v, t) for k, (v, t, _) in columns.items()}, schema=schema)
for version in ["1.0", "2.0"]:
    pq.write_table(
        table,
        os.path.join(OUT, f"pages-v{version[0]}.parquet"),
        row_group_size=1100,
        data_page_size=2048,
        data_page_version=version,
        use_dictionary=["uid", "traj_uid", "anchor_obs", "action", "task"],
        dictionary_pagesize_limit=4096,
        compression={"anchor_obs": "zstd", "action": "snappy", "task": "none", "uid": "zstd",
                     "traj_uid": "snappy", "env_feedback": "zstd", "step": "zstd", "reward": "zstd"},
        column_encoding={"env_feedback": "DELTA_BYTE_ARRAY", "step": "PLAIN", "reward": "PLAIN"},
    )
