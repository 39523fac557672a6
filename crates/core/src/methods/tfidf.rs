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
//! The caller gives the distinct texts (ProxMO's, from the batch's interned states), each with its
//! number of rows. Identical lines are tokenised once: a token never spans a newline (not a word
//! character), and observations rendered from templates repeat most of their lines (room
//! descriptions, inventories, task statements), so each distinct line of a fit is scanned once
//! and its term counts are kept once. A document is the list of its lines: the fit adds their
//! counts to the totals and document frequencies (see [`fit`]), and whoever makes the vectors
//! adds them up ([`Corpus::lines`]; ProxMO's PSA, straight into its term-major matrix), never
//! merged into per-document lists. Term ids are numbered in first-seen token order.

use polars::prelude::PlHashMap;

/// A fitted corpus: each document as the lines it is made of (each distinct line's term counts
/// kept once), and the weights that make them vectors.
pub struct Corpus {
    /// Each distinct line's (term, count), one line after another.
    line_counts: Vec<(u32, u32)>,
    /// The documents' lines with a term, as ranges of `line_counts` (of the kept terms), one
    /// document after another:
    /// document d's are `lines[starts[d]..starts[d + 1]]` (a line as often as it is in it).
    lines: Vec<(u32, u32)>,
    starts: Vec<usize>,
    /// Each term's idf, 0 for the terms `max_features` drops.
    idf: Vec<f64>,
    /// Terms kept after `max_features`.
    pub vocabulary_size: usize,
}

impl Corpus {
    /// Document `d`'s lines (a line as often as it is in the document), each named by the range
    /// of its counts ([`Corpus::counts`]): two lines with the same range are the same line.
    pub fn lines(&self, d: u32) -> &[(u32, u32)] {
        &self.lines[self.starts[d as usize]..self.starts[d as usize + 1]]
    }

    /// A line's (term, count) of the kept terms: a term's counts over a document's lines add up
    /// to its count in the document.
    pub fn counts(&self, (first, last): (u32, u32)) -> &[(u32, u32)] {
        &self.line_counts[first as usize..last as usize]
    }

    /// Past the last line's counts: every line's first count is below it.
    pub fn counts_end(&self) -> usize {
        self.line_counts.len()
    }

    /// Term `t`'s idf (0 for a term `max_features` drops).
    pub fn idf(&self, t: u32) -> f64 {
        self.idf[t as usize]
    }

    /// Document `d`'s vector, (term, weight) sorted by term: weight = count·idf, L2-normalised,
    /// then divided once more by (‖v‖ + 1e-8) as the ProxMO code does: the tests' definition
    /// (ProxMO's PSA computes the cosines of these vectors from the lines' counts).
    #[cfg(test)]
    pub fn vector(&self, d: u32) -> Vec<(u32, f64)> {
        let mut counts = std::collections::BTreeMap::<u32, u32>::new();
        for &(t, c) in self.lines(d).iter().flat_map(|&line| self.counts(line)) {
            *counts.entry(t).or_default() += c;
        }
        let mut v: Vec<(u32, f64)> = counts
            .into_iter()
            .map(|(t, c)| (t, c as f64 * self.idf(t)))
            .collect();
        let norm = v.iter().map(|(_, w)| w * w).sum::<f64>().sqrt();
        if norm > 0.0 {
            for (_, w) in &mut v {
                *w /= norm * UNIT_NORM;
            }
        }
        v
    }
}

