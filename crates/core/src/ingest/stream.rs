//! The driver: reads the inputs in bounded memory and hands out windows of complete units.
//!
//! A reader thread cuts files into tasks (JSONL chunks of whole lines, Parquet slices); tasks are
//! parsed in parallel; the [`Assembler`] takes the blocks in input order; windows of complete
//! units are processed in parallel (`process`) while the next tasks are parsed, and their results
//! go to `sink` in order. Memory holds the tasks in flight, the open units and the windows being
//! processed, never the whole log.
//!
//! If one pass cannot stay exact (a unit's rows come back after it closed: see `assemble`), the
//! consumer is told to start over (`restart`), an index pass finds each unit's last row, and a
//! second pass closes every unit exactly there.

use super::assemble::{Assembler, Closing, Flow, Indexer, Pending, UnitKind, Window};
use super::files::{self, Format, Input};
use super::jsonl::{self, Block, Chunk};
use super::parquet;
use super::{FileSummary, IngestOptions, IngestReport};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

/// How far a read has got, for a progress bar.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// Bytes of the input files read so far (compressed bytes for .gz/.zst).
    pub bytes: u64,
    pub total_bytes: u64,
    pub rows: u64,
    /// 1 for the single pass; 2 and 3 for the index pass and the second pass of a re-read.
    pub pass: u8,
}

/// Sizes that decide memory: chunks, quiet distance and budget (bytes).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub chunk_bytes: usize,
    pub quiet_bytes: u64,
    pub budget_bytes: u64,
}

impl Default for Limits {
    /// 4 MiB chunks; a unit closes after 32 MiB of other rows; at most 256 MiB of rows held.
    /// `CREDIT_CHUNK_BYTES`, `CREDIT_QUIET_BYTES` and `CREDIT_BUDGET_BYTES` override them (tests
    /// use tiny values to make every unit close early and exercise the re-read).
    fn default() -> Self {
        let env = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(default)
        };
        Limits {
            chunk_bytes: env("CREDIT_CHUNK_BYTES", 4 << 20).max(1) as usize,
            quiet_bytes: env("CREDIT_QUIET_BYTES", 32 << 20),
            budget_bytes: env("CREDIT_BUDGET_BYTES", 256 << 20),
        }
    }
}

enum Task {
    Chunk(Chunk),
    Slice(Arc<parquet::Plan>, parquet::Slice),
    /// A whole-file problem (unreadable Parquet, a required column missing).
    Problem(u32, Error),
}

impl Task {
    /// About how many bytes its rows take once parsed (a Parquet slice's are many times its bytes
    /// on disk).
    fn bytes(&self) -> usize {
        match self {
            Task::Chunk(chunk) => chunk.len,
            Task::Slice(_, slice) => slice.bytes,
            Task::Problem(..) => 0,
        }
    }
}

/// What the consumer of a stream receives, in order.
pub enum Event<R> {
    /// A window and what `process` made of it (boxed: a window is large beside `Restart`).
    Window(Box<Window>, R),
    /// The input is read again from the start: forget every window received so far.
    Restart,
}

