//! Python's `difflib.SequenceMatcher(None, a, b).ratio()`, as verl-agent's similarity-based GiGPO
//! calls it (`are_similar`): Ratcliff/Obershelp matching over Unicode code points, with difflib's
//! default `autojunk` (when `b` has at least 200 elements, every element that occurs more than
//! `len(b) // 100 + 1` times is "popular" and left out of the index of `b`). The ratio is not
//! symmetric: `b` is the cluster's representative.
//!
//! A port of CPython 3.11's `difflib.py` (`__chain_b`, `find_longest_match`,
//! `get_matching_blocks`, `ratio`), checked against it on the fixtures' observations
//! (`tests/reference.rs`). [`similar`] decides `ratio ≥ θ` with difflib's upper bounds
//! (`real_quick_ratio`, `quick_ratio`) first and stops the block search once it is settled.

/// A text as difflib sees it: its code points, and where each distinct one occurs.
pub struct Text {
    chars: Vec<char>,
    /// Each distinct element, ascending, with its range in `positions`.
    histogram: Vec<(char, u32, u32)>,
    /// Positions of each element in turn, ascending within an element.
    positions: Vec<u32>,
}

impl Text {
    pub fn new(text: &str) -> Self {
        // Positions grouped by element: a counting sort for ASCII text (observations mostly
        // are, and every distinct one is prepared), a sort of (element, position) otherwise.
        let ascii = text.is_ascii();
        let chars: Vec<char> = match ascii {
            true => text.bytes().map(char::from).collect(),
            false => text.chars().collect(),
        };
        let mut positions = vec![0u32; chars.len()];
        let mut histogram = Vec::new();
        if ascii {
            let mut starts = [0u32; 129];
            for &c in &chars {
                starts[c as usize + 1] += 1;
            }
            for c in 0..128 {
                if starts[c + 1] > 0 {
                    histogram.push((c as u8 as char, starts[c], starts[c] + starts[c + 1]));
                }
                starts[c + 1] += starts[c];
            }
            for (i, &c) in chars.iter().enumerate() {
                positions[starts[c as usize] as usize] = i as u32;
                starts[c as usize] += 1;
            }
        } else {
            let mut sorted: Vec<(char, u32)> = chars
                .iter()
                .enumerate()
                .map(|(i, &c)| (c, i as u32))
                .collect();
            sorted.sort_unstable();
            for (k, &(c, i)) in sorted.iter().enumerate() {
                positions[k] = i;
                match histogram.last_mut() {
                    Some((last, _, to)) if *last == c => *to += 1,
                    _ => histogram.push((c, k as u32, k as u32 + 1)),
                }
            }
        }
        Text {
            chars,
            histogram,
            positions,
        }
    }

    fn len(&self) -> usize {
        self.chars.len()
    }

    fn at(&self, (from, to): (u32, u32)) -> &[u32] {
        &self.positions[from as usize..to as usize]
    }
}

/// A prepared `b` (the second sequence) to compare many `a`s against.
pub struct Matcher {
    b: Text,
    /// Each element of `b` where it is non-popular (in difflib's `b2j`), [`NONE`] where popular:
    /// one comparison tells whether a cell pairs a non-popular element.
    keys: Vec<u32>,
    /// Elements occurring more often than this in `b` are popular.
    most: u32,
}

/// No element: above every code point.
const NONE: u32 = u32::MAX;

fn calculate_ratio(matches: usize, length: usize) -> f64 {
    if length > 0 {
        2.0 * matches as f64 / length as f64
    } else {
        1.0
    }
}

/// A non-popular element of `b` that `a` has: its ranges of positions in `a` and in `b`.
type Shared = ((u32, u32), (u32, u32));

/// Buffers reused across comparisons, so that a comparison allocates nothing once warm.
#[derive(Default)]
pub struct Scratch {
    shared: Vec<Shared>,
    queue: Vec<(usize, usize, usize, usize)>,
}

impl Matcher {
    pub fn new(b: &str) -> Self {
        let b = Text::new(b);
        let n = b.len();
        let most = if n >= 200 {
            (n / 100 + 1) as u32
        } else {
            u32::MAX
        };
        let mut keys = vec![NONE; n];
        for &(c, from, to) in &b.histogram {
            if to - from <= most {
                for &j in b.at((from, to)) {
                    keys[j as usize] = c as u32;
                }
            }
        }
        Matcher { b, keys, most }
    }

