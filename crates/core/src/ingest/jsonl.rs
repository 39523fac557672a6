//! JSONL reading: one step row per line, or one episode per line with a `steps` array.
//!
//! A file is cut into chunks of whole lines ([`read_chunks`]) that are parsed in parallel
//! ([`parse`]). Each line goes through simd-json's tape first: a flat step row whose values are
//! what the schema expects is typed straight from the tape. Anything else (an episode with
//! `steps`, a value that needs converting or is wrong, malformed JSON, a lone surrogate escape,
//! duplicate keys) takes the serde_json path, which decides every such case and words every
//! message: both paths give the same rows, the fast one only takes the lines it is sure of.
//! polars' own NDJSON reader is not used because every problem must name its line and column and
//! `--lenient` must skip single lines.

use super::files::{Compression, Input};
use super::flat;
use super::rows::{Origin, Rows, Value as Typed};
use super::{conflict_message, convert, domain_error, is_non_finite_word, Cell, SeenColumns};
use crate::error::{Error, Location, Reason, Result, Unit};
use crate::schema::{
    columns::*, describe_accepted, ColumnMap, ColumnUse, Derive, Field, Kind, Resolution, FIELDS,
};
use serde_json::{Map, Value};
use simd_json::{Node, StaticNode};
use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

/// Whole lines of one file.
pub(crate) struct Chunk {
    pub file: u32,
    /// 1-based number of the first line read of the file: the parser numbers the chunk's lines
    /// from it, and the lines of the chunks before are added once blocks are in order
    /// ([`Block::after_lines`]), so that the reader need not count them.
    pub first_line: u64,
    /// The lines are `data[start..start + len]` (the rest is room a reader wrote before: the
    /// buffer goes back to [`ChunkBuffers`] whole, so it is never zeroed again).
    pub data: Vec<u8>,
    pub start: usize,
    pub len: usize,
    /// Bytes of the file on disk that this chunk accounts for (compressed size for .gz/.zst).
    pub disk_bytes: u64,
}

impl Chunk {
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.start + self.len]
    }
}

/// Chunk buffers handed back once parsed, to be read into again: a new buffer costs a page fault
/// per 4 KiB, and std's reader zeroes it before reading into it (together ~9% of the time to
/// read a large log). A buffer that grew for a long line is let go.
pub(crate) struct ChunkBuffers {
    kept: std::sync::Mutex<Vec<Vec<u8>>>,
    largest: usize,
}

impl ChunkBuffers {
    /// Enough for the reader to find one ready while the parsers give theirs back; more would
    /// sit idle (4 MiB each) while windows take memory.
    const KEEP: usize = 4;

    pub fn new(chunk_bytes: usize) -> Self {
        ChunkBuffers {
            kept: Default::default(),
            largest: 2 * chunk_bytes,
        }
    }

    fn take(&self) -> Vec<u8> {
        self.kept
            .lock()
            .ok()
            .and_then(|mut kept| kept.pop())
            .unwrap_or_default()
    }

    pub fn give(&self, buffer: Vec<u8>) {
        if buffer.len() > self.largest {
            return;
        }
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() < Self::KEEP {
                kept.push(buffer);
            }
        }
    }
}

/// Reads from `reader` into `buffer[*filled..end]` (growing the buffer, zeroed, only where it was
/// never written) until `end` or the end of the input: whether the input ended.
fn fill(
    reader: &mut dyn Read,
    buffer: &mut Vec<u8>,
    filled: &mut usize,
    end: usize,
) -> std::io::Result<bool> {
    if buffer.len() < end {
        buffer.resize(end, 0);
    }
    while *filled < end {
        match reader.read(&mut buffer[*filled..end]) {
            Ok(0) => return Ok(true),
            Ok(n) => *filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Counts the bytes a reader hands out (the compressed bytes behind a decoder).
struct Counting<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads `input` (its `size` bytes on disk from `start`) as chunks of about `chunk_bytes` that end
/// at a line break, handing each to `emit` (which returns false to stop early). A UTF-8
/// byte-order mark at the start of the file is dropped.
///
/// Plain files are read, not mapped: a mapped file cut short by another process while it is read
/// (log rotation by copytruncate, a trainer rewriting its log) ends the process with `SIGBUS`
/// when the missing pages are read, while a read ends early, here an error naming the file and
/// both sizes. Mapping was faster: `analyze` of 1M rows 2.35 s mapped, 2.59 s read (medians of 5
/// alternating release runs, #50).
pub(crate) fn read_chunks(
    input: &Input,
    compression: Compression,
    file: u32,
    chunk_bytes: usize,
    buffers: &ChunkBuffers,
    mut emit: impl FnMut(Chunk) -> bool,
) -> Result<()> {
    let path = input.path.as_path();
    let opened = std::fs::File::open(path).map_err(|cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    let pause = std::env::var_os(PAUSE_READER).map(PathBuf::from);
    let mut chunks = 0;
    let emit = |chunk| {
        let open = emit(chunk);
        chunks += 1;
        // Only a read that goes on pauses: a look at the first rows (a command choosing its
        // default methods) stops after its first chunk and is not the read a test changes.
        if let (1, Some(dir), true) = (chunks, &pause, open) {
            pause_for_test(dir);
        }
        open
    };
    read_into_buffers(
        input,
        &opened,
        compression,
        file,
        chunk_bytes,
        buffers,
        emit,
    )
    .map_err(|cause| read_error(input, &opened, cause))
}

/// A test hook: the environment variable naming a folder where, after each file's first chunk,
/// the reader creates `paused` and waits for `resume`, so that a test can change the file at a
/// known point of the read.
const PAUSE_READER: &str = "CREDIT_TEST_PAUSE_READER";

fn pause_for_test(dir: &Path) {
    let _ = std::fs::write(dir.join("paused"), "");
    let resume = dir.join("resume");
    for _ in 0..1000 {
        if resume.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why a file could not be read as text, told apart from the I/O errors beneath (carried as an
/// `io::Error`'s inner error from the readers to [`read_chunks`]).
#[derive(Debug)]
enum Unreadable {
    /// Shorter than when it was listed: `listed` bytes then, `now` bytes now.
    Truncated { listed: u64, now: u64 },
    /// UTF-16 text: which byte order, and whether a byte-order mark says so.
    Utf16 { order: &'static str, marked: bool },
    /// A gzip stream followed by this many zero bytes.
    GzipPadding(u64),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Unreadable {}

impl From<Unreadable> for std::io::Error {
    fn from(unreadable: Unreadable) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, unreadable)
    }
}

/// A reader's error as the user reads it: the file, and what happened to it.
fn read_error(input: &Input, opened: &std::fs::File, cause: std::io::Error) -> Error {
    let path = input.path.as_path();
    let Some(unreadable) = cause.get_ref().and_then(|e| e.downcast_ref::<Unreadable>()) else {
        return Error::Io {
            path: path.to_path_buf(),
            cause,
        };
    };
    let message = match *unreadable {
        Unreadable::Truncated { listed, now } => format!(
            "truncated while being read: it had {listed} bytes when credit listed it and has {} now (log rotation with copytruncate? a trainer rewriting its log?); read it again once nothing writes it",
            opened.metadata().map_or(now, |m| m.len())
        ),
        Unreadable::Utf16 { order, marked } => format!(
            "looks like UTF-16 ({order}{}): convert it to UTF-8 (iconv -f UTF-16 -t UTF-8 FILE > FILE.jsonl); logs must be UTF-8 text",
            if marked { ", by its byte-order mark" } else { ", without a byte-order mark" }
        ),
        Unreadable::GzipPadding(zeros) => format!(
            "the gzip stream ends in {zeros} bytes of zero padding after its last member (`gzip -d` warns and ignores them; credit does not guess): remove them, e.g. `gzip -dc FILE | gzip > FIXED.gz`"
        ),
    };
    Error::input(Location::file(path), Reason::UnreadableFile, message)
}

/// `Some` when a file's first bytes are UTF-16 text: a byte-order mark, or a JSON object's `{`
/// (or white space before it) next to a zero byte.
fn utf16(start: &[u8]) -> Option<Unreadable> {
    let (order, marked) = match start {
        [0xFF, 0xFE, ..] => ("little-endian", true),
        [0xFE, 0xFF, ..] => ("big-endian", true),
        [b, 0, ..] if b.is_ascii_graphic() || b.is_ascii_whitespace() => ("little-endian", false),
        [0, b, ..] if b.is_ascii_graphic() || b.is_ascii_whitespace() => ("big-endian", false),
        _ => return None,
    };
    Some(Unreadable::Utf16 { order, marked })
}

/// gzip members one after another, as `gzip -d` reads them (`MultiGzDecoder` does too, but says
/// only "invalid gzip header" when zero bytes follow the last member, as tape archives and
/// preallocated files leave them).
struct GzipMembers<R: std::io::BufRead> {
    /// `None` once the input has ended.
    member: Option<flate2::bufread::GzDecoder<R>>,
}

impl<R: std::io::BufRead> Read for GzipMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let Some(member) = &mut self.member else {
                return Ok(0);
            };
            let n = member.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(mut rest) = self.member.take().map(|m| m.into_inner()) else {
                return Ok(0);
            };
            match rest.fill_buf()? {
                [] => return Ok(0),
                // Any other byte starts the next member, whose header its decoder checks.
                [0, ..] => {}
                _ => {
                    self.member = Some(flate2::bufread::GzDecoder::new(rest));
                    continue;
                }
            }
            let mut zeros = 0u64;
            loop {
                let bytes = rest.fill_buf()?;
                if bytes.is_empty() {
                    return Err(Unreadable::GzipPadding(zeros).into());
                }
                let run = bytes.iter().take_while(|&&b| b == 0).count();
                if run < bytes.len() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "{} zero bytes after a gzip member, then data that is not gzip",
                            zeros + run as u64
                        ),
                    ));
                }
                zeros += run as u64;
                rest.consume(run);
            }
        }
    }
}