/// Reads `paths` and calls `process` on every window (in parallel) and `sink` on its result (in
/// input order). Returns what ingest saw. `E` is the caller's error type (any that a core error
/// converts into).
pub fn stream<R: Send, E: From<Error> + Send>(
    paths: &[PathBuf],
    options: &IngestOptions,
    unit: UnitKind,
    progress: &(dyn Fn(Progress) + Sync),
    process: impl Fn(&Window) -> std::result::Result<R, E> + Sync,
    mut sink: impl FnMut(Event<R>) -> std::result::Result<(), E>,
) -> std::result::Result<IngestReport, E> {
    options.columns.check().map_err(Error::Config)?;
    let mut notes = Vec::new();
    let mut inputs = files::collect(paths, &mut notes)?;
    files::apply_spans(&mut inputs, &options.spans)?;
    let limits = options.limits;
    let closing = Closing::Optimistic {
        quiet: limits.quiet_bytes,
        budget: limits.budget_bytes,
    };
    let first = pass(
        &inputs, options, unit, closing, 1, progress, &process, &mut sink,
    )?;
    let mut report = match first {
        Outcome::Done(report) => report,
        Outcome::Restart(reason) => {
            sink(Event::Restart)?;
            let mut indexer = Indexer::new();
            read_blocks(&inputs, options, 2, progress, &mut |block| {
                indexer.push(unit, &block.rows);
                Ok(Flow::Continue)
            })?;
            let closing = Closing::Exact {
                last_seq: indexer.last_seq,
                present: indexer.present,
            };
            match pass(
                &inputs, options, unit, closing, 3, progress, &process, &mut sink,
            )? {
                Outcome::Done(mut report) => {
                    report.notes.push(format!(
                        "read the logs twice: {reason}; an index pass found where each unit ends (memory then holds the rows between a unit's first and last row)"
                    ));
                    report
                }
                Outcome::Restart(reason) => {
                    return Err(Error::Config(format!(
                        "internal: the second pass could not place a row ({reason})"
                    ))
                    .into())
                }
            }
        }
    };
    options
        .columns
        .check_seen(&report.column_names.mapped, &report.column_names.others)
        .map_err(Error::Config)?;
    notes.append(&mut report.notes);
    report.notes = notes;
    if report.rows == 0 {
        return Err(empty_input(paths, &report).into());
    }
    Ok(report)
}

fn empty_input(paths: &[PathBuf], report: &IngestReport) -> Error {
    let what: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let detail = match report.skipped_examples.first() {
        Some(first) => format!(
            "; all {} rows were skipped as bad (the first: {first})",
            report.skipped_total()
        ),
        None => String::new(),
    };
    Error::input(
        crate::error::Location::file(what.join(", ")),
        crate::error::Reason::EmptyInput,
        format!("no step rows found{detail}"),
    )
}

enum Outcome {
    Done(IngestReport),
    Restart(String),
}

#[allow(clippy::too_many_arguments)]
fn pass<R: Send, E: From<Error> + Send>(
    inputs: &[Input],
    options: &IngestOptions,
    unit: UnitKind,
    closing: Closing,
    pass_number: u8,
    progress: &(dyn Fn(Progress) + Sync),
    process: &(impl Fn(&Window) -> std::result::Result<R, E> + Sync),
    sink: &mut impl FnMut(Event<R>) -> std::result::Result<(), E>,
) -> std::result::Result<Outcome, E> {
    let paths: Vec<PathBuf> = inputs.iter().map(|i| i.path.clone()).collect();
    let mut assembler = Assembler::new(
        unit,
        closing,
        options.lenient,
        options.success_threshold,
        options.gamma,
        paths,
    );
    assembler.expect_bytes(inputs.iter().map(|i| i.size).sum());
    assembler.report.files = inputs
        .iter()
        .map(|i| FileSummary {
            path: i.path.clone(),
            format: i.format.name(),
            rows: 0,
        })
        .collect();
    let mut pending: Vec<Pending> = Vec::new();
    let mut restart: Option<String> = None;
    // Windows are built and processed in parallel; their results reach `sink` in order.
    let run = |windows: Vec<Pending>| -> Vec<std::result::Result<(Window, R), E>> {
        windows
            .into_par_iter()
            .map(|p| {
                let window = p.build()?;
                let result = process(&window)?;
                Ok((window, result))
            })
            .collect()
    };
    let mut deliver =
        |results: Vec<std::result::Result<(Window, R), E>>| -> std::result::Result<(), E> {
            for result in results {
                let (window, r) = result?;
                sink(Event::Window(Box::new(window), r))?;
            }
            Ok(())
        };
    read_blocks_with(
        inputs,
        options,
        pass_number,
        progress,
        &mut |blocks: Vec<Result<Block>>| -> std::result::Result<Option<Vec<Pending>>, E> {
            // Windows from the previous round are processed while these blocks were parsed
            // (see `read_blocks_with`); here the blocks are assembled in order.
            for block in blocks {
                match assembler.push(block?)? {
                    Flow::Continue => {}
                    Flow::Restart(reason) => {
                        restart = Some(reason);
                        return Ok(None);
                    }
                }
            }
            while let Some(window) = assembler.window(false) {
                pending.push(window);
            }
            Ok(Some(std::mem::take(&mut pending)))
        },
        &run,
        &mut deliver,
    )?;
    if let Some(reason) = restart {
        return Ok(Outcome::Restart(reason));
    }
    assembler.finish()?;
    while let Some(window) = assembler.window(true) {
        pending.push(window);
    }
    deliver(run(pending))?;
    let mut report = std::mem::take(&mut assembler.report);
    report.columns = std::mem::take(&mut report.columns_seen)
        .into_iter()
        .collect();
    report
        .columns
        .sort_by_key(|u| (crate::schema::field_index(u.field), u.column.clone()));
    Ok(Outcome::Done(report))
}

