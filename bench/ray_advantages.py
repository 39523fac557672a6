#!/usr/bin/env python3
"""Benchmark (not a test): rows/s of `credit.advantages` in one process against
`credit.ray.advantages` on a local Ray cluster, on the same log as one Parquet file and as a folder
with one Parquet file per iteration (as verl writes its dumps), each given to Ray as a path (the
tasks read the files in Rust) and as a Dataset (`ray.data.read_parquet`, read into the object
store).

    python bench/ray_advantages.py [LOG.parquet] [--split DIR] [--methods grpo,gigpo] [--methods all]
                        [--preset verl] [--cpus 2] [--reps 3]

LOG defaults to /work/cmp/s200k.parquet when it exists, else a 200k-row bench/synth_scale.py log
generated into a temporary folder. The per-iteration files go to DIR (default: a temporary folder;
an existing DIR with Parquet files in it is used as it is). Each figure is the median of --reps
runs. Ray runs share one `ray.init(num_cpus=CPUS)`, which is not timed; a run is timed from the
call (and `ray.data.read_parquet`) until every output block exists (nothing is written).
"""

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

import credit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOG = "/work/cmp/s200k.parquet"


def split_by_iteration(log: str, folder: Path) -> Path:
    if folder.is_dir() and any(folder.glob("*.parquet")):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(log)
    for it in pc.unique(table.column("iteration")).to_pylist():
        part = table.filter(pc.equal(table.column("iteration"), it))
        pq.write_table(part, folder / f"iter-{it:05d}.parquet")
    return folder


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log", nargs="?")
    ap.add_argument("--split")
    ap.add_argument("--methods", action="append")
    ap.add_argument("--preset", default="verl")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    methods = args.methods or ["grpo,gigpo", "all"]
    tmp = Path(tempfile.mkdtemp(prefix="credit-bench-ray-"))
    log = args.log or (DEFAULT_LOG if os.path.exists(DEFAULT_LOG) else None)
    if log is None:
        log = str(tmp / "synth.parquet")
        subprocess.run([sys.executable, str(ROOT / "bench" / "synth_scale.py"), "--rows", "200000",
                        "--out", str(tmp / "synth.jsonl"), "--parquet", log], check=True)
    folder = str(split_by_iteration(log, Path(args.split) if args.split else tmp / "iterations"))
    rows = pq.ParquetFile(log).metadata.num_rows
    files = len(list(Path(folder).glob("*.parquet")))
    print(f"log: {log} ({rows} rows); per-iteration folder: {folder} ({files} files); "
          f"preset {args.preset}; median of {args.reps}")

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    import ray
    import credit.ray as credit_ray

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)

    @ray.remote
    def count(block):
        return block.num_rows

    def on_ray(source, m, dataset):
        out = credit_ray.advantages(ray.data.read_parquet(source) if dataset else source, methods=m,
                                    preset=args.preset)
        n = sum(ray.get([count.remote(r) for r in out.to_arrow_refs()]))
        assert n == rows, (n, rows)

    for m in methods:
        single = median_time(lambda: credit.advantages(log, methods=m, preset=args.preset), args.reps)
        print(f"--methods {m}")
        print(f"  credit.advantages, one process: {'':<36} {rows / single:>9,.0f} rows/s ({single:.2f} s)")
        for name, source in [("per-iteration files", folder), ("one file", log)]:
            for dataset in [False, True]:
                dt = median_time(lambda: on_ray(source, m, dataset), args.reps)
                how = f"{name}, {'Dataset' if dataset else 'path'}:"
                print(f"  credit.ray.advantages, {args.cpus} CPUs, {how:<30} {rows / dt:>9,.0f} rows/s "
                      f"({dt:.2f} s, {single / dt:.2f}x one process)")
    ray.shutdown()


if __name__ == "__main__":
    main()
