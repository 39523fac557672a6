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
use super::pages;
use super::parquet;
use super::{FileSummary, IngestOptions, IngestReport};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::sync_channel;
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
    /// Whole lines of one file, or the whole lines of several small files (see [`produce`]):
    /// parsed by one job, their blocks taken in turn as if each chunk were a task of its own.
    Chunks(Vec<Chunk>),
    Slice(Arc<parquet::Plan>, pages::Slice),
    /// A whole-file problem (unreadable Parquet, a required column missing).
    Problem(u32, Error),
}

/// What a task, or one of its blocks, counts for against the tasks parsed at once and in a
/// round ([`is_round`]): units (a chunk one; a Parquet slice two, as it decodes to twice a
/// chunk's bytes and more, `parquet::SLICE_BYTES`, so one slice per thread is as much as two
/// chunks per thread of JSONL) and about how many bytes its rows take once parsed (a Parquet
/// slice's are many times its bytes on disk).
type Weight = (usize, usize);

impl Task {
    fn weight(&self) -> Weight {
        match self {
            Task::Chunks(chunks) => (chunks.len(), chunks.iter().map(|c| c.len).sum()),
            Task::Slice(_, slice) => (2, slice.bytes),
            Task::Problem(..) => (1, 0),
        }
    }
}

/// A task's blocks in order, each with its chunk's or slice's [`Weight`].
type Parsed = Vec<(Result<Block>, Weight)>;

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
            // A round of blocks, in order, assembled while other tasks are parsed and the
            // windows before are processed (see `read_blocks_with`).
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

/// What a job of the pool hands back to the loop of [`read_blocks_with`], or its panic (which the
/// loop raises again: a job that ended without a word would leave it waiting).
enum Done<R> {
    /// The blocks of the task numbered so, with the task's [`Weight`].
    Parsed(usize, Weight, std::thread::Result<Parsed>),
    /// The results of the batch of windows numbered so.
    Processed(usize, std::thread::Result<Vec<R>>),
}

/// How many batches of windows are processed at once: two, so that while one ends on its
/// slowest window the next keeps the other cores busy.
const BATCHES: usize = 2;

/// Jobs numbered as they start, their results taken back in that order however they end.
struct InOrder<T> {
    started: usize,
    taken: usize,
    ended: BTreeMap<usize, T>,
}

impl<T> InOrder<T> {
    fn new() -> Self {
        InOrder {
            started: 0,
            taken: 0,
            ended: BTreeMap::new(),
        }
    }

    /// The number of a job starting now.
    fn start(&mut self) -> usize {
        self.started += 1;
        self.started - 1
    }

    fn end(&mut self, number: usize, result: T) {
        self.ended.insert(number, result);
    }

    /// The next result in order, once its job has ended.
    fn take(&mut self) -> Option<T> {
        let result = self.ended.remove(&self.taken)?;
        self.taken += 1;
        Some(result)
    }

    /// Jobs started and not ended.
    fn running(&self) -> usize {
        self.started - self.taken - self.ended.len()
    }
}

/// Runs a job, its panic caught to be sent on.
fn caught<T>(job: impl FnOnce() -> T) -> std::thread::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
}