/// Parses every input into blocks (in parallel) and hands them to `take` in order.
fn read_blocks(
    inputs: &[Input],
    options: &IngestOptions,
    pass_number: u8,
    progress: &(dyn Fn(Progress) + Sync),
    take: &mut dyn FnMut(Block) -> Result<Flow>,
) -> Result<()> {
    read_blocks_with::<(), (), Error>(
        inputs,
        options,
        pass_number,
        progress,
        &mut |blocks| {
            for block in blocks {
                if let Flow::Restart(_) = take(block?)? {
                    return Ok(None);
                }
            }
            Ok(Some(Vec::new()))
        },
        &|_: Vec<()>| Vec::new(),
        &mut |_| Ok(()),
    )
}

/// The parallel loop: each round parses the next tasks while the windows of the round before are
/// processed (`rayon::join`), then `assemble` takes the blocks in order and returns the windows
/// for the next round (`None` stops), and `finish` receives the processed windows in order.
#[allow(clippy::type_complexity)]
fn read_blocks_with<W: Send, R: Send, E: From<Error> + Send>(
    inputs: &[Input],
    options: &IngestOptions,
    pass_number: u8,
    progress: &(dyn Fn(Progress) + Sync),
    assemble: &mut dyn FnMut(Vec<Result<Block>>) -> std::result::Result<Option<Vec<W>>, E>,
    process: &(dyn Fn(Vec<W>) -> Vec<R> + Sync),
    finish: &mut dyn FnMut(Vec<R>) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let total_bytes: u64 = inputs.iter().map(|i| i.size).sum();
    let threads = rayon::current_num_threads().max(1);
    let chunk_bytes = options.limits.chunk_bytes;
    let columns = &options.columns;
    let paths: Vec<PathBuf> = inputs.iter().map(|i| i.path.clone()).collect();
    // Chunk buffers go back to the reader once parsed.
    let buffers = &jsonl::ChunkBuffers::new(chunk_bytes);
    std::thread::scope(|scope| -> std::result::Result<(), E> {
        let (send, receive) = sync_channel::<Result<Task>>(2 * threads);
        let reader = scope.spawn(move || produce(inputs, chunk_bytes, buffers, columns, send));
        let mut state = Progress {
            total_bytes,
            pass: pass_number,
            ..Default::default()
        };
        // A pipeline of three rounds: while the pool parses round i+1's tasks and processes the
        // windows assembled in round i, this thread delivers round i's results, assembles round
        // i's blocks and takes round i+2's tasks from the reader.
        let mut parsed: Vec<Result<Block>> = Vec::new();
        let mut windows: Vec<W> = Vec::new();
        let mut results: Vec<R> = Vec::new();
        // Rounds of whole chunks are as before (a chunk ends at a line break, under
        // `chunk_bytes`); rounds of small files' tasks hold about as much input.
        let next = || next_tasks(&receive, 2 * threads, threads * chunk_bytes);
        let result = (|| -> std::result::Result<(), E> {
            let mut tasks = next()?;
            loop {
                let reading = !tasks.is_empty();
                if !reading && parsed.is_empty() && windows.is_empty() && results.is_empty() {
                    return Ok(());
                }
                let (to_assemble, to_process, to_deliver) = (
                    std::mem::take(&mut parsed),
                    std::mem::take(&mut windows),
                    std::mem::take(&mut results),
                );
                let (mut new_parsed, mut new_results) = (Vec::new(), Vec::new());
                let (mut delivered, mut assembled) = (Ok(()), Ok(None));
                let mut next_round = Ok(Vec::new());
                rayon::in_place_scope(|s| {
                    s.spawn(|_| {
                        new_parsed = tasks
                            .into_par_iter()
                            .map(|task| parse_task(task, &paths, columns, buffers))
                            .collect();
                    });
                    s.spawn(|_| new_results = process(to_process));
                    delivered = finish(to_deliver);
                    for b in to_assemble.iter().flatten() {
                        state.bytes += b.disk_bytes;
                        state.rows += b.rows.len() as u64;
                    }
                    if delivered.is_ok() {
                        assembled = assemble(to_assemble);
                    }
                    if reading && matches!(assembled, Ok(Some(_))) {
                        next_round = next();
                    }
                });
                delivered?;
                progress(state);
                match assembled? {
                    Some(w) => windows = w,
                    None => return finish(new_results),
                }
                parsed = new_parsed;
                results = new_results;
                tasks = next_round?;
            }
        })();
        drop(receive);
        let produced = reader
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        result?;
        Ok(produced?)
    })
}