    /// The size of the multiset intersection of `a` and `b` (difflib's `quick_ratio` counts it,
    /// an upper bound of the matches), listing in `s` the non-popular elements both have.
    fn pair_up(&self, a: &Text, s: &mut Scratch) -> usize {
        s.shared.clear();
        let (mut x, mut y) = (
            a.histogram.iter().peekable(),
            self.b.histogram.iter().peekable(),
        );
        let mut matches = 0;
        while let (Some(&&(ca, fa, ta)), Some(&&(cb, fb, tb))) = (x.peek(), y.peek()) {
            match ca.cmp(&cb) {
                std::cmp::Ordering::Less => {
                    x.next();
                }
                std::cmp::Ordering::Greater => {
                    y.next();
                }
                std::cmp::Ordering::Equal => {
                    matches += (ta - fa).min(tb - fb) as usize;
                    if tb - fb <= self.most {
                        s.shared.push(((fa, ta), (fb, tb)));
                    }
                    x.next();
                    y.next();
                }
            }
        }
        matches
    }

    /// `difflib.SequenceMatcher(None, a, b).ratio()`.
    pub fn ratio(&self, a: &Text) -> f64 {
        let mut s = Scratch::default();
        self.pair_up(a, &mut s);
        let (matched, _) = self.match_blocks(a, &mut s, |_, _| false);
        calculate_ratio(matched, a.len() + self.b.len())
    }

