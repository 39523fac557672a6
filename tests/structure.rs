//! The code's shape (issue #51): no function in credit-report or the binary longer than a screen
//! and a half (a function that long does several things; split it where its parts are), a binary
//! of flags and printing (`src/` ≤ 1,300 lines), and no
//! cycle among the modules of any crate (data flows one way: ingest → batch → methods → analyses
//! → report; a cycle is a definition in the wrong module).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a non-test function may be, in lines from `fn` to its closing brace.
const MAX_LINES: usize = 120;

/// The most lines the binary (`src/`) may have: flags and printing over the library crates.
const MAX_BINARY_LINES: usize = 1_300;

/// A function: its file, name, first line and length in lines.
#[derive(Debug)]
struct Function {
    file: String,
    name: String,
    line: usize,
    lines: usize,
}

/// Rust source `text` as code alone: comments, string and character literals and `#[cfg(test)]`
/// items blanked, newlines kept so that lines still count. A scan, not a parser: enough for this
/// code base.
fn code(text: &str) -> String {
    let bytes = text.as_bytes();
    let starts = |i: usize, s: &str| bytes[i..].starts_with(s.as_bytes());
    let word_at =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    // The length of a raw string at `i` (`r"…"`, `r#"…"#`), if one starts there (not `r#type`).
    let raw_string = |i: usize| {
        let hashes = bytes[i + 1..].iter().take_while(|&&b| b == b'#').count();
        let open = i + 1 + hashes;
        (bytes.get(open) == Some(&b'"')).then(|| {
            let close = format!("\"{}", "#".repeat(hashes));
            text[open + 1..]
                .find(&close)
                .map_or(bytes.len(), |n| open + 1 + n + close.len())
                - i
        })
    };
    let mut out = String::with_capacity(text.len());
    // Inside a `#[cfg(test)]` item: the braces it has open, and the parentheses and brackets (a
    // `;` inside them, as in `[f64; 3]`, ends no item).
    let mut test: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let (len, is_code) = if starts(i, "//") {
            (text[i..].find('\n').unwrap_or(bytes.len() - i), false)
        } else if starts(i, "/*") {
            (
                text[i..].find("*/").map_or(bytes.len() - i, |n| n + 2),
                false,
            )
        } else if let Some(len) = (c == b'r' && word_at(i)).then(|| raw_string(i)).flatten() {
            (len, false)
        } else if c == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            ((j + 1).min(bytes.len()) - i, false)
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{1F600}', '{'); otherwise a lifetime.
            let rest = &text[i + 1..];
            let literal = if rest.starts_with('\\') {
                rest.get(2..).and_then(|r| r.find('\'')).map(|n| n + 3)
            } else {
                rest.chars()
                    .next()
                    .filter(|ch| rest[ch.len_utf8()..].starts_with('\''))
                    .map(|ch| ch.len_utf8() + 1)
            };
            literal.map_or((1, true), |n| (n + 1, false))
        } else if test.is_none() && starts(i, "#[cfg(test)]") {
            test = Some((0, 0));
            ("#[cfg(test)]".len(), false)
        } else {
            (text[i..].chars().next().map_or(1, char::len_utf8), true)
        };
        if let (true, Some((braces, nest))) = (is_code, test.as_mut()) {
            match c {
                b'{' => *braces += 1,
                b'}' => *braces = braces.wrapping_sub(1),
                b'(' | b'[' => *nest += 1,
                b')' | b']' => *nest = nest.saturating_sub(1),
                _ => {}
            }
            let outside = *braces == 0 && *nest == 0;
            if *braces == usize::MAX {
                // The brace of the scope around the item (a field's or an arm's item): code.
                out.push('}');
                test = None;
            } else {
                out.push(if c == b'\n' { '\n' } else { ' ' });
                // The item ends at its closing brace, or at a `;` before any (a `use`).
                if outside && (c == b'}' || c == b';') {
                    test = None;
                }
            }
        } else if is_code {
            out.push_str(&text[i..i + len]);
        } else {
            out.extend(
                text[i..i + len]
                    .chars()
                    .map(|ch| if ch == '\n' { '\n' } else { ' ' }),
            );
        }
        i += len;
    }
    out
}