/// Takes the next round of tasks: at least `n` of them and `bytes` of input between them (many
/// small files make small tasks, and each round costs the same however little it holds), or
/// what is left. A Parquet slice counts as two tasks: it decodes to twice a chunk's bytes and
/// more (`parquet::SLICE_BYTES`), and a round of one slice per thread holds as much as the two
/// chunks per thread of JSONL. An empty list means the input has ended.
fn next_tasks(receive: &Receiver<Result<Task>>, n: usize, bytes: usize) -> Result<Vec<Task>> {
    let mut tasks = Vec::with_capacity(n);
    let (mut counted, mut taken) = (0, 0);
    while counted < n || taken < bytes {
        match receive.recv() {
            Ok(task) => {
                let task = task?;
                taken += task.bytes();
                counted += match task {
                    Task::Slice(..) => 2,
                    Task::Chunk(_) | Task::Problem(..) => 1,
                };
                tasks.push(task);
            }
            Err(_) => break,
        }
    }
    Ok(tasks)
}

/// The reader thread: files in order, cut into tasks. Stops when the receiver is gone.
fn produce(
    inputs: &[Input],
    chunk_bytes: usize,
    buffers: &jsonl::ChunkBuffers,
    columns: &crate::schema::ColumnMap,
    send: std::sync::mpsc::SyncSender<Result<Task>>,
) -> Result<()> {
    for (file, input) in inputs.iter().enumerate() {
        let file = file as u32;
        let sent = match input.format {
            Format::Jsonl(compression) => {
                let mut open = true;
                let read =
                    jsonl::read_chunks(input, compression, file, chunk_bytes, buffers, |chunk| {
                        open = send.send(Ok(Task::Chunk(chunk))).is_ok();
                        open
                    });
                match read {
                    Ok(()) => open,
                    Err(e) => {
                        let _ = send.send(Err(e));
                        false
                    }
                }
            }
            Format::Parquet => match parquet::plan(&input.path, file, input.size, columns) {
                Ok(plan) => {
                    let plan = Arc::new(plan);
                    plan.slices
                        .iter()
                        .all(|&slice| send.send(Ok(Task::Slice(plan.clone(), slice))).is_ok())
                }
                Err(e @ Error::Input { .. }) => send.send(Ok(Task::Problem(file, e))).is_ok(),
                Err(e) => {
                    let _ = send.send(Err(e));
                    false
                }
            },
        };
        if !sent {
            return Ok(());
        }
    }
    Ok(())
}

fn parse_task(
    task: Task,
    paths: &[PathBuf],
    columns: &crate::schema::ColumnMap,
    buffers: &jsonl::ChunkBuffers,
) -> Result<Block> {
    match task {
        Task::Chunk(chunk) => {
            let block = jsonl::parse(&chunk, &paths[chunk.file as usize], columns);
            buffers.give(chunk.buffer);
            Ok(block)
        }
        Task::Slice(plan, slice) => parquet::read_slice(&paths[plan.file as usize], &plan, slice),
        Task::Problem(file, e) => Ok(Block {
            file,
            rows: Default::default(),
            problems: vec![e],
            uses: Default::default(),
            columns: Default::default(),
            disk_bytes: 0,
        }),
    }
}