/// The parallel loop. The pool parses about a round of tasks at once ([`is_round`]), a new one
/// starting as soon as one is parsed, so that no core waits for the slowest task of a round (as
/// it did when the loop went round by round); it processes up to [`BATCHES`] batches of windows at
/// once, a batch starting as soon as it is assembled. This thread takes the tasks from the reader,
/// gives `assemble` the blocks in input order a round at a time (so windows are cut where the
/// rounds cut them), collects the windows it returns (`None` stops), and gives `finish` the
/// results in order. While that many batches are being processed, or one is assembled and waits,
/// no task is started: memory holds two batches being processed and a round being read, or one
/// and a round more, as when a batch being processed had one waiting behind it.
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
        let (done, events) = std::sync::mpsc::channel::<Done<R>>();
        let (paths, done) = (&paths, &done);
        let result = rayon::in_place_scope(|s| -> std::result::Result<(), E> {
            // Tasks' blocks (each with its weight), and the units and bytes being parsed.
            let mut parsed: InOrder<Parsed> = InOrder::new();
            let (mut parsing, mut parsing_bytes) = (0, 0);
            let mut lines_read = LinesRead::default();
            // Blocks in order, in rounds as the reading loop used to take tasks (`is_round`):
            // the round being filled, and those filled, not yet assembled.
            let mut round: (Vec<Result<Block>>, usize, usize) = (Vec::new(), 0, 0);
            let mut rounds: VecDeque<Vec<Result<Block>>> = VecDeque::new();
            // Windows assembled and waiting, and the batches of them processed (their results
            // delivered in order).
            let mut waiting: Vec<W> = Vec::new();
            let mut processed: InOrder<Vec<R>> = InOrder::new();
            let (mut reading, mut stopped) = (true, false);
            // Each turn starts new tasks (a task parsed makes room for the next before anything
            // else here runs) and the waiting windows if a batch can start, delivers
            // the results in order, assembles the next round if no windows wait, and waits for
            // a job to end.
            loop {
                while reading
                    && !stopped
                    && !is_round(parsing, parsing_bytes, threads, chunk_bytes)
                    && waiting.is_empty()
                    && processed.running() < BATCHES
                {
                    let Ok(task) = receive.recv() else {
                        reading = false;
                        break;
                    };
                    let task = task?;
                    let weight @ (units, bytes) = task.weight();
                    (parsing, parsing_bytes) = (parsing + units, parsing_bytes + bytes);
                    let number = parsed.start();
                    s.spawn(move |_| {
                        let blocks = caught(|| parse_task(task, paths, columns, buffers));
                        let _ = done.send(Done::Parsed(number, weight, blocks));
                    });
                }
                // The pool gets the next batch before results are delivered (`finish` may write
                // them out).
                if processed.running() < BATCHES && !waiting.is_empty() {
                    let windows = std::mem::take(&mut waiting);
                    let number = processed.start();
                    s.spawn(move |_| {
                        let _ = done.send(Done::Processed(number, caught(|| process(windows))));
                    });
                }
                while let Some(results) = processed.take() {
                    finish(results)?;
                }
                // Block by block: rounds are cut where they would be with a task per chunk.
                while let Some(blocks) = parsed.take() {
                    for (mut block, (units, bytes)) in blocks {
                        if let Ok(block) = &mut block {
                            lines_read.number(block);
                        }
                        round = (round.0, round.1 + units, round.2 + bytes);
                        round.0.push(block);
                        if is_round(round.1, round.2, threads, chunk_bytes) {
                            rounds.push_back(std::mem::take(&mut round).0);
                        }
                    }
                }
                let read_all = !reading && parsing == 0;
                if read_all && !round.0.is_empty() {
                    rounds.push_back(std::mem::take(&mut round).0);
                }
                // A round at a time, as before, so that windows are cut where they were; the next
                // once these windows are being processed.
                while !stopped && waiting.is_empty() {
                    let Some(blocks) = rounds.pop_front() else {
                        break;
                    };
                    for b in blocks.iter().flatten() {
                        state.bytes += b.disk_bytes;
                        state.rows += b.rows.len() as u64;
                    }
                    progress(state);
                    match assemble(blocks)? {
                        Some(windows) => waiting = windows,
                        None => stopped = true,
                    }
                }
                if processed.running() < BATCHES && !waiting.is_empty() {
                    // Windows to start processing: the next turn does, without waiting.
                    continue;
                }
                let drained = stopped || (read_all && rounds.is_empty());
                if parsing == 0 && processed.running() == 0 {
                    // Nothing runs: done, or the next turn has tasks to start.
                    if drained {
                        return Ok(());
                    }
                    continue;
                }
                // A job runs, and every job sends before it ends.
                let Ok(event) = events.recv() else {
                    return Ok(());
                };
                match event {
                    Done::Parsed(number, (units, bytes), blocks) => {
                        let blocks =
                            blocks.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                        (parsing, parsing_bytes) = (parsing - units, parsing_bytes - bytes);
                        if !stopped {
                            parsed.end(number, blocks);
                        }
                    }
                    Done::Processed(number, results) => {
                        let results =
                            results.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                        processed.end(number, results);
                    }
                }
            }
        });
        drop(receive);
        let produced = reader
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        result?;
        Ok(produced?)
    })
}

/// The lines of the current file in the blocks taken so far, in order: the next block's lines
/// follow them.
#[derive(Default)]
struct LinesRead {
    file: u32,
    lines: u64,
}

impl LinesRead {
    fn number(&mut self, block: &mut Block) {
        if block.file != self.file {
            *self = LinesRead {
                file: block.file,
                lines: 0,
            };
        }
        block.after_lines(self.lines);
        self.lines += block.lines;
    }
}

/// Whether tasks of `units` and `bytes` of input ([`Weight`]) make a round: at least two
/// units per thread and a chunk per thread (many small files make small tasks, and each round
/// costs the same however little it holds). A round of one Parquet slice per thread holds as
/// much as two chunks per thread of JSONL.
fn is_round(units: usize, bytes: usize, threads: usize, chunk_bytes: usize) -> bool {
    units >= 2 * threads && bytes >= threads * chunk_bytes
}

