//! The common line, scanned without simd-json: one flat JSON object whose values are strings,
//! numbers, booleans or null, as trainers write step rows. It gives the nodes simd-json's tape
//! gives for the same line (`tests::nodes_equal_simd_json`), without copying the line (simd-json
//! parses a mutable copy) or the strings that hold no escape (most text: borrowed from the line).
//!
//! Anything else is left to the reader's general path, which decides it as before (`None`): a
//! nested value, an escape of a UTF-16 surrogate (simd-json decodes lone ones leniently, so the
//! serde path words them), a number outside simd-json's exact fast path (more than 18 digits, a
//! significand above 2^53 or a decimal exponent beyond ±22: there its rounding is its own), and
//! every malformed line.

use simd_json::{Node, StaticNode};

/// Buffers reused from line to line: the scanned values, and the strings with escapes decoded,
/// kept for the whole block (its text columns view them there instead of copying them again).
#[derive(Default)]
pub(crate) struct Scratch {
    decoded: String,
    parts: Vec<Part>,
}

impl Scratch {
    /// The strings decoded so far, for the block that views them.
    pub fn take_decoded(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.decoded).into_bytes()
    }

    /// Room for the rest of the input's decoded text at the rate of the `read` bytes of its
    /// `total` so far (a buffer grown by doubling copies what it holds).
    pub fn reserve_decoded_at_rate(&mut self, read: usize, total: usize) {
        let more = super::rows::at_rate(self.decoded.len(), read, total);
        self.decoded.reserve(more);
    }
}

/// A scanned key or value, before it is borrowed as a node.
#[derive(Clone, Copy)]
enum Part {
    /// Bytes of the line between a string's quotes (no escape in them).
    Line(usize, usize),
    /// A string with escapes, decoded into [`Scratch::decoded`].
    Decoded(usize, usize),
    Static(StaticNode),
}

/// The nodes of the flat object at the start of `text` (after spaces), into `nodes` (emptied
/// first): where the object ends, and the text decoded so far (the object's strings with escapes
/// at its end, after those of the lines before), or `None` when it is not a flat object of plain
/// values, or not valid JSON. A line break ends the search (the object must lie in one line); what
/// follows the object is for the caller to check. `text` must hold no control character but line
/// breaks ([`clean_text`]): simd-json rejects them in strings, and the string scan looks for none.
pub(crate) fn scan<'a>(
    text: &'a str,
    scratch: &'a mut Scratch,
    nodes: &mut Vec<Node<'a>>,
) -> Option<(usize, &'a [u8])> {
    nodes.clear();
    scratch.parts.clear();
    let before = scratch.decoded.len();
    let Some((len, end)) = entries(text, scratch) else {
        scratch.decoded.truncate(before);
        return None;
    };
    let scratch: &'a Scratch = scratch;
    nodes.reserve(1 + scratch.parts.len());
    nodes.push(Node::Object {
        len,
        count: 2 * len,
    });
    nodes.extend(scratch.parts.iter().map(|&part| match part {
        Part::Line(from, to) => Node::String(&text[from..to]),
        Part::Decoded(from, to) => Node::String(&scratch.decoded[from..to]),
        Part::Static(value) => Node::Static(value),
    }));
    Some((end, scratch.decoded.as_bytes()))
}

