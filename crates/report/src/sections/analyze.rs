//! `credit analyze`'s sections: what is in the logs, in one screen of text (`--format json` is
//! the serialised `Summary`, every figure).

use super::pct;
use crate::doc::{Block, Cell, Column, Header, Section, Table, Text};
use credit_core::analyses::progress::{Curve, ProgressStats, SegmentStats};
use credit_core::analyses::summary::{Rate, SingleTurn, SizeDistribution, Summary};
use credit_core::methods::hisr::Segments;
use credit_core::schema::{columns::OBS, ColumnUse};
use credit_core::wording::plural;

/// Per-iteration rows beyond this many show the first and last few: a long run stays readable,
/// and `--format json` has every iteration.
const ITERATION_LINES: usize = 12;

/// Progress rows shown, by step position from the first.
const POSITION_LINES: usize = 10;

/// The sections, in order; those the logs do not allow are left out.
pub fn analyze(s: &Summary) -> Vec<Section<'static>> {
    // Multi-turn logs' lengths come before the actions, their step groups and graphs after.
    let (lengths, turns) = match &s.single_turn {
        Some(t) => (None, vec![single_turn(t)]),
        None => (Some(lengths(s)), vec![step_groups(s), graphs(s)]),
    };
    let sections = [overview(s), success(s)]
        .into_iter()
        .chain(lengths)
        .chain([invalid_actions(s), degenerate(s)])
        .chain(turns)
        .map(Some)
        .chain([
            s.progress.as_ref().map(progress),
            s.segments.as_ref().map(segments),
            padding(s),
            skipped(s),
            diagnostics(s),
        ]);
    sections.flatten().collect()
}

/// Adds `items` as rows; beyond [`ITERATION_LINES`] the first and last few, with a line saying
/// how many were left out in the middle.
fn iteration_rows<T>(table: &mut Table, items: &[T], row: impl Fn(&T) -> Vec<Cell>) {
    let half = ITERATION_LINES / 2 - 1;
    let (first, last) = if items.len() <= ITERATION_LINES {
        (items, &items[..0])
    } else {
        (&items[..half], &items[items.len() - half..])
    };
    for item in first {
        table.row(row(item));
    }
    if !last.is_empty() {
        table.omitted = Some((
            table.rows.len() - 1,
            Text::plain(format!(
                "… {} more iterations (all of them: --format json)",
                items.len() - 2 * half
            )),
        ));
    }
    for item in last {
        table.row(row(item));
    }
}

/// Rates by key (task, iteration) four spaces in: the key, the rate, out of how many `unit`.
fn rates(rates: &[Rate], unit: &str, by_iteration: bool) -> Block<'static> {
    let mut table = Table::of(vec![
        Column::left("").fixed(32, 0),
        Column::right("").fixed(7, 1),
        Column::left("").fixed(0, 2),
    ])
    .header(Header::Hidden);
    let row = |r: &Rate| {
        vec![
            r.key.as_str().into(),
            pct(r.rate).into(),
            format!("({} {unit})", r.n).into(),
        ]
    };
    if by_iteration {
        iteration_rows(&mut table, rates, row);
    } else {
        for r in rates {
            table.row(row(r));
        }
    }
    Block::Indented(vec![Block::Table(table)])
}

/// Counts, the columns read under other names (and each field logged under several), group sizes.
fn overview(s: &Summary) -> Section<'static> {
    let mut section = Section::untitled("overview");
    let iterations = s
        .iterations
        .map_or(String::new(), |i| format!(", {}", plural(i, "iteration")));
    section.push(Block::Paragraph(Text::plain(format!(
        "{}, {}{iterations}, {}, {}",
        plural(s.files, "file"),
        plural(s.rows, "row"),
        plural(s.groups, "group"),
        plural(s.trajectories, "trajectory")
    ))));
    let renamed: Vec<String> = s
        .columns
        .iter()
        .filter(|u| u.column != u.field || u.field == OBS)
        .map(ColumnUse::short)
        .collect();
    section.push(Block::Paragraph(Text::plain(format!(
        "columns: {}",
        renamed.join(", ")
    ))));
    section
        .blocks
        .extend(super::column_collisions(&s.columns, false));
    let r = &s.rollouts_per_group;
    section.push(Block::Paragraph(Text::plain(format!(
        "rollouts per group: min {} / mean {:.1} / max {}; {} with a single rollout",
        r.min,
        r.mean,
        r.max,
        plural(r.single_rollout_groups, "group")
    ))));
    section
}

