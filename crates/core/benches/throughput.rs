//! Throughput benchmark: reading a large log (JSONL and Parquet) and every method over it.
//!
//! ```text
//! python3 ../shared/tools/synth_scale.py --rows 1000000 --out /tmp/synth_1m.jsonl   # also writes .parquet
//! cargo bench -p credit-core --bench throughput -- /tmp/synth_1m.jsonl /tmp/synth_1m.parquet
//! ```
//! Prints rows/s per stage and the process's peak resident memory (VmHWM) after each stage.
//! `--methods LIST` times those methods only; `--repeat N` runs each N times and prints the
//! fastest (a shared machine's noise is mostly slower runs).

use credit_core::ingest::{read_paths, IngestOptions};
use credit_core::methods::{parse_list, Method};
use credit_core::profile::Profile;
use std::path::PathBuf;
use std::time::Instant;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

fn main() {
    let (mut paths, mut methods, mut repeat) = (Vec::new(), "all".to_string(), 1);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--methods" => methods = args.next().expect("--methods LIST"),
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--repeat N")
            }
            // cargo bench passes --bench.
            flag if flag.starts_with("--") => {}
            path => paths.push(PathBuf::from(path)),
        }
    }
    if paths.is_empty() {
        eprintln!(
            "usage: cargo bench -p credit-core --bench throughput -- LOG.jsonl [LOG.parquet …]"
        );
        return;
    }
    let mut batch = None;
    for path in &paths {
        let start = Instant::now();
        let ingested =
            read_paths(std::slice::from_ref(path), &IngestOptions::default()).expect("read");
        let secs = start.elapsed().as_secs_f64();
        let rows = ingested.batch.len();
        println!(
            "read {:<40} {rows:>9} rows {secs:>7.2} s {:>10.0} rows/s  peak RSS {:>7.0} MiB",
            path.file_name().unwrap().to_string_lossy(),
            rows as f64 / secs,
            peak_rss_mib()
        );
        batch.get_or_insert(ingested.batch);
    }
    let batch = batch.expect("one input");
    for profile in [Profile::Paper, Profile::Verl] {
        let all = Instant::now();
        // `all`: every method that needs no extra logged signal (SPA and HISR need `progress` etc.).
        for name in parse_list(&methods).unwrap() {
            let method = Method::preset(&name, profile).unwrap();
            let mut secs = f64::INFINITY;
            for _ in 0..repeat {
                let start = Instant::now();
                let result = method.advantages(&batch).expect("method");
                secs = secs.min(start.elapsed().as_secs_f64());
                std::hint::black_box(result);
            }
            println!(
                "{profile:?} {name:<8} {secs:>7.2} s {:>12.0} rows/s",
                batch.len() as f64 / secs
            );
        }
        let secs = all.elapsed().as_secs_f64();
        println!(
            "{profile:?} all      {secs:>7.2} s {:>12.0} rows/s  peak RSS {:>7.0} MiB",
            batch.len() as f64 / secs,
            peak_rss_mib()
        );
    }
}