/// [`read_chunks`] into reused buffers.
fn read_into_buffers(
    input: &Input,
    mut opened: &std::fs::File,
    compression: Compression,
    file: u32,
    chunk_bytes: usize,
    buffers: &ChunkBuffers,
    mut emit: impl FnMut(Chunk) -> bool,
) -> std::io::Result<()> {
    let size = input.size;
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    if input.start > 0 {
        opened.seek(std::io::SeekFrom::Start(input.start))?;
    }
    // A plain file is read up to `size`: lines written after the file was listed are left for
    // the next read of a log still being written.
    let limit = match compression {
        Compression::None => size,
        Compression::Gzip | Compression::Zstd => u64::MAX,
    };
    let raw = Counting {
        inner: opened.take(limit),
        count: count.clone(),
    };
    let mut reader: Box<dyn Read> = match compression {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(GzipMembers {
            member: Some(flate2::bufread::GzDecoder::new(
                std::io::BufReader::with_capacity(1 << 20, raw),
            )),
        }),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(raw)?),
    };
    // Room for what is left to read, when that is known and less than a chunk: a small file
    // takes a small buffer.
    let room = |want: usize, read: u64| match compression {
        Compression::None => want.min(size.saturating_sub(read) as usize + 1),
        Compression::Gzip | Compression::Zstd => want,
    };
    let mut buffer = buffers.take();
    // The buffer's bytes, and those of them known to hold no line break (a line longer than a
    // chunk is searched once, not again each time the buffer grows).
    let (mut filled, mut searched) = (0, 0);
    let (mut reported, mut at_start, mut eof) = (0u64, input.start == 0, false);
    // Read up to `target` bytes; a line longer than that raises the target until it ends.
    let mut target = chunk_bytes;
    while !eof {
        if filled < target {
            let read = count.load(std::sync::atomic::Ordering::Relaxed);
            let end = filled + room(target - filled, read);
            eof = fill(&mut reader, &mut buffer, &mut filled, end)?;
        }
        if eof && compression == Compression::None {
            let read = count.load(std::sync::atomic::Ordering::Relaxed);
            if read < size {
                let (listed, now) = (input.start + size, input.start + read);
                return Err(Unreadable::Truncated { listed, now }.into());
            }
        }
        if at_start && (filled >= 3 || eof) {
            if let Some(utf16) = utf16(&buffer[..filled]) {
                return Err(utf16.into());
            }
            if buffer[..filled].starts_with(UTF8_BOM) {
                buffer.copy_within(3..filled, 0);
                filled -= 3;
                searched = 0;
            }
            at_start = false;
        }
        let cut = if eof {
            filled
        } else {
            match memchr::memrchr(b'\n', &buffer[searched..filled]) {
                Some(p) => searched + p + 1,
                None => {
                    searched = filled;
                    target = filled + chunk_bytes;
                    continue;
                }
            }
        };
        target = chunk_bytes;
        if cut == 0 {
            continue;
        }
        // The bytes after the last line break start the next buffer (none at the end: a kept
        // buffer is not taken only to be dropped).
        let mut next = match eof {
            true => Vec::new(),
            false => buffers.take(),
        };
        let rest = filled - cut;
        if next.len() < rest {
            next.resize(rest, 0);
        }
        next[..rest].copy_from_slice(&buffer[cut..filled]);
        (filled, searched) = (rest, rest);
        let buffer = std::mem::replace(&mut buffer, next);
        let disk = count.load(std::sync::atomic::Ordering::Relaxed);
        let chunk = Chunk {
            file,
            first_line: input.first_line,
            data: buffer,
            start: 0,
            len: cut,
            disk_bytes: disk - reported,
        };
        reported = disk;
        if !emit(chunk) {
            return Ok(());
        }
    }
    Ok(())
}

/// What parsing a chunk (or reading a Parquet slice) gave: typed rows (their `seq` counts from 0
/// within the block), the rejected rows' errors in order, and which column fed each field.
pub(crate) struct Block {
    pub file: u32,
    pub rows: Rows,
    pub problems: Vec<Error>,
    pub uses: BTreeSet<ColumnUse>,
    /// Column names seen, to find mapped columns no log has.
    pub columns: SeenColumns,
    pub disk_bytes: u64,
    /// Lines of the file in the block's chunk (none for Parquet).
    pub lines: u64,
}

impl Block {
    /// Numbers the block's lines as following `lines` more of its file (the chunks before it).
    pub fn after_lines(&mut self, lines: u64) {
        if lines == 0 {
            return;
        }
        for origin in &mut self.rows.origin {
            origin.line += lines;
        }
        for problem in &mut self.problems {
            if let Error::Input { location, .. } = problem {
                if let Some(line) = &mut location.line {
                    *line += lines;
                }
            }
        }
    }
}

/// The fields' resolution for the keys of a row that [`ColumnMap::reads`], in their order, with
/// each key's role. Keys nothing reads are left out, so rows that each carry a key of their own
/// still share a shape.
struct Shape {
    keys: Vec<String>,
    /// Per key: (field, rank) — rank 0 feeds the field, rank k ≥ 1 is its k-th agreeing column.
    roles: Vec<Option<(usize, usize)>>,
    resolution: Resolution,
    /// The fields some key feeds, in field order: a row's values are typed for these alone.
    fed: Vec<usize>,
    /// An episode's `steps`, too many agreeing columns, or a required field no key feeds: the
    /// serde path decides.
    slow: bool,
    /// Whether this block's report already has the shape's column uses.
    reported: bool,
}

