//! Text columns read from their Parquet pages as string views over the decompressed pages.
//!
//! polars' reader decompresses each page into a zeroed buffer and copies every plain-encoded
//! string out of it into arrays of its own: for a log's observations, ~1.7 GB written twice per
//! million rows. Here a page is decompressed into a buffer of its own that the views then point
//! into, so a string is written once, by the decompressor. This covers what trainers'
//! writers (pyarrow, polars) give text: a flat optional or required `BYTE_ARRAY` column, data
//! pages v1 or v2, plain or dictionary encoded, any codec. Anything else, and any page that does
//! not decode as its header says, is left to polars' reader, which reads that column as before
//! (and words its errors), so what is read is the same either way.

use polars::io::parquet::read::FileMetadata;
use polars_arrow::array::{Array, PrimitiveArray, Utf8ViewArray, View};
use polars_arrow::bitmap::Bitmap;
use polars_arrow::datatypes::{ArrowDataType, Field};
use polars_arrow::types::NativeType;
use polars_buffer::Buffer;
use polars_parquet::arrow::read::column_iter_to_arrays;
use polars_parquet::parquet::compression::{Compression, DecompressionContext};
use polars_parquet::parquet::encoding::hybrid_rle::HybridRleDecoder;
use polars_parquet::parquet::encoding::Encoding;
use polars_parquet::parquet::metadata::ColumnChunkMetadata;
use polars_parquet::parquet::page::{CompressedDataPage, CompressedPage, DataPageHeader, Page};
use polars_parquet::parquet::read::{decompress, BasicDecompressor, PageReader};
use polars_parquet::parquet::schema::types::PhysicalType;
use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};

/// Rows `[start, start + rows)` of a file, about `bytes` once decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub start: usize,
    pub rows: usize,
    pub bytes: usize,
}

/// A page larger than this, compressed or not, is left to polars (a damaged header can claim any
/// size, and the buffer is allocated before the page is read).
const MAX_PAGE_BYTES: usize = 1 << 30;

/// Whether a column's chunks are of the kind read here: a top-level `BYTE_ARRAY` of at most one
/// definition level (the Arrow type, a string, is checked by the plan).
pub(crate) fn readable(metadata: &FileMetadata, name: &str) -> bool {
    metadata.row_groups.iter().all(|group| {
        let mut chunks = group.columns_under_root_iter(name).into_iter().flatten();
        match (chunks.next(), chunks.next()) {
            (Some(chunk), None) => {
                let column = chunk.descriptor();
                let descriptor = &column.descriptor;
                column.path_in_schema.len() == 1
                    && descriptor.primitive_type.physical_type == PhysicalType::ByteArray
                    && descriptor.max_rep_level == 0
                    && descriptor.max_def_level <= 1
            }
            _ => false,
        }
    })
}

/// The column's strings for the slice's rows, or `None` where polars should read it.
pub(crate) fn text(
    file: &mut File,
    metadata: &FileMetadata,
    name: &str,
    slice: Slice,
) -> Option<Utf8ViewArray> {
    let mut column = Views::default();
    let end = slice.start + slice.rows;
    let mut group_start = 0;
    for group in &metadata.row_groups {
        let group_end = group_start + group.num_rows();
        if group_end > slice.start && group_start < end {
            let chunk = group.columns_under_root_iter(name)?.next()?;
            let from = slice.start.max(group_start) - group_start;
            let to = end.min(group_end) - group_start;
            column.chunk(file, chunk, from, to)?;
        }
        group_start = group_end;
        if group_start >= end {
            break;
        }
    }
    (column.views.len() == slice.rows).then_some(())?;
    column.finish()
}

/// Whether an Arrow type is an integer narrower than 32 bits, which polars, built without its
/// 8- and 16-bit types, cannot hold.
pub(crate) fn narrow_int(dtype: &ArrowDataType) -> bool {
    use ArrowDataType as A;
    matches!(dtype, A::Int8 | A::Int16 | A::UInt8 | A::UInt16)
}

