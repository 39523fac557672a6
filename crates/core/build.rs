//! Reads the doc comments of the methods' parameter structs (`src/methods/*.rs`, and the
//! `Conventions` of `src/profile.rs` they flatten in) and the first sentence of each method
//! module, so that `credit methods` says what a method and each of its settings mean from the
//! comments written beside them: one source, no second list to keep in step.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// A field of a parameter struct: its name, its doc comment, and the type it flattens in.
struct Field {
    name: String,
    doc: String,
    flatten: Option<String>,
}

fn main() {
    println!("cargo:rerun-if-changed=src/methods");
    println!("cargo:rerun-if-changed=src/profile.rs");
    let mut files = vec![("profile".to_string(), read(Path::new("src/profile.rs")))];
    let mut paths: Vec<_> = std::fs::read_dir("src/methods")
        .expect("src/methods")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    paths.sort();
    for path in paths {
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        files.push((module, read(&path)));
    }
    // Structs by name: each field's doc, and flattened structs expanded below.
    let mut structs: BTreeMap<String, Vec<Field>> = BTreeMap::new();
    let mut modules = String::new();
    let mut params = String::new();
    for (module, text) in &files {
        for (name, fields) in parse_structs(text) {
            structs.insert(format!("{module}::{name}"), fields);
            structs.entry(name).or_default();
        }
        let lead: Vec<&str> = text
            .lines()
            .map_while(|l| l.strip_prefix("//!"))
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .collect();
        // The modules of estimators: those with an `advantages` function.
        if text.contains("pub fn advantages(") && !lead.is_empty() {
            let _ = writeln!(
                modules,
                "    ({module:?}, {:?}),",
                sentence(&lead.join(" "))
            );
        }
    }
    for (key, fields) in &structs {
        let Some(module) = key.strip_suffix("::Params") else {
            continue;
        };
        let mut docs = Vec::new();
        expand(&structs, fields, &mut docs);
        let pairs: String = docs
            .iter()
            .map(|(name, doc)| format!("({name:?}, {doc:?}), "))
            .collect();
        let _ = writeln!(params, "    ({module:?}, &[{pairs}]),");
    }
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("method_docs.rs");
    let code = format!(
        "/// Each method module's first sentence, by module.\npub(crate) const MODULE_DOCS: &[(&str, &str)] = &[\n{modules}];\n/// Each module's `Params` fields (flattened ones inlined) with their doc's first sentence.\npub(crate) const PARAM_DOCS: &[(&str, &[(&str, &str)])] = &[\n{params}];\n"
    );
    std::fs::write(out, code).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `pub struct NAME {` blocks of a file, with their `pub` fields.
fn parse_structs(text: &str) -> Vec<(String, Vec<Field>)> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<Field>)> = None;
    let (mut doc, mut flatten) = (Vec::<String>::new(), false);
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_none() {
            if let Some(rest) = line.strip_prefix("pub struct ") {
                if let Some(name) = rest.strip_suffix(" {") {
                    current = Some((name.trim().to_string(), Vec::new()));
                    doc.clear();
                    flatten = false;
                }
            }
            continue;
        }
        if line == "}" {
            out.extend(current.take());
            continue;
        }
        if let Some(text) = trimmed.strip_prefix("///") {
            doc.push(text.trim().to_string());
        } else if trimmed.starts_with("#[") {
            flatten |= trimmed.contains("flatten");
        } else if let Some(field) = trimmed.strip_prefix("pub ") {
            if let Some((name, ty)) = field.split_once(':') {
                let ty = ty.trim().trim_end_matches(',').to_string();
                let (_, fields) = current.as_mut().unwrap();
                fields.push(Field {
                    name: name.trim().to_string(),
                    doc: sentence(&doc.join(" ")),
                    flatten: flatten.then_some(ty),
                });
            }
            doc.clear();
            flatten = false;
        }
    }
    out
}

/// The fields with their docs, flattened structs' fields in their place.
fn expand(
    structs: &BTreeMap<String, Vec<Field>>,
    fields: &[Field],
    out: &mut Vec<(String, String)>,
) {
    for field in fields {
        match &field.flatten {
            Some(ty) => {
                let inner = structs
                    .iter()
                    .find(|(k, v)| k.rsplit("::").next() == Some(ty.as_str()) && !v.is_empty());
                if let Some((_, inner)) = inner {
                    expand(structs, inner, out);
                }
            }
            None => out.push((field.name.clone(), field.doc.clone())),
        }
    }
}

/// The first sentence of a doc comment: up to the first `. ` that neither ends an abbreviation
/// (`et al.`, `Eq.`) nor goes on in lower case or with a number (`Eq. 5`), or all of it.
fn sentence(text: &str) -> String {
    const ABBREVIATIONS: [&str; 6] = ["al", "Eq", "e.g", "i.e", "Alg", "App"];
    let mut end = text.len();
    for (at, _) in text.match_indices(". ") {
        let next = text[at + 2..].chars().next();
        let word = text[..at].rsplit([' ', '(']).next().unwrap_or("");
        let goes_on = next.is_some_and(|c| c.is_lowercase() || c.is_ascii_digit());
        if !goes_on && !ABBREVIATIONS.contains(&word) {
            end = at;
            break;
        }
    }
    text[..end].trim_end_matches('.').to_string()
}