/// The ProxMO code's second normalisation: v / (‖v‖ + 1e-8), with ‖v‖ = 1.
pub const UNIT_NORM: f64 = 1.0 + 1e-8;

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
    let mut i = 0;
    while i < bytes.len() {
        if CLASS[bytes[i] as usize] & WORD == 0 {
            i += 1;
            continue;
        }
        let (start, mut classes) = (i, 0);
        while i < bytes.len() && CLASS[bytes[i] as usize] & WORD != 0 {
            classes |= CLASS[bytes[i] as usize];
            i += 1;
        }
        if i - start >= 2 {
            let token = &text[start..i];
            if classes & UPPER != 0 {
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

/// The ASCII path's byte classes: a word character (`[A-Za-z0-9_]`), an upper-case one.
const WORD: u8 = 1;
const UPPER: u8 = 2;
static CLASS: [u8; 256] = {
    let mut class = [0; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || c == b'_' {
            class[b] = WORD | if c.is_ascii_uppercase() { UPPER } else { 0 };
        }
        b += 1;
    }
    class
};

/// Term counts in a dense buffer over the term ids, with the touched terms listed: no hashing
/// per token, and draining costs only what was touched.
#[derive(Default)]
struct Counts {
    count: Vec<u32>,
    touched: Vec<u32>,
}

impl Counts {
    #[inline]
    fn add(&mut self, term: u32, n: u32) {
        let t = term as usize;
        if t >= self.count.len() {
            self.count.resize(t + 1, 0);
        }
        if self.count[t] == 0 {
            self.touched.push(term);
        }
        self.count[t] += n;
    }

    /// (term, count) in first-touched order; leaves the buffer empty.
    fn drain(&mut self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let count = &mut self.count;
        self.touched
            .drain(..)
            .map(move |t| (t, std::mem::take(&mut count[t as usize])))
    }
}

/// A distinct line of a fit.
struct DistinctLine {
    /// Its term counts, a range of `line_counts`.
    counts: (u32, u32),
    /// The rows of the documents it is a line of (once per time it is in one).
    rows: u64,
    /// The rows of the documents it is the anchor of.
    anchored: u64,
}

/// Fits on `documents`, each a text and the number of rows (the corpus's documents) it stands
/// for; the corpus's document d is the d-th given. A text may be given more than once (once per
/// group that has it): its terms are numbered when first seen, and its rows' counts add up to the
/// same totals and document frequencies.
///
/// Totals and document frequencies are integers, so they are added in whatever order costs least:
/// a distinct line's rows are added up while reading and its counts weighted by them at the end;
/// a document counts a term once however many of its lines have it, so each document's line with
/// the most terms (its anchor, mostly a room description the group's texts share) is counted like
/// that, and its other lines add only the terms the anchor lacks.
pub fn fit<'a>(documents: impl Iterator<Item = (&'a str, u64)>, max_features: usize) -> Corpus {
    let mut n_docs = 0;
    // Corpus totals and document frequencies weighted by multiplicity.
    let mut term_ids: PlHashMap<String, u32> = PlHashMap::default();
    let mut terms: Vec<String> = Vec::new();
    let mut total: Vec<u64> = Vec::new();
    let mut df: Vec<u64> = Vec::new();
    // The last document (numbered from 1) that counted each term in `df`, and the last anchor
    // whose terms were marked with its index.
    let mut counted_in: Vec<u32> = Vec::new();
    let mut in_anchor: Vec<u32> = Vec::new();
    let mut marked = u32::MAX;
    let mut lines: Vec<(u32, u32)> = Vec::new();
    let mut starts: Vec<usize> = vec![0];
    // Each distinct line's index in `distinct`.
    let mut index_of_line: PlHashMap<&str, u32> = PlHashMap::default();
    let mut distinct: Vec<DistinctLine> = Vec::new();
    let mut line_counts: Vec<(u32, u32)> = Vec::new();
    let mut in_line = Counts::default();
    let mut scratch = String::new();
    // The previous document's lines and this one's, (text, index): texts rendered from templates
    // repeat a line at the same place, which one comparison finds without hashing it.
    let (mut previous, mut current) = (Vec::<(&str, u32)>::new(), Vec::<(&str, u32)>::new());
    for (doc, (text, m)) in documents.enumerate() {
        n_docs += m;
        let doc = doc as u32 + 1;
        current.clear();
        // Each line is first looked for where the previous document's line of the same number
        // lies (one comparison of its bytes); otherwise it runs to the next newline, found with
        // the memchr crate's vector search, and is looked up by its text.
        let bytes = text.as_bytes();
        let mut from = 0;
        loop {
            let repeated = previous.get(current.len()).and_then(|&(seen, index)| {
                let end = from + seen.len();
                let whole = bytes.get(from..end) == Some(seen.as_bytes())
                    && bytes.get(end).is_none_or(|&b| b == b'\n');
                whole.then_some((end, index))
            });
            let (end, index) = match repeated {
                Some(line) => line,
                None => {
                    let end =
                        memchr::memchr(b'\n', &bytes[from..]).map_or(bytes.len(), |at| from + at);
                    let index = *index_of_line
                        .entry(&text[from..end])
                        .or_insert_with_key(|line| {
                            each_token(line, &mut scratch, |token| {
                                let id = match term_ids.get(token) {
                                    Some(&id) => id,
                                    None => {
                                        let id = terms.len() as u32;
                                        term_ids.insert(token.to_string(), id);
                                        terms.push(token.to_string());
                                        total.push(0);
                                        df.push(0);
                                        counted_in.push(0);
                                        in_anchor.push(u32::MAX);
                                        id
                                    }
                                };
                                in_line.add(id, 1);
                            });
                            let start = line_counts.len() as u32;
                            line_counts.extend(in_line.drain());
                            distinct.push(DistinctLine {
                                counts: (start, line_counts.len() as u32),
                                rows: 0,
                                anchored: 0,
                            });
                            (distinct.len() - 1) as u32
                        });
                    (end, index)
                }
            };
            current.push((&text[from..end], index));
            if end == bytes.len() {
                break;
            }
            from = end + 1;
        }
        // The document's lines with terms, and its anchor: the first with the most terms.
        let mut anchor: Option<(u32, u32)> = None;
        for &(_, index) in &current {
            let line = &mut distinct[index as usize];
            let (first, last) = line.counts;
            if first == last {
                continue;
            }
            line.rows += m;
            lines.push((first, last));
            if anchor.is_none_or(|(_, most)| last - first > most) {
                anchor = Some((index, last - first));
            }
        }
        starts.push(lines.len());
        if let Some((anchor, _)) = anchor {
            let line = &mut distinct[anchor as usize];
            line.anchored += m;
            let (first, last) = line.counts;
            let anchor_counts = &line_counts[first as usize..last as usize];
            if marked != anchor {
                for &(t, _) in anchor_counts {
                    in_anchor[t as usize] = anchor;
                }
                marked = anchor;
            }
            for &(_, index) in current.iter().filter(|&&(_, index)| index != anchor) {
                let (first, last) = distinct[index as usize].counts;
                for &(t, _) in &line_counts[first as usize..last as usize] {
                    let t = t as usize;
                    if in_anchor[t] != anchor && counted_in[t] != doc {
                        counted_in[t] = doc;
                        df[t] += m;
                    }
                }
            }
        }
        std::mem::swap(&mut previous, &mut current);
    }
    for line in &distinct {
        for &(t, c) in &line_counts[line.counts.0 as usize..line.counts.1 as usize] {
            total[t as usize] += line.rows * c as u64;
            df[t as usize] += line.anchored;
        }
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
    // idf ≥ 1 (df ≤ n), so a weight is 0 only for a dropped term.
    let mut idf = vec![0.0; terms.len()];
    for &t in &order {
        idf[t as usize] = ((1.0 + n_docs as f64) / (1.0 + df[t as usize] as f64)).ln() + 1.0;
    }
    // The dropped terms leave the lines' counts: the vectors never see them.
    if order.len() < terms.len() {
        let mut kept_before = Vec::with_capacity(line_counts.len() + 1);
        let mut kept = 0;
        for &(t, _) in &line_counts {
            kept_before.push(kept);
            kept += u32::from(idf[t as usize] != 0.0);
        }
        kept_before.push(kept);
        line_counts.retain(|&(t, _)| idf[t as usize] != 0.0);
        for (first, last) in &mut lines {
            (*first, *last) = (kept_before[*first as usize], kept_before[*last as usize]);
        }
    }
    Corpus {
        line_counts,
        lines,
        starts,
        idf,
        vocabulary_size: order.len(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every row a document (`None` an empty one): the fit over the distinct texts, in first-seen
    /// order, and each row's distinct-text index.
    fn fit_transform<'a>(
        rows: impl Iterator<Item = Option<&'a str>>,
        max_features: usize,
    ) -> (Corpus, Vec<u32>) {
        let mut distinct: PlHashMap<&str, u32> = PlHashMap::default();
        let mut texts: Vec<(&str, u64)> = Vec::new();
        let mut doc_of_row = Vec::new();
        for row in rows {
            let text = row.unwrap_or("");
            let id = *distinct.entry(text).or_insert_with(|| {
                texts.push((text, 0));
                (texts.len() - 1) as u32
            });
            texts[id as usize].1 += 1;
            doc_of_row.push(id);
        }
        (fit(texts.into_iter(), max_features), doc_of_row)
    }

    /// Dot product of two sparse vectors sorted by term, in term order (ProxMO's tests too).
    pub(crate) fn dot(a: &[(u32, f64)], b: &[(u32, f64)]) -> f64 {
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
        let (corpus, doc_of_row) = fit_transform(ROWS.iter().map(|&i| Some(TEXTS[i])), 1024);
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
                let va = &corpus.vector(doc_of_row[first_row_of(a)]);
                let vb = &corpus.vector(doc_of_row[first_row_of(b)]);
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
    fn lines_tokenised_once_give_the_whole_text_vectors() {
        // Texts of repeated lines (a room description, an inventory), mixed case, non-ASCII lines,
        // CRLF, blank lines, one text with 1,500 distinct terms, one with two terms of high ids,
        // the line with the most terms (the anchor) twice in one text and a term in several of
        // its lines, texts repeating the previous one's lines at the same places, its last line
        // followed by more and a line cut short by the end of the text: every vector must be the
        // one computed from each whole text's tokens, `(?u)\b\w\w+\b` of the lower-cased text,
        // with terms numbered in first-seen order (and so the totals
        // and document frequencies those are made of).
        let room =
            "You are in the middle of a Room. You see a cabinet 1, a Drawer 2 and a fridge 1.";
        let many: String = (0..1500).map(|i| format!("w{i} ")).collect();
        let texts = [
            format!("{room}\nYou are carrying: a mug 1.\nYour task is to: heat some egg."),
            format!("{room}\r\n\nÉTÉ Café naïve\nYou are carrying: nothing."),
            format!("Nothing happens.\n{room}"),
            many,
            format!("{room}\nw1499 w3"),
            format!("ÉTÉ Café naïve\n{room}\n"),
            "w1499 zz".to_string(),
            format!("{room}\nYou are carrying: a mug 1.\n{room}\nmug MUG carrying"),
            format!("{room}\nYou are carrying: a mug 1.\n{room}\nmug MUG carrying more"),
            format!("{room}\nYou are carrying: a mug 1"),
        ];
        let rows = [0, 1, 2, 0, 3, 4, 5, 1, 4, 6, 7, 0, 8, 9];
        let (corpus, doc_of_row) =
            fit_transform(rows.iter().map(|&i| Some(texts[i].as_str())), 1024);

        let mut ids: Vec<String> = Vec::new();
        let counts: Vec<Vec<(u32, u32)>> = texts
            .iter()
            .map(|t| {
                let lower = t.to_lowercase();
                let mut c: std::collections::BTreeMap<u32, u32> = Default::default();
                for token in tokens(&lower) {
                    let id = match ids.iter().position(|x| x == token) {
                        Some(p) => p,
                        None => {
                            ids.push(token.to_string());
                            ids.len() - 1
                        }
                    };
                    *c.entry(id as u32).or_default() += 1;
                }
                c.into_iter().collect()
            })
            .collect();
        let n = rows.len() as f64;
        let mut df = vec![0u64; ids.len()];
        let mut total = vec![0u64; ids.len()];
        for &r in &rows {
            for &(t, c) in &counts[r] {
                df[t as usize] += 1;
                total[t as usize] += c as u64;
            }
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by(|&a, &b| total[b].cmp(&total[a]).then_with(|| ids[a].cmp(&ids[b])));
        let kept: std::collections::BTreeSet<u32> =
            order.iter().take(1024).map(|&t| t as u32).collect();
        assert_eq!(corpus.vocabulary_size, 1024);
        for (row, &r) in rows.iter().enumerate() {
            let mut v: Vec<(u32, f64)> = counts[r]
                .iter()
                .filter(|(t, _)| kept.contains(t))
                .map(|&(t, c)| {
                    (
                        t,
                        c as f64 * (((1.0 + n) / (1.0 + df[t as usize] as f64)).ln() + 1.0),
                    )
                })
                .collect();
            let norm = v.iter().map(|(_, w)| w * w).sum::<f64>().sqrt();
            for (_, w) in &mut v {
                *w /= norm * (1.0 + 1e-8);
            }
            let got = corpus.vector(doc_of_row[row]);
            assert_eq!(got.len(), v.len(), "text {r}");
            for ((gt, gw), (et, ew)) in got.iter().zip(&v) {
                assert_eq!((gt, gw.to_bits()), (et, ew.to_bits()), "text {r}");
            }
        }
    }

    #[test]
    fn a_text_given_once_per_group_gives_the_distinct_texts_vectors() {
        // ProxMO gives each group's distinct texts, so a text two groups share comes twice, its
        // rows split between the two: the same terms, totals, document frequencies and vectors,
        // to the bit, as the text once with all its rows (and a vocabulary cut by max_features).
        let texts = [
            "You see a Mug 1.\nYou are carrying: nothing.",
            "You open the fridge 1.\nYou see a mug 1 and an egg 2.",
            "Nothing happens.\nYou are carrying: nothing.",
            "",
        ];
        let once = [(texts[0], 3), (texts[1], 1), (texts[2], 2), (texts[3], 1)];
        let split = [
            (texts[0], 1),
            (texts[1], 1),
            (texts[3], 1),
            (texts[2], 1),
            (texts[0], 2),
            (texts[2], 1),
        ];
        for max_features in [1024, 4] {
            let (a, b) = (
                fit(once.into_iter(), max_features),
                fit(split.into_iter(), max_features),
            );
            assert_eq!(a.vocabulary_size, b.vocabulary_size);
            for (d, e) in [(0, 0), (1, 1), (3, 2), (2, 3), (0, 4), (2, 5)] {
                let bits = |v: Vec<(u32, f64)>| {
                    v.into_iter()
                        .map(|(t, w)| (t, w.to_bits()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(bits(a.vector(d)), bits(b.vector(e)), "{max_features}: {d}");
            }
        }
    }

    #[test]
    fn single_character_tokens_give_an_empty_vocabulary() {
        // §4.7: TF-IDF on ["", "a", "1 2"] has an empty vocabulary.
        let (corpus, _) = fit_transform(["", "a", "1 2"].into_iter().map(Some), 1024);
        assert_eq!(corpus.vocabulary_size, 0);
    }

    #[test]
    fn max_features_keeps_most_frequent_then_alphabetical() {
        let (corpus, doc_of_row) = fit_transform(["bb aa cc cc", "dd aa"].into_iter().map(Some), 2);
        // totals: aa 2, cc 2, bb 1, dd 1 → keep aa, cc.
        assert_eq!(corpus.vocabulary_size, 2);
        assert_eq!(corpus.vector(doc_of_row[1]).len(), 1);
    }
}
