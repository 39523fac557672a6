//! Every third-party crate is built with one feature set, whichever members a build selects
//! (crates/workspace-hack, kept by `cargo hakari`): `maturin develop` then reuses the polars that
//! `cargo test --workspace` compiled, instead of compiling it again (most of CI's Python step).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `cargo` with the arguments, offline (everything a test build needs is already downloaded).
fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .args(["--offline", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Each third-party package ("name version") in a build's tree, with the feature sets it is built
/// with (one for the target, one for build scripts and macros where those differ).
fn features(selection: &[&str], edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut args = vec!["tree", "-e", edges, "--prefix", "none", "-f", "{p}|{f}"];
    args.extend_from_slice(selection);
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Each member's tree ends with a blank line.
    for line in cargo(&args).lines().filter(|l| !l.is_empty()) {
        let (package, features) = line.split_once('|').expect("{p}|{f}");
        // Workspace members are named with their path (registry packages are not): their
        // features are the selection's own.
        if package.contains(" (") {
            continue;
        }
        let features = features.trim_end_matches("(*)").trim_end();
        packages
            .entry(package.trim_end().to_string())
            .or_default()
            .insert(features.to_string());
    }
    packages
}

#[test]
fn one_build_of_each_dependency() {
    let whole = features(&["--workspace"], "normal,build,dev");
    let metadata: serde_json::Value =
        serde_json::from_str(&cargo(&["metadata", "--format-version", "1", "--no-deps"]))
            .expect("cargo metadata's JSON");
    let members = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string());
    let mut differing = Vec::new();
    for member in members {
        for (package, sets) in features(&["-p", &member], "normal,build") {
            match whole.get(&package) {
                Some(all) if *all != sets => {
                    differing.push(format!("{member}: {package} {sets:?}, workspace {all:?}"))
                }
                _ => {}
            }
        }
    }
    assert!(
        differing.is_empty(),
        "building one member alone compiles these crates (and all that depend on them) again; \
         run `cargo hakari generate` (.config/hakari.toml), and add what it leaves out below its \
         section in crates/workspace-hack/Cargo.toml:\n{}",
        differing.join("\n")
    );
}
