#!/usr/bin/env python3
"""Throughput and peak memory of credit on large synthetic logs, side by side with polars.

Usage:
    python3 -m venv /tmp/bench && /tmp/bench/bin/pip install polars pyarrow
    cargo build --release
    /tmp/bench/bin/python bench/scale.py --rows 1000000 10000000 [--data DIR] [--credit target/release/credit]
        [--before OLD_BINARY] [--repeat 5] [--skip compare graph report]

For each size it generates the log once with bench/synth_scale.py (JSONL, and Parquet when pyarrow
is importable; deterministic), then runs, each as its own process: polars.read_ndjson and
polars.read_parquet on the same files, and credit analyze, advantages (grpo,rloo,gigpo,proxmo,mgr,
graphgpo), GiGPO alone and with verl-agent's similarity groups (θ = 0.95), compare, graph --top 1
and report; with `--before BIN`, an earlier build runs every command beside it, in the same run. It prints wall time, rows/s, MB/s of the input,
peak RSS (from wait4) and the ratio to polars, as a Markdown table. polars' time is its read alone,
measured inside its process (before this, the interpreter's start and `import polars`, ~0.4 s,
were counted to polars); credit's is the whole process.

On a shared 2-core machine one run of a command varies by 5-10%, as much as the margins the goals
ask for. `--repeat N` runs the whole list N times in rounds (polars, the earlier build and this one
take turns, so a slow spell of the machine falls on all of them) and prints each command's median
wall time with its range, the median peak RSS, and every ratio from the medians.
"""
import argparse
import atexit
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = "grpo,rloo,gigpo,proxmo,mgr,graphgpo"


def measure(argv, env=None, timed_inside=False):
    """Runs argv; returns (seconds, peak RSS in MB). Fails loudly on a non-zero exit. With
    `timed_inside`, the seconds are the ones the command prints (its work alone)."""
    start = time.perf_counter()
    out = subprocess.PIPE if timed_inside else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)  # a few bytes of output: the pipes do not fill
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{err}")
    if timed_inside:
        seconds = float(proc.stdout.read().split()[-1])
    return seconds, usage.ru_maxrss / 1024


def polars_read(kind, path):
    """polars reading the file, timed inside its process: the interpreter's start and `import
    polars` (~0.4 s here) are not the read, and credit has neither to pay."""
    return [sys.executable, "-c", "import time, polars as pl; start = time.perf_counter(); "
            f"pl.read_{kind}({path!r}); print(time.perf_counter() - start)"]