impl Shape {
    fn new(keys: &[&str], resolution: Resolution) -> Shape {
        let roles = keys
            .iter()
            .map(|key| {
                resolution.feeds.iter().enumerate().find_map(|(f, feed)| {
                    let feed = feed.as_ref()?;
                    if feed.column == *key {
                        Some((f, 0))
                    } else {
                        feed.agree.iter().position(|a| a == key).map(|k| (f, k + 1))
                    }
                })
            })
            .collect();
        let fed = (0..N_FIELDS)
            .filter(|&f| resolution.feeds[f].is_some())
            .collect();
        let slow = keys.contains(&"steps")
            || resolution
                .feeds
                .iter()
                .flatten()
                .any(|f| f.agree.len() >= MAX_RANK)
            || FIELDS
                .iter()
                .zip(&resolution.feeds)
                .any(|(field, feed)| field.required && feed.is_none());
        Shape {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            roles,
            resolution,
            fed,
            slow,
            reported: false,
        }
    }
}

const MAX_RANK: usize = 8;
const N_FIELDS: usize = FIELDS.len();

/// Shapes a worker keeps; past that the cache starts over (logs repeat a handful of shapes).
const MAX_SHAPES: usize = 64;

/// The whole key list of the last row, and what it gave: rows of one log repeat it, and a row
/// with the same keys in the same order is matched by comparing them, with no lookup.
#[derive(Default)]
struct LastKeys {
    /// The keys, one after another, and where each ends in `text`.
    text: String,
    ends: Vec<usize>,
    shape: usize,
    /// Positions among the row's entries of the keys the shape holds.
    read: Vec<usize>,
    /// Whether a key appears twice (the serde path words the error).
    repeats: bool,
}

impl LastKeys {
    fn matches<'k>(&self, keys: impl ExactSizeIterator<Item = &'k str>) -> bool {
        if keys.len() != self.ends.len() {
            return false;
        }
        let mut start = 0;
        for (key, &end) in keys.zip(&self.ends) {
            if &self.text[start..end] != key {
                return false;
            }
            start = end;
        }
        true
    }
}

/// Per-worker state: the shapes seen, and scratch space.
struct FastPath<'a> {
    columns: &'a ColumnMap,
    shapes: Vec<Shape>,
    /// `None` before the first row and after the cache starts over.
    last: Option<LastKeys>,
    /// (key node, value node) of the current row's entries.
    entries: Vec<(usize, usize)>,
    /// Value node per (field, rank), for the current row.
    slots: Vec<Option<usize>>,
}

impl<'a> FastPath<'a> {
    fn new(columns: &'a ColumnMap) -> Self {
        FastPath {
            columns,
            shapes: Vec::new(),
            last: None,
            entries: Vec::new(),
            slots: vec![None; N_FIELDS * MAX_RANK],
        }
    }

