//! Typed rows in columns: the values of every canonical field for a run of rows, each row with its
//! origin (file, line or row).
//!
//! Readers fill one [`Rows`] per block of input; the assembler hands each row, by reference, to the
//! unit (group or iteration) it belongs to ([`UnitRows`]), and a window of complete units becomes a
//! polars frame ([`Rows::frame`]). Text is stored as string views into byte buffers, so a row
//! costs no allocation of its own and each value's bytes are written once: into the column's own
//! buffer, or, for a string the JSONL scanner decoded from escapes, left where it was decoded (the
//! block's decoded text, [`Rows::push_decoded`]). Once a block is complete its columns are frozen
//! into view arrays, and the frames' string columns share their buffers (the text is never copied
//! again). Parquet text stays in the string views polars decoded it into, shared the same way.

use super::Cell;
use crate::schema::{Kind, FIELDS};
use polars::prelude::*;
use polars_arrow::array::{Array as _, Utf8ViewArray, View};
use smallvec::SmallVec;

/// Where a row came from: file index and 1-based line (JSONL) or 0-based row (Parquet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Origin {
    pub file: u32,
    pub line: u64,
}

/// A borrowed value of one field, as a reader hands it over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl<'a> Value<'a> {
    pub fn of(cell: &'a Cell) -> Value<'a> {
        match cell {
            Cell::Str(s) => Value::Str(s),
            Cell::Int(v) => Value::Int(*v),
            Cell::Float(v) => Value::Float(*v),
            Cell::Bool(v) => Value::Bool(*v),
        }
    }
}

/// A text column's values while a reader fills its block: a view per row into the column's own
/// bytes ([`OWN`]) or into the block's decoded text ([`DECODED`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct TextValues {
    views: Vec<View>,
    valid: Vec<bool>,
    own: Vec<u8>,
    /// Bytes of the values (each view's length).
    bytes: usize,
    /// Whether a value lay beyond the 4 GiB a view's offset reaches (the block's frame fails).
    overflow: bool,
}

/// The buffers of a text column's views: its own bytes, then the block's decoded text.
const OWN: u32 = 0;
const DECODED: u32 = 1;

impl TextValues {
    fn nulls(n: usize) -> Self {
        TextValues {
            views: vec![View::default(); n],
            valid: vec![false; n],
            ..Default::default()
        }
    }

    /// Appends a value: a string inside `decoded` is viewed there, any other is copied (an id
    /// given as a number is written as its digits).
    fn push(&mut self, value: Option<Value>, decoded: &[u8]) {
        let (buffer, start, len) = match value {
            Some(Value::Str(s)) => match offset_in(decoded, s.as_bytes()) {
                Some(start) => (DECODED, start, s.len()),
                None => {
                    let start = self.own.len();
                    self.own.extend_from_slice(s.as_bytes());
                    (OWN, start, s.len())
                }
            },
            Some(Value::Int(v)) => {
                use std::io::Write as _;
                let start = self.own.len();
                let _ = write!(self.own, "{v}");
                (OWN, start, self.own.len() - start)
            }
            _ => return self.push_null(),
        };
        let Ok(offset) = u32::try_from(start) else {
            self.overflow = true;
            return self.push_null();
        };
        let bytes = match buffer {
            OWN => &self.own[start..start + len],
            _ => &decoded[start..start + len],
        };
        self.views.push(View::new_from_bytes(bytes, buffer, offset));
        self.valid.push(true);
        self.bytes += len;
    }

    fn push_null(&mut self) {
        self.views.push(View::default());
        self.valid.push(false);
    }