/// `bytes` as text when they are valid UTF-8 holding no control character (below U+0020) other
/// than a line break: simd-json rejects one in a string, and whitespace between tokens is seldom
/// a tab or a carriage return, so text with one is left to the general path. One pass, 64 bytes
/// at a time without a branch per byte, finds control characters and whether every byte is ASCII
/// (most logs are, and ASCII is UTF-8); the UTF-8 check runs only where a byte is not.
pub(crate) fn clean_text(bytes: &[u8]) -> Option<&str> {
    let mut any = 0u8;
    for chunk in bytes.chunks(64) {
        let (or, control) = chunk.iter().fold((0u8, false), |(or, control), &b| {
            (or | b, control | (b < 0x20 && b != b'\n'))
        });
        if control {
            return None;
        }
        any |= or;
    }
    if any.is_ascii() {
        // SAFETY: every byte is below 0x80, and ASCII is valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

/// Whether what follows an object on its line lets it stand alone: only spaces (the scanned text
/// holds no other whitespace, [`clean_text`]).
pub(crate) fn ends_line(rest: &[u8]) -> bool {
    rest.iter().all(|&b| b == b' ')
}

/// [`scan`] on one line (no line break) checked on its own, when it is valid UTF-8 with no
/// control character, holding one flat object of plain values and nothing after it but spaces:
/// the text decoded so far.
pub(crate) fn scan_line<'a>(
    line: &'a [u8],
    scratch: &'a mut Scratch,
    nodes: &mut Vec<Node<'a>>,
) -> Option<&'a [u8]> {
    let (end, decoded) = scan(clean_text(line)?, scratch, nodes)?;
    ends_line(&line[end..]).then_some(decoded)
}

/// An empty vector of nodes for another line, keeping the allocation (the collect happens in
/// place: no element is produced, and the element type's layout is the same).
pub(crate) fn recycle<'b>(mut nodes: Vec<Node<'_>>) -> Vec<Node<'b>> {
    nodes.clear();
    nodes.into_iter().map(|_| unreachable!()).collect()
}

/// Scans the object into `scratch.parts` (key, value, key, value, …): how many entries it has,
/// and where it ends.
fn entries(line: &str, scratch: &mut Scratch) -> Option<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(bytes, at + 1);
    let mut len = 0;
    if bytes.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            if bytes.get(at) != Some(&b'"') {
                return None;
            }
            at = string(line, at + 1, scratch)?;
            at = skip_space(bytes, at);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            at = skip_space(bytes, at + 1);
            at = match *bytes.get(at)? {
                b'"' => string(line, at + 1, scratch)?,
                b't' => word(bytes, at, b"true", StaticNode::Bool(true), scratch)?,
                b'f' => word(bytes, at, b"false", StaticNode::Bool(false), scratch)?,
                b'n' => word(bytes, at, b"null", StaticNode::Null, scratch)?,
                b'-' | b'0'..=b'9' => number(bytes, at, scratch)?,
                _ => return None,
            };
            len += 1;
            at = skip_space(bytes, at);
            match bytes.get(at) {
                Some(b',') => at = skip_space(bytes, at + 1),
                Some(b'}') => {
                    at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    Some((len, at))
}

/// Past the spaces, tabs and carriage returns at `at` (not a line break: the object ends there).
fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\r')) {
        at += 1;
    }
    at
}

/// `true`, `false` or `null` at `at`: where it ends.
fn word(
    bytes: &[u8],
    at: usize,
    text: &[u8],
    value: StaticNode,
    scratch: &mut Scratch,
) -> Option<usize> {
    let end = at + text.len();
    (bytes.get(at..end)? == text).then(|| {
        scratch.parts.push(Part::Static(value));
        end
    })
}

/// The string whose text starts at `from` (after its opening quote): where it ends (after the
/// closing quote). The line holds no control character ([`clean_text`]).
fn string(line: &str, from: usize, scratch: &mut Scratch) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut at = string_stop(bytes, from)?;
    match bytes[at] {
        b'"' => {
            scratch.parts.push(Part::Line(from, at));
            return Some(at + 1);
        }
        b'\n' => return None,
        _ => {}
    }
    let decoded = &mut scratch.decoded;
    let start = decoded.len();
    decoded.push_str(&line[from..at]);
    loop {
        // `at` is a backslash.
        let escape = *bytes.get(at + 1)?;
        at += 2;
        match escape {
            b'"' => decoded.push('"'),
            b'\\' => decoded.push('\\'),
            b'/' => decoded.push('/'),
            b'b' => decoded.push('\u{8}'),
            b'f' => decoded.push('\u{c}'),
            b'n' => decoded.push('\n'),
            b'r' => decoded.push('\r'),
            b't' => decoded.push('\t'),
            b'u' => {
                let hex = std::str::from_utf8(bytes.get(at..at + 4)?).ok()?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                // A surrogate (paired or not) is `None` here: the general path decides it.
                decoded.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                at += 4;
            }
            _ => return None,
        }
        let next = string_stop(bytes, at)?;
        decoded.push_str(&line[at..next]);
        at = next;
        match bytes[at] {
            b'"' => {
                scratch.parts.push(Part::Decoded(start, decoded.len()));
                return Some(at + 1);
            }
            b'\n' => return None,
            _ => {}
        }
    }
}

