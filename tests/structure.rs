//! The code's shape: no function in credit-report or the binary longer than a screen and a half
//! (issue #51). A function that long does several things; split it where its parts are.

use std::path::{Path, PathBuf};

/// The longest a non-test function may be, in lines from `fn` to its closing brace.
const MAX_LINES: usize = 120;

/// A function: its file, name, first line and length in lines.
#[derive(Debug)]
struct Function {
    file: String,
    name: String,
    line: usize,
    lines: usize,
}

/// What an open brace opened.
enum Frame {
    Function {
        name: String,
        line: usize,
    },
    /// A `#[cfg(test)]` item: nothing inside counts.
    Test,
    Other,
}

/// The functions of Rust source `text` outside `#[cfg(test)]` items, by a brace-depth scan that
/// skips comments, strings and character literals (not a parser: enough for this code base).
fn functions(file: &str, text: &str) -> Vec<Function> {
    let bytes = text.as_bytes();
    let (mut i, mut line) = (0, 1);
    let mut frames: Vec<Frame> = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let mut test_item = false;
    // Parentheses and brackets open since the last `fn`: a `;` inside them (`[f64; 3]`) ends
    // no declaration.
    let mut nest = 0usize;
    let mut found = Vec::new();
    let starts = |i: usize, s: &str| bytes[i..].starts_with(s.as_bytes());
    let word_at =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if starts(i, "//") {
            i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
        } else if starts(i, "/*") {
            let end = text[i..].find("*/").map_or(bytes.len(), |n| i + n + 2);
            line += text[i..end].matches('\n').count();
            i = end;
        } else if c == b'r' && word_at(i) && (starts(i, "r\"") || starts(i, "r#")) {
            let hashes = bytes[i + 1..].iter().take_while(|&&b| b == b'#').count();
            let open = i + 1 + hashes;
            if bytes.get(open) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let end = text[open + 1..]
                .find(&close)
                .map_or(bytes.len(), |n| open + 1 + n + close.len());
            line += text[i..end].matches('\n').count();
            i = end;
        } else if c == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            line += text[i..j.min(bytes.len())].matches('\n').count();
            i = j + 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{1F600}', '{'); otherwise a lifetime.
            let rest = &text[i + 1..];
            let len = if rest.starts_with('\\') {
                rest.get(2..).and_then(|r| r.find('\'')).map(|n| n + 3)
            } else {
                rest.chars()
                    .next()
                    .filter(|ch| rest[ch.len_utf8()..].starts_with('\''))
                    .map(|ch| ch.len_utf8() + 1)
            };
            i += 1 + len.unwrap_or(0);
        } else if starts(i, "#[cfg(test)]") {
            test_item = true;
            i += "#[cfg(test)]".len();
        } else if starts(i, "fn ") && word_at(i) {
            let name: String = text[i + 3..]
                .trim_start()
                .chars()
                .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                .collect();
            if !name.is_empty() {
                pending = Some((name, line));
                nest = 0;
            }
            i += 3;
        } else if c == b'(' || c == b'[' {
            nest += 1;
            i += 1;
        } else if c == b')' || c == b']' {
            nest = nest.saturating_sub(1);
            i += 1;
        } else if c == b';' && nest == 0 {
            // The end of a declaration without a body (a trait's method), or of an item that
            // `#[cfg(test)]` marked (a `use`).
            pending = None;
            test_item = false;
            i += 1;
        } else if c == b'{' {
            let frame = if std::mem::take(&mut test_item) {
                pending = None;
                Frame::Test
            } else if let Some((name, line)) = pending.take() {
                Frame::Function { name, line }
            } else {
                Frame::Other
            };
            frames.push(frame);
            i += 1;
        } else if c == b'}' {
            let in_test = frames.iter().any(|f| matches!(f, Frame::Test));
            if let Some(Frame::Function { name, line: start }) = frames.pop() {
                if !in_test {
                    found.push(Function {
                        file: file.to_string(),
                        name,
                        line: start,
                        lines: line - start + 1,
                    });
                }
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_function_in_the_report_crate_or_the_binary_is_over_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["crates/report/src", "src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut all: Vec<Function> = files
        .iter()
        .flat_map(|path| {
            let file = path.strip_prefix(root).unwrap().display().to_string();
            functions(&file, &std::fs::read_to_string(path).unwrap())
        })
        .collect();
    all.sort_by_key(|f| std::cmp::Reverse(f.lines));
    eprintln!("the longest functions:");
    for f in all.iter().take(10) {
        eprintln!("  {:>4} lines  {}:{} {}", f.lines, f.file, f.line, f.name);
    }
    let over: Vec<String> = all
        .iter()
        .filter(|f| f.lines > MAX_LINES)
        .map(|f| format!("{}:{} `{}` ({} lines)", f.file, f.line, f.name, f.lines))
        .collect();
    assert!(
        over.is_empty(),
        "functions over {MAX_LINES} lines: {}",
        over.join("; ")
    );
}

#[test]
fn the_scan_measures_functions_and_skips_tests_comments_and_strings() {
    let text = "fn a() {\n    let s = \"}\"; // }\n    let c = '{';\n}\ntrait T { fn b(&self); }\nimpl<'a> X<'a> {\n    fn c(&self) -> [&'a str; 1] {\n        [r#\"{\"#]\n    }\n}\n#[cfg(test)]\nuse x;\n#[cfg(test)]\nmod tests {\n    fn d() {\n    }\n}\nfn e() { '\\'' }\n";
    let found: Vec<(String, usize, usize)> = functions("x.rs", text)
        .into_iter()
        .map(|f| (f.name, f.line, f.lines))
        .collect();
    assert_eq!(
        found,
        vec![
            ("a".to_string(), 1, 4),
            ("c".to_string(), 7, 3),
            ("e".to_string(), 18, 1)
        ]
    );
}
