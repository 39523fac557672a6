//! TF-IDF vectors compatible with scikit-learn's `TfidfVectorizer(max_features=1024)` defaults,
//! for ProxMO's PSA (`spec-proxmo-gigpo.md` §3.2, step 1).
//!
//! - text lower-cased; tokens are the matches of `(?u)\b\w\w+\b`, i.e. maximal runs of word
//!   characters (Unicode alphanumerics and `_`) at least two characters long;
//! - unigrams, every row a document (duplicates count), min_df = 1, max_df = 1.0;
//! - more than `max_features` terms: keep those with the highest total count over the corpus;
//!   ties are broken alphabetically (sklearn's own tie-break comes from an unstable argsort);
//! - tf = raw count, idf(w) = ln((1 + n)/(1 + df(w))) + 1 (smooth_idf), v = tf·idf, L2-normalised,
//!   then divided once more by (‖v‖ + 1e-8) as the ProxMO code does.
//!
//! Identical texts are tokenised once; vectors are sparse and sorted by term id.

use polars::prelude::PlHashMap;

/// A fitted corpus: one sparse vector per distinct text.
pub struct Corpus {
    /// Sparse L2-normalised vectors, (term, weight) sorted by term.
    pub vectors: Vec<Vec<(u32, f64)>>,
    /// For each input document (row), its distinct-text index.
    pub doc_of_row: Vec<u32>,
    /// Terms kept after `max_features`.
    pub vocabulary_size: usize,
}

/// Maximal runs of word characters at least two characters long, of already lower-cased text.
fn tokens(lower: &str) -> impl Iterator<Item = &str> + '_ {
    lower
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| t.chars().nth(1).is_some())
}

/// [`tokens`] of `text` lower-cased, each handed to `each`. ASCII text (most logs) takes a byte
/// path: there `\w` is `[A-Za-z0-9_]` and lower-casing is ASCII's, so the tokens are the same.
fn each_token(text: &str, scratch: &mut String, mut each: impl FnMut(&str)) {
    if !text.is_ascii() {
        let lower = if text.chars().any(char::is_uppercase) {
            std::borrow::Cow::Owned(text.to_lowercase())
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        tokens(&lower).for_each(each);
        return;
    }
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        if i - start >= 2 {
            let token = &text[start..i];
            if token.bytes().any(|b| b.is_ascii_uppercase()) {
                scratch.clear();
                scratch.push_str(token);
                scratch.make_ascii_lowercase();
                each(scratch);
            } else {
                each(token);
            }
        }
    }
}