    /// The shape of the object whose keys are `keys`, built on first sight, and its key list
    /// remembered in `self.last`. Noted column names go to `names`.
    fn shape<'k>(
        &mut self,
        keys: impl ExactSizeIterator<Item = &'k str> + Clone,
        names: &mut SeenColumns,
    ) -> std::result::Result<(), String> {
        if self.last.as_ref().is_some_and(|l| l.matches(keys.clone())) {
            return Ok(());
        }
        let mut last = self.last.take().unwrap_or_default();
        last.text.clear();
        last.ends.clear();
        last.read.clear();
        let mut read: Vec<&str> = Vec::new();
        for (i, key) in keys.clone().enumerate() {
            last.text.push_str(key);
            last.ends.push(last.text.len());
            if self.columns.reads(key) || key == "steps" {
                last.read.push(i);
                read.push(key);
            }
            names.note(self.columns, key);
        }
        let mut sorted: Vec<&str> = keys.collect();
        sorted.sort_unstable();
        last.repeats = sorted.windows(2).any(|w| w[0] == w[1]);
        let found = self
            .shapes
            .iter()
            .position(|s| s.keys.iter().map(String::as_str).eq(read.iter().copied()));
        last.shape = match found {
            Some(i) => i,
            None => {
                let resolution = self.columns.resolve(read.iter().copied())?;
                if self.shapes.len() == MAX_SHAPES {
                    self.shapes.clear();
                }
                self.shapes.push(Shape::new(&read, resolution));
                self.shapes.len() - 1
            }
        };
        self.last = Some(last);
        Ok(())
    }

    /// Types one flat step row from its tape into `rows` (its strings that lie in `decoded`, the
    /// block's decoded text, are viewed there); false when the serde path must decide.
    fn row(
        &mut self,
        nodes: &[Node<'_>],
        decoded: &[u8],
        origin: Origin,
        rows: &mut Rows,
        uses: &mut BTreeSet<ColumnUse>,
        names: &mut SeenColumns,
    ) -> bool {
        let Some(&Node::Object { len, .. }) = nodes.first() else {
            return false;
        };
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        let mut idx = 1;
        for _ in 0..len {
            let value = idx + 1;
            let width = match nodes[value] {
                Node::Object { count, .. } | Node::Array { count, .. } => count + 1,
                _ => 1,
            };
            entries.push((idx, value));
            idx = value + width;
        }
        let key = |i: usize| match nodes[i] {
            Node::String(s) => s,
            _ => "",
        };
        let pushed = match self.shape(entries.iter().map(|&(k, _)| key(k)), names) {
            Ok(()) => self.typed_row(&entries, nodes, decoded, origin, rows, uses),
            Err(_) => false,
        };
        self.entries = entries;
        pushed
    }

    #[allow(clippy::too_many_arguments)]
    fn typed_row(
        &mut self,
        entries: &[(usize, usize)],
        nodes: &[Node<'_>],
        decoded: &[u8],
        origin: Origin,
        rows: &mut Rows,
        uses: &mut BTreeSet<ColumnUse>,
    ) -> bool {
        let Some(last) = &self.last else {
            return false;
        };
        let shape = &mut self.shapes[last.shape];
        if shape.slow || last.repeats {
            return false;
        }
        // The slots a row sets are cleared after it (the others stay `None`).
        let roles = || {
            last.read
                .iter()
                .zip(&shape.roles)
                .filter_map(|(&e, r)| Some((e, (*r)?)))
        };
        for (entry, (field, rank)) in roles() {
            self.slots[field * MAX_RANK + rank] = Some(entries[entry].1);
        }
        let typed = typed_values(shape, &self.slots, nodes);
        for (_, (field, rank)) in roles() {
            self.slots[field * MAX_RANK + rank] = None;
        }
        let Some(values) = typed else {
            return false;
        };
        rows.push_decoded(origin, &values, decoded);
        if !shape.reported {
            uses.extend(shape.resolution.uses.iter().cloned());
            shape.reported = true;
        }
        true
    }
}

/// A row's values for the fields `shape` feeds, from the value nodes in `slots`; `None` when the
/// serde path must decide.
fn typed_values<'i>(
    shape: &Shape,
    slots: &[Option<usize>],
    nodes: &[Node<'i>],
) -> Option<[Option<Typed<'i>>; N_FIELDS]> {
    let mut values: [Option<Typed>; N_FIELDS] = [None; N_FIELDS];
    for &f in &shape.fed {
        let (field, feed) = (&FIELDS[f], shape.resolution.feeds[f].as_ref()?);
        let mut chosen: Option<Typed> = None;
        for rank in 0..=feed.agree.len() {
            let Some(node) = slots[f * MAX_RANK + rank] else {
                continue;
            };
            match (chosen, typed(field.kind, &nodes[node])?) {
                (_, None) => {}
                (None, Some(v)) => chosen = Some(v),
                (Some(c), Some(v)) if c == v => {}
                _ => return None,
            }
        }
        match chosen {
            None if field.required => return None,
            Some(v) if out_of_domain(field, v) => return None,
            _ => values[f] = chosen.map(|v| derived(feed.derive, v)),
        }
    }
    Some(values)
}

/// A tape value as the field's kind, when that needs no conversion worth a message:
/// `Some(None)` is null, `None` sends the row to the serde path.
fn typed<'i>(kind: Kind, node: &Node<'i>) -> Option<Option<Typed<'i>>> {
    use StaticNode as S;
    let Node::Static(s) = node else {
        return match (kind, node) {
            (Kind::Key | Kind::Text, Node::String(s)) => Some(Some(Typed::Str(s))),
            (Kind::Bool, Node::String(s)) => match *s {
                "true" | "True" => Some(Some(Typed::Bool(true))),
                "false" | "False" => Some(Some(Typed::Bool(false))),
                _ => None,
            },
            _ => None,
        };
    };
    let value = match (kind, *s) {
        (_, S::Null) => return Some(None),
        (Kind::Key, S::I64(v)) => Typed::Int(v),
        (Kind::Key, S::U64(v)) => Typed::Int(i64::try_from(v).ok()?),
        (Kind::Int, S::I64(v)) => Typed::Int(v),
        (Kind::Int, S::U64(v)) => Typed::Int(i64::try_from(v).ok()?),
        (Kind::Int, S::F64(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Typed::Int(f as i64),
        (Kind::Float, S::I64(v)) => Typed::Float(v as f64),
        (Kind::Float, S::U64(v)) => Typed::Float(v as f64),
        (Kind::Float, S::F64(f)) if f.is_finite() => Typed::Float(f),
        (Kind::Bool, S::Bool(b)) => Typed::Bool(b),
        (Kind::Bool, S::I64(v)) if v == 0 || v == 1 => Typed::Bool(v == 1),
        (Kind::Bool, S::U64(v)) if v == 0 || v == 1 => Typed::Bool(v == 1),
        (Kind::Bool, S::F64(f)) if f == 0.0 || f == 1.0 => Typed::Bool(f == 1.0),
        _ => return None,
    };
    Some(Some(value))
}

/// The field's value from its column's ([`Derive`]).
fn derived(derive: Derive, value: Typed<'_>) -> Typed<'_> {
    match (derive, value) {
        (Derive::SamplePart, Typed::Str(id)) => Typed::Str(derive.key(id)),
        (Derive::Zero, _) => Typed::Int(0),
        (_, v) => v,
    }
}

/// A value the field cannot take (the serde path words the message).
fn out_of_domain(field: &Field, value: Typed) -> bool {
    match value {
        Typed::Float(c) => domain_error(field, &Cell::Float(c)).is_some(),
        Typed::Int(n) if field.kind == Kind::Int => domain_error(field, &Cell::Int(n)).is_some(),
        _ => false,
    }
}

/// Whether a line has a `\\u` escape of a UTF-16 surrogate, which simd-json decodes leniently.
fn has_surrogate_escape(line: &[u8]) -> bool {
    memchr::memmem::find_iter(line, b"\\u").any(|p| {
        matches!(line.get(p + 2), Some(b'd' | b'D'))
            && matches!(
                line.get(p + 3),
                Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            )
    })
}

/// Rows parsed before a chunk's text buffers are sized for the whole chunk.
const RESERVE_AFTER_ROWS: usize = 16;

/// Parses one chunk: every line into typed rows or a located problem.
pub(crate) fn parse(chunk: &Chunk, path: &Path, columns: &ColumnMap) -> Block {
    let (file, first_line, disk_bytes) = (chunk.file, chunk.first_line, chunk.disk_bytes);
    let bytes = chunk.bytes();
    let mut rows = Rows::default();
    let mut problems = Vec::new();
    let mut uses = BTreeSet::new();
    let mut names = SeenColumns::default();
    let mut fast = FastPath::new(columns);
    let mut slow = Resolver {
        columns,
        cache: HashMap::new(),
    };
    let mut buffers = simd_json::Buffers::default();
    let mut copy: Vec<u8> = Vec::new();
    let mut scratch = flat::Scratch::default();
    let mut spare: Vec<Node<'static>> = Vec::new();
    // A chunk of valid UTF-8 with no control character but line breaks (most are) is checked
    // once, and the scanner reads each line's object from where the line starts, so the line
    // break is looked for only after it; in another chunk each line is checked and scanned alone.
    let clean = flat::clean_text(bytes);
    let mut start = 0;
    let mut line_no = first_line;
    while start < bytes.len() {
        let line_break =
            |from: usize| memchr::memchr(b'\n', &bytes[from..]).map_or(bytes.len(), |p| from + p);
        let without_cr = |end: usize| {
            if end > start && bytes[end - 1] == b'\r' {
                end - 1
            } else {
                end
            }
        };
        // The common line is scanned in place; a line the scanner leaves is parsed by simd-json
        // (which gives the same nodes where both read it), and the serde path decides the rest.
        let mut nodes = flat::recycle(std::mem::take(&mut spare));
        // `scanned`: the block's decoded text so far, when the scanner read the line.
        let (end, scanned) = match clean {
            Some(text) => {
                let object = flat::scan(&text[start..], &mut scratch, &mut nodes);
                let end = line_break(start + object.map_or(0, |(n, _)| n));
                let ends = |n| flat::ends_line(&bytes[start + n..without_cr(end)]);
                (end, object.filter(|&(n, _)| ends(n)).map(|(_, d)| d))
            }
            None => {
                let end = line_break(start);
                let line = &bytes[start..without_cr(end)];
                (end, flat::scan_line(line, &mut scratch, &mut nodes))
            }
        };
        let line_end = without_cr(end);
        let this_line = line_no;
        line_no += 1;
        let range = start..line_end;
        start = end + 1;
        if bytes[range.clone()].iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let origin = Origin {
            file,
            line: this_line,
        };
        let mut fast_row =
            |nodes: &[Node<'_>], decoded: &[u8], rows: &mut Rows, uses: &mut _, names: &mut _| {
                fast.row(nodes, decoded, origin, rows, uses, names)
            };
        let pushed = if let Some(decoded) = scanned {
            let pushed = fast_row(&nodes, decoded, &mut rows, &mut uses, &mut names);
            spare = flat::recycle(nodes);
            pushed
        } else if !has_surrogate_escape(&bytes[range.clone()]) {
            // The tape is parsed from a copy: simd-json rewrites its input in place, and a line
            // that the serde path must read again needs its original bytes.
            copy.clear();
            copy.extend_from_slice(&bytes[range.clone()]);
            simd_json::to_tape_with_buffers(&mut copy, &mut buffers)
                .is_ok_and(|tape| fast_row(&tape.0, &[], &mut rows, &mut uses, &mut names))
        } else {
            false
        };
        if pushed {
            if rows.len() == RESERVE_AFTER_ROWS {
                // Room for the rest of the chunk's rows and decoded text at the rate of its first
                // rows (lines of one log are alike), so they are not copied as they grow.
                let (read, total) = (end + 1, bytes.len());
                rows.reserve_at_rate(read, total);
                scratch.reserve_decoded_at_rate(read, total);
            }
            continue;
        }
        let at = |char_column: Option<u64>, column: Option<String>| Location {
            path: path.to_path_buf(),
            line: Some(this_line),
            unit: Unit::Line,
            char_column,
            column,
        };
        slow.line(
            &bytes[range],
            origin,
            &at,
            &mut rows,
            &mut problems,
            &mut uses,
            &mut names,
        );
    }
    rows.attach_decoded(scratch.take_decoded());
    Block {
        file,
        rows,
        problems,
        uses,
        columns: names,
        disk_bytes,
        lines: line_no - first_line,
    }
}

/// Where a line's problem is: (character column, field).
type At<'a> = &'a dyn Fn(Option<u64>, Option<String>) -> Location;

/// The 1-based character column where the value of `field` starts in a JSON line: `reward`, or
/// `steps[3].reward` inside an episode's `steps`.
fn value_column(text: &str, field: &str) -> Option<u64> {
    let (mut from, key) = match field.split_once("].") {
        Some((head, key)) => {
            let k: usize = head.strip_prefix("steps[")?.parse().ok()?;
            let steps = text.find("\"steps\"")?;
            // The k-th step object: skip k occurrences of the key after `steps`.
            let quoted = format!("\"{key}\"");
            let mut at = steps;
            for _ in 0..k {
                at += text[at..].find(&quoted)? + quoted.len();
            }
            (at, key)
        }
        None => (0, field),
    };
    let quoted = format!("\"{key}\"");
    loop {
        let found = from + text[from..].find(&quoted)?;
        let after = found + quoted.len();
        let rest = text[after..].trim_start();
        if let Some(value) = rest.strip_prefix(':') {
            let start = text.len() - value.trim_start().len();
            return Some(text[..start].chars().count() as u64 + 1);
        }
        from = after;
    }
}

/// serde_json's message without its own "at line L column C" (the line is the file's, not 1).
fn serde_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Malformed JSON: name the column (character position), and the field when a Python-style
/// `NaN`/`Infinity` literal is what broke the parse.
fn malformed(text: &str, e: &serde_json::Error, at: At) -> Error {
    let col = e.column();
    let message = serde_message(e);
    if let Some(key) = message
        .strip_prefix(DUPLICATE_KEY)
        .and_then(|rest| rest.strip_suffix('`'))
    {
        // serde_json stops just after the repeated key: point at its opening quote.
        let mut end = col.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let start = text[..end].rfind(&format!("\"{key}\"")).unwrap_or(end);
        return Error::input(
            at(
                Some(text[..start].chars().count() as u64 + 1),
                Some(key.to_string()),
            ),
            Reason::DuplicateKey,
            format!("duplicate key `{key}`; which value is meant is not clear"),
        );
    }
    let byte = text
        .char_indices()
        .nth(col.saturating_sub(1))
        .map(|(b, _)| b)
        .unwrap_or(text.len());
    let rest = &text[byte.min(text.len())..];
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '+')
        .collect();
    if is_non_finite_word(&word) {
        let key = text[..byte]
            .rsplit_once('"')
            .and_then(|(head, _)| head.rsplit_once('"'))
            .map(|(_, k)| k.to_string());
        if let Some(key) = key {
            return Error::input(
                at(Some(col as u64), Some(key)),
                Reason::NonFinite,
                format!(
                    "expected a finite number, got {word} (NaN and infinities are not rewards)"
                ),
            );
        }
    }
    Error::input(
        at(Some(col as u64), None),
        Reason::MalformedJson,
        format!("malformed JSON: {}", serde_message(e)),
    )
}

/// The start of the message of a repeated key in an object, up to the key.
const DUPLICATE_KEY: &str = "duplicate key `";

/// A JSON value whose objects have no repeated key: serde_json's own `Value` keeps the last
/// value of a repeated key, and the value dropped would be input taken silently.
struct NoDuplicateKeys(Value);

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(NoDuplicateKeys)
    }
}