/// The first quote, backslash or line break at or after `from`. Most strings of a row (its keys,
/// ids, short values) end within 16 bytes: those are looked at with one SSE2 comparison inline,
/// where a call to `memchr3` per string cost more than the search itself.
fn string_stop(bytes: &[u8], from: usize) -> Option<usize> {
    // Where `memchr3` goes on from: past the 16 bytes looked at inline.
    #[cfg(target_arch = "x86_64")]
    let rest = match bytes.get(from..from + 16) {
        Some(window) => {
            use std::arch::x86_64::*;
            // SAFETY: SSE2 is part of x86_64; the load reads the 16 bytes of `window`.
            let stops = unsafe {
                let v = _mm_loadu_si128(window.as_ptr().cast());
                let is = |b: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8));
                _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(is(b'"'), is(b'\\')), is(b'\n'))) as u32
            };
            if stops != 0 {
                return Some(from + stops.trailing_zeros() as usize);
            }
            from + 16
        }
        None => from,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let rest = from;
    memchr::memchr3(b'"', b'\\', b'\n', &bytes[rest..]).map(|p| rest + p)
}

/// Exact powers of ten in `f64` (10^22 is the last).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Digits from `at`: their value (at most 18 of them, else `None`) and where they end.
fn digits(bytes: &[u8], mut at: usize, mut value: u64, count: &mut usize) -> Option<(u64, usize)> {
    while let Some(&b) = bytes.get(at).filter(|b| b.is_ascii_digit()) {
        *count += 1;
        if *count > 18 {
            return None;
        }
        value = value * 10 + u64::from(b - b'0');
        at += 1;
    }
    Some((value, at))
}