/// The reader thread: files in order, cut into tasks. Stops when the receiver is gone.
///
/// The chunks of JSONL files smaller than a chunk are gathered into one task until they hold a
/// chunk's bytes: a task costs thread wake-ups (the reader's send, the job's start and its
/// result) however little it holds, and with a task per file they were a third of the time to
/// read 10k files of 18 KB.
fn produce(
    inputs: &[Input],
    chunk_bytes: usize,
    buffers: &jsonl::ChunkBuffers,
    columns: &crate::schema::ColumnMap,
    send: std::sync::mpsc::SyncSender<Result<Task>>,
) -> Result<()> {
    let mut gathered = Gathered::default();
    for (file, input) in inputs.iter().enumerate() {
        let file = file as u32;
        let small = matches!(input.format, Format::Jsonl(_)) && input.size < chunk_bytes as u64;
        // Tasks go in file order: what was gathered goes before any other task.
        if !small && !gathered.send(&send) {
            return Ok(());
        }
        let sent = match input.format {
            Format::Jsonl(compression) => {
                let mut open = true;
                let read =
                    jsonl::read_chunks(input, compression, file, chunk_bytes, buffers, |chunk| {
                        open = match small {
                            true => gathered.add(chunk, chunk_bytes, &send),
                            false => send.send(Ok(Task::Chunks(vec![chunk]))).is_ok(),
                        };
                        open
                    });
                match read {
                    Ok(()) => open,
                    Err(e) => {
                        let _ = gathered.send(&send) && send.send(Err(e)).is_ok();
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
    gathered.send(&send);
    Ok(())
}

/// Chunks of small files gathered for one task, and their bytes.
#[derive(Default)]
struct Gathered(Vec<Chunk>, usize);

impl Gathered {
    /// Adds a chunk, and sends the task once it holds `chunk_bytes`: whether the receiver is
    /// still there.
    fn add(
        &mut self,
        chunk: Chunk,
        chunk_bytes: usize,
        send: &std::sync::mpsc::SyncSender<Result<Task>>,
    ) -> bool {
        self.1 += chunk.len;
        self.0.push(chunk);
        self.1 < chunk_bytes || self.send(send)
    }

    /// Sends what was gathered, if anything: whether the receiver is still there.
    fn send(&mut self, send: &std::sync::mpsc::SyncSender<Result<Task>>) -> bool {
        self.1 = 0;
        match std::mem::take(&mut self.0) {
            chunks if chunks.is_empty() => true,
            chunks => send.send(Ok(Task::Chunks(chunks))).is_ok(),
        }
    }
}

fn parse_task(
    task: Task,
    paths: &[PathBuf],
    columns: &crate::schema::ColumnMap,
    buffers: &jsonl::ChunkBuffers,
) -> Parsed {
    let weight = task.weight();
    match task {
        Task::Chunks(chunks) => chunks
            .into_iter()
            .map(|chunk| {
                let block = jsonl::parse(&chunk, &paths[chunk.file as usize], columns);
                let weight = (1, chunk.len);
                buffers.give(chunk.data);
                (Ok(block), weight)
            })
            .collect(),
        Task::Slice(plan, slice) => vec![(
            parquet::read_slice(&paths[plan.file as usize], &plan, slice),
            weight,
        )],
        Task::Problem(file, e) => vec![(
            Ok(Block {
                file,
                rows: Default::default(),
                problems: vec![e],
                uses: Default::default(),
                columns: Default::default(),
                disk_bytes: 0,
                lines: 0,
            }),
            weight,
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two batches are processed at once, so with two threads or more a later one can end first
    /// (here every other batch is slow; handing results on as they come fails this test):
    /// `finish` still gets every batch's results once, in order.
    #[test]
    fn results_reach_finish_in_order_when_batches_end_out_of_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let line = r#"{"uid": "g", "traj_uid": "t", "step": 0, "reward": 0.0}"#;
        std::fs::write(&path, format!("{line}\n").repeat(2000)).unwrap();
        let inputs = files::collect(&[path], &mut Vec::new()).unwrap();
        let mut options = IngestOptions::default();
        options.limits.chunk_bytes = 1000;
        // Each round of blocks makes a batch of two windows, numbered in input order. Called from
        // this thread, as the commands do: the pool's threads run the jobs.
        let (mut batches, mut delivered) = (0, Vec::new());
        read_blocks_with::<usize, usize, Error>(
            &inputs,
            &options,
            1,
            &|_| {},
            &mut |blocks| {
                for block in blocks {
                    block?;
                }
                batches += 1;
                Ok(Some(vec![2 * batches - 2, 2 * batches - 1]))
            },
            &|windows: Vec<usize>| {
                if windows[0].is_multiple_of(4) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                windows
            },
            &mut |results| {
                delivered.extend(results);
                Ok(())
            },
        )
        .unwrap();
        assert!(batches >= 10, "{batches} batches");
        assert_eq!(delivered, (0..2 * batches).collect::<Vec<_>>());
    }
}
