#!/usr/bin/env python3
"""Writes the bad-input fixtures of issue #50 from the 5-row base of fixtures/bad (group `g1`,
trajectories `a` with steps 0-2 and `b` with steps 0-1), and fixtures/formats/narrow-ints.parquet
(8- and 16-bit integer columns, read as numbers). Deterministic:
`python3 scripts/fixture-bad-inputs.py` (pyarrow for the Parquet files)."""
import codecs
import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "..", "fixtures", "bad")
FORMATS = os.path.join(HERE, "..", "fixtures", "formats")


def base():
    rows = []
    for traj, steps in (("a", 3), ("b", 2)):
        for step in range(steps):
            rows.append({"uid": "g1", "traj_uid": traj, "step": step, "anchor_obs": f"room {step}",
                         "action": "go north", "reward": 1.0 if (traj, step) == ("a", 2) else 0.0,
                         "is_action_valid": True})
    return rows


def jsonl(rows):
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write(name, data, folder=BAD):
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(folder, name), mode) as f:
        f.write(data)


# Trajectory `a` goes on into iteration 1 at its step 1 (line 2): one trajectory, two iterations.
rows = base()
for row in rows:
    row["iteration"] = 0
for row in rows[1:3]:
    row["iteration"] = 1
write("trajectory-in-two-iterations.jsonl", jsonl(rows))

# Trajectory `a` logs episode reward 1 on its steps 0 and 1 and 0 on step 2 (line 3).
rows = base()
for row in rows:
    row["episode_rewards"] = 1.0 if row["traj_uid"] == "a" else 0.0
rows[2]["episode_rewards"] = 0.0
write("episode-reward-changes.jsonl", jsonl(rows))
pq.write_table(pa.Table.from_pylist(rows), os.path.join(BAD, "episode-reward-changes.parquet"))

# Two logs joined with `cat`: the second one's byte-order mark starts line 4.
text = jsonl(base())
lines = text.splitlines(keepends=True)
write("bom-mid-file.jsonl", ("\ufeff" + "".join(lines[:3]) + "\ufeff" + "".join(lines[3:])).encode())

# UTF-16 as Windows tools write it: with a byte-order mark (little-endian), and without one
# (big-endian).
write("utf16.jsonl", codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
write("utf16-no-bom.jsonl", text.encode("utf-16-be"))

# A gzip stream followed by 512 zero bytes (a tape block's padding).
write("gzip-zero-padding.jsonl.gz", gzip.compress(text.encode(), mtime=0) + bytes(512))

# The step, reward and validity as 8- and 16-bit integers, signed and unsigned.
rows = base()
table = pa.table({
    "uid": [r["uid"] for r in rows],
    "traj_uid": [r["traj_uid"] for r in rows],
    "step": pa.array([r["step"] for r in rows], pa.uint8()),
    "reward": pa.array([int(r["reward"]) for r in rows], pa.int16()),
    "is_action_valid": pa.array([1] * len(rows), pa.uint16()),
    "iteration": pa.array([0] * len(rows), pa.int8()),
})
pq.write_table(table, os.path.join(FORMATS, "narrow-ints.parquet"))
