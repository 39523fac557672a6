#!/usr/bin/env python3
"""Benchmark (not a test): rows/s of credit.advantages in one process and on a local Ray cluster
with 1 and 2 worker CPUs.

    python tests/python/bench_ray.py [LOG.parquet] [--methods grpo,gigpo] [--preset verl]

Without LOG, a 1M-row log is generated with bench/synth_scale.py into a temporary folder.
Each Ray run starts a fresh local cluster (`ray.init(num_cpus=N)`), reads the Parquet file with
`ray.data.read_parquet`, and writes nothing: the time is until every output block exists.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

import credit

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log", nargs="?")
    ap.add_argument("--methods", default="grpo,gigpo")
    ap.add_argument("--preset", default="verl")
    ap.add_argument("--workers", default="1,2")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="credit-bench-")
    log = args.log
    if log is None:
        log = os.path.join(tmp, "synth.parquet")
        subprocess.run([sys.executable, str(ROOT / "bench" / "synth_scale.py"), "--rows", "1000000",
                        "--out", os.path.join(tmp, "synth.jsonl"), "--parquet", log], check=True)
    rows = pq.ParquetFile(log).metadata.num_rows
    print(f"log: {log} ({rows} rows), methods {args.methods}, preset {args.preset}")

    t = time.perf_counter()
    out = credit.advantages(log, methods=args.methods, preset=args.preset)
    dt = time.perf_counter() - t
    print(f"credit.advantages (one process, all cores): {dt:.1f} s, {rows / dt:,.0f} rows/s ({out.num_rows} rows out)")

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    import ray
    import credit.ray as credit_ray

    for n in [int(x) for x in args.workers.split(",")]:
        ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        t = time.perf_counter()
        ds = credit_ray.advantages(ray.data.read_parquet(log), methods=args.methods, preset=args.preset)
        refs = ds.to_arrow_refs()
        total = sum(ray.get([ray.remote(lambda b: b.num_rows).remote(r) for r in refs]))
        dt = time.perf_counter() - t
        print(f"credit.ray.advantages, {n} worker CPU(s): {dt:.1f} s, {rows / dt:,.0f} rows/s ({total} rows out)")
        ray.shutdown()


if __name__ == "__main__":
    main()