/// The slice's rows of a column of 8- or 16-bit integers (type `dtype`), widened to 64 bits;
/// `Err` says why the pages do not decode.
pub(crate) fn narrow_ints(
    file: &mut File,
    metadata: &FileMetadata,
    name: &str,
    dtype: &ArrowDataType,
    slice: Slice,
) -> Result<Vec<Option<i64>>, String> {
    let mut values = Vec::with_capacity(slice.rows);
    let end = slice.start + slice.rows;
    let mut group_start = 0;
    for group in &metadata.row_groups {
        let group_end = group_start + group.num_rows();
        if group_end > slice.start && group_start < end {
            let chunk = group
                .columns_under_root_iter(name)
                .and_then(|mut chunks| chunks.next())
                .ok_or("a row group without the column")?;
            let range = chunk.byte_range();
            let length = range
                .end
                .checked_sub(range.start)
                .ok_or("a bad column chunk")?;
            let mut bytes = vec![0; usize::try_from(length).map_err(|e| e.to_string())?];
            file.seek(SeekFrom::Start(range.start))
                .and_then(|_| file.read_exact(&mut bytes))
                .map_err(|e| e.to_string())?;
            let pages = PageReader::new(
                Cursor::new(Buffer::from(bytes)),
                chunk,
                Vec::new(),
                MAX_PAGE_BYTES,
            );
            let field = Field::new(name.into(), dtype.clone(), true);
            let (arrays, _) = column_iter_to_arrays(
                vec![BasicDecompressor::new(pages, Vec::new())],
                vec![&chunk.descriptor().descriptor.primitive_type],
                field,
                None,
            )
            .map_err(|e| e.to_string())?;
            let from = slice.start.max(group_start) - group_start;
            let to = end.min(group_end) - group_start;
            let mut group_values = Vec::with_capacity(group_end - group_start);
            for array in &arrays {
                widen(array.as_ref(), &mut group_values).ok_or("an array of another type")?;
            }
            values.extend(group_values.get(from..to).ok_or("fewer values than rows")?);
        }
        group_start = group_end;
        if group_start >= end {
            break;
        }
    }
    Ok(values)
}

/// Appends an array of 8- or 16-bit integers as 64-bit ones; `None` for another type.
fn widen(array: &dyn Array, out: &mut Vec<Option<i64>>) -> Option<()> {
    fn each<T: NativeType + Into<i64>>(
        array: &dyn Array,
        out: &mut Vec<Option<i64>>,
    ) -> Option<()> {
        let array = array.as_any().downcast_ref::<PrimitiveArray<T>>()?;
        out.extend(array.iter().map(|v| v.map(|&v| v.into())));
        Some(())
    }
    each::<i8>(array, out)
        .or_else(|| each::<i16>(array, out))
        .or_else(|| each::<u8>(array, out))
        .or_else(|| each::<u16>(array, out))
}

/// Views and validity gathered chunk by chunk, and the buffers they point into.
#[derive(Default)]
struct Views {
    views: Vec<View>,
    valid: Vec<bool>,
    buffers: Vec<Buffer<u8>>,
}

impl Views {
    /// Rows `[from, to)` of one column chunk.
    fn chunk(
        &mut self,
        file: &mut File,
        chunk: &ColumnChunkMetadata,
        from: usize,
        to: usize,
    ) -> Option<()> {
        let range = chunk.byte_range();
        let mut bytes = vec![0; usize::try_from(range.end.checked_sub(range.start)?).ok()?];
        file.seek(SeekFrom::Start(range.start)).ok()?;
        file.read_exact(&mut bytes).ok()?;
        let mut pages = PageReader::new(
            Cursor::new(Buffer::from(bytes)),
            chunk,
            Vec::new(),
            MAX_PAGE_BYTES,
        );
        let mut context = DecompressionContext::Unset;
        let mut zstd = None;
        let nullable = chunk.descriptor().descriptor.max_def_level > 0;
        let mut dictionary = None;
        let mut row = 0;
        while row < to {
            let page = match pages.next()?.ok()? {
                // A dictionary comes first, once.
                CompressedPage::Dict(page) if row == 0 && dictionary.is_none() => {
                    let page =
                        decompress(CompressedPage::Dict(page), &mut Vec::new(), &mut context);
                    let Page::Dict(page) = page.ok()? else {
                        return None;
                    };
                    let values = Buffer::from(page.buffer.into_vec());
                    let index = self.buffer(values.clone());
                    dictionary = Some(plain(&values, 0, index, page.num_values)?);
                    continue;
                }
                CompressedPage::Dict(_) => return None,
                CompressedPage::Data(page) => page,
            };
            let rows = page.num_values();
            if row + rows <= from {
                // Before the slice: skipped undecompressed.
                row += rows;
                continue;
            }
            let header = page.header().clone();
            let buffer = decompressed(page, &mut zstd, &mut context)?;
            let (skip, take) = (from.saturating_sub(row), (to - row).min(rows));
            let dictionary = dictionary.as_deref().unwrap_or_default();
            self.page(&header, buffer, nullable, dictionary, rows, skip..take)?;
            row += rows;
        }
        Some(())
    }