/// serde_json's `Value` visitor, with a check for repeated keys.
struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E>(self, x: f64) -> std::result::Result<Value, E> {
        Ok(Value::from(x))
    }
    fn visit_str<E>(self, s: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> std::result::Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(NoDuplicateKeys(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("{DUPLICATE_KEY}{key}`")));
            }
            let NoDuplicateKeys(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// The serde path: every line the tape path does not take.
struct Resolver<'a> {
    columns: &'a ColumnMap,
    /// Resolutions by row shape (the sorted list of the keys resolution reads): logs repeat a
    /// handful of shapes.
    cache: HashMap<Vec<String>, Resolution>,
}

impl Resolver<'_> {
    /// One line: its rows into `rows`, or its problems into `problems`.
    #[allow(clippy::too_many_arguments)]
    fn line(
        &mut self,
        line: &[u8],
        origin: Origin,
        at: At,
        rows: &mut Rows,
        problems: &mut Vec<Error>,
        uses: &mut BTreeSet<ColumnUse>,
        names: &mut SeenColumns,
    ) {
        // A file's own mark was dropped when it was read: one starting a later line is where
        // another file begins.
        if line.starts_with(UTF8_BOM) {
            problems.push(Error::input(
                at(Some(1), None),
                Reason::MalformedJson,
                "a byte-order mark starts this line (files joined with `cat`?): only a file's first line may start with one; remove it",
            ));
            return;
        }
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                // The column of the first bad byte, counted in the characters before it.
                let good = std::str::from_utf8(&line[..e.valid_up_to()]).unwrap_or("");
                let col = good.chars().count() as u64 + 1;
                problems.push(Error::input(
                    at(Some(col), None),
                    Reason::InvalidUtf8,
                    format!(
                        "invalid UTF-8 (byte {} of the line); logs must be UTF-8 text",
                        e.valid_up_to() + 1
                    ),
                ));
                return;
            }
        };
        let value: Value = match serde_json::from_str::<NoDuplicateKeys>(text) {
            Ok(v) => v.0,
            Err(e) => {
                problems.push(malformed(text, &e, at));
                return;
            }
        };
        let Value::Object(object) = value else {
            problems.push(Error::input(
                at(Some(1), None),
                Reason::WrongType,
                "expected a JSON object (one step or one episode per line)",
            ));
            return;
        };
        let mut push =
            |cells: std::result::Result<Vec<Option<Cell>>, (String, Reason, String)>| match cells {
                Ok(cells) => {
                    let values: Vec<Option<Typed>> =
                        cells.iter().map(|c| c.as_ref().map(Typed::of)).collect();
                    rows.push(origin, &values);
                }
                Err((column, reason, message)) => problems.push(Error::input(
                    at(value_column(text, &column), Some(column)),
                    reason,
                    message,
                )),
            };
        match object.get("steps") {
            Some(Value::Array(steps)) if steps.is_empty() => push(Err((
                "steps".into(),
                Reason::EmptyEpisode,
                "an episode with no steps".into(),
            ))),
            Some(Value::Array(steps)) => {
                for (k, step) in steps.iter().enumerate() {
                    let Value::Object(step) = step else {
                        push(Err((
                            format!("steps[{k}]"),
                            Reason::WrongType,
                            "expected each element of `steps` to be an object".into(),
                        )));
                        continue;
                    };
                    let prefix = format!("steps[{k}].");
                    push(self.cells(&[(step, prefix.as_str()), (&object, "")], uses, names));
                }
            }
            _ => push(self.cells(&[(&object, "")], uses, names)),
        }
    }

    /// Typed cells of one row from one or more objects (a step, then its episode), the first
    /// object's keys taking precedence. `Err` is (column, reason, message).
    fn cells(
        &mut self,
        sources: &[(&Map<String, Value>, &str)],
        uses: &mut BTreeSet<ColumnUse>,
        names: &mut SeenColumns,
    ) -> std::result::Result<Vec<Option<Cell>>, (String, Reason, String)> {
        let episode_level = sources.len() > 1;
        // Only the keys resolution reads: rows that each carry a key of their own share a shape.
        let mut shape: Vec<String> = Vec::new();
        for (level, (object, _)) in sources.iter().enumerate() {
            for key in object.keys() {
                names.note(self.columns, key);
                if !(episode_level && level == sources.len() - 1 && key == "steps")
                    && self.columns.reads(key)
                {
                    shape.push(key.clone());
                }
            }
        }
        shape.sort_unstable();
        shape.dedup();
        if !self.cache.contains_key(&shape) {
            let resolution = self
                .columns
                .resolve(shape.iter().map(String::as_str))
                .map_err(|message| ("".to_string(), Reason::MissingColumn, message))?;
            uses.extend(resolution.uses.iter().cloned());
            self.cache.insert(shape.clone(), resolution);
        }
        let resolution = &self.cache[&shape];
        // A column's value and the prefix that locates it (`steps[3].`), the step's own keys first.
        let lookup = |key: &str| -> Option<(&Value, &str)> {
            sources
                .iter()
                .find_map(|(object, prefix)| object.get(key).map(|v| (v, *prefix)))
        };
        let typed = |field: &Field,
                     key: &str|
         -> std::result::Result<Option<Cell>, (String, Reason, String)> {
            let Some((value, prefix)) = lookup(key) else {
                return Ok(None);
            };
            if value.is_null() {
                return Ok(None);
            }
            let located = |reason, message| (format!("{prefix}{key}"), reason, message);
            let cell = convert(field.kind, value).map_err(|(r, m)| located(r, m))?;
            if let Some(message) = domain_error(field, &cell) {
                return Err(located(Reason::WrongType, message));
            }
            Ok(Some(cell))
        };
        let missing: Vec<&Field> = resolution.missing_required();
        if let Some(first) = missing.first() {
            return Err((
                first.name.to_string(),
                Reason::MissingColumn,
                missing_columns(&missing, sources),
            ));
        }
        let mut cells = Vec::with_capacity(FIELDS.len());
        for (i, field) in FIELDS.iter().enumerate() {
            let Some(feed) = &resolution.feeds[i] else {
                cells.push(None);
                continue;
            };
            let mut cell = typed(field, &feed.column)?;
            let mut from = feed.column.as_str();
            for other in &feed.agree {
                let Some(value) = typed(field, other)? else {
                    continue;
                };
                match &cell {
                    None => {
                        cell = Some(value);
                        from = other;
                    }
                    Some(first) if *first == value => {}
                    Some(first) => {
                        let prefix = lookup(other).map_or("", |(_, p)| p);
                        return Err((
                            format!("{prefix}{other}"),
                            Reason::ConflictingColumns,
                            conflict_message(field, from, first, other, &value),
                        ));
                    }
                }
            }
            if cell.is_none() && field.required {
                let prefix = lookup(&feed.column).map_or("", |(_, p)| p);
                return Err((
                    format!("{prefix}{}", feed.column),
                    Reason::MissingValue,
                    format!("`{}` is null; a value is required", field.name),
                ));
            }
            cells.push(cell.map(|c| match (feed.derive, c) {
                (Derive::SamplePart, Cell::Str(id)) => Cell::Str(feed.derive.key(&id).to_string()),
                (Derive::Zero, _) => Cell::Int(0),
                (_, c) => c,
            }));
        }
        Ok(cells)
    }
}

