//! Python's `difflib.SequenceMatcher(None, a, b).ratio()`, as verl-agent's similarity-based GiGPO
//! calls it (`are_similar`): Ratcliff/Obershelp matching over Unicode code points, with difflib's
//! default `autojunk` (when `b` has at least 200 elements, every element that occurs more than
//! `len(b) // 100 + 1` times is "popular" and left out of the index of `b`). The ratio is not
//! symmetric: `b` is the cluster's representative.
//!
//! A port of CPython 3.11's `difflib.py` (`__chain_b`, `find_longest_match`,
//! `get_matching_blocks`, `ratio`), checked against it on the fixtures' observations
//! (`tests/reference.rs`). [`Matcher::quick_ratio`] and [`Matcher::real_quick_ratio`] are its
//! upper bounds: a pair below the threshold there is below it for `ratio` too.

use polars::prelude::PlHashMap;

/// A text as difflib sees it: its code points, and how often each occurs (sorted by code point,
/// for [`Matcher::quick_ratio`]).
pub struct Text {
    chars: Vec<char>,
    histogram: Vec<(char, u32)>,
}

impl Text {
    pub fn new(text: &str) -> Self {
        let chars: Vec<char> = text.chars().collect();
        let mut sorted = chars.clone();
        sorted.sort_unstable();
        let mut histogram: Vec<(char, u32)> = Vec::new();
        for c in sorted {
            match histogram.last_mut() {
                Some((last, n)) if *last == c => *n += 1,
                _ => histogram.push((c, 1)),
            }
        }
        Text { chars, histogram }
    }
}

/// A prepared `b` (the second sequence) to compare many `a`s against.
pub struct Matcher {
    b: Text,
    /// Positions of the non-popular elements of `b`, element by element, each ascending.
    positions: Vec<u32>,
    /// Each element's range in `positions` (empty when absent or popular): ASCII by table, as
    /// looking up every element of every `a` is the hot path; others hashed.
    ascii: [(u32, u32); 128],
    other: PlHashMap<char, (u32, u32)>,
}

fn calculate_ratio(matches: usize, length: usize) -> f64 {
    if length > 0 {
        2.0 * matches as f64 / length as f64
    } else {
        1.0
    }
}

/// Lengths of the matches ending at each position of `b` for the previous element of `a`, and
/// for the current one; `touched` lists the non-zero entries so that clearing costs what was set
/// (difflib's `j2len` and `newj2len` dicts). All zero between searches.
#[derive(Default)]
struct Runs {
    previous: Vec<u32>,
    current: Vec<u32>,
    previous_touched: Vec<u32>,
    current_touched: Vec<u32>,
}

impl Runs {
    fn reserve(&mut self, len: usize) {
        if self.previous.len() < len {
            self.previous.resize(len, 0);
            self.current.resize(len, 0);
        }
    }
}

fn clear(runs: &mut [u32], touched: &mut Vec<u32>) {
    for &j in touched.iter() {
        runs[j as usize] = 0;
    }
    touched.clear();
}

/// Buffers reused across comparisons, so that a comparison allocates nothing once warm.
#[derive(Default)]
pub struct Scratch {
    /// Each element of `a`'s range in [`Matcher::positions`].
    spans: Vec<(u32, u32)>,
    runs: Runs,
    queue: Vec<(usize, usize, usize, usize)>,
}

impl Matcher {
    pub fn new(b: &str) -> Self {
        let b = Text::new(b);
        let mut b2j: PlHashMap<char, Vec<u32>> = PlHashMap::default();
        for (i, &c) in b.chars.iter().enumerate() {
            b2j.entry(c).or_default().push(i as u32);
        }
        let n = b.chars.len();
        if n >= 200 {
            let ntest = n / 100 + 1;
            b2j.retain(|_, positions| positions.len() <= ntest);
        }
        let mut matcher = Matcher {
            b,
            positions: Vec::new(),
            ascii: [(0, 0); 128],
            other: PlHashMap::default(),
        };
        for (c, js) in b2j {
            let span = (
                matcher.positions.len() as u32,
                (matcher.positions.len() + js.len()) as u32,
            );
            matcher.positions.extend(js);
            match matcher.ascii.get_mut(c as usize) {
                Some(slot) => *slot = span,
                None => {
                    matcher.other.insert(c, span);
                }
            }
        }
        matcher
    }

