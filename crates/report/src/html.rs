//! `report.html`: one self-contained file (inline CSS, SVG and script, no fonts, external files or
//! network) with the analyze and compare results, every figure with its caption, the checks, and
//! the explorer of chosen groups.

use crate::check::Outcome;
use crate::explorer::Explorer;
use crate::plots::{Figure, Section};
use crate::Inputs;
use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

const STYLE: &str = "body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:2rem auto;max-width:1100px;color:#222;line-height:1.45;padding:0 1rem}\
h1{font-size:1.7rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.2rem}\
table{border-collapse:collapse;margin:.6rem 0 1rem}td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:right}\
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}\
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.not-applicable{color:#666}\
figure{margin:1.2rem 0 2rem}figure svg{max-width:100%;height:auto;border:1px solid #eee}\
figcaption{color:#444;font-size:.95rem;margin-top:.4rem}pre{background:#f7f7f7;padding:.8rem;overflow-x:auto;font-size:.8rem}\
.note{color:#555}";

pub fn write(
    inputs: &Inputs,
    figures: &[Figure],
    checks: Option<&Outcome>,
    baseline: Option<&serde_json::Value>,
    explorer: Option<&Explorer>,
) -> String {
    let s = inputs.summary;
    let mut o = String::new();
    let preset = inputs.metadata["preset"].as_str().unwrap_or("paper");
    let _ = write!(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>credit report</title><style>{STYLE}</style></head><body>\n");
    let _ = writeln!(o, "<h1>credit report</h1>");
    let _ = writeln!(
        o,
        "<p>{} files, {} rows, {} groups, {} trajectories. Preset <code>{}</code>; methods: {}.</p>",
        s.files,
        s.rows,
        s.groups,
        s.trajectories,
        esc(preset),
        esc(&inputs.advantages.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>().join(", "))
    );
    if let Some(e) = explorer.filter(|e| !e.groups.is_empty()) {
        let _ = writeln!(
            o,
            "<p><a href=\"#explore\">Explore {} groups</a> step by step: what the agent saw and did, every method's credit, the state graph.</p>",
            e.groups.len()
        );
    }
    let _ = writeln!(
        o,
        "<p class=\"columns\">Columns: {}.</p>",
        esc(&s
            .columns
            .iter()
            .map(|u| u.short())
            .collect::<Vec<_>>()
            .join(", "))
    );
    let collisions: Vec<String> = s
        .columns
        .iter()
        .filter(|u| !u.also.is_empty())
        .map(|u| format!("<li>{}</li>", esc(&u.describe())))
        .collect();
    if !collisions.is_empty() {
        let _ = writeln!(o, "<ul class=\"columns\">{}</ul>", collisions.concat());
    }

    if let Some(c) = checks {
        let verdict = if c.passed {
            format!(
                "<span class=\"pass\">all checks passed</span>{}",
                c.not_applicable_note()
            )
        } else {
            "<span class=\"fail\">checks failed</span>".to_string()
        };
        let _ = writeln!(o, "<h2 id=\"checks\">Checks</h2><p>{verdict}</p><table><tr><th>rule</th><th>key</th><th>value</th><th>bound</th>");
        if baseline.is_some() {
            let _ = write!(o, "<th>baseline</th>");
        }
        let _ = writeln!(o, "<th>result</th></tr>");
        for r in &c.rules {
            let bound = r.bound();
            let _ = write!(
                o,
                "<tr><td>{}</td><td><code>{}</code></td><td>{:.4}</td><td>{}</td>",
                esc(&r.name),
                esc(&r.key),
                r.value,
                esc(&bound)
            );
            if baseline.is_some() {
                let _ = write!(
                    o,
                    "<td>{}</td>",
                    r.baseline.map_or("—".into(), |b| format!("{b:.4}"))
                );
            }
            let verdict = r.verdict();
            let _ = writeln!(
                o,
                "<td class=\"{}\" title=\"{}\">{verdict}</td></tr>",
                verdict.replace(' ', "-"),
                esc(r.not_applicable.as_deref().unwrap_or(""))
            );
        }
        let _ = writeln!(o, "</table>");
    }

    let _ = writeln!(
        o,
        "<h2 id=\"logs\">What is in the logs</h2><table><tr><th>figure</th><th>value</th>"
    );
    if baseline.is_some() {
        let _ = write!(o, "<th>baseline</th>");
    }
    let _ = writeln!(o, "</tr>");
    let headline = crate::Headline::of(s, inputs.comparison);
    for (label, key, value) in headline.shares() {
        let _ = write!(o, "<tr><td>{label}</td><td>{}</td>", pct(value));
        if let Some(b) = baseline {
            let _ = write!(
                o,
                "<td>{}</td>",
                b["headline"][key].as_f64().map_or("—".into(), pct)
            );
        }
        let _ = writeln!(o, "</tr>");
    }
    let _ = writeln!(o, "</table>");
    let r = &s.rollouts_per_group;
    let lengths = match &s.single_turn {
        None => format!(
            "Trajectory length: {:.1} steps for successes, {:.1} for failures.",
            s.length.success.mean, s.length.failure.mean
        ),
        Some(_) => "Single-turn logs (one step per rollout): step groups, state graphs and step positions do not apply.".into(),
    };
    let _ = writeln!(
        o,
        "<p>Rollouts per group: {} to {} (mean {:.1}); {} group(s) with a single rollout. {lengths} {} padding duplicate row(s) dropped.</p>",
        r.min, r.max, r.mean, r.single_rollout_groups, s.padding_duplicates
    );
    if !s.diagnostics.is_empty() {
        let _ = writeln!(o, "<h3>Worth a look</h3><ul>");
        for d in &s.diagnostics {
            let _ = writeln!(o, "<li>{}</li>", esc(d));
        }
        let _ = writeln!(o, "</ul>");
    }

    if let Some(c) = inputs.comparison {
        let _ = writeln!(
            o,
            "<h2 id=\"compare\">How the methods credit the same steps</h2>"
        );
        let _ = writeln!(o, "<table><tr><th>method</th><th>mean</th><th>std</th><th>median</th><th>zero</th><th>positive</th><th>invalid credited +</th><th>… in successes</th></tr>");
        for m in &c.methods {
            let d = &c.distributions[m];
            let i = &c.invalid_credit[m];
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(m),
                d.mean,
                d.std,
                d.median,
                pct(d.share_zero),
                pct(d.share_positive),
                pct(i.invalid_positive_share),
                pct(i.invalid_positive_share_in_success)
            );
        }
        let _ = writeln!(o, "</table>");
        if !c.pairwise.is_empty() {
            let _ = writeln!(o, "<table><tr><th>pair</th><th>Spearman ρ</th><th>Kendall τ-b</th><th>same sign</th></tr>");
            let f = |x: Option<f64>| x.map_or("—".into(), |v| format!("{v:.3}"));
            for p in &c.pairwise {
                let _ = writeln!(
                    o,
                    "<tr><td>{} vs {}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&p.a),
                    esc(&p.b),
                    f(p.spearman),
                    f(p.kendall_tau_b),
                    pct(p.sign_agreement)
                );
            }
            let _ = writeln!(o, "</table>");
        }
    }

    let in_section = |section: Section| figures.iter().filter(move |f| f.section == section);
    let figure = |o: &mut String, fig: &Figure| {
        let _ = writeln!(
            o,
            "<figure id=\"fig-{}\"><h3>{}</h3>\n{}\n<figcaption>{}</figcaption></figure>",
            fig.id,
            esc(&fig.title),
            fig.svg,
            esc(&fig.caption)
        );
    };
    let trends: Vec<&Figure> = in_section(Section::Trends).collect();
    if !trends.is_empty() {
        let _ = writeln!(o, "<h2 id=\"trends\">Per-iteration trends</h2>");
        for fig in trends {
            figure(&mut o, fig);
        }
    }
    let _ = writeln!(o, "<h2 id=\"figures\">Figures</h2>");
    for fig in in_section(Section::Figures) {
        figure(&mut o, fig);
    }
    let numbers = crate::progress_numbers(s);
    if !numbers.is_empty() {
        let _ = writeln!(
            o,
            "<h2 id=\"progress\">Progress and segments</h2><p>SPA's per-step progress ĉ_t and HISR's segments (logged, or filled by <code>--progress-model</code> / <code>--sprm-model</code>).</p><table><tr><th>figure</th><th>value</th></tr>"
        );
        for (label, value) in &numbers {
            let _ = writeln!(o, "<tr><td>{}</td><td>{}</td></tr>", esc(label), esc(value));
        }
        let _ = writeln!(o, "</table>");
        for fig in in_section(Section::ProgressSegments) {
            figure(&mut o, fig);
        }
    }
    if let Some(e) = explorer {
        explore(&mut o, e, s.groups);
    }
    let params = serde_json::to_string_pretty(&inputs.metadata).unwrap_or_default();
    let _ = writeln!(
        o,
        "<h2 id=\"parameters\">Preset and parameters</h2><pre>{}</pre>",
        esc(&params)
    );
    let _ = writeln!(
        o,
        "<p class=\"note\">Generated by credit {}.</p></body></html>",
        env!("CARGO_PKG_VERSION")
    );
    o
}