    fn get<'a>(&'a self, row: usize, decoded: &'a [u8]) -> Option<&'a str> {
        if !self.valid[row] {
            return None;
        }
        let view = &self.views[row];
        let bytes = match view.get_inlined_slice() {
            Some(inline) => inline,
            None => {
                let buffer: &[u8] = if view.buffer_idx == OWN {
                    &self.own
                } else {
                    decoded
                };
                let start = view.offset as usize;
                buffer.get(start..start + view.length as usize)?
            }
        };
        // SAFETY: only whole `&str`s (or digits) were pushed, so every view holds UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    }

    /// The values as a string-view array over their own bytes and the block's decoded text; the
    /// values back when one lies beyond the 4 GiB a view's offset reaches.
    fn into_array(self, decoded: &polars_buffer::Buffer<u8>) -> Result<Utf8ViewArray, Self> {
        use polars_arrow::datatypes::ArrowDataType;
        if self.overflow {
            return Err(self);
        }
        let own: polars_buffer::Buffer<u8> = self.own.into();
        let total_buffer_len = own.len() + decoded.len();
        let validity = self
            .valid
            .contains(&false)
            .then(|| self.valid.iter().copied().collect());
        // SAFETY: every view lies inside the buffer it names ([`TextValues::push`]: `decoded` holds
        // the text the views into it were made from), and only whole `&str`s were pushed, so the
        // bytes are UTF-8.
        Ok(unsafe {
            Utf8ViewArray::new_unchecked(
                ArrowDataType::Utf8View,
                self.views.into(),
                vec![own, decoded.clone()].into(),
                validity,
                Some(self.bytes),
                total_buffer_len,
            )
        })
    }
}

/// Room for what the rest of an input would add to `held`, at the rate `read` of its `total`
/// bytes gave so far (plus an eighth).
pub(crate) fn at_rate(held: usize, read: usize, total: usize) -> usize {
    let rate = held as f64 / read.max(1) as f64;
    (rate * 1.125 * total.saturating_sub(read) as f64) as usize
}

/// Where `value` starts inside `buffer`, when it lies there.
fn offset_in(buffer: &[u8], value: &[u8]) -> Option<usize> {
    let start = (value.as_ptr() as usize).checked_sub(buffer.as_ptr() as usize)?;
    (!value.is_empty() && start + value.len() <= buffer.len()).then_some(start)
}

/// One field's values.
#[derive(Clone, Debug)]
pub(crate) enum Buffer {
    /// A field no row has given yet: only a count of nulls. Most of the fields a log could carry
    /// are absent from any one log, and a buffer of nulls per row each (16 bytes a float) cost
    /// more memory and writes than the values that are there.
    Nulls(Kind, usize),
    /// Keys and text while a reader fills its block (frozen into [`Buffer::Views`]).
    Text(TextValues),
    /// Keys and text as a reader decoded them into string views (Parquet): never copied.
    Views(Utf8ViewArray),
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
}

impl Buffer {
    /// `n` nulls of a field's kind, as values are written: the first value makes room for them.
    fn materialized(kind: Kind, n: usize) -> Self {
        match kind {
            Kind::Key | Kind::Text => Buffer::Text(TextValues::nulls(n)),
            Kind::Int => Buffer::Int(vec![None; n]),
            Kind::Float => Buffer::Float(vec![None; n]),
            Kind::Bool => Buffer::Bool(vec![None; n]),
        }
    }

    /// Appends a value (of the column's kind: readers convert first; an id given as a number is
    /// written as its digits) or a null; text inside `decoded` stays there.
    fn push(&mut self, value: Option<Value>, decoded: &[u8]) {
        match self {
            Buffer::Nulls(_, n) if value.is_none() => *n += 1,
            &mut Buffer::Nulls(kind, n) => {
                *self = Buffer::materialized(kind, n);
                self.push(value, decoded);
            }
            Buffer::Text(text) => text.push(value, decoded),
            Buffer::Views(_) => unreachable!("rows are pushed one by one into byte buffers only"),
            Buffer::Int(v) => v.push(match value {
                Some(Value::Int(x)) => Some(x),
                _ => None,
            }),
            Buffer::Float(v) => v.push(match value {
                Some(Value::Float(x)) => Some(x),
                _ => None,
            }),
            Buffer::Bool(v) => v.push(match value {
                Some(Value::Bool(x)) => Some(x),
                _ => None,
            }),
        }
    }

    /// Row `row`'s value, of a column read whole (no decoded text besides).
    pub fn get(&self, row: usize) -> Option<Value<'_>> {
        self.get_in(row, &[])
    }

    /// Row `row`'s value (`decoded`: its block's decoded text).
    fn get_in<'a>(&'a self, row: usize, decoded: &'a [u8]) -> Option<Value<'a>> {
        match self {
            Buffer::Nulls(..) => None,
            Buffer::Text(text) => text.get(row, decoded).map(Value::Str),
            Buffer::Views(array) => array.get(row).map(Value::Str),
            Buffer::Int(v) => v[row].map(Value::Int),
            Buffer::Float(v) => v[row].map(Value::Float),
            Buffer::Bool(v) => v[row].map(Value::Bool),
        }
    }

    fn len(&self) -> usize {
        match self {
            Buffer::Nulls(_, n) => *n,
            Buffer::Text(text) => text.valid.len(),
            Buffer::Views(array) => array.len(),
            Buffer::Int(v) => v.len(),
            Buffer::Float(v) => v.len(),
            Buffer::Bool(v) => v.len(),
        }
    }