    /// Keeps a buffer for views to point into; its index.
    fn buffer(&mut self, buffer: Buffer<u8>) -> u32 {
        self.buffers.push(buffer);
        (self.buffers.len() - 1) as u32
    }

    /// The rows `keep` of a decompressed data page of `rows` rows.
    fn page(
        &mut self,
        header: &DataPageHeader,
        buffer: Vec<u8>,
        nullable: bool,
        dictionary: &[View],
        rows: usize,
        keep: std::ops::Range<usize>,
    ) -> Option<()> {
        // Where the definition levels and the values lie in the page.
        let (encoding, levels, values) = match header {
            DataPageHeader::V1(header) => {
                let levels = if nullable {
                    let rle = Encoding::try_from(header.definition_level_encoding).ok()?;
                    (rle == Encoding::Rle).then_some(())?;
                    let length = u32::from_le_bytes(buffer.get(..4)?.try_into().ok()?) as usize;
                    4..4 + length
                } else {
                    0..0
                };
                (header.encoding, levels.clone(), levels.end..buffer.len())
            }
            DataPageHeader::V2(header) => {
                let repeated = usize::try_from(header.repetition_levels_byte_length).ok()?;
                let defined = usize::try_from(header.definition_levels_byte_length).ok()?;
                (
                    header.encoding,
                    repeated..repeated + defined,
                    repeated + defined..buffer.len(),
                )
            }
        };
        (values.start <= buffer.len()).then_some(())?;
        let buffer = Buffer::from(buffer);
        let present: Vec<bool> = if nullable {
            let levels = HybridRleDecoder::new(buffer.get(levels)?, 1, rows)
                .collect()
                .ok()?;
            (levels.len() == rows).then_some(())?;
            levels.into_iter().map(|level| level == 1).collect()
        } else {
            vec![true; rows]
        };
        let count = present.iter().filter(|&&p| p).count();
        let decoded = match Encoding::try_from(encoding).ok()? {
            Encoding::Plain => {
                let index = self.buffer(buffer.clone());
                plain(&buffer, values.start, index, count)?
            }
            Encoding::RleDictionary | Encoding::PlainDictionary => {
                let values = &buffer[values];
                let (&width, indices) = values.split_first()?;
                let indices = HybridRleDecoder::new(indices, u32::from(width), count)
                    .collect()
                    .ok()?;
                (indices.len() == count).then_some(())?;
                indices
                    .into_iter()
                    .map(|i| dictionary.get(i as usize).copied())
                    .collect::<Option<Vec<View>>>()?
            }
            _ => return None,
        };
        let mut decoded = decoded.into_iter();
        for (row, present) in present.into_iter().enumerate() {
            let view = if present {
                decoded.next()?
            } else {
                View::default()
            };
            if keep.contains(&row) {
                self.views.push(view);
                self.valid.push(present);
            }
        }
        Some(())
    }

    /// The array of the views gathered.
    fn finish(self) -> Option<Utf8ViewArray> {
        let validity = self
            .valid
            .contains(&false)
            .then(|| Bitmap::from_iter(self.valid.iter().copied()));
        let buffer_bytes = self.buffers.iter().map(|b| b.len()).sum();
        // SAFETY: each view was made from bytes of its buffer checked as UTF-8 (`plain`).
        Some(unsafe {
            Utf8ViewArray::new_unchecked(
                ArrowDataType::Utf8View,
                Buffer::from(self.views),
                Buffer::from(self.buffers),
                validity,
                None,
                buffer_bytes,
            )
        })
    }
}