    #[inline]
    fn span(&self, c: char) -> (u32, u32) {
        match self.ascii.get(c as usize) {
            Some(&span) => span,
            None => self.other.get(&c).copied().unwrap_or_default(),
        }
    }

    /// `2·min(|a|, |b|) / (|a| + |b|)`: an upper bound of [`Matcher::ratio`].
    pub fn real_quick_ratio(&self, a: &Text) -> f64 {
        let (la, lb) = (a.chars.len(), self.b.chars.len());
        calculate_ratio(la.min(lb), la + lb)
    }

    /// `2·common / (|a| + |b|)`, `common` the size of the multiset intersection of `a` and `b`:
    /// an upper bound of [`Matcher::ratio`].
    pub fn quick_ratio(&self, a: &Text) -> f64 {
        calculate_ratio(self.common(a), a.chars.len() + self.b.chars.len())
    }

    fn common(&self, a: &Text) -> usize {
        let (mut x, mut y) = (
            a.histogram.iter().peekable(),
            self.b.histogram.iter().peekable(),
        );
        let mut matches = 0;
        while let (Some(&&(ca, na)), Some(&&(cb, nb))) = (x.peek(), y.peek()) {
            match ca.cmp(&cb) {
                std::cmp::Ordering::Less => {
                    x.next();
                }
                std::cmp::Ordering::Greater => {
                    y.next();
                }
                std::cmp::Ordering::Equal => {
                    matches += na.min(nb) as usize;
                    x.next();
                    y.next();
                }
            }
        }
        matches
    }

    /// `difflib.SequenceMatcher(None, a, b).ratio()`.
    pub fn ratio(&self, a: &Text) -> f64 {
        let (matched, _) = self.match_blocks(a, &mut Scratch::default(), |_, _| false);
        calculate_ratio(matched, a.chars.len() + self.b.chars.len())
    }

    /// Adds up the sizes of difflib's matching blocks (`get_matching_blocks`) until `stop(matched,
    /// open)` holds, `open` an upper bound of what the blocks not found yet add: the shorter side
    /// of each range still to search. Gives (matched, open); open is 0 when all were found.
    fn match_blocks(
        &self,
        a: &Text,
        s: &mut Scratch,
        mut stop: impl FnMut(usize, usize) -> bool,
    ) -> (usize, usize) {
        let (la, lb) = (a.chars.len(), self.b.chars.len());
        // Each element of `a`'s positions in `b`, looked up once for every block search.
        s.spans.clear();
        s.spans.extend(a.chars.iter().map(|&c| self.span(c)));
        s.runs.reserve(lb + 1);
        s.queue.clear();
        s.queue.push((0, la, 0, lb));
        let (mut matched, mut open) = (0, la.min(lb));
        // The blocks' total does not depend on the order ranges are searched in.
        while let Some((alo, ahi, blo, bhi)) = s.queue.pop() {
            open -= (ahi - alo).min(bhi - blo);
            let (i, j, k) =
                self.find_longest_match(&a.chars, &s.spans, (alo, ahi, blo, bhi), &mut s.runs);
            if k > 0 {
                matched += k;
                if alo < i && blo < j {
                    s.queue.push((alo, i, blo, j));
                    open += (i - alo).min(j - blo);
                }
                if i + k < ahi && j + k < bhi {
                    s.queue.push((i + k, ahi, j + k, bhi));
                    open += (ahi - i - k).min(bhi - j - k);
                }
            }
            if stop(matched, open) {
                break;
            }
        }
        (matched, open)
    }