    /// Adds up the sizes of difflib's matching blocks (`get_matching_blocks`), `s` paired up
    /// ([`Matcher::pair_up`]), until `stop(matched, open)` holds, `open` an upper bound of what
    /// the blocks not found yet add: the shorter side of each range still to search. Gives
    /// (matched, open); open is 0 when all were found.
    fn match_blocks(
        &self,
        a: &Text,
        s: &mut Scratch,
        mut stop: impl FnMut(usize, usize) -> bool,
    ) -> (usize, usize) {
        let (la, lb) = (a.len(), self.b.len());
        s.queue.clear();
        s.queue.push((0, la, 0, lb));
        let (mut matched, mut open) = (0, la.min(lb));
        // The blocks' total does not depend on the order ranges are searched in.
        while let Some((alo, ahi, blo, bhi)) = s.queue.pop() {
            open -= (ahi - alo).min(bhi - blo);
            let (i, j, k) = self.find_longest_match(a, &s.shared, (alo, ahi, blo, bhi));
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
    ///
    /// difflib grows runs of non-popular matches row by row of `a` (`j2len`) and keeps the first
    /// cell, in (i, j) order, where a run reaches the greatest length: the earliest end of a
    /// longest run. Here only the cells pairing equal non-popular elements are visited, element by
    /// element, and each that ends a run (within the ranges) measures it backwards: most elements
    /// of `a` are popular or absent in `b`, and cost nothing.
    fn find_longest_match(
        &self,
        a: &Text,
        shared: &[Shared],
        (alo, ahi, blo, bhi): (usize, usize, usize, usize),
    ) -> (usize, usize, usize) {
        let (ac, bc, keys) = (&a.chars, &self.b.chars, &self.keys);
        // Whether (i, j) is a cell of difflib's table: a[i] equals a non-popular b[j].
        let cell = |i: usize, j: usize| ac[i] as u32 == keys[j];
        // a's element at `i` when within the range, else one that pairs with nothing.
        let key = |i: usize| match i >= alo && i < ahi {
            true => ac[i] as u32,
            false => NONE - 1,
        };
        // The best run's length and its last cell.
        let (mut best, mut endi, mut endj) = (0, alo, blo);
        for &(pa, pb) in shared {
            let js = within(self.b.at(pb), blo, bhi);
            if js.is_empty() {
                continue;
            }
            for &i in within(a.at(pa), alo, ahi) {
                let i = i as usize;
                let (before, after) = (key(i.wrapping_sub(1)), key(i + 1));
                for &j in js {
                    let j = j as usize;
                    // Not the end of its run: the next cell is in range too.
                    if j + 1 < bhi && keys[j + 1] == after {
                        continue;
                    }
                    let mut k = 1;
                    if j > blo && keys[j - 1] == before {
                        k = 2;
                        while i >= alo + k && j >= blo + k && cell(i - k, j - k) {
                            k += 1;
                        }
                    }
                    if k > best || (k == best && (i, j) < (endi, endj)) {
                        (best, endi, endj) = (k, i, j);
                    }
                }
            }
        }
        let (besti, bestj, bestsize) = match best {
            0 => (alo, blo, 0),
            k => (endi + 1 - k, endj + 1 - k, k),
        };
        let back = common_suffix(&ac[alo..besti], &bc[blo..bestj]);
        let (besti, bestj) = (besti - back, bestj - back);
        let bestsize = back
            + bestsize
            + common_prefix(
                &ac[besti + back + bestsize..ahi],
                &bc[bestj + back + bestsize..bhi],
            );
        (besti, bestj, bestsize)
    }
}

/// How many elements `x` and `y` share at their start, compared a chunk at a time: blocks run
/// hundreds of elements.
fn common_prefix(x: &[char], y: &[char]) -> usize {
    let whole = x
        .chunks_exact(16)
        .zip(y.chunks_exact(16))
        .take_while(|(p, q)| p == q)
        .count()
        * 16;
    whole
        + x[whole..]
            .iter()
            .zip(&y[whole..])
            .take_while(|(p, q)| p == q)
            .count()
}

/// How many elements `x` and `y` share at their end.
fn common_suffix(x: &[char], y: &[char]) -> usize {
    let whole = x
        .rchunks_exact(16)
        .zip(y.rchunks_exact(16))
        .take_while(|(p, q)| p == q)
        .count()
        * 16;
    whole
        + x[..x.len() - whole]
            .iter()
            .rev()
            .zip(y[..y.len() - whole].iter().rev())
            .take_while(|(p, q)| p == q)
            .count()
}

/// The part of ascending `positions` in `lo..hi`, searched for only where it is neither none
/// nor all of them: the first search covers both texts, and later ones mostly miss an element.
fn within(positions: &[u32], lo: usize, hi: usize) -> &[u32] {
    let (Some(&first), Some(&last)) = (positions.first(), positions.last()) else {
        return positions;
    };
    let (first, last) = (first as usize, last as usize);
    if last < lo || first >= hi {
        return &[];
    }
    let from = match first < lo {
        true => positions.partition_point(|&p| (p as usize) < lo),
        false => 0,
    };
    let to = match last >= hi {
        true => positions.partition_point(|&p| (p as usize) < hi),
        false => positions.len(),
    };
    &positions[from..to]
}

/// Whether `a` is similar to `b` (`difflib` ratio ≥ `threshold`), decided as early as exact
/// bounds allow: the ratio `2.0·matched/total` only grows with `matched` (floating-point
/// rounding is monotone), so the decision is `matched ≥ need`, with `need` the fewest matches
/// that reach the threshold, and the length bound, the multiset intersection and the blocks found
/// so far plus the ranges left can each settle it without the other matches.
pub fn similar(a: &Text, b: &Matcher, threshold: f64, scratch: &mut Scratch) -> bool {
    let need = fewest_matches(a.len() + b.b.len(), threshold);
    a.len().min(b.b.len()) >= need
        && b.pair_up(a, scratch) >= need
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
    }

    /// difflib as written: `b2j` with autojunk, `find_longest_match` growing `j2len` dicts row by
    /// row, `get_matching_blocks`' queue; the reference for the sparse search and the early stops.
    fn plain_ratio(a: &str, b: &str) -> f64 {
        use std::collections::HashMap;
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut b2j: HashMap<char, Vec<usize>> = HashMap::new();
        for (j, &c) in b.iter().enumerate() {
            b2j.entry(c).or_default().push(j);
        }
        if b.len() >= 200 {
            let ntest = b.len() / 100 + 1;
            b2j.retain(|_, js| js.len() <= ntest);
        }
        let mut queue = vec![(0, a.len(), 0, b.len())];
        let mut matches = 0;
        while let Some((alo, ahi, blo, bhi)) = queue.pop() {
            let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
            let mut j2len: HashMap<usize, usize> = HashMap::new();
            for (i, c) in a.iter().enumerate().take(ahi).skip(alo) {
                let mut newj2len = HashMap::new();
                for &j in b2j.get(c).map_or(&[][..], |js| js.as_slice()) {
                    if j < blo {
                        continue;
                    }
                    if j >= bhi {
                        break;
                    }
                    let k = j2len.get(&j).copied().unwrap_or(0) + 1;
                    newj2len.insert(j + 1, k);
                    if k > bestsize {
                        (besti, bestj, bestsize) = (i + 1 - k, j + 1 - k, k);
                    }
                }
                j2len = newj2len;
            }
            while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
                (besti, bestj, bestsize) = (besti - 1, bestj - 1, bestsize + 1);
            }
            while besti + bestsize < ahi
                && bestj + bestsize < bhi
                && a[besti + bestsize] == b[bestj + bestsize]
            {
                bestsize += 1;
            }
            if bestsize > 0 {
                matches += bestsize;
                if alo < besti && blo < bestj {
                    queue.push((alo, besti, blo, bestj));
                }
                if besti + bestsize < ahi && bestj + bestsize < bhi {
                    queue.push((besti + bestsize, ahi, bestj + bestsize, bhi));
                }
            }
        }
        calculate_ratio(matches, a.len() + b.len())
    }