fn success(s: &Summary) -> Section<'static> {
    let mut section = Section::untitled("success");
    section.push(Block::Paragraph(Text::plain(format!(
        "success: {} of trajectories",
        pct(s.success.overall)
    ))));
    for (title, list, by_iteration) in [
        ("per task", &s.success.per_task, false),
        ("per iteration", &s.success.per_iteration, true),
    ] {
        if !list.is_empty() {
            section.push(Block::Indented(vec![
                Block::Paragraph(Text::plain(format!("{title}:"))),
                rates(list, "trajectories", by_iteration),
            ]));
        }
    }
    section
}

fn lengths(s: &Summary) -> Section<'static> {
    let mut table = Table::of(vec![
        Column::left("").fixed(16, 0),
        Column::right("n").fixed(5, 1),
        Column::right("mean").fixed(6, 1),
        Column::right("median").fixed(7, 1),
        Column::right("max").fixed(4, 1),
    ])
    .header(Header::Titled("trajectory length".into()));
    for (name, l) in [
        ("success", &s.length.success),
        ("failure", &s.length.failure),
    ] {
        table.row(vec![
            name.into(),
            l.trajectories.to_string().into(),
            super::num(l.mean, 1).into(),
            super::num(l.median, 1).into(),
            l.max.to_string().into(),
        ]);
    }
    let mut section = Section::untitled("lengths");
    section.push(Block::Table(table));
    section
}

fn invalid_actions(s: &Summary) -> Section<'static> {
    let inv = &s.invalid_actions;
    let mut sentence = Text::plain(format!(
        "invalid actions: {} of steps ({} steps)",
        pct(inv.rate),
        inv.steps
    ));
    if !inv.logged {
        sentence = sentence.and(" (no ").and_code("valid").and(" column)");
    }
    let mut section = Section::untitled("invalid");
    section.push(Block::Paragraph(sentence));
    if !inv.per_task.is_empty() {
        section.push(Block::Indented(vec![rates(&inv.per_task, "steps", false)]));
    }
    section
}

fn degenerate(s: &Summary) -> Section<'static> {
    let d = &s.degenerate;
    let mut section = Section::untitled("degenerate");
    section.push(Block::Paragraph(Text::plain(format!(
        "degenerate groups (GRPO signal 0): {} all-success + {} all-fail = {} of groups, {} of steps",
        d.all_success_groups,
        d.all_fail_groups,
        pct(d.share_of_groups),
        pct(d.share_of_steps)
    ))));
    section
}

/// A size distribution's four shares (sizes 1, 2, 3, more), as cells.
fn buckets(d: &SizeDistribution, of_steps: bool) -> Vec<Cell> {
    let v = if of_steps {
        d.pct_steps
    } else {
        d.pct_clusters
    };
    v.iter().map(|x| Cell::from(format!("{x:.1}%"))).collect()
}

/// Columns for [`buckets`] after a label column of `label_width`, `gap` spaces apart from it.
fn bucket_columns(label: &str, label_width: Option<usize>, gap: usize) -> Vec<Column> {
    let label = Column {
        width: label_width,
        ..Column::left(label)
    };
    let sizes = ["size 1", "size 2", "size 3", ">3"];
    std::iter::once(label)
        .chain(
            sizes
                .iter()
                .enumerate()
                .map(|(k, size)| Column::right(size).fixed(7, if k == 0 { gap } else { 1 })),
        )
        .collect()
}

fn step_groups(s: &Summary) -> Section<'static> {
    let g = &s.step_groups;
    let mut section = Section::untitled("step-groups");
    section.push(Block::Paragraph(Text::plain(format!(
        "exact-anchor step groups: {} clusters over {} steps, mean size {:.2}",
        g.overall.clusters, g.overall.steps, g.overall.mean_size
    ))));
    let mut table =
        Table::of(bucket_columns("", Some(19), 1)).header(Header::Titled(String::new()));
    for (label, of_steps) in [("% of steps", true), ("% of clusters", false)] {
        let cells = std::iter::once(Cell::from(label)).chain(buckets(&g.overall, of_steps));
        table.row(cells.collect());
    }
    iteration_rows(&mut table, &g.per_iteration, |(it, dist)| {
        std::iter::once(Cell::from(format!("iteration {it:<6} steps")))
            .chain(buckets(dist, true))
            .collect()
    });
    section.push(Block::Table(table));
    if !g.similarity.is_empty() {
        let mut similar = Table::of(
            bucket_columns("", None, 1)
                .into_iter()
                .chain([Column::left("clusters").fixed(0, 2)])
                .collect(),
        )
        .header(Header::Hidden);
        for t in &g.similarity {
            let label = Cell::from(format!("θ = {:<16}", t.threshold));
            let clusters = Cell::from(t.overall.clusters.to_string());
            let cells = std::iter::once(label)
                .chain(buckets(&t.overall, true))
                .chain([clusters]);
            similar.row(cells.collect());
        }
        section.push(Block::Indented(vec![Block::Paragraph(Text::plain(
            "similarity groups (gigpo.similarity; % of steps by size, clusters):",
        ))]));
        section.push(Block::Indented(vec![Block::Table(similar)]));
    }
    section
}