    fn any_value(&self) -> bool {
        match self {
            Buffer::Nulls(..) => false,
            Buffer::Text(text) => text.valid.contains(&true),
            Buffer::Views(array) => array.len() > array.null_count(),
            Buffer::Int(v) => v.iter().any(Option::is_some),
            Buffer::Float(v) => v.iter().any(Option::is_some),
            Buffer::Bool(v) => v.iter().any(Option::is_some),
        }
    }

    /// Rows `keep` (ascending) of a column read whole; string views keep sharing their text.
    pub fn keep(self, keep: &[usize]) -> Buffer {
        fn pick<T: Copy>(values: Vec<T>, keep: &[usize]) -> Vec<T> {
            keep.iter().map(|&r| values[r]).collect()
        }
        match self {
            Buffer::Nulls(kind, _) => Buffer::Nulls(kind, keep.len()),
            Buffer::Views(array) => {
                let views: Vec<View> = keep.iter().map(|&r| array.views()[r]).collect();
                let validity = array
                    .validity()
                    .map(|v| keep.iter().map(|&r| v.get_bit(r)).collect());
                // SAFETY: the views are the array's own, over its own buffers.
                Buffer::Views(unsafe {
                    Utf8ViewArray::new_unchecked_unknown_md(
                        array.dtype().clone(),
                        views.into(),
                        array.data_buffers().clone(),
                        validity,
                        None,
                    )
                })
            }
            Buffer::Int(v) => Buffer::Int(pick(v, keep)),
            Buffer::Float(v) => Buffer::Float(pick(v, keep)),
            Buffer::Bool(v) => Buffer::Bool(pick(v, keep)),
            Buffer::Text(_) => unreachable!("readers keep rows of whole columns as views"),
        }
    }
}

/// Rows of typed values, one [`Buffer`] per field of [`FIELDS`].
#[derive(Clone, Debug)]
pub(crate) struct Rows {
    pub origin: Vec<Origin>,
    columns: Vec<Buffer>,
    /// Whether any row has a value of each field.
    pub present: Vec<bool>,
    /// Per field: whether an id was given as a number, and as a string (keys only).
    pub numbered: Vec<bool>,
    pub named: Vec<bool>,
    /// The strings a reader decoded from escapes, where the text columns' views find them
    /// ([`Rows::push_decoded`], [`Rows::attach_decoded`]).
    decoded: polars_buffer::Buffer<u8>,
    /// Text bytes held, counted when the block is frozen (its columns' own bytes and the decoded
    /// text once, which their view arrays share).
    frozen_text_bytes: Option<usize>,
}

impl Default for Rows {
    fn default() -> Self {
        Rows {
            origin: Vec::new(),
            columns: FIELDS.iter().map(|f| Buffer::Nulls(f.kind, 0)).collect(),
            present: vec![false; FIELDS.len()],
            numbered: vec![false; FIELDS.len()],
            named: vec![false; FIELDS.len()],
            decoded: Default::default(),
            frozen_text_bytes: None,
        }
    }
}

impl Rows {
    /// Heap bytes of a row besides its text (origin, fixed-size values), as the memory budget
    /// counts them.
    pub const FIXED_BYTES_PER_ROW: usize = 16 + FIELDS.len() * 10;

    pub fn len(&self) -> usize {
        self.origin.len()
    }

    pub fn is_empty(&self) -> bool {
        self.origin.is_empty()
    }

    /// Heap bytes held (text and fixed-size values), for the memory budget.
    pub fn bytes(&self) -> usize {
        let text = self.frozen_text_bytes.unwrap_or_else(|| self.text_bytes());
        text + self.len() * Self::FIXED_BYTES_PER_ROW
    }

    /// Text bytes held: each column's own, and the decoded text once.
    fn text_bytes(&self) -> usize {
        let own: usize = self
            .columns
            .iter()
            .map(|c| match c {
                Buffer::Text(text) => text.own.len(),
                Buffer::Views(array) => array.total_bytes_len(),
                _ => 0,
            })
            .sum();
        own + self.decoded.len()
    }

    /// Rows read a column at a time: `columns[i]` holds `FIELDS[i]`'s values (of its kind, text as
    /// [`Buffer::Views`]), `origin` each row's.
    pub fn from_columns(columns: Vec<Buffer>, origin: Vec<Origin>) -> Rows {
        debug_assert!(columns.iter().all(|c| c.len() == origin.len()));
        let present: Vec<bool> = columns.iter().map(Buffer::any_value).collect();
        let named = FIELDS
            .iter()
            .zip(&present)
            .map(|(f, &p)| p && f.kind == Kind::Key)
            .collect();
        Rows {
            origin,
            columns,
            present,
            numbered: vec![false; FIELDS.len()],
            named,
            decoded: Default::default(),
            frozen_text_bytes: None,
        }
    }