def timing(runs):
    """The median wall time of `runs` (seconds, RSS MB), its range when there are several, and the
    median peak RSS."""
    walls = [w for w, _ in runs]
    wall = statistics.median(walls)
    spread = f" ({min(walls):.2f}–{max(walls):.2f})" if len(runs) > 1 else ""
    return wall, f"{wall:.2f}{spread}", statistics.median(r for _, r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "credit-bench"))
    ap.add_argument("--credit", default=os.path.join(HERE, "..", "target", "release", "credit"))
    ap.add_argument("--before", help="an earlier credit binary, run beside --credit on every command")
    ap.add_argument("--skip", nargs="*", default=[], help="commands to leave out (e.g. report)")
    ap.add_argument("--polars-max-rows", type=int, default=2_000_000,
                    help="run polars only up to this size (it holds the whole file in memory)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of every measurement; medians are reported (default 1)")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    os.makedirs(a.data, exist_ok=True)
    try:
        import pyarrow  # noqa: F401
        parquet = True
    except ImportError:
        parquet = False
    print(f"credit: {a.credit}; {os.cpu_count()} CPUs; polars on the same files in the same run\n")
    print("| rows | input | work | wall s | rows/s | MB/s | peak RSS MB | vs polars |")
    print("|---|---|---|---|---|---|---|---|")
    for rows in a.rows:
        jsonl = os.path.join(a.data, f"synth{rows}.jsonl")
        pq = os.path.join(a.data, f"synth{rows}.parquet")
        if not os.path.exists(jsonl):
            gen = [sys.executable, os.path.join(HERE, "synth_scale.py"), "--rows", str(rows), "--out", jsonl]
            subprocess.run(gen + ([] if parquet else ["--no-parquet"]), check=True, stdout=subprocess.DEVNULL)
        inputs = [("jsonl", jsonl, "ndjson")] + ([("parquet", pq, "parquet")] if parquet and os.path.exists(pq) else [])
        # The commands' outputs (reports, graphs, advantages: GBs at 10M rows) go to a scratch
        # folder removed after each size (and on a failure).
        out = tempfile.mkdtemp(dir=a.data)
        atexit.register(shutil.rmtree, out, True)
        for label, path, polars_kind in inputs:
            mb = os.path.getsize(path) / 1e6
            commands = {
                "analyze": ["analyze", path, "--format", "json"],
                "advantages": ["advantages", path, "--methods", METHODS, "-o", os.path.join(out, "adv.parquet")],
                "gigpo": ["advantages", path, "--methods", "gigpo", "-o", os.path.join(out, "gigpo.parquet")],
                "gigpo-similarity": ["advantages", path, "--methods", "gigpo", "--set", "gigpo.similarity=0.95",
                                     "-o", os.path.join(out, "gigpo-sim.parquet")],
                "compare": ["compare", path, "--methods", "grpo,gigpo,proxmo", "--format", "json"],
                "graph": ["graph", path, "--top", "1", "--out", os.path.join(out, "graphs")],
                "report": ["report", path, "--out", os.path.join(out, "report")],
            }
            binaries = [("before", a.before)] if a.before else []
            binaries.append(("", a.credit))
            # Every measurement, in the order printed: polars first, then each build's commands.
            jobs = [("polars", None, polars_read(polars_kind, path))] if rows <= a.polars_max_rows else []
            jobs += [(name, tag, [binary] + args) for tag, binary in binaries
                     for name, args in commands.items() if name not in a.skip]
            runs = [[] for _ in jobs]
            for round_ in range(a.repeat):
                for i, (name, tag, argv) in enumerate(jobs):
                    # Each run writes its own output (credit replaces only its own earlier one).
                    for arg in argv:
                        if arg.startswith(out) and os.path.isfile(arg):
                            os.remove(arg)
                    runs[i].append(measure(argv, timed_inside=name == "polars"))
                if a.repeat > 1:
                    print(f"round {round_ + 1} of {a.repeat} done ({label}, {rows:,} rows)", file=sys.stderr)
            base = None
            if jobs and jobs[0][0] == "polars":
                base, shown, rss = timing(runs[0])
                print(f"| {rows:,} | {label} {mb:,.0f} MB | polars.read_{polars_kind} | {shown} | {rows / base:,.0f} | {mb / base:,.0f} | {rss:,.0f} | 1.00 |")
            else:
                print(f"| {rows:,} | {label} {mb:,.0f} MB | polars.read_{polars_kind} | — | — | — | — (holds the whole log) | |")
            # Each build's first command (analyze, unless skipped) and exact GiGPO: what the others
            # are compared with.
            reference = {}
            for i, (name, tag, argv) in enumerate(jobs):
                if name == "polars":
                    continue
                seconds, shown, rss = timing(runs[i])
                reference.setdefault((tag, "analyze"), seconds)
                if name == "gigpo":
                    reference[(tag, "gigpo")] = seconds
                analyze, gigpo = reference[(tag, "analyze")], reference.get((tag, "gigpo"))
                extra = f" ({seconds / analyze:.2f}× analyze)" if name != "analyze" else ""
                if name == "gigpo-similarity" and gigpo:
                    extra = f" ({seconds / gigpo:.2f}× exact GiGPO)"
                ratio = f"{base / seconds:.2f}" if base else ""
                who = f"credit {tag} " if tag else "credit "
                print(f"| {rows:,} | {label} | {who}{name}{extra} | {shown} | {rows / seconds:,.0f} | {mb / seconds:,.0f} | {rss:,.0f} | {ratio} |")
                sys.stdout.flush()
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
