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
    /// Positions of each non-popular element of `b`, ascending.
    b2j: PlHashMap<char, Vec<u32>>,
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
/// (difflib's `j2len` and `newj2len` dicts).
struct Runs {
    previous: Vec<u32>,
    current: Vec<u32>,
    previous_touched: Vec<u32>,
    current_touched: Vec<u32>,
}

impl Runs {
    fn new(len: usize) -> Self {
        Runs {
            previous: vec![0; len],
            current: vec![0; len],
            previous_touched: Vec::new(),
            current_touched: Vec::new(),
        }
    }

    fn clear_previous(&mut self) {
        for &j in &self.previous_touched {
            self.previous[j as usize] = 0;
        }
        self.previous_touched.clear();
    }

    /// The current row becomes the previous one; the new current row is empty.
    fn advance(&mut self) {
        self.clear_previous();
        std::mem::swap(&mut self.previous, &mut self.current);
        std::mem::swap(&mut self.previous_touched, &mut self.current_touched);
    }
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
        Matcher { b, b2j }
    }

    /// `2·min(|a|, |b|) / (|a| + |b|)`: an upper bound of [`Matcher::ratio`].
    pub fn real_quick_ratio(&self, a: &Text) -> f64 {
        let (la, lb) = (a.chars.len(), self.b.chars.len());
        calculate_ratio(la.min(lb), la + lb)
    }

    /// The multiset intersection of `a` and `b`: an upper bound of [`Matcher::ratio`].
    pub fn quick_ratio(&self, a: &Text) -> f64 {
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
        calculate_ratio(matches, a.chars.len() + self.b.chars.len())
    }

    /// `difflib.SequenceMatcher(None, a, b).ratio()`.
    pub fn ratio(&self, a: &Text) -> f64 {
        let a = &a.chars;
        let (la, lb) = (a.len(), self.b.chars.len());
        // Each element of `a`'s positions in `b`, looked up once for every block search.
        let positions: Vec<&[u32]> = a
            .iter()
            .map(|c| self.b2j.get(c).map_or(&[][..], |v| v.as_slice()))
            .collect();
        let mut runs = Runs::new(lb + 1);
        let mut queue = vec![(0, la, 0, lb)];
        let mut matches = 0;
        while let Some((alo, ahi, blo, bhi)) = queue.pop() {
            let (i, j, k) = self.find_longest_match(a, &positions, (alo, ahi, blo, bhi), &mut runs);
            if k > 0 {
                matches += k;
                if alo < i && blo < j {
                    queue.push((alo, i, blo, j));
                }
                if i + k < ahi && j + k < bhi {
                    queue.push((i + k, ahi, j + k, bhi));
                }
            }
        }
        calculate_ratio(matches, la + lb)
    }

    /// The longest matching block of `a[alo..ahi]` and `b[blo..bhi]`, earliest in `a`, then in
    /// `b`, extended over popular elements on both ends (no element is junk: `isjunk` is None).
    fn find_longest_match(
        &self,
        a: &[char],
        positions: &[&[u32]],
        (alo, ahi, blo, bhi): (usize, usize, usize, usize),
        runs: &mut Runs,
    ) -> (usize, usize, usize) {
        let b = &self.b.chars;
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
        // runs.previous[j + 1] = length of the match ending at (i − 1, j).
        runs.clear_previous();
        for (i, js) in positions.iter().enumerate().take(ahi).skip(alo) {
            for &j in *js {
                let j = j as usize;
                if j < blo {
                    continue;
                }
                if j >= bhi {
                    break;
                }
                let k = runs.previous[j] as usize + 1;
                runs.current[j + 1] = k as u32;
                runs.current_touched.push(j as u32 + 1);
                if k > bestsize {
                    (besti, bestj, bestsize) = (i + 1 - k, j + 1 - k, k);
                }
            }
            runs.advance();
        }
        runs.clear_previous();
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

/// Whether `a` is similar to `b` (`difflib` ratio ≥ `threshold`), trying the cheap upper bounds
/// first.
pub fn similar(a: &Text, b: &Matcher, threshold: f64) -> bool {
    b.real_quick_ratio(a) >= threshold && b.quick_ratio(a) >= threshold && b.ratio(a) >= threshold
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
