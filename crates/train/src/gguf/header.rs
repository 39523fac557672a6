//! The header of a GGUF file (version, metadata, tensor directory) read within the file's own
//! length: every count and string length is checked against the bytes left before anything is
//! allocated or skipped, through a buffered reader. Arrays are not read here: only located (their
//! element type, length and first byte) and walked to check that they fit, and read on demand
//! ([`Header::strings`], [`Header::ints`]) for the few that credit uses (the tokenizer's tokens,
//! merges and token types). candle's `Content::read` instead boxes every element of every array
//! as a 32-byte `Value` with a system call per element: a 200 MB file holding one u8 array took
//! 8.2 GB and 172 s before its error.
//!
//! Errors are messages that name the byte where the problem was found; [`super::Gguf::open`]
//! adds the file.

use candle_core::quantized::gguf_file::TensorInfo;
use candle_core::quantized::GgmlDType;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// The tensor data starts at the first multiple of this after the header, unless
/// `general.alignment` says otherwise.
const DEFAULT_ALIGNMENT: u64 = 32;
/// Arrays of arrays nested deeper than this are refused (llama.cpp writes none): each level is a
/// recursion.
const MAX_NESTING: usize = 8;
/// GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
/// More metadata entries or tensors than any model has (llama.cpp writes a few dozen entries;
/// Llama 3.1 405B has 1,138 tensors): each costs a map entry several times its least size on
/// disk, so a file of nothing but tiny entries would otherwise take several times its length.
const MAX_ENTRIES: u64 = 1 << 16;
const MAX_TENSORS: u64 = 1 << 20;

/// A metadata value type, numbered as the format numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Self> {
        use Kind::*;
        [
            U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64,
        ]
        .get(usize::try_from(v).ok()?)
        .copied()
    }

    /// The bytes of one value of a fixed-size type; `None` for strings and arrays.
    fn size(self) -> Option<u64> {
        use Kind::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    fn name(self) -> &'static str {
        use Kind::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// A metadata value: scalars and strings as read, arrays as where their elements lie.
#[derive(Clone, Debug, PartialEq)]
pub enum Meta {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(ArrayAt),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayAt {
    pub kind: Kind,
    pub len: u64,
    /// The byte of the first element.
    pub at: u64,
}

impl std::fmt::Display for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Meta::Uint(x) => write!(f, "{x}"),
            Meta::Int(x) => write!(f, "{x}"),
            Meta::Float(x) => write!(f, "{x}"),
            Meta::Bool(x) => write!(f, "{x}"),
            Meta::Str(s) => write!(f, "{s:?}"),
            Meta::Array(a) => write!(f, "an array of {} {}", a.len, a.kind.name()),
        }
    }
}

pub struct Header {
    /// Version 1 wrote lengths and counts as u32, later versions as u64.
    wide: bool,
    pub metadata: HashMap<String, Meta>,
    /// The tensor directory, each tensor's data checked to lie within the file.
    pub tensors: HashMap<String, TensorInfo>,
    /// Where the tensor data starts; each tensor's offset counts from here.
    pub data_offset: u64,
}

/// A buffered reader that knows its position, the file's length and what it is reading (for
/// messages, which name the byte where the last field read starts).
struct Reader {
    inner: BufReader<File>,
    at: u64,
    last: u64,
    len: u64,
    wide: bool,
    what: String,
}

impl Reader {
    fn new(file: File, at: u64, wide: bool, what: String) -> Result<Self, String> {
        let len = file
            .metadata()
            .map_err(|e| format!("cannot read its length: {e}"))?
            .len();
        let mut inner = BufReader::with_capacity(1 << 16, file);
        inner
            .seek(SeekFrom::Start(at))
            .map_err(|e| format!("cannot seek to byte {at}: {e}"))?;
        Ok(Reader {
            inner,
            at,
            last: at,
            len,
            wide,
            what,
        })
    }

    fn left(&self) -> u64 {
        self.len.saturating_sub(self.at)
    }

    fn fail(&self, message: impl std::fmt::Display) -> String {
        format!("at byte {}, {} {message}", self.last, self.what)
    }