/// The message for the required fields a row lacks (`missing`), its objects `sources` (a step, then
/// its episode): verl's rollout dump without ids is told as such.
fn missing_columns(missing: &[&Field], sources: &[(&Map<String, Value>, &str)]) -> String {
    let object = sources[sources.len() - 1].0;
    let has = |k: &str| object.contains_key(k);
    let accepted = |name: &str| crate::schema::field(name).map_or(String::new(), describe_accepted);
    if missing
        .iter()
        .any(|field| field.name == GROUP_ID || field.name == TRAJ_ID)
        && has("input")
        && has("output")
        && has("score")
        && has("step")
    {
        return format!(
            "this is a rollout dump (`input, output, score, step`) without ids: columns {} and {} are missing. \
             verl's classic trainer (verl 0.4–0.8, `trainer.use_v1=false`) writes no `uid` and reorders a prompt's \
             rollouts, so they cannot be grouped; verl ≥ 0.9 (its default trainer) and 0.8's `main_ppo_sync` write \
             `uid` = `{{sample}}_{{session}}_{{output}}`, which credit reads as it is. verl-agent's dump has no ids either: \
             write per-step rows with `integrations/verl_agent_dump.py` (docs/formats.md), or map your own id columns \
             with `--schema map.toml`",
            accepted(GROUP_ID),
            accepted(TRAJ_ID),
        );
    }
    // Every key of the row, the step's first, but not the episode's list of steps.
    let mut names: Vec<&str> = Vec::new();
    for (i, (object, _)) in sources.iter().enumerate() {
        for key in object.keys() {
            let steps = sources.len() > 1 && i == sources.len() - 1 && key == "steps";
            if !steps && !names.contains(&key.as_str()) {
                names.push(key);
            }
        }
    }
    crate::schema::missing_message(missing, &names)
}