/// The explorer: heading and notes outside the container, then the stylesheet, the data, the
/// container and the script, in the order `explorer.js` expects.
fn explore(o: &mut String, e: &Explorer, groups_in_logs: usize) {
    let _ = writeln!(
        o,
        "<h2 id=\"explore\">Explore groups, trajectories and steps</h2>"
    );
    if e.groups.is_empty() {
        let _ = writeln!(o, "<p class=\"note\">None of the logs' {groups_in_logs} groups is one the explorer picks on its own (a group where the methods' ranks can disagree needs {} steps; none has singleton states or failed yet made progress): name groups with <code>--explore GROUP</code>.</p>", crate::explorer::MIN_STEPS_FOR_RANKS);
        return;
    }
    let _ = writeln!(
        o,
        "<p>{} of the logs' {} groups: those named with <code>--explore</code>, then in turns the groups where the methods disagree most (the lowest Spearman ρ between two methods' advantages over the group's steps), the most singleton-heavy (steps whose exact observation occurs once in the group: GiGPO's step term is 0) and failed groups that still made progress (<code>--explore-max</code> bounds how many). Pick a group, then a step (click, or ←/→ and ↑/↓): the panel shows what the agent saw and did, every method's advantage and its parts, and the step's state in the group's graph (nodes by distance to success, edges by mean <code>adv_{}</code>). Steps are coloured by the chosen method's advantage (keys 1–9), full colour at its 95th-percentile |A| over the logs; the address reopens the same step.</p>",
        e.groups.len(),
        groups_in_logs,
        esc(&e.default_method)
    );
    if e.graphviz_missing {
        let _ = writeln!(o, "<p class=\"note\">Graphviz <code>dot</code> was not found when this report was built: the groups' state graphs are left out (install graphviz and build the report again).</p>");
    }
    if e.named_left_out > 0 {
        let _ = writeln!(
            o,
            "<p class=\"note\">{} more groups matched <code>--explore</code> than <code>--explore-max</code> allows: the earliest in the input are here.</p>",
            e.named_left_out
        );
    }
    let _ = writeln!(
        o,
        "<style>{}</style>\n<script type=\"application/json\" id=\"credit-explorer-data\">{}</script>\n<div id=\"explorer\"></div>\n<script>{}</script>",
        crate::explorer::CSS,
        e.json(),
        crate::explorer::JS
    );
}