    /// Room for the rows and text of `total` input bytes, `read` of which filled the buffers so
    /// far, at the same rate per field (plus an eighth): buffers that grow by doubling copy what
    /// they hold each time, into fresh pages.
    pub fn reserve_at_rate(&mut self, read: usize, total: usize) {
        let at_rate = |held| at_rate(held, read, total);
        let rows = at_rate(self.len());
        self.origin.reserve(rows);
        for column in &mut self.columns {
            match column {
                Buffer::Text(text) => {
                    text.own.reserve(at_rate(text.own.len()));
                    text.views.reserve(rows);
                    text.valid.reserve(rows);
                }
                Buffer::Int(v) => v.reserve(rows),
                Buffer::Float(v) => v.reserve(rows),
                Buffer::Bool(v) => v.reserve(rows),
                Buffer::Nulls(..) | Buffer::Views(_) => {}
            }
        }
    }

    /// Ends the block: its text columns become view arrays over buffers that frames share.
    pub fn freeze(&mut self) {
        if self.frozen_text_bytes.is_some() {
            return;
        }
        self.frozen_text_bytes = Some(self.text_bytes());
        for column in &mut self.columns {
            if let Buffer::Text(text) = column {
                // A block past what a view reaches stays as it is: its frame fails.
                *column = match std::mem::take(text).into_array(&self.decoded) {
                    Ok(array) => Buffer::Views(array),
                    Err(text) => Buffer::Text(text),
                };
            }
        }
    }

    /// Appends one row: `values[i]` belongs to `FIELDS[i]` and is already of its kind.
    pub fn push(&mut self, origin: Origin, values: &[Option<Value>]) {
        self.push_decoded(origin, values, &[]);
    }

    /// [`Rows::push`] of a row whose strings may lie in `decoded`, the text a reader decoded
    /// for this block so far: they are viewed there, not copied, once [`Rows::attach_decoded`]
    /// hands the block that text (which must hold `decoded` at the same offsets).
    pub fn push_decoded(&mut self, origin: Origin, values: &[Option<Value>], decoded: &[u8]) {
        for (i, (column, value)) in self.columns.iter_mut().zip(values).enumerate() {
            match value {
                Some(Value::Int(_)) if FIELDS[i].kind == Kind::Key => self.numbered[i] = true,
                Some(Value::Str(_)) if FIELDS[i].kind == Kind::Key => self.named[i] = true,
                _ => {}
            }
            if value.is_some() {
                self.present[i] = true;
            }
            column.push(*value, decoded);
        }
        self.origin.push(origin);
    }

    /// The text decoded for this block, which [`Rows::push_decoded`]'s views point into.
    pub fn attach_decoded(&mut self, decoded: Vec<u8>) {
        self.decoded = decoded.into();
    }