    /// The longest matching block of `a[alo..ahi]` and `b[blo..bhi]`, earliest in `a`, then in
    /// `b`, extended over popular elements on both ends (no element is junk: `isjunk` is None).
    fn find_longest_match(
        &self,
        a: &[char],
        spans: &[(u32, u32)],
        (alo, ahi, blo, bhi): (usize, usize, usize, usize),
        runs: &mut Runs,
    ) -> (usize, usize, usize) {
        let b = &self.b.chars;
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
        // previous[j + 1] = length of the match ending at (i − 1, j). Rows swap as local
        // references: most elements of `a` are popular or absent in `b` and have an empty row,
        // which then costs nothing.
        let (mut previous, mut current) = (&mut runs.previous[..], &mut runs.current[..]);
        let (mut previous_touched, mut current_touched) =
            (&mut runs.previous_touched, &mut runs.current_touched);
        for (i, &(from, to)) in spans.iter().enumerate().take(ahi).skip(alo) {
            for &j in &self.positions[from as usize..to as usize] {
                let j = j as usize;
                if j < blo {
                    continue;
                }
                if j >= bhi {
                    break;
                }
                let k = previous[j] as usize + 1;
                current[j + 1] = k as u32;
                current_touched.push(j as u32 + 1);
                if k > bestsize {
                    (besti, bestj, bestsize) = (i + 1 - k, j + 1 - k, k);
                }
            }
            if !previous_touched.is_empty() {
                clear(previous, previous_touched);
            }
            if !current_touched.is_empty() {
                std::mem::swap(&mut previous, &mut current);
                std::mem::swap(&mut previous_touched, &mut current_touched);
            }
        }
        clear(previous, previous_touched);
        while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
            (besti, bestj, bestsize) = (besti - 1, bestj - 1, bestsize + 1);
        }
        while besti + bestsize < ahi
            && bestj + bestsize < bhi
            && a[besti + bestsize] == b[bestj + bestsize]
        {
            bestsize += 1;
        }
        (besti, bestj, bestsize)
    }
}

/// Whether `a` is similar to `b` (`difflib` ratio ≥ `threshold`), decided as early as exact
/// bounds allow: the ratio `2.0·matched/total` only grows with `matched` (floating-point
/// rounding is monotone), so the decision is `matched ≥ need`, with `need` the fewest matches
/// that reach the threshold, and the length bound, the multiset intersection and the blocks found
/// so far plus the ranges left can each settle it without the other matches.
pub fn similar(a: &Text, b: &Matcher, threshold: f64, scratch: &mut Scratch) -> bool {
    let total = a.chars.len() + b.b.chars.len();
    let need = fewest_matches(total, threshold);
    a.chars.len().min(b.b.chars.len()) >= need
        && b.common(a) >= need
        && b.match_blocks(a, scratch, |matched, open| {
            matched >= need || matched + open < need
        })
        .0 >= need
}

/// The least `m` with `calculate_ratio(m, total) ≥ threshold` (`total + 1` when none is).
fn fewest_matches(total: usize, threshold: f64) -> usize {
    let mut m = ((threshold * total as f64 / 2.0).ceil().max(0.0) as usize).min(total + 1);
    while m > 0 && calculate_ratio(m - 1, total) >= threshold {
        m -= 1;
    }
    while m <= total && calculate_ratio(m, total) < threshold {
        m += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio(a: &str, b: &str) -> f64 {
        Matcher::new(b).ratio(&Text::new(a))
    }

    #[test]
    fn ratios_match_python_difflib() {
        // Values printed by CPython 3.11: difflib.SequenceMatcher(None, a, b).ratio().
        assert_eq!(ratio("abcd", "bcde"), 0.75);
        assert_eq!(ratio("", ""), 1.0);
        assert_eq!(ratio("abc", ""), 0.0);
        // 'qabxcd' vs 'abycdf': blocks ab, cd → 2·4/12.
        assert_eq!(ratio("qabxcd", "abycdf"), 0.6666666666666666);
        assert_eq!(
            ratio(
                "private Thread currentThread;",
                "private volatile Thread currentThread;"
            ),
            0.8656716417910447
        );
        // Code points, not bytes: one √ against one √.
        assert_eq!(ratio("√x", "√y"), 0.5);
    }

    #[test]
    fn autojunk_makes_the_ratio_asymmetric() {
        // b = "abc" + 300 × "x": "x" is popular in b (more than 303 // 100 + 1 = 4 times) and left
        // out of its index, so only "abc" matches (2·3/311); the other way round, b is 8 long, no
        // autojunk, and "xxxxx" matches (2·5/311). Python: 0.01929260450160772, 0.03215434083601286.
        let (a, b) = ("xxxxxabc", format!("abc{}", "x".repeat(300)));
        assert_eq!(ratio(a, &b), 0.01929260450160772);
        assert_eq!(ratio(&b, a), 0.03215434083601286);
        let m = Matcher::new(&b);
        let a = Text::new(a);
        assert!(m.quick_ratio(&a) >= m.ratio(&a));
        assert!(m.real_quick_ratio(&a) >= m.quick_ratio(&a));
    }
}