    /// Random texts and edited copies of them (some 200 long or more, so autojunk applies, some
    /// with non-ASCII elements): the ratio equals plain difflib's to the bit, and `similar`
    /// decides `ratio ≥ θ` exactly, at fixed thresholds and right at and above each ratio, which
    /// the length bound, the multiset bound, the early stops and the full search each settle.
    #[test]
    fn similar_decides_as_the_plain_ratio() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut scratch = Scratch::default();
        let (mut above, mut below) = (0, 0);
        for round in 0..3000 {
            let alphabet: Vec<char> = match round % 3 {
                0 => "ab c".chars().collect(),
                1 => "abcdefgh ijk.,\n".chars().collect(),
                _ => "xy z√é".chars().collect(),
            };
            let len = [next(12), next(150), 150 + next(300)][round % 3];
            let a: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            // An edited copy: each element kept, dropped, replaced or followed by another.
            let mut b = String::new();
            let edits = 1 + next(30);
            for c in a.chars() {
                match next(100) {
                    x if x < edits / 3 => {}
                    x if x < 2 * edits / 3 => b.push(alphabet[next(alphabet.len())]),
                    x if x < edits => {
                        b.push(c);
                        b.push(alphabet[next(alphabet.len())]);
                    }
                    _ => b.push(c),
                }
            }
            let (a, b) = if next(4) == 0 { (b, a) } else { (a, b) };
            let (text, matcher) = (Text::new(&a), Matcher::new(&b));
            let r = plain_ratio(&a, &b);
            assert_eq!(matcher.ratio(&text), r, "{a:?} {b:?}");
            let up = f64::from_bits(r.to_bits() + 1);
            for t in [0.1, 0.5, 0.8, 0.9, 0.95, r, up] {
                let expected = r >= t;
                assert_eq!(
                    similar(&text, &matcher, t, &mut scratch),
                    expected,
                    "{a:?} {b:?} {t}"
                );
                if expected {
                    above += 1;
                } else {
                    below += 1;
                }
            }
        }
        assert!(above > 3000 && below > 3000, "{above} {below}");
    }

    #[test]
    fn bounds_settle_before_the_search() {
        let mut scratch = Scratch::default();
        // Lengths: 2·3/13 < 0.5 whatever the order.
        assert!(!similar(
            &Text::new("abc"),
            &Matcher::new("abcdefghij"),
            0.5,
            &mut scratch
        ));
        // Same elements, reversed: the multiset bound passes (1.0), the ratio is 2·1/6.
        let (a, m) = (Text::new("abc"), Matcher::new("cba"));
        assert_eq!(m.ratio(&a), 1.0 / 3.0);
        assert!(similar(&a, &m, 1.0 / 3.0, &mut scratch));
        assert!(!similar(&a, &m, 0.34, &mut scratch));
        assert!(similar(
            &Text::new(""),
            &Matcher::new(""),
            0.99,
            &mut scratch
        ));
    }
}