/// The functions of Rust source `text` outside `#[cfg(test)]` items, by a brace-depth scan of its
/// [`code`].
fn functions(file: &str, text: &str) -> Vec<Function> {
    let code = code(text);
    let bytes = code.as_bytes();
    let (mut i, mut line) = (0, 1);
    // Each open brace: the function it opened, if any.
    let mut frames: Vec<Option<(String, usize)>> = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    // Parentheses and brackets open since the last `fn`: a `;` inside them (`[f64; 3]`) ends no
    // declaration.
    let mut nest = 0usize;
    let mut found = Vec::new();
    while i < bytes.len() {
        let c = bytes[i];
        let word_at = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if c == b'\n' {
            line += 1;
        } else if bytes[i..].starts_with(b"fn ") && word_at {
            let name: String = code[i + 3..]
                .trim_start()
                .chars()
                .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                .collect();
            if !name.is_empty() {
                pending = Some((name, line));
                nest = 0;
            }
        } else if c == b'(' || c == b'[' {
            nest += 1;
        } else if c == b')' || c == b']' {
            nest = nest.saturating_sub(1);
        } else if c == b';' && nest == 0 {
            // The end of a declaration without a body (a trait's method).
            pending = None;
        } else if c == b'{' {
            frames.push(pending.take());
        } else if c == b'}' {
            if let Some(Some((name, start))) = frames.pop() {
                found.push(Function {
                    file: file.to_string(),
                    name,
                    line: start,
                    lines: line - start + 1,
                });
            }
        }
        i += 1;
    }
    found
}

/// A module, by its path inside its crate (`["ingest", "pages"]`; the crate root is empty).
type Module = Vec<String>;

/// The module of the file at `relative` (inside `src`): `mod.rs`, `lib.rs` and `main.rs` are
/// their folder's module.
fn module_of(relative: &Path) -> Module {
    let mut parts: Module = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| ["mod", "lib", "main"].contains(&p.as_str()))
    {
        parts.pop();
    }
    parts
}

/// The paths after each `crate::` and `super::` in `code`, braces expanded (`crate::a::{b, c::d}`
/// names `a::b` and `a::c::d`), each as its segments with `crate` or `super` first.
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for start in 0..bytes.len() {
        // A path's first segment: not one after `::` (the second `super` of `super::super`).
        let first = start == 0
            || !(bytes[start - 1].is_ascii_alphanumeric()
                || bytes[start - 1] == b'_'
                || bytes[start - 1] == b':');
        let rest = &bytes[start..];
        if first && (rest.starts_with(b"crate::") || rest.starts_with(b"super::")) {
            let mut at = start;
            expand(code, &mut at, Vec::new(), &mut found);
        }
    }
    found
}

/// Reads the path at `code[*at..]` onto `prefix`: segments joined by `::`, a brace group of
/// paths read in turn. A glob (`*`) ends a path.
fn expand(code: &str, at: &mut usize, mut prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    let rest = |at: usize| code.get(at..).unwrap_or("");
    let skip_space = |at: &mut usize| *at += rest(*at).len() - rest(*at).trim_start().len();
    loop {
        skip_space(at);
        if rest(*at).starts_with('{') {
            *at += 1;
            loop {
                skip_space(at);
                if rest(*at).is_empty() || rest(*at).starts_with('}') {
                    *at += 1;
                    return;
                }
                let before = *at;
                expand(code, at, prefix.clone(), found);
                skip_space(at);
                if rest(*at).starts_with(',') || *at == before {
                    *at += 1;
                }
            }
        }
        let len = rest(*at)
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        if len == 0 {
            break;
        }
        prefix.push(rest(*at)[..len].to_string());
        *at += len;
        if rest(*at).starts_with("::") {
            *at += 2;
        } else {
            break;
        }
    }
    found.push(prefix);
}