fn graphs(s: &Summary) -> Section<'static> {
    let gr = &s.graph;
    let mut section = Section::untitled("graphs");
    section.push(Block::Paragraph(Text::plain(format!(
        "state graphs (GraphGPO): {} state nodes, {} edges, {:.2} steps per node; {} of nodes reach success ({} of {} groups have one)",
        gr.nodes,
        gr.edges,
        gr.steps_per_node,
        pct(gr.share_nodes_reaching_success),
        gr.groups_with_success,
        gr.groups
    ))));
    let hist: Vec<String> = gr
        .distance_histogram
        .iter()
        .map(|(d, n)| format!("{d}:{n}"))
        .collect();
    let details = [
        format!("distance to goal (d:nodes): {}", hist.join(" ")),
        format!(
            "progress steps in failed trajectories: {} ({} of {}); non-progress steps in successful ones: {} ({} of {})",
            pct(gr.share_progress_in_failures),
            gr.progress_steps_in_failures,
            gr.failed_steps,
            pct(gr.share_non_progress_in_successes),
            gr.non_progress_steps_in_successes,
            gr.success_steps
        ),
        format!(
            "revisits: {} steps, {} trajectories with cycles; dead-end steps: {}",
            gr.revisit_steps, gr.trajectories_with_cycles, gr.dead_end_steps
        ),
    ];
    section.push(Block::List {
        title: None,
        items: details.into_iter().map(Text::plain).collect(),
        bullets: false,
    });
    section
}

/// Single-turn logs: which groups teach anything, and the rewards by group size; the
/// multi-turn figures are left out with one line saying why.
fn single_turn(t: &SingleTurn) -> Section<'static> {
    let mut section = Section::untitled("single-turn");
    section.push(Block::Paragraph(Text::plain(
        "single-turn logs (one step per rollout): trajectory lengths, step groups and state graphs do not apply",
    )));
    section.push(Block::Paragraph(Text::plain(format!(
        "zero-std groups (all rewards equal, GRPO advantage 0): {} of {}; effective groups {}",
        t.zero_std_groups,
        t.groups,
        pct(t.effective_group_fraction)
    ))));
    let mut zero_std = Table::of(vec![
        Column::left("iteration").fixed(32, 0),
        Column::right("zero-std").fixed(7, 1),
        Column::left("groups").fixed(0, 1),
    ])
    .header(Header::Hidden);
    iteration_rows(&mut zero_std, &t.zero_std_per_iteration, |rate| {
        vec![
            format!("iteration {}", rate.key).into(),
            pct(rate.rate).into(),
            format!("zero-std  ({} groups)", rate.n).into(),
        ]
    });
    section.push(Block::Indented(vec![Block::Indented(vec![Block::Table(
        zero_std,
    )])]));
    let mut rewards = Table::of(vec![
        Column::left("").fixed(21, 0),
        Column::right("groups").fixed(6, 1),
        Column::right("rollouts").fixed(9, 1),
        Column::right("mean").fixed(7, 1),
        Column::right("min").fixed(7, 1),
        Column::right("max").fixed(7, 1),
        Column::left("values").fixed(0, 2),
    ])
    .header(Header::Titled("rewards by group size".into()));
    for g in &t.reward_by_group_size {
        let values: Vec<String> = g.values.iter().map(|(v, n)| format!("{v}×{n}")).collect();
        rewards.row(vec![
            g.group_size.to_string().into(),
            g.groups.to_string().into(),
            g.rollouts.to_string().into(),
            super::num(g.mean, 3).into(),
            super::num(g.min, 3).into(),
            super::num(g.max, 3).into(),
            values.join(" ").into(),
        ]);
    }
    section.push(Block::Table(rewards));
    section
}

