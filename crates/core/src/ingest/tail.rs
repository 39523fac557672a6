//! Logs still being written (`credit watch`): how much of a file can be read now. Plain JSONL is
//! read up to its last complete line (a half-written line waits for its line break); a
//! compressed stream when it decodes to its end; Parquet when its footer is there.

use super::files::{format_of, Compression, Format};
use crate::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// What of a log file can be read now, from where an earlier read ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Nothing new and complete yet.
    Wait,
    /// Whole lines of plain JSONL, up to byte `end` (past a line break), `lines` of them.
    Lines { end: u64, lines: u64 },
    /// The whole file: a complete compressed stream or Parquet file.
    Whole,
}

/// What of `path` (`size` bytes now) can be read past byte `from`. A compressed or Parquet file
/// is whole or not at all, so `from` > 0 means it changed after it was read: that is for the
/// caller to see (it is read again from the start), and here it is `Whole` when complete.
pub fn ready(path: &Path, size: u64, from: u64) -> Result<Ready> {
    let io = |cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    };
    let Some(format) = format_of(path) else {
        return Ok(Ready::Wait);
    };
    match format {
        Format::Jsonl(Compression::None) => {
            let mut file = std::fs::File::open(path).map_err(io)?;
            file.seek(SeekFrom::Start(from)).map_err(io)?;
            let mut reader = file.take(size.saturating_sub(from));
            let mut buffer = vec![0u8; 1 << 20];
            let (mut at, mut end, mut lines) = (from, None, 0u64);
            loop {
                let n = reader.read(&mut buffer).map_err(io)?;
                if n == 0 {
                    break;
                }
                let block = &buffer[..n];
                lines += memchr::memchr_iter(b'\n', block).count() as u64;
                if let Some(p) = memchr::memrchr(b'\n', block) {
                    end = Some(at + p as u64 + 1);
                }
                at += n as u64;
            }
            Ok(match end {
                Some(end) => Ready::Lines { end, lines },
                None => Ready::Wait,
            })
        }
        Format::Jsonl(compression) => {
            let file = std::fs::File::open(path).map_err(io)?;
            let mut decoder: Box<dyn Read> = match compression {
                Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(
                    std::io::BufReader::new(file),
                )),
                _ => Box::new(zstd::stream::read::Decoder::new(file).map_err(io)?),
            };
            // A stream cut short fails to decode: it is still being written.
            Ok(match std::io::copy(&mut decoder, &mut std::io::sink()) {
                Ok(_) => Ready::Whole,
                Err(_) => Ready::Wait,
            })
        }
        Format::Parquet => {
            let mut file = std::fs::File::open(path).map_err(io)?;
            let mut magic = [0u8; 4];
            if size < 12 {
                return Ok(Ready::Wait);
            }
            file.seek(SeekFrom::Start(size - 4)).map_err(io)?;
            file.read_exact(&mut magic).map_err(io)?;
            Ok(if &magic == b"PAR1" {
                Ready::Whole
            } else {
                Ready::Wait
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn jsonl_is_ready_up_to_its_last_line_break_and_gzip_when_whole() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("1.jsonl");
        std::fs::write(&plain, "{\"a\": 1}\n{\"a\": 2}\n{\"a\"").unwrap();
        let size = std::fs::metadata(&plain).unwrap().len();
        assert_eq!(
            ready(&plain, size, 0).unwrap(),
            Ready::Lines { end: 18, lines: 2 }
        );
        assert_eq!(ready(&plain, size, 18).unwrap(), Ready::Wait);

        let packed = dir.path().join("1.jsonl.gz");
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&[b'{'; 4096]).unwrap();
        let whole = encoder.finish().unwrap();
        std::fs::write(&packed, &whole[..whole.len() - 8]).unwrap();
        assert_eq!(ready(&packed, 0, 0).unwrap(), Ready::Wait);
        std::fs::write(&packed, &whole).unwrap();
        assert_eq!(ready(&packed, 0, 0).unwrap(), Ready::Whole);
    }
}
