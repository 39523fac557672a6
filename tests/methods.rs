//! `credit methods`: every method and its settings, from credit-core's listing.

use crate::util::{json, stderr, stdout, Run};

#[test]
fn one_method_shows_its_settings_defaults_types_and_meanings() {
    let run = Run::new();
    let out = run.credit(["methods", "gigpo"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "gigpo\n  GiGPO: episode- plus step-level group advantage (Feng et al. 2025, arXiv 2505.10978, Eq. 3, 5–8)\n  runs with `--methods all` or when named\n",
        "  setting                paper         verl      takes\n",
        "  gigpo.omega            1.0           1.0       number in [0, ∞)\n    ω, the weight of the step term (`step_advantage_w`)\n",
        "  gigpo.stats_over       trajectories  rows      trajectories | rows\n",
        "  gigpo.invalid_penalty  0.0           0.1       number\n",
        "  gigpo.similarity       unset         unset     number or unset in (0, 1)\n",
    ] {
        assert!(text.contains(expected), "{expected}\n---\n{text}");
    }
    let out = run.credit(["methods", "logged"]);
    assert!(stdout(&out).contains("no settings: it reads the logged advantages as they are"));
}

#[test]
fn every_method_is_listed_and_json_has_them_all() {
    let run = Run::new();
    let out = run.credit(["methods", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list = json(&out);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for name in [
        "grpo", "drgrpo", "gigpo", "mgr", "spa", "hisr", "oracle", "gae", "opo",
    ] {
        assert!(names.contains(&name), "{name}: {names:?}");
    }
    let mgr = list
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "mgr")
        .unwrap();
    let gate = mgr["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "mgr.gate")
        .unwrap();
    assert_eq!(gate["kind"], "choice");
    assert!(gate["values"]
        .as_array()
        .unwrap()
        .contains(&"sample".into()));
    let text = stdout(&run.credit(["methods"]));
    assert!(
        text.contains("\ngae\n") && text.contains("verl's registry: runs with `--methods verl`")
    );
    // An unknown name: the error `--methods` gives, with the closest.
    let out = run.credit(["methods", "gipgo"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).trim_end().ends_with("did you mean `gigpo`?"),
        "{}",
        stderr(&out)
    );
}