/// Each module's references to other modules of its crate: for each file (its module and its
/// text), the module that each `crate::`/`super::` path outside `#[cfg(test)]` items lies in (the
/// longest prefix that is a module). A module's references to its own parent or children are
/// left out: a module and its submodules are one unit.
fn module_graph(files: &[(Module, String)]) -> BTreeMap<Module, BTreeSet<Module>> {
    let modules: BTreeSet<&Module> = files.iter().map(|(m, _)| m).collect();
    let mut graph = BTreeMap::new();
    for (module, text) in files {
        let mut targets = BTreeSet::new();
        for path in paths(&code(text)) {
            // `super` is the parent of the file's module (for `mod.rs`, of its folder's).
            let mut full: Module = Vec::new();
            let mut segments = path.into_iter().peekable();
            if segments.next().as_deref() == Some("super") {
                full = module[..module.len().saturating_sub(1)].to_vec();
                while segments.next_if(|s| s == "super").is_some() {
                    full.pop();
                }
            }
            full.extend(segments.filter(|s| s != "self"));
            let target = (0..=full.len())
                .rev()
                .map(|k| full[..k].to_vec())
                .find(|prefix| modules.contains(prefix))
                .unwrap_or_default();
            if !target.starts_with(module) && !module.starts_with(&target) {
                targets.insert(target);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// The cycles of `graph`: its strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Search<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, (usize, usize)>,
        stack: Vec<&'g Module>,
        found: Vec<Vec<Module>>,
    }
    impl<'g> Search<'g> {
        fn visit(&mut self, v: &'g Module) -> usize {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            let mut low = n;
            let graph = self.graph;
            for w in graph.get(v).into_iter().flatten() {
                match self.index.get(w) {
                    None => low = low.min(self.visit(w)),
                    Some(&(k, _)) if self.stack.contains(&w) => low = low.min(k),
                    Some(_) => {}
                }
            }
            self.index.insert(v, (n, low));
            if low == n {
                let at = self.stack.iter().position(|m| *m == v).unwrap();
                let component: Vec<Module> = self.stack.drain(at..).cloned().collect();
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
            low
        }
    }
    let mut search = Search {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !search.index.contains_key(v) {
            search.visit(v);
        }
    }
    search.found
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

/// Every crate's `src`: the binary's and each of `crates/`.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            dirs.push(src);
        }
    }
    dirs.sort();
    dirs
}

#[test]
fn no_function_in_the_report_crate_or_the_binary_is_over_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in crate_sources(root) {
        rust_files(&dir, &mut files);
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
        .filter(|f| f.file.starts_with("crates/report/") || f.file.starts_with("src/"))
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
fn the_binary_is_flags_and_printing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let lines: usize = files
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap().lines().count())
        .sum();
    eprintln!("src/: {lines} lines in {} files", files.len());
    assert!(
        lines <= MAX_BINARY_LINES,
        "src/ has {lines} lines (at most {MAX_BINARY_LINES}): move what is not flags or printing into a library crate"
    );
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for src in crate_sources(root) {
        let mut paths = Vec::new();
        rust_files(&src, &mut paths);
        let files: Vec<(Module, String)> = paths
            .iter()
            .map(|path| {
                let module = module_of(path.strip_prefix(&src).unwrap());
                (module, std::fs::read_to_string(path).unwrap())
            })
            .collect();
        let name = src.strip_prefix(root).unwrap().display();
        for cycle in cycles(&module_graph(&files)) {
            let modules: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            found.push(format!("{name}: {{{}}}", modules.join(", ")));
        }
    }
    eprintln!("module cycles: {}", found.len());
    assert!(found.is_empty(), "module cycles: {}", found.join("; "));
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

#[test]
fn the_module_scan_follows_crate_and_super_paths_and_finds_cycles() {
    let module = |path: &str| module_of(Path::new(path));
    let files = vec![
        (module("lib.rs"), "mod a; mod b; mod c;".to_string()),
        // `a` names `b` through a brace group; its comment, string and test module name `c`.
        (
            module("a/mod.rs"),
            "use crate::{b::{self, X}, a::inner};\n// crate::c\nconst S: &str = \"crate::c\";\n#[cfg(test)]\nmod tests { use crate::c::Y; }".to_string(),
        ),
        (module("a/inner.rs"), "use super::super::c::Z;".to_string()),
        (module("b.rs"), "fn f() { super::a::g(); }".to_string()),
        (module("c.rs"), "use crate::lib_item;".to_string()),
    ];
    let graph = module_graph(&files);
    let names = |m: &Module| {
        graph[m]
            .iter()
            .map(|t| t.join("::"))
            .collect::<Vec<String>>()
    };
    assert_eq!(module("a/mod.rs"), ["a"]);
    assert_eq!(names(&module("a/mod.rs")), ["b"]);
    assert_eq!(names(&module("a/inner.rs")), ["c"]);
    assert_eq!(names(&module("b.rs")), ["a"]);
    // The crate root is every module's parent: no edge.
    assert!(names(&module("c.rs")).is_empty());
    let cycles: Vec<Vec<String>> = cycles(&graph)
        .iter()
        .map(|c| c.iter().map(|m| m.join("::")).collect())
        .collect();
    assert_eq!(cycles.len(), 1);
    let mut cycle = cycles[0].clone();
    cycle.sort();
    assert_eq!(cycle, ["a", "b"]);
}