fn progress(p: &ProgressStats) -> Section<'static> {
    let c = &p.calibration;
    let r = c.pearson.map_or("n/a".into(), |r| super::num(r, 3));
    let mut section = Section::untitled("progress");
    section.push(Block::Paragraph(Text::plain(format!(
        "progress (SPA ĉ_t): {} trajectories, {} steps; Σĉ vs R: MSE {:.4}, Pearson r {r} (mean Σĉ {:.3}, mean R {:.3})",
        p.trajectories, p.steps, c.mse, c.mean_predicted, c.mean_return
    ))));
    let mut details = Vec::new();
    if p.incomplete_trajectories > 0 {
        details.push(
            Text::plain(format!(
                "{} trajectories left out (a step without ",
                p.incomplete_trajectories
            ))
            .and_code("progress")
            .and(")"),
        );
    }
    details.push(Text::plain(format!(
        "negative-progress steps in successful trajectories: {} ({} of {})",
        pct(p.share_negative_in_success),
        p.negative_steps_in_success,
        p.success_steps
    )));
    section.push(Block::List {
        title: None,
        items: details,
        bullets: false,
    });
    let mut table = Table::of(vec![
        Column::left("step").fixed(4, 0),
        Column::right("ĉ success").fixed(10, 1),
        Column::right("Φ success").fixed(10, 1),
        Column::right("ĉ failure").fixed(10, 2),
        Column::right("Φ failure").fixed(10, 1),
    ]);
    let cells = |c: &Option<Curve>| match c {
        Some(c) => [
            super::num(c.mean_progress, 3),
            super::num(c.mean_cumulative, 3),
        ],
        None => ["-".to_string(), "-".to_string()],
    };
    for row in p.by_position.iter().take(POSITION_LINES) {
        let cells = std::iter::once(row.position.to_string())
            .chain(cells(&row.success))
            .chain(cells(&row.failure));
        table.row(cells.map(Cell::from).collect());
    }
    if p.by_position.len() > POSITION_LINES {
        table.omitted = Some((
            POSITION_LINES - 1,
            Text::plain(format!(
                "… {} more positions (--format json)",
                p.by_position.len() - POSITION_LINES
            )),
        ));
    }
    section.push(Block::Indented(vec![Block::Table(table)]));
    section
}

fn segments(g: &SegmentStats) -> Section<'static> {
    let l = &g.segments_per_trajectory;
    let mut sentence = Text::plain("segments (HISR)");
    sentence = match g.segmenter {
        Segments::Logged => sentence,
        Segments::PerTurn => sentence
            .and(" (one per turn: no ")
            .and_code("segment")
            .and(" column, or ")
            .and_code("hisr.segments = per_turn")
            .and(")"),
        Segments::Rule => sentence
            .and(" (")
            .and_code("hisr.segments = rule")
            .and(": a heuristic, not the logged segmentation)"),
    };
    let sentence = sentence.and(format!(
        ": {:.2} per trajectory (median {:.1}, max {})",
        l.mean, l.median, l.max
    ));
    let mut section = Section::untitled("segments");
    section.push(Block::Paragraph(sentence));
    let mut table = Table::of(bucket_columns("turns per segment", None, 2));
    for (name, d) in [
        ("success", &g.turns_per_segment_success),
        ("failure", &g.turns_per_segment_failure),
    ] {
        if d.clusters > 0 {
            let label = Cell::from(format!("{name}, % of segs"));
            table.row(std::iter::once(label).chain(buckets(d, false)).collect());
        }
    }
    section.push(Block::Indented(vec![Block::Table(table)]));
    let mut details = Vec::new();
    if g.fallback_trajectories > 0 {
        details.push(
            Text::plain(format!(
                "{} trajectories with non-contiguous ",
                g.fallback_trajectories
            ))
            .and_code("segment")
            .and(" ids counted one segment per turn"),
        );
    }
    if let Some(r) = &g.reward_share {
        let three = |v: [f64; 3]| format!("{} / {} / {}", pct(v[0]), pct(v[1]), pct(v[2]));
        details.push(Text::plain(format!(
            "reward share first / middle / last segment ({} trajectories): SPRM {}, after HISR modulation {}",
            r.trajectories,
            three(r.raw),
            three(r.modulated)
        )));
    }
    if !details.is_empty() {
        section.push(Block::List {
            title: None,
            items: details,
            bullets: false,
        });
    }
    section
}

fn padding(s: &Summary) -> Option<Section<'static>> {
    if s.padding_duplicates == 0 {
        return None;
    }
    let mut section = Section::untitled("padding");
    section.push(Block::Paragraph(Text::plain(format!("padding duplicates dropped: {} rows (exact copies of earlier rows, as verl-agent's adjust_batch makes)", s.padding_duplicates))));
    Some(section)
}

fn skipped(s: &Summary) -> Option<Section<'static>> {
    if s.skipped.is_empty() {
        return None;
    }
    let list: Vec<String> = s.skipped.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let mut section = Section::untitled("skipped");
    section.push(Block::Paragraph(Text::plain(format!(
        "skipped rows (--lenient): {}",
        list.join(", ")
    ))));
    Some(section)
}

fn diagnostics(s: &Summary) -> Option<Section<'static>> {
    let mut section = Section::untitled("diagnostics");
    section.push(super::diagnostics(s, "worth a look")?);
    Some(section)
}