    fn cut_short(&self) -> String {
        self.fail(format_args!(
            "is cut short: the file ends at byte {}",
            self.len
        ))
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0u8; N];
        self.last = self.at;
        self.inner.read_exact(&mut b).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.cut_short()
            } else {
                self.fail(format_args!("cannot be read: {e}"))
            }
        })?;
        self.at += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.bytes().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.bytes().map(u64::from_le_bytes)
    }

    /// A count or string length: u32 in version 1, u64 after.
    fn length(&mut self) -> Result<u64, String> {
        if self.wide {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    fn length_size(&self) -> u64 {
        if self.wide {
            8
        } else {
            4
        }
    }

    fn skip(&mut self, n: u64) -> Result<(), String> {
        // Callers check `n` against the bytes left, which a file's length keeps below i64::MAX.
        let step = i64::try_from(n).unwrap_or(i64::MAX);
        self.inner
            .seek_relative(step)
            .map_err(|e| self.fail(format_args!("cannot be read: {e}")))?;
        self.at += n;
        Ok(())
    }

    /// A string's length, checked against the bytes left.
    fn string_length(&mut self) -> Result<u64, String> {
        let n = self.length()?;
        if n > self.left() {
            return Err(self.fail(format_args!(
                "has a string of {n} bytes but the file has only {} bytes left",
                self.left()
            )));
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.string_length()?;
        // At most the bytes left, as checked.
        let mut v = Vec::with_capacity(n as usize);
        (&mut self.inner)
            .take(n)
            .read_to_end(&mut v)
            .map_err(|e| self.fail(format_args!("cannot be read: {e}")))?;
        if v.len() as u64 != n {
            return Err(self.cut_short());
        }
        self.at += n;
        // Strings are not NUL-terminated, but some writers add one; not all are valid UTF-8.
        while v.last() == Some(&0) {
            v.pop();
        }
        Ok(String::from_utf8_lossy(&v).into_owned())
    }

    /// A value type number.
    fn kind(&mut self) -> Result<Kind, String> {
        let v = self.u32()?;
        Kind::from_u32(v)
            .ok_or_else(|| self.fail(format_args!("has type {v}, not a GGUF type (0 to 12)")))
    }

    /// One scalar or string value, or an array located and walked.
    fn value(&mut self, kind: Kind) -> Result<Meta, String> {
        Ok(match kind {
            Kind::U8 => Meta::Uint(u8::from_le_bytes(self.bytes()?).into()),
            Kind::U16 => Meta::Uint(u16::from_le_bytes(self.bytes()?).into()),
            Kind::U32 => Meta::Uint(self.u32()?.into()),
            Kind::U64 => Meta::Uint(self.u64()?),
            Kind::I8 => Meta::Int(i8::from_le_bytes(self.bytes()?).into()),
            Kind::I16 => Meta::Int(i16::from_le_bytes(self.bytes()?).into()),
            Kind::I32 => Meta::Int(i32::from_le_bytes(self.bytes()?).into()),
            Kind::I64 => Meta::Int(i64::from_le_bytes(self.bytes()?)),
            Kind::F32 => Meta::Float(f32::from_le_bytes(self.bytes()?).into()),
            Kind::F64 => Meta::Float(f64::from_le_bytes(self.bytes()?)),
            Kind::Bool => match self.bytes::<1>()?[0] {
                0 => Meta::Bool(false),
                1 => Meta::Bool(true),
                b => return Err(self.fail(format_args!("is {b}, not a boolean (0 or 1)"))),
            },
            Kind::String => Meta::Str(self.string()?),
            Kind::Array => {
                let kind = self.kind()?;
                let len = self.length()?;
                let at = self.at;
                self.walk_array(kind, len, 0)?;
                Meta::Array(ArrayAt { kind, len, at })
            }
        })
    }

    /// Checks that `len` elements of `kind` fit in the file and moves past them, reading only
    /// the lengths of strings and nested arrays.
    fn walk_array(&mut self, kind: Kind, len: u64, depth: usize) -> Result<(), String> {
        if depth >= MAX_NESTING {
            return Err(self.fail(format_args!("nests arrays more than {MAX_NESTING} deep")));
        }
        let (size, exact) = match kind.size() {
            Some(size) => (size, true),
            // A string is at least its length, an array its type and length.
            None if kind == Kind::String => (self.length_size(), false),
            None => (4 + self.length_size(), false),
        };
        let needed = u128::from(len) * u128::from(size);
        if needed > u128::from(self.left()) {
            return Err(self.fail(format_args!(
                "claims {len} elements ({}{needed} bytes) but the file has only {} bytes left",
                if exact { "" } else { "at least " },
                self.left()
            )));
        }
        match kind {
            _ if exact => self.skip(needed as u64),
            Kind::String => (0..len).try_for_each(|_| {
                let n = self.string_length()?;
                self.skip(n)
            }),
            _ => (0..len).try_for_each(|_| {
                let inner = self.kind()?;
                let n = self.length()?;
                self.walk_array(inner, n, depth + 1)
            }),
        }
    }
}

/// The ggml tensor types candle reads, by their number in the format.
fn ggml_type(v: u32) -> Option<GgmlDType> {
    use GgmlDType::*;
    Some(match v {
        0 => F32,
        1 => F16,
        2 => Q4_0,
        3 => Q4_1,
        6 => Q5_0,
        7 => Q5_1,
        8 => Q8_0,
        9 => Q8_1,
        10 => Q2K,
        11 => Q3K,
        12 => Q4K,
        13 => Q5K,
        14 => Q6K,
        15 => Q8K,
        30 => BF16,
        _ => return None,
    })
}

impl Header {
    /// The header of `file`, which starts with the GGUF magic.
    pub fn read(file: File) -> Result<Self, String> {
        let mut r = Reader::new(file, 4, true, "the header".into())?;
        let version = r.u32()?;
        r.wide = match version {
            1 => false,
            2 | 3 => true,
            v => {
                return Err(r.fail(format_args!(
                    "has GGUF version {v}; versions 1 to 3 are read"
                )))
            }
        };
        let tensor_count = r.length()?;
        let kv_count = r.length()?;
        if kv_count > MAX_ENTRIES || tensor_count > MAX_TENSORS {
            return Err(r.fail(format_args!(
                "claims {tensor_count} tensors and {kv_count} metadata entries: more than any model has (credit reads up to {MAX_TENSORS} and {MAX_ENTRIES})"
            )));
        }
        // The least an entry takes: a key's length, a type and one byte; a tensor's name length,
        // dimension count, type and offset.
        let needed = u128::from(kv_count) * u128::from(r.length_size() + 5)
            + u128::from(tensor_count) * u128::from(r.length_size() + 16);
        if needed > u128::from(r.left()) {
            return Err(r.fail(format_args!(
                "claims {tensor_count} tensors and {kv_count} metadata entries (at least {needed} bytes) but the file has only {} bytes left",
                r.left()
            )));
        }
        let mut metadata = HashMap::new();
        for i in 0..kv_count {
            r.what = format!("the key of metadata entry {i}");
            let key = r.string()?;
            r.what = format!("metadata `{key}`");
            if metadata.contains_key(&key) {
                return Err(r.fail("appears twice"));
            }
            let kind = r.kind()?;
            let value = r.value(kind)?;
            metadata.insert(key, value);
        }
        let mut entries = Vec::new();
        for i in 0..tensor_count {
            r.what = format!("the name of tensor entry {i}");
            let name = r.string()?;
            r.what = format!("tensor `{name}`");
            let at = r.at;
            let n_dims = r.u32()?;
            if n_dims > MAX_DIMS {
                return Err(r.fail(format_args!("has {n_dims} dimensions (at most {MAX_DIMS})")));
            }
            let mut dims = Vec::new();
            for _ in 0..n_dims {
                dims.push(r.length()?);
            }
            let elements = dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    r.fail(format_args!("has dimensions {dims:?}, too many elements"))
                })?;
            let t = r.u32()?;
            let dtype = ggml_type(t).ok_or_else(|| {
                r.fail(format_args!(
                    "has ggml type {t}, which candle does not read"
                ))
            })?;
            let block = dtype.block_size();
            if elements % block != 0 {
                return Err(r.fail(format_args!(
                    "has {elements} elements, not whole blocks of {block} ({dtype:?})"
                )));
            }
            let offset = r.u64()?;
            let bytes = (elements / block) as u128 * dtype.type_size() as u128;
            // GGUF lists the fastest-varying dimension first.
            let shape: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
            entries.push((name, at, offset, bytes, dtype, shape));
        }
        r.what = "the header".into();
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Meta::Uint(a)) if a.is_power_of_two() => *a,
            Some(Meta::Int(a)) if *a > 0 && (*a as u64).is_power_of_two() => *a as u64,
            Some(v) => {
                return Err(format!(
                    "general.alignment is {v}: must be a power of two (GGUF's default is {DEFAULT_ALIGNMENT})"
                ))
            }
        };
        let data_offset = r.at.checked_next_multiple_of(alignment).unwrap_or(u64::MAX);
        let mut tensors = HashMap::new();
        for (name, at, offset, bytes, dtype, shape) in entries {
            let start = u128::from(data_offset) + u128::from(offset);
            if start + bytes > u128::from(r.len) {
                return Err(format!(
                    "at byte {at}, tensor `{name}` needs {bytes} bytes from byte {start} but the file ends at byte {}",
                    r.len
                ));
            }
            let info = TensorInfo {
                ggml_dtype: dtype,
                shape: shape.into(),
                offset,
            };
            if tensors.insert(name.clone(), info).is_some() {
                return Err(format!("at byte {at}, tensor `{name}` appears twice"));
            }
        }
        Ok(Header {
            wide: r.wide,
            metadata,
            tensors,
            data_offset,
        })
    }

    /// A reader at the first element of `array`, for the metadata `key`.
    fn array_reader(&self, path: &Path, key: &str, array: &ArrayAt) -> Result<Reader, String> {
        let file = File::open(path).map_err(|e| e.to_string())?;
        Reader::new(file, array.at, self.wide, format!("metadata `{key}`"))
    }

    /// The strings of the array `key` (located by [`Header::read`]).
    pub fn strings(&self, path: &Path, key: &str, array: &ArrayAt) -> Result<Vec<String>, String> {
        if array.kind != Kind::String {
            return Err(format!(
                "metadata `{key}` is an array of {}, not of strings",
                array.kind.name()
            ));
        }
        let mut r = self.array_reader(path, key, array)?;
        (0..array.len).map(|_| r.string()).collect()
    }

    /// The integers of the array `key`, whichever integer type they are stored as.
    pub fn ints(&self, path: &Path, key: &str, array: &ArrayAt) -> Result<Vec<i64>, String> {
        use Kind::*;
        if !matches!(array.kind, U8 | I8 | U16 | I16 | U32 | I32 | U64 | I64) {
            return Err(format!(
                "metadata `{key}` is an array of {}, not of integers",
                array.kind.name()
            ));
        }
        let mut r = self.array_reader(path, key, array)?;
        (0..array.len)
            .map(|_| match r.value(array.kind)? {
                Meta::Int(x) => Ok(x),
                Meta::Uint(x) => {
                    i64::try_from(x).map_err(|_| r.fail(format_args!("holds {x}, out of range")))
                }
                other => Err(r.fail(format_args!("holds {other}, not an integer"))),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-3 header claiming `tensors` tensors and `entries` metadata entries.
    fn header(tensors: u64, entries: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend(entries.to_le_bytes());
        b
    }

    fn string(s: &str) -> Vec<u8> {
        let mut b = (s.len() as u64).to_le_bytes().to_vec();
        b.extend(s.as_bytes());
        b
    }

    /// A metadata entry: key, type number, value bytes.
    fn entry(key: &str, kind: u32, value: &[u8]) -> Vec<u8> {
        let mut b = string(key);
        b.extend(kind.to_le_bytes());
        b.extend(value);
        b
    }

    /// An array value: element type number, length, elements.
    fn array(kind: u32, len: u64, elements: &[u8]) -> Vec<u8> {
        let mut b = kind.to_le_bytes().to_vec();
        b.extend(len.to_le_bytes());
        b.extend(elements);
        b
    }

    /// A tensor directory entry: name, dimensions (fastest first), ggml type, offset.
    fn tensor(name: &str, dims: &[u64], ggml: u32, offset: u64) -> Vec<u8> {
        let mut b = string(name);
        b.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
        b.extend(ggml.to_le_bytes());
        b.extend(offset.to_le_bytes());
        b
    }

    /// `parts` written as a file, and its header read.
    fn read(
        parts: &[Vec<u8>],
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        Result<Header, String>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, parts.concat()).unwrap();
        let header = Header::read(File::open(&path).unwrap());
        (dir, path, header)
    }

    fn array_of<'a>(h: &'a Header, key: &str) -> &'a ArrayAt {
        match &h.metadata[key] {
            Meta::Array(a) => a,
            other => panic!("{key} = {other}"),
        }
    }

    #[test]
    fn values_arrays_and_tensors_are_located() {
        let ints: Vec<u8> = [(-3i32).to_le_bytes(), 4i32.to_le_bytes()].concat();
        let strings = [string("a"), string("bc\0")].concat();
        let mut parts = vec![
            header(1, 4),
            entry("types", 9, &array(5, 2, &ints)),
            entry("tokens", 9, &array(8, 2, &strings)),
            entry("big", 9, &array(10, 1, &u64::MAX.to_le_bytes())),
            entry("general.alignment", 4, &64u32.to_le_bytes()),
            tensor("t", &[2, 3], 0, 0),
        ];
        let header_len: usize = parts.iter().map(Vec::len).sum();
        let data_offset = header_len.next_multiple_of(64);
        parts.push(vec![0; data_offset - header_len + 24]);
        let (_dir, path, h) = read(&parts);
        let h = h.unwrap();
        assert_eq!(h.data_offset, data_offset as u64);
        assert_eq!(h.tensors["t"].shape.dims(), [3, 2]);
        let types = array_of(&h, "types");
        // After the header, the key, the value type, the element type and the length.
        assert_eq!(types.at, (24 + 8 + 5 + 4 + 4 + 8) as u64);
        assert_eq!(h.ints(&path, "types", types).unwrap(), [-3, 4]);
        let tokens = array_of(&h, "tokens");
        // A trailing NUL is dropped, as some writers add one.
        assert_eq!(h.strings(&path, "tokens", tokens).unwrap(), ["a", "bc"]);
        assert_eq!(
            h.strings(&path, "types", types).unwrap_err(),
            "metadata `types` is an array of i32, not of strings"
        );
        assert_eq!(
            h.ints(&path, "tokens", tokens).unwrap_err(),
            "metadata `tokens` is an array of string, not of integers"
        );
        let big = array_of(&h, "big");
        assert_eq!(
            h.ints(&path, "big", big).unwrap_err(),
            format!(
                "at byte {}, metadata `big` holds {}, out of range",
                big.at,
                u64::MAX
            )
        );
    }

    #[test]
    fn every_field_is_checked_before_it_is_used() {
        let nested = |depth: usize| {
            let mut b = Vec::new();
            for _ in 0..depth {
                b.extend(9u32.to_le_bytes());
                b.extend(1u64.to_le_bytes());
            }
            b.extend(array(0, 0, &[]));
            b
        };
        let mut version = b"GGUF".to_vec();
        version.extend(9u32.to_le_bytes());
        // Metadata values start at byte 37 after a one-letter key; tensor entries' dimension
        // counts at 33 after a one-letter name, their first dimension at 37.
        let cases: Vec<(Vec<Vec<u8>>, String)> = vec![
            (
                vec![version],
                "at byte 4, the header has GGUF version 9; versions 1 to 3 are read".into(),
            ),
            (
                vec![header(0, MAX_ENTRIES + 1)],
                format!(
                    "at byte 16, the header claims 0 tensors and {} metadata entries: more than any model has (credit reads up to {MAX_TENSORS} and {MAX_ENTRIES})",
                    MAX_ENTRIES + 1
                ),
            ),
            (
                vec![header(0, 1), entry("k", 99, &[])],
                "at byte 33, metadata `k` has type 99, not a GGUF type (0 to 12)".into(),
            ),
            (
                vec![header(0, 1), entry("k", 7, &[2])],
                "at byte 37, metadata `k` is 2, not a boolean (0 or 1)".into(),
            ),
            (
                vec![header(0, 1), entry("k", 9, &nested(MAX_NESTING))],
                format!(
                    "at byte {}, metadata `k` nests arrays more than {MAX_NESTING} deep",
                    37 + 12 * MAX_NESTING + 4
                ),
            ),
            (
                vec![
                    header(0, 1),
                    entry("k", 9, &array(8, 2, &[string("abcdefgh"), vec![0; 4]].concat())),
                ],
                "at byte 65, metadata `k` is cut short: the file ends at byte 69".into(),
            ),
            (
                vec![header(0, 2), entry("k", 4, &[0; 4]), entry("k", 4, &[0; 4])],
                "at byte 41, metadata `k` appears twice".into(),
            ),
            (
                vec![header(1, 0), tensor("t", &[1, 1, 1, 1, 1], 0, 0)],
                "at byte 33, tensor `t` has 5 dimensions (at most 4)".into(),
            ),
            (
                vec![header(1, 0), tensor("t", &[1 << 40, 1 << 40], 0, 0)],
                format!(
                    "at byte 45, tensor `t` has dimensions {:?}, too many elements",
                    [1u64 << 40, 1 << 40]
                ),
            ),
            (
                vec![header(1, 0), tensor("t", &[4], 99, 0)],
                "at byte 45, tensor `t` has ggml type 99, which candle does not read".into(),
            ),
            (
                vec![header(1, 0), tensor("t", &[33], 2, 0)],
                "at byte 45, tensor `t` has 33 elements, not whole blocks of 32 (Q4_0)".into(),
            ),
            (
                vec![header(1, 0), tensor("t", &[4], 0, 0), vec![0; 8]],
                "at byte 33, tensor `t` needs 16 bytes from byte 64 but the file ends at byte 65"
                    .into(),
            ),
            (
                vec![
                    header(2, 0),
                    tensor("t", &[1], 0, 0),
                    tensor("t", &[1], 0, 0),
                    vec![0; 64],
                ],
                "at byte 66, tensor `t` appears twice".into(),
            ),
        ];
        for (parts, expected) in cases {
            assert_eq!(read(&parts).2.err().as_deref(), Some(expected.as_str()));
        }
    }
}