/// A data page's bytes as its header lays them out, decompressed. zstd (what pyarrow and polars
/// write) decompresses into memory as it comes from the allocator; other codecs through polars,
/// which zeroes the page first.
fn decompressed(
    mut page: CompressedDataPage,
    zstd: &mut Option<zstd::bulk::Decompressor<'static>>,
    context: &mut DecompressionContext,
) -> Option<Vec<u8>> {
    let size = page.uncompressed_size();
    if size > MAX_PAGE_BYTES {
        return None;
    }
    if let (Compression::Zstd, DataPageHeader::V1(_)) = (page.compression(), page.header()) {
        if zstd.is_none() {
            *zstd = Some(zstd::bulk::Decompressor::new().ok()?);
        }
        let mut buffer = Vec::with_capacity(size);
        zstd.as_mut()?
            .decompress_to_buffer(page.slice_mut(), &mut buffer)
            .ok()?;
        return (buffer.len() == size).then_some(buffer);
    }
    let Page::Data(mut page) =
        decompress(CompressedPage::Data(page), &mut Vec::new(), context).ok()?
    else {
        return None;
    };
    Some(std::mem::take(page.buffer_mut()))
}

/// `count` plain-encoded strings (each a 4-byte little-endian length and its bytes) from `at` in
/// `bytes`, as views into buffer `index`.
fn plain(bytes: &[u8], mut at: usize, index: u32, count: usize) -> Option<Vec<View>> {
    let mut views = Vec::with_capacity(count);
    for _ in 0..count {
        let length = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
        at += 4;
        let value = bytes.get(at..at + length)?;
        // Checked while the page is in cache; most text is ASCII, checked without a call.
        (value.is_ascii() || simdutf8::basic::from_utf8(value).is_ok()).then_some(())?;
        views.push(View::new_from_bytes(value, index, u32::try_from(at).ok()?));
        at += length;
    }
    Some(views)
}

#[cfg(test)]
mod tests {
    use super::*;
    use polars::prelude::*;

    /// The fixtures `scripts/fixture-pages.py` writes: the same log in data pages v1 and v2.
    fn fixture(version: u8) -> std::path::PathBuf {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        root.join(format!("fixtures/formats/pages-v{version}.parquet"))
    }

    fn metadata(path: &std::path::Path) -> Arc<FileMetadata> {
        let mut reader = ParquetReader::new(File::open(path).unwrap());
        reader.get_metadata().unwrap().clone()
    }

    /// polars' own read of a column's rows `[start, start + rows)`.
    fn polars_text(path: &std::path::Path, name: &str, slice: Slice) -> Vec<Option<String>> {
        let frame = ParquetReader::new(File::open(path).unwrap())
            .with_columns(Some(vec![name.to_string()]))
            .with_slice(Some((slice.start, slice.rows)))
            .finish()
            .unwrap();
        let column = frame.column(name).unwrap().str().unwrap().clone();
        column.iter().map(|v| v.map(str::to_string)).collect()
    }

    #[test]
    fn text_from_pages_is_what_polars_reads() {
        // Slices within a page, across pages, across row groups (of 1,100 rows), at the ends, and
        // the whole file; columns plain and dictionary encoded (one falling back to plain pages),
        // nullable and required, compressed with zstd, snappy or not at all.
        let slices = [
            (0, 3000),
            (0, 1),
            (5, 700),
            (1000, 200),
            (1099, 2),
            (2999, 1),
            (1500, 1500),
        ];
        for version in [1, 2] {
            let path = fixture(version);
            let metadata = metadata(&path);
            for name in ["anchor_obs", "action", "task", "uid", "traj_uid"] {
                assert!(readable(&metadata, name), "{name}");
                for (start, rows) in slices {
                    let slice = Slice {
                        start,
                        rows,
                        bytes: 0,
                    };
                    let mut file = File::open(&path).unwrap();
                    let array = text(&mut file, &metadata, name, slice)
                        .unwrap_or_else(|| panic!("v{version} {name} {slice:?} left to polars"));
                    let ours: Vec<Option<String>> =
                        array.iter().map(|v| v.map(str::to_string)).collect();
                    assert_eq!(
                        ours,
                        polars_text(&path, name, slice),
                        "v{version} {name} {slice:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_columns_are_left_to_polars() {
        for version in [1, 2] {
            let path = fixture(version);
            let metadata = metadata(&path);
            // Not a byte array.
            assert!(!readable(&metadata, "step"));
            // A byte array in an encoding read by polars alone.
            let slice = Slice {
                start: 0,
                rows: 3000,
                bytes: 0,
            };
            let mut file = File::open(&path).unwrap();
            assert!(readable(&metadata, "env_feedback"));
            assert!(text(&mut file, &metadata, "env_feedback", slice).is_none());
        }
    }
}