/// A JSON number at `at`, typed as simd-json types it: an integer is `I64` when negative and
/// `U64` otherwise; a number with a fraction or exponent is `F64`, here only in simd-json's exact
/// fast path (significand ≤ 2^53 − 1, decimal exponent within ±22: one correctly rounded
/// multiplication or division, the same operation simd-json does). Where it ends.
fn number(bytes: &[u8], mut at: usize, scratch: &mut Scratch) -> Option<usize> {
    let negative = bytes[at] == b'-';
    at += usize::from(negative);
    let first = at;
    let mut count = 0;
    let (mut significand, end) = digits(bytes, at, 0, &mut count)?;
    // No leading zeros, and at least one digit.
    if end == first || (bytes[first] == b'0' && end > first + 1) {
        return None;
    }
    at = end;
    let mut exponent: i64 = 0;
    let mut float = false;
    if bytes.get(at) == Some(&b'.') {
        float = true;
        let before = count;
        (significand, at) = digits(bytes, at + 1, significand, &mut count)?;
        if count == before {
            return None;
        }
        exponent -= (count - before) as i64;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        float = true;
        at += 1;
        let sign = match bytes.get(at) {
            Some(b'-') => -1,
            Some(b'+') => 1,
            _ => 0,
        };
        at += usize::from(sign != 0);
        let mut exponent_digits = 0;
        let (written, end) = digits(bytes, at, 0, &mut exponent_digits)?;
        if exponent_digits == 0 {
            return None;
        }
        at = end;
        exponent += if sign < 0 {
            -(written as i64)
        } else {
            written as i64
        };
    }
    // What may follow a number (anything else is malformed).
    if !matches!(
        bytes.get(at),
        None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
    ) {
        return None;
    }
    let value = if !float {
        match negative {
            true => StaticNode::I64(-(significand as i64)),
            false => StaticNode::U64(significand),
        }
    } else {
        if significand > (1 << 53) - 1 || !(-22..=22).contains(&exponent) {
            return None;
        }
        let mut f = significand as f64;
        match exponent < 0 {
            true => f /= POW10[exponent.unsigned_abs() as usize],
            false => f *= POW10[exponent as usize],
        }
        StaticNode::F64(if negative { -f } else { f })
    };
    scratch.parts.push(Part::Static(value));
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nodes` with their strings leaked, to outlive the line (tests only).
    fn owned(nodes: &[Node<'_>]) -> Vec<Node<'static>> {
        nodes
            .iter()
            .map(|node| match *node {
                Node::String(s) => Node::String(Box::leak(s.to_string().into_boxed_str())),
                Node::Object { len, count } => Node::Object { len, count },
                Node::Array { len, count } => Node::Array { len, count },
                Node::Static(s) => Node::Static(s),
            })
            .collect()
    }

    /// The nodes simd-json's tape gives for `line`, or `None` where it rejects it.
    fn simd(line: &str) -> Option<Vec<Node<'static>>> {
        let mut copy = line.as_bytes().to_vec();
        Some(owned(&simd_json::to_tape(&mut copy).ok()?.0))
    }

    /// The scanner on one line, as the reader calls it on a line of a chunk that is not clean.
    fn ours(line: &str) -> Option<Vec<Node<'static>>> {
        let mut scratch = Scratch::default();
        let mut nodes = Vec::new();
        scan_line(line.as_bytes(), &mut scratch, &mut nodes).map(|_| owned(&nodes))
    }

    /// Bitwise equality (floats by their bits: -0.0 is not 0.0).
    fn same(a: &[Node<'_>], b: &[Node<'_>]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| match (x, y) {
                (Node::Static(StaticNode::F64(p)), Node::Static(StaticNode::F64(q))) => {
                    p.to_bits() == q.to_bits()
                }
                _ => x == y,
            })
    }

    #[test]
    fn clean_text_is_valid_utf8_without_control_characters_but_line_breaks() {
        let long = "x".repeat(100);
        for (bytes, clean) in [
            (&b"{\"a\": 1}\n{\"b\": \"caf\xc3\xa9\"}\n"[..], true),
            (b"plain ascii\n", true),
            (b"", true),
            (b"a\tb", false),
            (b"a\r\n", false),
            (b"\x00", false),
            (b"caf\xc3", false),
            (b"\xff\n", false),
        ] {
            assert_eq!(clean_text(bytes).is_some(), clean, "{bytes:?}");
            assert_eq!(
                clean_text(bytes),
                std::str::from_utf8(bytes)
                    .ok()
                    .filter(|t| !t.bytes().any(|b| b < 0x20 && b != b'\n'))
            );
        }
        // A control character or a non-ASCII byte past the first 64 bytes is seen too.
        assert!(clean_text(format!("{long}\u{1}").as_bytes()).is_none());
        assert_eq!(
            clean_text(format!("{long}é").as_bytes()),
            Some(&*format!("{long}é"))
        );
        let mut bad = long.into_bytes();
        bad.push(0xc3);
        assert!(clean_text(&bad).is_none());
    }

    #[test]
    fn nodes_equal_simd_json() {
        let lines = [
            r#"{"uid":"g1","traj_uid":"t1","step":0,"reward":0.5,"done":false,"obs":"a\nb \"q\" \\ \/ \t \b \f \r é \u00e9 \u0041","x":null,"y":true}"#,
            r#"  { "a" : -3 , "b":1.25e-3,"c":-0.0,"d":0,"e":1E5,"f":12345678901234567,"g":-12345678901234567 }  "#,
            r#"{}"#,
            "{\"k\":\"tab\",\"ünï\":\"çødé\",\"e\":\"\",\"n\":1.5,\"m\":-2.75,\"z\":0.1,\"w\":3.14159,\"v\":123.456e2,\"u\":7e-22,\"t\":900719925474099.1}",
            r#"{"big":1e22,"small":1e-22,"s":"\u0000\u001f\u007f\u0800\uffff","k2":"\\u0041"}"#,
        ];
        for line in lines {
            let want = simd(line).unwrap_or_else(|| panic!("simd-json rejects {line}"));
            let got = ours(line).unwrap_or_else(|| panic!("not scanned: {line}"));
            assert!(same(&got, &want), "{line}\n{got:?}\n{want:?}");
        }
    }

    #[test]
    fn numbers_equal_simd_json_bit_for_bit() {
        // Every number the scanner takes gives simd-json's value and type, bit for bit.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut taken = 0;
        for _ in 0..200_000 {
            let r = next();
            let int = next() % 10u64.pow((r % 17) as u32 + 1);
            let frac_digits = (r >> 8) % 12;
            let frac = next() % 10u64.pow(frac_digits as u32).max(1);
            let sign = if (r >> 16) & 1 == 1 { "-" } else { "" };
            let exp = match (r >> 20) % 4 {
                0 => String::new(),
                1 => format!("e{}", (next() % 50) as i64 - 25),
                2 => format!("E+{}", next() % 30),
                _ => format!("e-{}", next() % 30),
            };
            let text = match frac_digits {
                0 => format!("{sign}{int}{exp}"),
                d => format!("{sign}{int}.{frac:0width$}{exp}", width = d as usize),
            };
            let line = format!(r#"{{"n":{text}}}"#);
            let want = simd(&line).expect("a valid number");
            if let Some(got) = ours(&line) {
                taken += 1;
                assert!(same(&got, &want), "{line}: {got:?} vs {want:?}");
            }
        }
        assert!(taken > 100_000, "only {taken} numbers took the scanner");
    }

    #[test]
    fn a_string_stops_where_memchr3_finds_its_end() {
        // Every start in buffers of every length up to 40, with a stop byte at every place or
        // none: within the 16 bytes looked at inline, just past them, and with fewer than 16 left.
        for len in 0..40 {
            for stop_at in (0..len).map(Some).chain([None]) {
                for stop in [b'"', b'\\', b'\n'] {
                    let mut bytes = vec![b'a'; len];
                    if let Some(p) = stop_at {
                        bytes[p] = stop;
                    }
                    for from in 0..=len {
                        let want =
                            memchr::memchr3(b'"', b'\\', b'\n', &bytes[from..]).map(|p| from + p);
                        assert_eq!(string_stop(&bytes, from), want, "{len} {stop_at:?} {from}");
                    }
                }
            }
        }
    }

    #[test]
    fn in_a_chunk_the_object_ends_its_line() {
        // A clean chunk is scanned from each line's start: the first object's end is found
        // without looking for the line break, and nothing reads past one.
        let chunk = "{\"a\":\"x\\ny\",\"b\":1}  \n{\"a\":2}\n";
        let (mut scratch, mut nodes) = (Scratch::default(), Vec::new());
        let (end, _) = scan(chunk, &mut scratch, &mut nodes).unwrap();
        assert_eq!(&chunk[end..end + 3], "  \n");
        assert_eq!(nodes[2], Node::String("x\ny"));
        for broken in [
            "{\"a\":\"open\n\",\"b\":1}\n",
            "{\"a\":\n1}\n",
            "{\"a\":\"x\\\n\"}\n",
        ] {
            let (mut scratch, mut nodes) = (Scratch::default(), Vec::new());
            assert!(
                scan(broken, &mut scratch, &mut nodes).is_none(),
                "{broken:?}"
            );
        }
    }

    #[test]
    fn everything_else_goes_to_the_general_path() {
        for line in [
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            r#"[1]"#,
            r#"{"a":1}x"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":+1}"#,
            r#"{"a":1e}"#,
            r#"{"a":-}"#,
            r#"{"a":1e23}"#,
            r#"{"a":1234567890123456789}"#,
            r#"{"a":9007199254740993.0}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12"}"#,
            r#"{"a":"open"#,
            r#"{"a":tru}"#,
            r#"{"a":nulls}"#,
            r#"{"a":NaN}"#,
            r#"{"a":1"#,
            "{\"a\":\"raw\ttab\"}",
            "{\"a\":\t1}",
            r#""#,
        ] {
            assert!(ours(line).is_none(), "scanned: {line}");
        }
    }
}