/// Fits on `documents` (every row a document; `None` is an empty document) and returns each
/// document's vector.
pub fn fit_transform<'a>(
    documents: impl Iterator<Item = Option<&'a str>>,
    max_features: usize,
) -> Corpus {
    let mut distinct: PlHashMap<&str, u32> = PlHashMap::default();
    let mut texts: Vec<&str> = Vec::new();
    let mut multiplicity: Vec<u64> = Vec::new();
    let mut doc_of_row = Vec::new();
    for doc in documents {
        let text = doc.unwrap_or("");
        let id = *distinct.entry(text).or_insert_with(|| {
            texts.push(text);
            multiplicity.push(0);
            (texts.len() - 1) as u32
        });
        multiplicity[id as usize] += 1;
        doc_of_row.push(id);
    }
    let n_docs = doc_of_row.len() as f64;

    // Term counts per distinct text; corpus totals and document frequencies weighted by multiplicity.
    let mut term_ids: PlHashMap<String, u32> = PlHashMap::default();
    let mut terms: Vec<String> = Vec::new();
    let mut total: Vec<u64> = Vec::new();
    let mut df: Vec<u64> = Vec::new();
    let mut counts: Vec<Vec<(u32, u32)>> = Vec::with_capacity(texts.len());
    // Per-document counts in a dense buffer, with the touched terms listed (no hashing per token).
    let mut local: Vec<u32> = Vec::new();
    let mut touched: Vec<u32> = Vec::new();
    let mut scratch = String::new();
    for (d, text) in texts.iter().enumerate() {
        each_token(text, &mut scratch, |token| {
            let id = match term_ids.get(token) {
                Some(&id) => id,
                None => {
                    let id = terms.len() as u32;
                    term_ids.insert(token.to_string(), id);
                    terms.push(token.to_string());
                    total.push(0);
                    df.push(0);
                    local.push(0);
                    id
                }
            };
            if local[id as usize] == 0 {
                touched.push(id);
            }
            local[id as usize] += 1;
        });
        let m = multiplicity[d];
        let mut doc: Vec<(u32, u32)> = touched.iter().map(|&t| (t, local[t as usize])).collect();
        for &(t, c) in &doc {
            total[t as usize] += m * c as u64;
            df[t as usize] += m;
            local[t as usize] = 0;
        }
        touched.clear();
        doc.sort_unstable();
        counts.push(doc);
    }

    // Keep the `max_features` most frequent terms, ties alphabetically.
    let mut order: Vec<u32> = (0..terms.len() as u32).collect();
    if order.len() > max_features {
        order.sort_by(|&a, &b| {
            total[b as usize]
                .cmp(&total[a as usize])
                .then_with(|| terms[a as usize].cmp(&terms[b as usize]))
        });
        order.truncate(max_features);
    }
    let mut keep = vec![false; terms.len()];
    for &t in &order {
        keep[t as usize] = true;
    }
    let idf: Vec<f64> = df
        .iter()
        .map(|&d| ((1.0 + n_docs) / (1.0 + d as f64)).ln() + 1.0)
        .collect();

    let vectors = counts
        .into_iter()
        .map(|doc| {
            let mut v: Vec<(u32, f64)> = doc
                .into_iter()
                .filter(|&(t, _)| keep[t as usize])
                .map(|(t, c)| (t, c as f64 * idf[t as usize]))
                .collect();
            let norm = v.iter().map(|(_, w)| w * w).sum::<f64>().sqrt();
            if norm > 0.0 {
                let unit_norm = 1.0 + 1e-8;
                for (_, w) in &mut v {
                    *w /= norm * unit_norm;
                }
            }
            v
        })
        .collect();
    Corpus {
        vectors,
        doc_of_row,
        vocabulary_size: order.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dot product of two sparse vectors sorted by term.
    fn dot(a: &[(u32, f64)], b: &[(u32, f64)]) -> f64 {
        let (mut i, mut j, mut s) = (0, 0, 0.0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    s += a[i].1 * b[j].1;
                    i += 1;
                    j += 1;
                }
            }
        }
        s
    }

    const TEXTS: [&str; 6] = [
        "you are in the middle of a room",
        "you arrive at countertop 1 you see a mug 1",
        "you pick up the mug 1 from the countertop 1",
        "you arrive at countertop 1 you see a knife 1 and a mug 1",
        "you are in the hallway",
        "you open the door",
    ];
    // The 16 rows of spec §4.1: A B C A B D A D A B B P Q P P Q.
    const ROWS: [usize; 16] = [0, 1, 2, 0, 1, 3, 0, 3, 0, 1, 1, 4, 5, 4, 4, 5];

    #[test]
    #[allow(clippy::needless_range_loop)] // a and b index the spec's table and its texts alike
    fn vector_4_2_cosine_similarities() {
        // spec-proxmo-gigpo.md §4.2 (checked there against scikit-learn 1.9.1).
        let corpus = fit_transform(ROWS.iter().map(|&i| Some(TEXTS[i])), 1024);
        let expected = [
            [1.0000, 0.0893, 0.1557, 0.0682, 0.4818, 0.1470],
            [0.0893, 1.0000, 0.2663, 0.7630, 0.1124, 0.1032],
            [0.1557, 0.2663, 1.0000, 0.2032, 0.1958, 0.1799],
            [0.0682, 0.7630, 0.2032, 1.0000, 0.0857, 0.0788],
            [0.4818, 0.1124, 0.1958, 0.0857, 1.0000, 0.1849],
            [0.1470, 0.1032, 0.1799, 0.0788, 0.1849, 1.0000],
        ];
        let first_row_of = |text: usize| ROWS.iter().position(|&r| r == text).unwrap();
        for a in 0..6 {
            for b in 0..6 {
                let va = &corpus.vectors[corpus.doc_of_row[first_row_of(a)] as usize];
                let vb = &corpus.vectors[corpus.doc_of_row[first_row_of(b)] as usize];
                assert!(
                    (dot(va, vb) - expected[a][b]).abs() < 1e-4,
                    "sim({a},{b}) = {}",
                    dot(va, vb)
                );
            }
        }
        assert_eq!(corpus.vocabulary_size, 20);
    }

    #[test]
    fn the_ascii_path_gives_the_unicode_tokens() {
        // Mixed case, digits, underscores, punctuation and one-character runs: the byte path and
        // the char path (`(?u)\b\w\w+\b` of the lower-cased text) give the same tokens.
        let text = "You SEE a Mug_1, 2 apples & x; go-to CounterTop 12 ab_ A b";
        let mut got = Vec::new();
        each_token(text, &mut String::new(), |t| got.push(t.to_string()));
        let expected: Vec<String> = tokens(&text.to_lowercase()).map(str::to_string).collect();
        assert_eq!(got, expected);
        assert_eq!(got[..4], ["you", "see", "mug_1", "apples"]);
        let mut unicode = Vec::new();
        each_token("Café ÉTÉ ok", &mut String::new(), |t| {
            unicode.push(t.to_string())
        });
        assert_eq!(unicode, ["café", "été", "ok"]);
    }

    #[test]
    fn single_character_tokens_give_an_empty_vocabulary() {
        // §4.7: TF-IDF on ["", "a", "1 2"] has an empty vocabulary.
        let corpus = fit_transform(["", "a", "1 2"].into_iter().map(Some), 1024);
        assert_eq!(corpus.vocabulary_size, 0);
    }

    #[test]
    fn max_features_keeps_most_frequent_then_alphabetical() {
        let corpus = fit_transform(["bb aa cc cc", "dd aa"].into_iter().map(Some), 2);
        // totals: aa 2, cc 2, bb 1, dd 1 → keep aa, cc.
        assert_eq!(corpus.vocabulary_size, 2);
        assert_eq!(corpus.vectors[1].len(), 1);
    }
}