    pub fn get(&self, field: usize, row: usize) -> Option<Value<'_>> {
        self.columns[field].get_in(row, &self.decoded)
    }

    /// A key or text value ("" when null).
    pub fn text(&self, field: usize, row: usize) -> &str {
        match self.get(field, row) {
            Some(Value::Str(s)) => s,
            _ => "",
        }
    }

    pub fn int(&self, field: usize, row: usize) -> Option<i64> {
        match self.get(field, row) {
            Some(Value::Int(v)) => Some(v),
            _ => None,
        }
    }

    /// A polars frame of the rows `selection` of each part, in order: one column per field in
    /// `present` (nulls where a row has no value), required floats without nulls.
    pub fn frame(parts: &[(&Rows, &[usize])], present: &[bool]) -> PolarsResult<DataFrame> {
        use rayon::prelude::*;
        let height: usize = parts.iter().map(|(_, s)| s.len()).sum();
        // A column per task: a window of one large group is otherwise built on one core.
        let column = |(i, field): (usize, &crate::schema::Field)| -> PolarsResult<Column> {
            let values = || {
                parts.iter().flat_map(move |(rows, selection)| {
                    selection.iter().map(move |&r| rows.get(i, r))
                })
            };
            let name: PlSmallStr = field.name.into();
            Ok(match field.kind {
                Kind::Key | Kind::Text => text_column(name, parts, i, height)?,
                Kind::Int => Column::new(
                    name,
                    values()
                        .map(|v| match v {
                            Some(Value::Int(x)) => Some(x),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Float if field.required => Column::new(
                    name,
                    values()
                        .map(|v| match v {
                            Some(Value::Float(x)) => x,
                            _ => 0.0,
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Float => Column::new(
                    name,
                    values()
                        .map(|v| match v {
                            Some(Value::Float(x)) => Some(x),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Bool => Column::new(
                    name,
                    values()
                        .map(|v| match v {
                            Some(Value::Bool(x)) => Some(x),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                ),
            })
        };
        let columns = FIELDS
            .par_iter()
            .enumerate()
            .filter(|&(i, _)| present[i])
            .map(column)
            .collect::<PolarsResult<Vec<_>>>()?;
        DataFrame::new(height, columns)
    }
}

/// A string column of the rows `selection` of each part: views into the parts' text buffers.
fn text_column(
    name: PlSmallStr,
    parts: &[(&Rows, &[usize])],
    field: usize,
    height: usize,
) -> PolarsResult<Column> {
    use polars_arrow::bitmap::MutableBitmap;
    use polars_arrow::datatypes::ArrowDataType;

    let mut buffers: Vec<polars_buffer::Buffer<u8>> = Vec::new();
    // Where each frozen block's view array's buffers begin.
    let mut first_buffer_of: PlHashMap<usize, u32> = PlHashMap::default();
    let mut views: Vec<View> = Vec::with_capacity(height);
    let mut validity = MutableBitmap::with_capacity(height);
    let mut total_bytes = 0;
    for (rows, selection) in parts {
        // A block still growing (tests) is viewed through a copy of its columns, whose buffers
        // no other part shares.
        let copied;
        let (array, shared) = match &rows.columns[field] {
            Buffer::Views(array) => (array, true),
            Buffer::Text(text) => {
                copied = text.clone().into_array(&rows.decoded).map_err(|_| {
                    polars_err!(ComputeError: "a block of {} text over 4 GiB", FIELDS[field].name)
                })?;
                (&copied, false)
            }
            Buffer::Nulls(..) => {
                views.extend(std::iter::repeat_n(View::default(), selection.len()));
                validity.extend_constant(selection.len(), false);
                continue;
            }
            _ => polars_bail!(ComputeError: "field {} holds no text", FIELDS[field].name),
        };
        let own = array.data_buffers();
        let mut add_buffers = || {
            buffers.extend(own.iter().cloned());
            (buffers.len() - own.len()) as u32
        };
        let first = match shared {
            true => *first_buffer_of
                .entry(own.as_ptr() as usize)
                .or_insert_with(add_buffers),
            false => add_buffers(),
        };
        for &r in selection.iter() {
            let valid = array.is_valid(r);
            validity.push(valid);
            if !valid {
                views.push(View::default());
                continue;
            }
            let mut view = array.views()[r];
            total_bytes += view.length as usize;
            if view.length > View::MAX_INLINE_SIZE {
                view.buffer_idx += first;
            }
            views.push(view);
        }
    }
    let total_buffer_len = buffers.iter().map(|b| b.len()).sum();
    let validity = (validity.unset_bits() > 0).then(|| validity.into());
    // SAFETY: the views are the parts' own, moved with their buffers, and hold UTF-8 (only whole
    // `&str`s were pushed or decoded; polars checks Parquet's).
    let array = unsafe {
        Utf8ViewArray::new_unchecked(
            ArrowDataType::Utf8View,
            views.into(),
            buffers.into(),
            validity,
            Some(total_bytes),
            total_buffer_len,
        )
    };
    Ok(StringChunked::with_chunk(name, array).into_column())
}

/// The rows of one unit: references into the blocks they were parsed in (no copy), with each
/// row's place in the input. A unit of one row (logs of single-row groups close a unit per row)
/// holds its block and row inline, without an allocation.
#[derive(Clone, Debug, Default)]
pub(crate) struct UnitRows {
    blocks: SmallVec<[std::sync::Arc<Rows>; 1]>,
    refs: SmallVec<[RowRef; 1]>,
    /// Estimated heap bytes of the referenced rows.
    pub bytes: usize,
}

/// A row of a unit: its block (an index into the unit's blocks), its row in that block, its
/// sequence number, and its trajectory's number (the assembler numbers trajectories in the order
/// the input first shows them).
#[derive(Clone, Copy, Debug)]
struct RowRef {
    block: u32,
    row: u32,
    seq: u64,
    traj: u64,
}

impl UnitRows {
    pub fn push(
        &mut self,
        block: &std::sync::Arc<Rows>,
        row: usize,
        seq: u64,
        traj: u64,
        bytes: usize,
    ) {
        let b = match self.blocks.last() {
            Some(last) if std::sync::Arc::ptr_eq(last, block) => self.blocks.len() - 1,
            _ => {
                self.blocks.push(block.clone());
                self.blocks.len() - 1
            }
        };
        self.refs.push(RowRef {
            block: b as u32,
            row: row as u32,
            seq,
            traj,
        });
        self.bytes += bytes;
    }

    pub fn len(&self) -> usize {
        self.refs.len()
    }

    fn at(&self, i: usize) -> (&Rows, usize) {
        let RowRef { block, row, .. } = self.refs[i];
        (&self.blocks[block as usize], row as usize)
    }

    /// The number of row `i`'s trajectory (see [`RowRef`]).
    pub fn traj(&self, i: usize) -> u64 {
        self.refs[i].traj
    }

    pub fn seq(&self, i: usize) -> u64 {
        self.refs[i].seq
    }

    pub fn text(&self, field: usize, i: usize) -> &str {
        let (rows, r) = self.at(i);
        rows.text(field, r)
    }

    pub fn int(&self, field: usize, i: usize) -> Option<i64> {
        let (rows, r) = self.at(i);
        rows.int(field, r)
    }

    pub fn float(&self, field: usize, i: usize) -> Option<f64> {
        let (rows, r) = self.at(i);
        match rows.get(field, r) {
            Some(Value::Float(v)) => Some(v),
            _ => None,
        }
    }

    pub fn origin(&self, i: usize) -> Origin {
        let (rows, r) = self.at(i);
        rows.origin[r]
    }

    /// Whether rows `i` and `j` hold the same value in every field.
    pub fn rows_equal(&self, i: usize, j: usize) -> bool {
        let ((a, ra), (b, rb)) = (self.at(i), self.at(j));
        (0..FIELDS.len()).all(|f| a.get(f, ra) == b.get(f, rb))
    }
}

/// The kept rows of a window's units, in order, as runs of rows of one block each, for
/// [`Rows::frame`]. A run goes on across units: a window of single-row units whose rows were
/// parsed in one block is one run, not one per unit.
#[derive(Default)]
pub(crate) struct Runs<'a> {
    rows: Vec<usize>,
    /// Each run's block and the end of its rows in `rows`.
    ends: Vec<(&'a Rows, usize)>,
}

impl<'a> Runs<'a> {
    pub fn push(&mut self, unit: &'a UnitRows, keep: &[usize]) {
        for &i in keep {
            let (block, row) = unit.at(i);
            match self.ends.last_mut() {
                Some((last, end)) if std::ptr::eq(*last, block) => *end += 1,
                _ => self.ends.push((block, self.rows.len() + 1)),
            }
            self.rows.push(row);
        }
    }

    pub fn parts(&self) -> Vec<(&'a Rows, &[usize])> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&(block, end)| {
                let part = (block, &self.rows[start..end]);
                start = end;
                part
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_values_nulls_and_text_boundaries() {
        let n = FIELDS.len();
        let mut rows = Rows::default();
        let mut a: Vec<Option<Value>> = vec![None; n];
        a[0] = Some(Value::Str("g1"));
        a[2] = Some(Value::Int(3));
        a[3] = Some(Value::Float(0.5));
        rows.push(Origin { file: 0, line: 1 }, &a);
        let mut b = a.clone();
        b[0] = Some(Value::Str("é-ü"));
        b[2] = None;
        rows.push(Origin { file: 0, line: 2 }, &b);
        assert_eq!(rows.text(0, 0), "g1");
        assert_eq!(rows.text(0, 1), "é-ü");
        assert_eq!(rows.int(2, 0), Some(3));
        assert_eq!(rows.int(2, 1), None);
        assert!(rows.present[0] && rows.present[2] && !rows.present[1]);
        let block = std::sync::Arc::new(rows);
        let mut unit = UnitRows::default();
        unit.push(&block, 1, 8, 0, 10);
        unit.push(&block, 0, 7, 1, 10);
        assert_eq!((unit.seq(0), unit.seq(1), unit.bytes), (8, 7, 20));
        assert_eq!((unit.traj(0), unit.traj(1)), (0, 1));
        assert_eq!(unit.text(0, 0), "é-ü");
        assert_eq!(unit.origin(1), Origin { file: 0, line: 1 });
        assert!(!unit.rows_equal(0, 1) && unit.rows_equal(1, 1));

        // Runs go on across units while the block stays the same.
        let mut other_rows = Rows::default();
        other_rows.push(Origin { file: 1, line: 1 }, &a);
        let other_block = std::sync::Arc::new(other_rows);
        let (mut same_block, mut other) = (UnitRows::default(), UnitRows::default());
        same_block.push(&block, 1, 10, 2, 10);
        other.push(&other_block, 0, 9, 3, 10);
        let mut runs = Runs::default();
        runs.push(&unit, &[1, 0]);
        runs.push(&same_block, &[0]);
        runs.push(&other, &[0]);
        let parts = runs.parts();
        let selections: Vec<&[usize]> = parts.iter().map(|&(_, s)| s).collect();
        assert_eq!(selections, vec![&[0, 1, 1][..], &[0][..]]);
        assert!(std::ptr::eq(parts[0].0, &*block) && std::ptr::eq(parts[1].0, &*other_block));
        let frame = Rows::frame(&parts, &block.present).unwrap();
        let ids = frame.column("group_id").unwrap().str().unwrap().clone();
        let ids: Vec<_> = ids.iter().collect();
        assert_eq!(ids, vec![Some("g1"), Some("é-ü"), Some("é-ü"), Some("g1")]);
    }

    #[test]
    fn a_field_first_given_after_nulls_keeps_them() {
        use crate::schema::{columns::*, field_index};
        let fi = |name| field_index(name).unwrap();
        let mut rows = Rows::default();
        let mut values: Vec<Option<Value>> = vec![None; FIELDS.len()];
        for line in 1..=3 {
            values[fi(VALUE)] = (line == 3).then_some(Value::Float(0.25));
            values[fi(ACTION)] = (line == 2).then_some(Value::Str("go north"));
            rows.push(Origin { file: 0, line }, &values);
        }
        // No memory for a field until a row gives it; then the rows before it are nulls.
        assert!(matches!(
            rows.columns[fi(DONE)],
            Buffer::Nulls(Kind::Bool, 3)
        ));
        let values_of = |f: usize| (0..3).map(|r| rows.get(f, r)).collect::<Vec<_>>();
        assert_eq!(values_of(fi(VALUE)), [None, None, Some(Value::Float(0.25))]);
        assert_eq!(
            values_of(fi(ACTION)),
            [None, Some(Value::Str("go north")), None]
        );
        assert_eq!(values_of(fi(DONE)), [None, None, None]);
        assert!(rows.present[fi(VALUE)] && !rows.present[fi(DONE)]);
        // A frame of this block beside a block that has the field gives the first block's rows
        // as nulls.
        let mut other = Rows::default();
        values[fi(DONE)] = Some(Value::Bool(true));
        other.push(Origin { file: 0, line: 4 }, &values);
        rows.freeze();
        other.freeze();
        let mut present = rows.present.clone();
        present[fi(DONE)] = true;
        let frame = Rows::frame(&[(&rows, &[0, 2]), (&other, &[0])], &present).unwrap();
        let done: Vec<_> = frame.column(DONE).unwrap().bool().unwrap().iter().collect();
        assert_eq!(done, [None, None, Some(true)]);
        let actions: Vec<_> = frame
            .column(ACTION)
            .unwrap()
            .str()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(actions, [None, None, None]);
    }

    #[test]
    fn frame_keeps_present_fields_with_nulls() {
        use crate::schema::{columns::*, field_index};
        let fi = |name| field_index(name).unwrap();
        let n = FIELDS.len();
        let mut rows = Rows::default();
        let mut a: Vec<Option<Value>> = vec![None; n];
        a[fi(GROUP_ID)] = Some(Value::Int(12));
        a[fi(TRAJ_ID)] = Some(Value::Str("t"));
        a[fi(STEP)] = Some(Value::Int(0));
        a[fi(REWARD)] = Some(Value::Float(0.5));
        a[fi(VALID)] = Some(Value::Bool(false));
        a[fi(VALUE)] = Some(Value::Float(2.0));
        rows.push(Origin { file: 0, line: 1 }, &a);
        // Row 1: no reward (required: 0.0 in the frame), no valid and no value (nulls), no id.
        let mut b: Vec<Option<Value>> = vec![None; n];
        b[fi(TRAJ_ID)] = Some(Value::Str("t"));
        b[fi(STEP)] = Some(Value::Int(1));
        rows.push(Origin { file: 0, line: 2 }, &b);
        // A numeric id is a key given as a number; the string trajectory id is named.
        assert!(rows.numbered[fi(GROUP_ID)] && !rows.named[fi(GROUP_ID)]);
        assert!(rows.named[fi(TRAJ_ID)] && !rows.numbered[fi(TRAJ_ID)]);
        assert_eq!(rows.text(fi(GROUP_ID), 1), "");

        // Only fields marked present become columns: leave `value` out.
        let mut present = rows.present.clone();
        present[fi(VALUE)] = false;
        let frame = Rows::frame(&[(&rows, &[0, 1])], &present).unwrap();
        let names: Vec<&str> = frame
            .get_column_names()
            .iter()
            .map(|s| s.as_str())
            .collect();
        // In FIELDS order.
        assert_eq!(names, [GROUP_ID, TRAJ_ID, STEP, REWARD, VALID]);
        let group: Vec<Option<&str>> = frame
            .column(GROUP_ID)
            .unwrap()
            .str()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(group, [Some("12"), None]);
        let reward = frame.column(REWARD).unwrap().f64().unwrap();
        assert_eq!(reward.null_count(), 0);
        assert_eq!(reward.cont_slice().unwrap(), &[0.5, 0.0]);
        let valid: Vec<Option<bool>> = frame
            .column(VALID)
            .unwrap()
            .bool()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(valid, [Some(false), None]);
        // A selection picks and orders rows.
        let frame = Rows::frame(&[(&rows, &[1]), (&rows, &[0])], &rows.present).unwrap();
        let steps: Vec<Option<i64>> = frame.column(STEP).unwrap().i64().unwrap().iter().collect();
        assert_eq!(steps, [Some(1), Some(0)]);
        let value: Vec<Option<f64>> = frame.column(VALUE).unwrap().f64().unwrap().iter().collect();
        assert_eq!(value, [None, Some(2.0)]);
    }

    #[test]
    fn frames_of_frozen_blocks_view_their_text() {
        use crate::schema::{columns::*, field_index};
        let (obs, traj) = (field_index(OBS).unwrap(), field_index(TRAJ_ID).unwrap());
        // Two blocks; texts longer and shorter than a view's 12 inline bytes, empty and null.
        let texts = [
            Some(
                "You are in the middle of a room. Looking quickly around you, you see a cabinet 1.",
            ),
            Some("short"),
            None,
            Some(""),
            Some("Ünïcödé text that spans more than twelve bytes"),
        ];
        let block = |from: usize| {
            let mut rows = Rows::default();
            for (i, text) in texts.iter().enumerate() {
                let mut values: Vec<Option<Value>> = vec![None; FIELDS.len()];
                values[traj] = Some(Value::Str("t"));
                values[obs] = text.map(Value::Str);
                rows.push(
                    Origin {
                        file: 0,
                        line: (from + i) as u64,
                    },
                    &values,
                );
            }
            rows.freeze();
            rows
        };
        let (a, b) = (block(0), block(5));
        // Interleaved runs of both blocks, one row twice.
        let parts: [(&Rows, &[usize]); 4] =
            [(&a, &[4, 0]), (&b, &[1, 2]), (&a, &[3, 0]), (&b, &[4])];
        let frame = Rows::frame(&parts, &a.present).unwrap();
        let got: Vec<Option<&str>> = frame.column(OBS).unwrap().str().unwrap().iter().collect();
        let expected: Vec<Option<&str>> = parts
            .iter()
            .flat_map(|(_, selection)| selection.iter().map(|&r| texts[r]))
            .collect();
        assert_eq!(got, expected);
        // The frame shares the blocks' buffers (each block's own and decoded text, once each)
        // instead of copying the text.
        let column = frame.column(OBS).unwrap().str().unwrap().clone();
        let array = column.downcast_iter().next().unwrap();
        let pointers = |buffers: &[polars_buffer::Buffer<u8>]| {
            buffers.iter().map(|b| b.as_ptr()).collect::<Vec<_>>()
        };
        let Buffer::Views(a_obs) = &a.columns[obs] else {
            panic!("a frozen block's text is a view array");
        };
        let Buffer::Views(b_obs) = &b.columns[obs] else {
            panic!("a frozen block's text is a view array");
        };
        assert_eq!(
            pointers(array.data_buffers()),
            [
                pointers(a_obs.data_buffers()),
                pointers(b_obs.data_buffers())
            ]
            .concat()
        );
        // A block still growing is copied, with the same values.
        let mut growing = Rows::default();
        let mut values: Vec<Option<Value>> = vec![None; FIELDS.len()];
        values[obs] = texts[0].map(Value::Str);
        growing.push(Origin { file: 0, line: 1 }, &values);
        let frame = Rows::frame(&[(&growing, &[0, 0])], &growing.present).unwrap();
        let got: Vec<Option<&str>> = frame.column(OBS).unwrap().str().unwrap().iter().collect();
        assert_eq!(got, [texts[0], texts[0]]);
    }
}