/// Parses `text` as one chunk of `mem.jsonl` whose first line is `first_line`, with the default
/// columns.
#[cfg(test)]
pub(crate) fn parse_text(text: &str, first_line: u64) -> Block {
    let chunk = Chunk {
        file: 0,
        first_line,
        data: text.as_bytes().to_vec(),
        start: 0,
        len: text.len(),
        disk_bytes: 0,
    };
    parse(&chunk, Path::new("mem.jsonl"), &ColumnMap::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_columns_point_at_the_value() {
        let line = r#"{"uid": "g", "reward": "n/a", "steps": [{"reward": 1}, {"reward":  2}]}"#;
        // `"n/a"` starts at character 24; the second step's 2 at character 67.
        assert_eq!(value_column(line, "reward"), Some(24));
        assert_eq!(&line[23..28], "\"n/a\"");
        assert_eq!(value_column(line, "steps[1].reward"), Some(68));
        assert_eq!(&line[67..68], "2");
        assert_eq!(value_column(line, "missing"), None);
    }

    fn fi(name: &str) -> usize {
        crate::schema::field_index(name).unwrap()
    }

    /// (reason, line, character column, field) of an input error.
    fn located(e: &Error) -> (Reason, Option<u64>, Option<u64>, Option<&str>) {
        match e {
            Error::Input {
                location, reason, ..
            } => (
                *reason,
                location.line,
                location.char_column,
                location.column.as_deref(),
            ),
            other => panic!("not an input error: {other}"),
        }
    }

    #[test]
    fn values_are_typed_to_their_fields() {
        let text = [
            // 1: an int reward becomes a float; verl-agent names (uid, traj_uid, anchor_obs,
            // is_action_valid) feed the canonical fields.
            r#"{"uid": "g", "traj_uid": "t", "step": 0, "reward": 1, "anchor_obs": "A", "is_action_valid": true}"#,
            // 2: a numeric id, an integral float step, a boolean as a string.
            r#"{"uid": 7, "traj_uid": "t", "step": 1.0, "reward": 0.5, "is_action_valid": "False"}"#,
            // 3: a boolean as 1, a negative reward.
            r#"{"uid": "g", "traj_uid": "t", "step": 2, "reward": -2, "is_action_valid": 1}"#,
            // 4: blank (skipped, but counted as a line).
            "   ",
            // 5: a structured observation is kept as its JSON text.
            r#"{"uid": "g", "traj_uid": "t", "step": 3, "reward": 0.0, "obs": {"k": [1, 2]}}"#,
        ]
        .join("\n");
        let block = parse_text(&text, 1);
        assert!(block.problems.is_empty(), "{:?}", block.problems);
        let rows = &block.rows;
        assert_eq!(rows.len(), 4);
        let lines: Vec<u64> = rows.origin.iter().map(|o| o.line).collect();
        assert_eq!(lines, vec![1, 2, 3, 5]);
        let (g, s, r, v, o) = (fi(GROUP_ID), fi(STEP), fi(REWARD), fi(VALID), fi(OBS));
        assert_eq!(rows.get(r, 0), Some(Typed::Float(1.0)));
        assert_eq!(rows.get(r, 1), Some(Typed::Float(0.5)));
        assert_eq!(rows.get(r, 2), Some(Typed::Float(-2.0)));
        assert_eq!(rows.get(s, 1), Some(Typed::Int(1)));
        // The numeric id 7 is stored as its digits, and remembered as a number.
        assert_eq!(rows.text(g, 1), "7");
        assert!(rows.numbered[g] && rows.named[g]);
        assert_eq!(rows.get(v, 0), Some(Typed::Bool(true)));
        assert_eq!(rows.get(v, 1), Some(Typed::Bool(false)));
        assert_eq!(rows.get(v, 2), Some(Typed::Bool(true)));
        assert_eq!(rows.get(v, 3), None);
        assert_eq!(rows.text(o, 0), "A");
        assert_eq!(rows.text(o, 3), r#"{"k":[1,2]}"#);
    }

    #[test]
    fn decoded_strings_are_viewed_where_they_were_decoded() {
        let text = [
            // Escaped text long and short (inline in its view), plain text, an id as a number.
            r#"{"uid": 7, "traj_uid": "t", "step": 0, "reward": 0, "anchor_obs": "line one\nline two, well past twelve bytes", "action": "go \"n\"", "env_feedback": "plain text past twelve bytes"}"#,
            // Scanned and decoded, then typed by the serde path (an action given as a number):
            // what the scanner decoded for it stays unused.
            r#"{"uid": "g", "traj_uid": "t", "step": 1, "reward": 0, "anchor_obs": "serde\tline text", "action": 5}"#,
            // Left by the scanner halfway (a nested value after an escaped string).
            r#"{"uid": "g", "traj_uid": "t", "step": 2, "reward": 0, "anchor_obs": "nested\nafter", "extra": {"a": 1}}"#,
            r#"{"uid": "g", "traj_uid": "t", "step": 3, "reward": 0, "anchor_obs": "caf\u00e9 and a back\\slash, long"}"#,
        ]
        .join("\n");
        let mut block = parse_text(&text, 1);
        assert!(block.problems.is_empty(), "{:?}", block.problems);
        let expected_obs = [
            "line one\nline two, well past twelve bytes",
            "serde\tline text",
            "nested\nafter",
            "café and a back\\slash, long",
        ];
        let rows = &mut block.rows;
        let obs: Vec<&str> = (0..4).map(|r| rows.text(fi(OBS), r)).collect();
        assert_eq!(obs, expected_obs);
        assert_eq!(rows.text(fi(ACTION), 0), "go \"n\"");
        assert_eq!(rows.text(fi(FEEDBACK), 0), "plain text past twelve bytes");
        assert_eq!(rows.text(fi(GROUP_ID), 0), "7");
        rows.freeze();
        let frame = Rows::frame(&[(&*rows, &[3, 0, 1, 2])], &rows.present).unwrap();
        let column = frame.column(OBS).unwrap().str().unwrap().clone();
        let got: Vec<Option<&str>> = column.iter().collect();
        let want = [3, 0, 1, 2].map(|r| Some(expected_obs[r]));
        assert_eq!(got, want);
        // The scanned lines' text was decoded once, into the block's decoded buffer, and viewed
        // there; the column's own bytes hold what the serde path typed. A line the scanner left
        // halfway leaves nothing decoded behind (one typed by the serde path after a scan does).
        let array = column.downcast_iter().next().unwrap();
        let [own, decoded] = array.data_buffers().as_ref() else {
            panic!("a JSONL block's text has its own and its decoded buffer");
        };
        let holds =
            |buffer: &[u8], text: &str| buffer.windows(text.len()).any(|w| w == text.as_bytes());
        let [scanned, serde_after_scan, left_halfway, scanned_again] = expected_obs;
        for text in [scanned, scanned_again] {
            assert!(holds(decoded, text) && !holds(own, text), "{text:?}");
        }
        assert!(holds(own, serde_after_scan));
        assert!(holds(own, left_halfway) && !holds(decoded, left_halfway));
    }

    #[test]
    fn episode_lines_give_one_row_per_step() {
        // The episode's uid/traj_uid apply to each step; a step's own key wins over the episode's.
        let line = r#"{"uid": "e", "traj_uid": "u", "reward": 9, "steps": [{"step": 0, "reward": 0}, {"step": 1, "reward": 1, "uid": "f"}]}"#;
        let block = parse_text(line, 1);
        assert!(block.problems.is_empty(), "{:?}", block.problems);
        let rows = &block.rows;
        assert_eq!(rows.len(), 2);
        assert_eq!((rows.origin[0].line, rows.origin[1].line), (1, 1));
        assert_eq!(
            (rows.text(fi(TRAJ_ID), 0), rows.text(fi(TRAJ_ID), 1)),
            ("u", "u")
        );
        assert_eq!(
            (rows.text(fi(GROUP_ID), 0), rows.text(fi(GROUP_ID), 1)),
            ("e", "f")
        );
        assert_eq!(rows.get(fi(REWARD), 0), Some(Typed::Float(0.0)));
        assert_eq!(rows.get(fi(REWARD), 1), Some(Typed::Float(1.0)));
        assert_eq!(rows.int(fi(STEP), 1), Some(1));
    }

    #[test]
    fn bad_values_name_line_column_and_field() {
        let text = [
            r#"{"uid": "g", "traj_uid": "t", "step": 0, "reward": 0}"#,
            // 2: a number as a string is not a reward.
            r#"{"uid": "g", "traj_uid": "t", "step": 3, "reward": "0.5"}"#,
            // 3: NaN spelled as a string.
            r#"{"uid": "g", "traj_uid": "t", "step": 4, "reward": "NaN"}"#,
            // 4: a fractional step.
            r#"{"uid": "g", "traj_uid": "t", "step": 1.5, "reward": 0}"#,
            // 5: malformed JSON.
            r#"{"uid": "g", "#,
            // 6: no reward column.
            r#"{"uid": "g", "traj_uid": "t", "step": 5}"#,
            // 7: a negative step.
            r#"{"uid": "g", "traj_uid": "t", "step": -1, "reward": 0}"#,
            // 8: a boolean that is not 0/1/true/false.
            r#"{"uid": "g", "traj_uid": "t", "step": 6, "reward": 0, "valid": 2}"#,
        ];
        let block = parse_text(&text.join("\n"), 1);
        // Only line 1 is a row; every other line is one problem, in line order.
        assert_eq!(block.rows.len(), 1);
        assert_eq!(block.problems.len(), 7);
        // Line 2: `"0.5"` starts at character 52:
        // {"uid": "g", "traj_uid": "t", "step": 3, "reward": "0.5"}
        // `"reward"` spans 42–49, then `:` 50, a space 51, the value from 52.
        assert_eq!(&text[1][51..56], "\"0.5\"");
        assert_eq!(
            located(&block.problems[0]),
            (Reason::WrongType, Some(2), Some(52), Some("reward"))
        );
        assert_eq!(
            block.problems[0].to_string(),
            r#"mem.jsonl:2:52 (reward): expected a finite number, got "0.5""#
        );
        let p = |i: usize| located(&block.problems[i]);
        assert_eq!(
            (p(1).0, p(1).1, p(1).3),
            (Reason::NonFinite, Some(3), Some("reward"))
        );
        assert_eq!(
            (p(2).0, p(2).1, p(2).3),
            (Reason::WrongType, Some(4), Some("step"))
        );
        assert_eq!((p(3).0, p(3).1), (Reason::MalformedJson, Some(5)));
        assert_eq!((p(4).0, p(4).1), (Reason::MissingColumn, Some(6)));
        assert_eq!(
            (p(5).0, p(5).1, p(5).3),
            (Reason::WrongType, Some(7), Some("step"))
        );
        assert!(block.problems[5].to_string().contains("≥ 0, got -1"));
        assert_eq!(
            (p(6).0, p(6).1, p(6).3),
            (Reason::WrongType, Some(8), Some("valid"))
        );
    }

    #[test]
    fn a_repeated_key_is_an_error_not_the_last_value() {
        let text = [
            // 1: a flat row (the tape path sees the repeat in its shape).
            r#"{"uid": "g", "traj_uid": "t", "step": 0, "reward": 1.0, "reward": 0.0}"#,
            // 2: a repeat inside a nested value, which the serde path reads.
            r#"{"uid": "g", "traj_uid": "t", "step": 0, "reward": 1.0, "obs": {"k": 1, "k": 2}}"#,
            // 3: a repeat inside an episode's step.
            r#"{"uid": "g", "traj_uid": "u", "steps": [{"step": 0, "reward": 1, "reward": 2}]}"#,
            // 4: a repeated key that no field reads is input dropped all the same.
            r#"{"uid": "g", "traj_uid": "t", "step": 1, "reward": 1.0, "note": "a", "note": "b"}"#,
        ];
        let block = parse_text(&text.join("\n"), 1);
        assert_eq!(block.rows.len(), 0);
        let found: Vec<_> = block.problems.iter().map(located).collect();
        // Line 1: the second `"reward"` starts at character 57.
        assert_eq!(&text[0][56..64], "\"reward\"");
        assert_eq!(
            found,
            vec![
                (Reason::DuplicateKey, Some(1), Some(57), Some("reward")),
                (Reason::DuplicateKey, Some(2), Some(73), Some("k")),
                (Reason::DuplicateKey, Some(3), Some(66), Some("reward")),
                (Reason::DuplicateKey, Some(4), Some(70), Some("note")),
            ]
        );
        assert_eq!(&text[1][72..75], "\"k\"");
        assert_eq!(&text[2][65..73], "\"reward\"");
        assert_eq!(&text[3][69..75], "\"note\"");
        assert_eq!(
            block.problems[0].to_string(),
            "mem.jsonl:1:57 (reward): duplicate key `reward`; which value is meant is not clear"
        );
    }

    #[test]
    fn an_episode_with_no_steps_is_an_error() {
        let line = r#"{"uid": "g", "traj_uid": "u", "steps": []}"#;
        let block = parse_text(line, 1);
        assert_eq!(block.rows.len(), 0);
        assert_eq!(
            located(&block.problems[0]),
            (Reason::EmptyEpisode, Some(1), Some(40), Some("steps"))
        );
        assert_eq!(
            block.problems[0].to_string(),
            "mem.jsonl:1:40 (steps): an episode with no steps"
        );
    }

    /// Rows that each carry a key of their own share one shape: the cache does not grow with
    /// the rows, so a row costs the same however many distinct key lists came before it.
    #[test]
    fn rows_with_keys_of_their_own_share_one_shape() {
        let columns = ColumnMap::default();
        let mut fast = FastPath::new(&columns);
        let mut rows = Rows::default();
        let (mut uses, mut names) = (BTreeSet::new(), SeenColumns::default());
        let mut buffers = simd_json::Buffers::default();
        for i in 0..1000u64 {
            let mut line = format!(
                r#"{{"uid": "g", "traj_uid": "t{i}", "step": 0, "reward": 1.0, "extra_{i}": 1}}"#
            )
            .into_bytes();
            let tape = simd_json::to_tape_with_buffers(&mut line, &mut buffers).unwrap();
            let origin = Origin {
                file: 0,
                line: i + 1,
            };
            assert!(fast.row(&tape.0, &[], origin, &mut rows, &mut uses, &mut names));
        }
        assert_eq!(rows.len(), 1000);
        assert_eq!(fast.shapes.len(), 1);
        // The names kept for messages stay a sample.
        assert!(names.others.len() <= 64, "{}", names.others.len());
        // And the rows are read as the same rows without the extra key would be.
        assert_eq!(rows.text(fi(TRAJ_ID), 999), "t999");
        assert_eq!(rows.get(fi(REWARD), 999), Some(Typed::Float(1.0)));
    }

    /// The chunks `read_chunks` gives of a plain file written with `text` (chunks of
    /// `chunk_bytes`), calling `after_first` after the first; or the error.
    fn read_file(
        text: &[u8],
        name: &str,
        chunk_bytes: usize,
        after_first: impl Fn(&Path),
    ) -> Result<Vec<Vec<u8>>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let mut inputs =
            super::super::files::collect(std::slice::from_ref(&path), &mut Vec::new())?;
        let input = inputs.remove(0);
        let super::super::files::Format::Jsonl(compression) = input.format else {
            panic!("not JSONL: {name}");
        };
        let buffers = ChunkBuffers::new(chunk_bytes);
        let mut chunks = Vec::new();
        read_chunks(&input, compression, 0, chunk_bytes, &buffers, |chunk| {
            chunks.push(chunk.bytes().to_vec());
            if chunks.len() == 1 {
                after_first(&path);
            }
            true
        })?;
        Ok(chunks)
    }

    /// The message of a whole-file error.
    fn file_error(e: Error) -> String {
        match &e {
            Error::Input {
                location,
                reason: Reason::UnreadableFile,
                ..
            } => assert_eq!((location.line, location.column.as_deref()), (None, None)),
            other => panic!("not a whole-file error: {other}"),
        }
        e.to_string()
    }

    #[test]
    fn a_file_cut_short_while_it_is_read_is_an_error() {
        let line = r#"{"uid": "g", "traj_uid": "t", "step": 0, "reward": 0.0}"#;
        let text = format!("{line}\n").repeat(200);
        let whole = read_file(text.as_bytes(), "log.jsonl", 1000, |_| {}).unwrap();
        assert_eq!(whole.concat(), text.as_bytes());
        for cut in [0, 1500, 5000] {
            let truncate = |path: &Path| {
                let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                file.set_len(cut).unwrap();
            };
            let e = read_file(text.as_bytes(), "log.jsonl", 1000, truncate).unwrap_err();
            let message = file_error(e);
            assert!(
                message.ends_with(&format!(
                    "log.jsonl: truncated while being read: it had {} bytes when credit listed it and has {cut} now (log rotation with copytruncate? a trainer rewriting its log?); read it again once nothing writes it",
                    text.len()
                )),
                "{message}"
            );
        }
    }

    #[test]
    fn utf16_text_is_named() {
        let text = "{\"uid\": \"g\"}\n";
        let le: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let be: Vec<u8> = text.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let marked = [&[0xFF, 0xFE][..], &le].concat();
        let cases = [
            (marked, "little-endian, by its byte-order mark"),
            (le, "little-endian, without a byte-order mark"),
            (be, "big-endian, without a byte-order mark"),
        ];
        for (bytes, what) in cases {
            for chunk_bytes in [4, 1 << 20] {
                let e = read_file(&bytes, "log.jsonl", chunk_bytes, |_| {}).unwrap_err();
                let message = file_error(e);
                assert!(
                    message.ends_with(&format!("log.jsonl: looks like UTF-16 ({what}): convert it to UTF-8 (iconv -f UTF-16 -t UTF-8 FILE > FILE.jsonl); logs must be UTF-8 text")),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn gzip_members_are_read_and_zero_padding_is_named() {
        use std::io::Write;
        let gzip = |text: &str| {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), Default::default());
            encoder.write_all(text.as_bytes()).unwrap();
            encoder.finish().unwrap()
        };
        let (a, b) = ("{\"n\": 1}\n", "{\"n\": 2}\n");
        let members = [gzip(a), gzip(b)].concat();
        let chunks = read_file(&members, "log.jsonl.gz", 1 << 20, |_| {}).unwrap();
        assert_eq!(chunks.concat(), format!("{a}{b}").as_bytes());
        let padded = [members.clone(), vec![0; 512]].concat();
        let e = read_file(&padded, "log.jsonl.gz", 1 << 20, |_| {}).unwrap_err();
        let message = file_error(e);
        assert!(
            message.ends_with("log.jsonl.gz: the gzip stream ends in 512 bytes of zero padding after its last member (`gzip -d` warns and ignores them; credit does not guess): remove them, e.g. `gzip -dc FILE | gzip > FIXED.gz`"),
            "{message}"
        );
        // Zero bytes, then more that is not gzip: the decoder's own error.
        let garbage = [members, vec![0; 3], b"xyz".to_vec()].concat();
        let e = read_file(&garbage, "log.jsonl.gz", 1 << 20, |_| {}).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(
            e.to_string().contains("3 zero bytes after a gzip member"),
            "{e}"
        );
    }

    #[test]
    fn a_byte_order_mark_inside_a_file_is_named() {
        let line = r#"{"uid": "g", "traj_uid": "t", "step": 0, "reward": 0.0}"#;
        let block = parse_text(&format!("{line}\n\u{feff}{line}"), 1);
        assert_eq!(block.rows.len(), 1);
        assert_eq!(
            located(&block.problems[0]),
            (Reason::MalformedJson, Some(2), Some(1), None)
        );
        assert_eq!(
            block.problems[0].to_string(),
            "mem.jsonl:2:1: a byte-order mark starts this line (files joined with `cat`?): only a file's first line may start with one; remove it"
        );
    }
}
