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

/// The name of `names` closest to `name` by difflib's ratio, from 0.6 as Python's
/// `get_close_matches`: the "did you mean" of every message about a name credit does not know (a
/// `--set` key, a method, a mapped column), so that they all suggest alike.
pub fn closest<'a>(name: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let matcher = Matcher::new(Text::new(name));
    names
        .into_iter()
        .map(|candidate| (matcher.ratio(&Text::new(candidate)), candidate))
        .filter(|(ratio, _)| *ratio >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// `; did you mean `<prefix><closest>`?`, the hint that ends such a message, or nothing when no
/// name is close ([`closest`]).
pub fn did_you_mean<'a>(
    name: &str,
    names: impl IntoIterator<Item = &'a str>,
    prefix: &str,
) -> String {
    closest(name, names).map_or(String::new(), |near| {
        format!("; did you mean `{prefix}{near}`?")
    })
}

/// A text as difflib sees it: its code points, and where each distinct one occurs.
pub struct Text {
    elements: Elements,
    /// Each distinct element, ascending, with its range in `positions`.
    histogram: Vec<(char, u32, u32)>,
    /// Positions of each element in turn, ascending within an element. Placed when first asked
    /// for where the text is ASCII: only to mark the rows of a comparison element by element,
    /// where they are not marked from its bytes ([`mark_rows`]).
    positions: std::cell::OnceCell<Vec<u32>>,
    /// For ASCII text, where each element's positions start (element 128: the end): its range
    /// without a search, and the multiset intersection of two such texts in one pass.
    ascii_starts: Option<Box<[u32; 129]>>,
    /// For ASCII text shorter than [`SHORT`], each element's count: two such texts' multiset
    /// intersection in eight-lane minima.
    short_counts: Option<Box<[i16; 128]>>,
}

/// Texts shorter than this count their ASCII elements in 16 bits.
const SHORT: usize = 1 << 15;

/// A text's elements, a byte each where it is ASCII: a comparison reads a quarter of the memory.
enum Elements {
    /// The bytes of an ASCII text and [`BYTES_PAD`] zeros: read 64 at a time.
    Ascii(Box<[u8]>),
    Wide(Vec<char>),
}

/// Zeros after an ASCII text's bytes, so that its last 64 bytes can be read whole.
const BYTES_PAD: usize = 64;

impl Text {
    pub fn new(text: &str) -> Self {
        // Elements counted from the bytes of ASCII text (observations mostly are, and every
        // distinct one is prepared), its positions placed later by a counting sort if asked
        // for; otherwise positions grouped now by a sort of (element, position).
        let positions = std::cell::OnceCell::new();
        let mut histogram = Vec::new();
        let (mut ascii_starts, mut short_counts) = (None, None);
        let elements = if text.is_ascii() {
            // Counted from the bytes, through a table a byte indexes without a check.
            let mut counts = [0u32; 256];
            for &c in text.as_bytes() {
                counts[c as usize] += 1;
            }
            let mut starts = [0u32; 129];
            for c in 0..128 {
                if counts[c] > 0 {
                    histogram.push((c as u8 as char, starts[c], starts[c] + counts[c]));
                }
                starts[c + 1] = starts[c] + counts[c];
            }
            ascii_starts = Some(Box::new(starts));
            if text.len() < SHORT {
                short_counts = Some(Box::new(std::array::from_fn(|c| counts[c] as i16)));
            }
            let mut padded = Vec::with_capacity(text.len() + BYTES_PAD);
            padded.extend_from_slice(text.as_bytes());
            padded.resize(text.len() + BYTES_PAD, 0);
            Elements::Ascii(padded.into_boxed_slice())
        } else {
            let chars: Vec<char> = text.chars().collect();
            let mut placed = vec![0u32; chars.len()];
            let mut sorted: Vec<(char, u32)> = chars
                .iter()
                .enumerate()
                .map(|(i, &c)| (c, i as u32))
                .collect();
            sorted.sort_unstable();
            for (k, &(c, i)) in sorted.iter().enumerate() {
                placed[k] = i;
                match histogram.last_mut() {
                    Some((last, _, to)) if *last == c => *to += 1,
                    _ => histogram.push((c, k as u32, k as u32 + 1)),
                }
            }
            let _ = positions.set(placed);
            Elements::Wide(chars)
        };
        Text {
            elements,
            histogram,
            positions,
            ascii_starts,
            short_counts,
        }
    }

    /// Each element's positions in turn, placed from the bytes of an ASCII text (a counting
    /// sort through the starts) the first time they are asked for.
    fn positions(&self) -> &[u32] {
        self.positions.get_or_init(|| {
            let (Some(starts), Some(bytes)) = (&self.ascii_starts, self.bytes()) else {
                unreachable!("a text not ASCII is placed when prepared")
            };
            let mut placed = vec![0u32; self.len()];
            let mut next = [0u32; 256];
            next[..128].copy_from_slice(&starts[..128]);
            for (i, &c) in bytes[..self.len()].iter().enumerate() {
                placed[next[c as usize] as usize] = i as u32;
                next[c as usize] += 1;
            }
            placed
        })
    }

    /// Where `element`'s positions are, if it occurs.
    fn find(&self, element: char) -> Option<(u32, u32)> {
        let range = match (&self.ascii_starts, element.is_ascii()) {
            (Some(starts), true) => (starts[element as usize], starts[element as usize + 1]),
            (Some(_), false) => return None,
            (None, _) => {
                let k = (self
                    .histogram
                    .binary_search_by_key(&element, |&(c, _, _)| c))
                .ok()?;
                (self.histogram[k].1, self.histogram[k].2)
            }
        };
        (range.0 < range.1).then_some(range)
    }

    /// The size of the multiset intersection of the two texts (what difflib's `quick_ratio`
    /// counts: an upper bound of the matches).
    fn intersection(&self, other: &Text) -> usize {
        if let (Some(x), Some(y)) = (&self.short_counts, &other.short_counts) {
            // Summed in 16 bits, which vectorises eight lanes wide (SSE2's signed minimum) and
            // cannot overflow: the total is at most the shorter length.
            return (x.iter().zip(y.iter()))
                .fold(0u16, |sum, (p, q)| sum.wrapping_add(*p.min(q) as u16))
                as usize;
        }
        if let (Some(x), Some(y)) = (&self.ascii_starts, &other.ascii_starts) {
            // Summed in u32 (no text is 2³² long), which vectorises without widening.
            return (0..128)
                .map(|c| (x[c + 1] - x[c]).min(y[c + 1] - y[c]))
                .sum::<u32>() as usize;
        }
        let (mut x, mut y) = (
            self.histogram.iter().peekable(),
            other.histogram.iter().peekable(),
        );
        let mut common = 0;
        while let (Some(&&(cx, fx, tx)), Some(&&(cy, fy, ty))) = (x.peek(), y.peek()) {
            match cx.cmp(&cy) {
                std::cmp::Ordering::Less => {
                    x.next();
                }
                std::cmp::Ordering::Greater => {
                    y.next();
                }
                std::cmp::Ordering::Equal => {
                    common += (tx - fx).min(ty - fy) as usize;
                    x.next();
                    y.next();
                }
            }
        }
        common
    }

    fn len(&self) -> usize {
        match &self.elements {
            Elements::Ascii(bytes) => bytes.len() - BYTES_PAD,
            Elements::Wide(chars) => chars.len(),
        }
    }

    /// The bytes of an ASCII text, then [`BYTES_PAD`] zeros.
    fn bytes(&self) -> Option<&[u8]> {
        match &self.elements {
            Elements::Ascii(bytes) => Some(bytes),
            Elements::Wide(_) => None,
        }
    }

    fn at(&self, (from, to): (u32, u32)) -> &[u32] {
        &self.positions()[from as usize..to as usize]
    }
}

/// A non-popular element of `b`: its ranges in [`Matcher::positions`] and
/// [`Matcher::pair_end_positions`].
#[derive(Clone, Copy)]
struct NonPopular {
    element: char,
    positions: (u32, u32),
    pair_ends: (u32, u32),
}

/// A prepared `b` (the second sequence) to compare many `a`s against.
pub struct Matcher {
    b: Text,
    /// Each element of `b` where it is non-popular (in difflib's `b2j`), [`NONE`] where popular:
    /// one comparison tells whether a cell pairs a non-popular element.
    keys: Vec<u32>,
    /// The positions of each non-popular element of `b` in turn, ascending within an element.
    positions: Vec<u32>,
    /// Each non-popular element of `b`, ascending.
    non_popular: Vec<NonPopular>,
    /// For ASCII `b`, each element's place in `non_popular` ([`POPULAR`] for one that is not
    /// there), found without a search.
    ascii_non_popular: Option<Box<[u8; 128]>>,
    /// For ASCII `b`, its non-popular elements as a table of 16 bytes: bit `h` of entry `l` for
    /// the element `16h + l` ([`mark_rows`]).
    ascii_nibbles: Option<[u8; 16]>,
    /// The positions `j` of `b` where `b[j - 1]` and `b[j]` are both non-popular (the only ones
    /// where a run of two or more cells can end), each after `b[j - 1]` (read beside it, not
    /// looked up), grouped by `b[j]`, ascending within an element.
    pair_end_positions: Vec<(u32, u32)>,
    /// The most non-popular elements of `b` in a row: no run of cells is longer.
    longest_key_run: usize,
}

/// Sets the keys of the non-popular elements among `elements` (`place` gives an element's place
/// in [`Matcher::non_popular`], `usize::MAX` for a popular one) and places their positions, in
/// one pass: `next` holds where each element's next position goes.
fn place_non_popular<E: Element>(
    elements: &[E],
    place: impl Fn(u32) -> usize,
    (keys, positions, next): &mut (&mut [u32], &mut [u32], &mut [u32]),
) {
    for (j, &element) in elements.iter().enumerate() {
        let c = element.into();
        let k = place(c);
        if k != usize::MAX {
            keys[j] = c;
            positions[next[k] as usize] = j as u32;
            next[k] += 1;
        }
    }
}

/// Not a place in [`Matcher::non_popular`]: an ASCII text has at most 128 elements.
const POPULAR: u8 = u8::MAX;

/// No element: above every code point.
const NONE: u32 = u32::MAX;

fn calculate_ratio(matches: usize, length: usize) -> f64 {
    if length > 0 {
        2.0 * matches as f64 / length as f64
    } else {
        1.0
    }
}

/// Ranges `alo..ahi` of `a` and `blo..bhi` of `b`.
type Range = (usize, usize, usize, usize);

/// The length of a range's shorter side: the most matches it can hold.
fn shorter((alo, ahi, blo, bhi): Range) -> usize {
    (ahi - alo).min(bhi - blo)
}

/// Buffers reused across comparisons, so that a comparison allocates nothing once warm.
#[derive(Default)]
pub struct Scratch {
    /// The rows of difflib's table that have cells, a bit each: the positions of `a` whose
    /// element is a non-popular one of `b`.
    marks: Vec<u64>,
    /// For the range searched, the rows that end runs of two rows or more within it, each with
    /// the length of its run ([`Matcher::longest_run`]).
    run_ends: Vec<(u32, u32)>,
    /// Ranges still to search.
    queue: Vec<Range>,
    /// [`fewest_matches`] of each total length so far, at the threshold of `needs_at` (its
    /// bits): a group's comparisons share one threshold and few lengths.
    needs: Vec<Option<u32>>,
    needs_at: u64,
}

impl Scratch {
    /// [`fewest_matches`], remembered for totals below [`REMEMBERED_TOTALS`].
    fn fewest_matches(&mut self, total: usize, threshold: f64) -> usize {
        if total >= REMEMBERED_TOTALS {
            return fewest_matches(total, threshold);
        }
        if self.needs_at != threshold.to_bits() {
            self.needs.clear();
            self.needs_at = threshold.to_bits();
        }
        if total >= self.needs.len() {
            self.needs.resize(total + 1, None);
        }
        *self.needs[total].get_or_insert_with(|| fewest_matches(total, threshold) as u32) as usize
    }
}

/// Totals of two lengths whose fewest matches [`Scratch`] remembers (observations run to a few
/// thousand code points).
const REMEMBERED_TOTALS: usize = 1 << 13;

impl Matcher {
    pub fn new(b: Text) -> Self {
        let n = b.len();
        let most = if n >= 200 {
            (n / 100 + 1) as u32
        } else {
            u32::MAX
        };
        // Each non-popular element, ascending, with its range in `positions`.
        let mut non_popular = Vec::new();
        let mut placed = 0;
        for &(c, from, to) in b
            .histogram
            .iter()
            .filter(|&&(_, from, to)| to - from <= most)
        {
            non_popular.push(NonPopular {
                element: c,
                positions: (placed, placed + to - from),
                pair_ends: (0, 0),
            });
            placed += to - from;
        }
        let ascii_non_popular = b.ascii_starts.as_ref().map(|_| {
            let mut places = Box::new([POPULAR; 128]);
            for (k, np) in non_popular.iter().enumerate() {
                places[np.element as usize] = k as u8;
            }
            places
        });
        // The keys and the non-popular elements' positions, in one pass over `b`.
        let mut keys = vec![NONE; n];
        let mut positions = vec![0; placed as usize];
        let mut next: Vec<u32> = non_popular.iter().map(|np| np.positions.0).collect();
        let mut placing = (&mut keys[..], &mut positions[..], &mut next[..]);
        let searched = |c: u32| {
            (non_popular.binary_search_by_key(&c, |np| np.element as u32)).unwrap_or(usize::MAX)
        };
        match (&b.elements, &ascii_non_popular) {
            (Elements::Ascii(bytes), Some(places)) => place_non_popular(
                &bytes[..n],
                |c| match places[c as usize] {
                    POPULAR => usize::MAX,
                    k => k as usize,
                },
                &mut placing,
            ),
            (Elements::Ascii(bytes), None) => {
                place_non_popular(&bytes[..n], searched, &mut placing)
            }
            (Elements::Wide(chars), _) => place_non_popular(chars, searched, &mut placing),
        }
        // Every key is set before the pair ends, which read the key before each position.
        let mut pair_end_positions = Vec::new();
        for np in &mut non_popular {
            let start = pair_end_positions.len() as u32;
            pair_end_positions.extend(
                (positions[np.positions.0 as usize..np.positions.1 as usize].iter())
                    .filter(|&&j| j > 0 && keys[j as usize - 1] != NONE)
                    .map(|&j| (keys[j as usize - 1], j)),
            );
            np.pair_ends = (start, pair_end_positions.len() as u32);
        }
        let ascii_nibbles = b.ascii_starts.as_ref().map(|_| {
            let mut nibbles = [0u8; 16];
            for np in &non_popular {
                nibbles[np.element as usize & 15] |= 1 << (np.element as u32 >> 4);
            }
            nibbles
        });
        // Without a branch per element (the split of the keys at popular ones costs more).
        let (_, longest_key_run) = keys.iter().fold((0, 0), |(run, longest), &key| {
            let run = if key == NONE { 0 } else { run + 1 };
            (run, longest.max(run))
        });
        Matcher {
            b,
            keys,
            positions,
            longest_key_run,
            non_popular,
            ascii_non_popular,
            ascii_nibbles,
            pair_end_positions,
        }
    }

    /// Marks in `s` the rows of `a` that have cells: from the bytes of ASCII texts, 64 at a
    /// time, or element by element.
    fn mark(&self, a: &Text, s: &mut Scratch) {
        s.marks.clear();
        s.marks.resize(a.len().div_ceil(64), 0);
        let marked = match (a.bytes(), &self.ascii_nibbles) {
            (Some(bytes), Some(nibbles)) => mark_rows(bytes, a.len(), nibbles, &mut s.marks),
            _ => false,
        };
        if !marked {
            self.mark_by_element(a, &mut s.marks);
        }
    }

    /// Marks the positions of `a` whose element is a non-popular one of `b`, element by element.
    fn mark_by_element(&self, a: &Text, marks: &mut [u64]) {
        for &NonPopular { element: c, .. } in &self.non_popular {
            if let Some(pa) = a.find(c) {
                for &i in a.at(pa) {
                    marks[i as usize / 64] |= 1 << (i % 64);
                }
            }
        }
    }

    /// The entry of `non_popular` for an element that is in it.
    fn non_popular(&self, c: u32) -> NonPopular {
        let place = match &self.ascii_non_popular {
            Some(places) => places[c as usize] as usize,
            None => (self.non_popular).partition_point(|np| (np.element as u32) < c),
        };
        self.non_popular[place]
    }

    /// `difflib.SequenceMatcher(None, a, b).ratio()`.
    pub fn ratio(&self, a: &Text) -> f64 {
        let mut s = Scratch::default();
        self.mark(a, &mut s);
        let (matched, _) = self.match_blocks(a, &mut s, |_, _| false);
        calculate_ratio(matched, a.len() + self.b.len())
    }

    /// Adds up the sizes of difflib's matching blocks (`get_matching_blocks`), `s` marked
    /// ([`Matcher::mark`]), until `stop(matched, open)` holds, `open` an upper bound of what
    /// the blocks not found yet add: the [`shorter`] side of each range still to search. Gives
    /// (matched, open); open is 0 when all were found.
    fn match_blocks(
        &self,
        a: &Text,
        s: &mut Scratch,
        mut stop: impl FnMut(usize, usize) -> bool,
    ) -> (usize, usize) {
        let (la, lb) = (a.len(), self.b.len());
        s.queue.clear();
        if la > 0 && lb > 0 {
            s.queue.push((0, la, 0, lb));
        }
        let (mut matched, mut open) = (0, la.min(lb));
        // The blocks' total does not depend on the order ranges are searched in.
        while let Some(range @ (alo, ahi, blo, bhi)) = s.queue.pop() {
            open -= shorter(range);
            let (i, j, k) = self.find_longest_match(a, &s.marks, &mut s.run_ends, range);
            if k > 0 {
                matched += k;
                // The side that can add more is searched first (pushed last): where the total
                // falls short, that settles it sooner (a tenth fewer searches on observations).
                let (left, right) = ((alo, i, blo, j), (i + k, ahi, j + k, bhi));
                let sides = match shorter(left) > shorter(right) {
                    true => [right, left],
                    false => [left, right],
                };
                for side @ (lo, hi, blo, bhi) in sides {
                    if lo >= hi || blo >= bhi {
                        continue;
                    }
                    if find_marked(&s.marks, lo, hi, Some).is_none() {
                        // No rows: difflib's block is the common start, and the range after it
                        // has none either and starts unequal.
                        matched += shared_start(a, &self.b, lo..hi, blo..bhi);
                        continue;
                    }
                    s.queue.push(side);
                    open += shorter(side);
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
    /// longest run ([`Matcher::longest_run`]).
    fn find_longest_match(
        &self,
        a: &Text,
        marks: &[u64],
        run_ends: &mut Vec<(u32, u32)>,
        range @ (alo, ahi, blo, bhi): Range,
    ) -> (usize, usize, usize) {
        let (best, endi, endj) = match &a.elements {
            Elements::Ascii(bytes) => self.longest_run(bytes, marks, run_ends, range),
            Elements::Wide(chars) => self.longest_run(chars, marks, run_ends, range),
        };
        let (besti, bestj, bestsize) = match best {
            0 => (alo, blo, 0),
            k => (endi + 1 - k, endj + 1 - k, k),
        };
        let back = shared_end(a, &self.b, alo..besti, blo..bestj);
        let (besti, bestj) = (besti - back, bestj - back);
        let (after_a, after_b) = (besti + back + bestsize, bestj + back + bestsize);
        let bestsize = back + bestsize + shared_start(a, &self.b, after_a..ahi, after_b..bhi);
        (besti, bestj, bestsize)
    }

    /// The longest run of cells in the range (not empty), earliest in (i, j) order, of `a`'s
    /// elements `ac` (see [`Matcher::find_longest_match`]): its length (0 where the range has no
    /// cell) and its last cell.
    ///
    /// A run of `t` cells ends at a row that ends a run of `t` rows or more, in `a`, within the
    /// range (`run_ends`, for t ≥ 2: few, as most non-popular elements stand between popular
    /// ones), and no run is longer than the longest of those nor than
    /// [`Matcher::longest_key_run`]. Searched from that length down, the first length with a run
    /// in range is the longest, and the first run found, in (i, j) order, the earliest; runs of
    /// one cell are the first row in range with an element in `b`'s range.
    fn longest_run<E: Element>(
        &self,
        ac: &[E],
        marks: &[u64],
        run_ends: &mut Vec<(u32, u32)>,
        (alo, ahi, blo, bhi): Range,
    ) -> (usize, usize, usize) {
        let keys = &self.keys;
        // Whether (i, j) is a cell of difflib's table: a[i] equals a non-popular b[j].
        let cell = |i: usize, j: usize| ac[i].into() == keys[j];
        let is_row = |i: usize| marks[i / 64] >> (i % 64) & 1 == 1;
        run_ends.clear();
        let mut longest = 1;
        if self.longest_key_run >= 2 {
            // The rows whose row before is one too (within the range), each run's length counted
            // back as far as a run of cells could be long.
            let mut carry = 0;
            for (w, rows) in marked_words(marks, alo, ahi) {
                let mut ends = rows & (rows << 1 | carry);
                carry = rows >> 63;
                while ends != 0 {
                    let i = w * 64 + ends.trailing_zeros() as usize;
                    ends &= ends - 1;
                    let mut run = 2;
                    while run < self.longest_key_run && i >= alo + run && is_row(i - run) {
                        run += 1;
                    }
                    longest = longest.max(run);
                    run_ends.push((i as u32, run as u32));
                }
            }
        }
        for t in (2..=longest).rev() {
            for &(i, run) in run_ends.iter() {
                let i = i as usize;
                if (run as usize) < t {
                    continue;
                }
                let before: u32 = ac[i - 1].into();
                let pair_ends = self.non_popular(ac[i].into()).pair_ends;
                let candidates =
                    &self.pair_end_positions[pair_ends.0 as usize..pair_ends.1 as usize];
                // `b`'s pair ends of the element, ascending: the first in range that follows
                // `a[i - 1]` too and runs back `t` cells is the earliest at `i`.
                for &(key_before, j) in candidates {
                    let j = j as usize;
                    if j >= bhi {
                        break;
                    }
                    if key_before == before
                        && j + 1 >= blo + t
                        && (2..t).all(|k| cell(i - k, j - k))
                    {
                        return (t, i, j);
                    }
                }
            }
        }
        let first = find_marked(marks, alo, ahi, |i| {
            let pb = self.non_popular(ac[i].into()).positions;
            let j = within(&self.positions[pb.0 as usize..pb.1 as usize], blo, bhi).first()?;
            Some((i, *j as usize))
        });
        first.map_or((0, alo, blo), |(i, j)| (1, i, j))
    }
}

/// Marks in `marks` the positions of the ASCII text `bytes` (`len` of them, then
/// [`BYTES_PAD`] zeros) whose byte is in the set `nibbles` holds (bit `h` of entry `l`: byte
/// `16h + l`), where the processor has AVX2: a table look-up by each byte's low nibble, ANDed
/// with the bit of its high one, 32 bytes an instruction. Whether it marked them (otherwise
/// the caller marks them element by element).
fn mark_rows(bytes: &[u8], len: usize, nibbles: &[u8; 16], marks: &mut [u64]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        assert!(bytes.len() >= marks.len() * 64 && len <= marks.len() * 64);
        // SAFETY: the CPU supports AVX2 (checked just above), and every 64 bytes read are in
        // `bytes` (asserted).
        unsafe { mark_rows_avx2(bytes, nibbles, marks) };
        if !len.is_multiple_of(64) {
            // The padding's zeros are not positions, whatever the set.
            if let Some(last) = marks.last_mut() {
                *last &= (1u64 << (len % 64)) - 1;
            }
        }
        return true;
    }
    let _ = (bytes, len, nibbles, marks);
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn mark_rows_avx2(bytes: &[u8], nibbles: &[u8; 16], marks: &mut [u64]) {
    use std::arch::x86_64::*;
    let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(nibbles.as_ptr().cast()));
    // The bit of each high nibble (ASCII's are 0 to 7), for both 16-byte lanes.
    let bit = _mm256_setr_epi8(
        1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, -128, 0, 0,
        0, 0, 0, 0, 0, 0,
    );
    let low = _mm256_set1_epi8(0x0f);
    for (w, word) in marks.iter_mut().enumerate() {
        let mut bits = 0u64;
        for half in 0..2 {
            let at = w * 64 + half * 32;
            let v = _mm256_loadu_si256(bytes.as_ptr().add(at).cast());
            let lo = _mm256_and_si256(v, low);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
            let hit =
                _mm256_and_si256(_mm256_shuffle_epi8(table, lo), _mm256_shuffle_epi8(bit, hi));
            let miss = _mm256_movemask_epi8(_mm256_cmpeq_epi8(hit, _mm256_setzero_si256())) as u32;
            bits |= ((!miss) as u64) << (32 * half);
        }
        *word = bits;
    }
}

/// How many elements `a[x]` and `b[y]` share at their start: compared 16 bytes at a time where both
/// texts are ASCII.
fn shared_start(a: &Text, b: &Text, x: std::ops::Range<usize>, y: std::ops::Range<usize>) -> usize {
    use Elements::{Ascii, Wide};
    match (&a.elements, &b.elements) {
        (Ascii(p), Ascii(q)) => common_prefix_bytes(&p[x], &q[y]),
        (Ascii(p), Wide(q)) => common_prefix(&p[x], &q[y]),
        (Wide(p), Ascii(q)) => common_prefix(&p[x], &q[y]),
        (Wide(p), Wide(q)) => common_prefix(&p[x], &q[y]),
    }
}

/// How many elements `a[x]` and `b[y]` share at their end.
fn shared_end(a: &Text, b: &Text, x: std::ops::Range<usize>, y: std::ops::Range<usize>) -> usize {
    use Elements::{Ascii, Wide};
    match (&a.elements, &b.elements) {
        (Ascii(p), Ascii(q)) => common_suffix_bytes(&p[x], &q[y]),
        (Ascii(p), Wide(q)) => common_suffix(&p[x], &q[y]),
        (Wide(p), Ascii(q)) => common_suffix(&p[x], &q[y]),
        (Wide(p), Wide(q)) => common_suffix(&p[x], &q[y]),
    }
}

/// The bytes `at..at + 16` of `x` as a number whose lowest byte is `x[at]`: compared 16 bytes an
/// instruction.
fn word(x: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(x[at..at + 16].try_into().expect("16 bytes"))
}

/// How many bytes `x` and `y` share at their start, 16 at a time: the first that differs is
/// the lowest set byte of the words' difference.
fn common_prefix_bytes(x: &[u8], y: &[u8]) -> usize {
    let n = x.len().min(y.len());
    let mut at = 0;
    while at + 16 <= n {
        let differ = word(x, at) ^ word(y, at);
        if differ != 0 {
            return at + differ.trailing_zeros() as usize / 8;
        }
        at += 16;
    }
    at + (x[at..n].iter().zip(&y[at..n]))
        .take_while(|(p, q)| p == q)
        .count()
}

/// How many bytes `x` and `y` share at their end, 16 at a time from the end.
fn common_suffix_bytes(x: &[u8], y: &[u8]) -> usize {
    let n = x.len().min(y.len());
    let (x, y) = (&x[x.len() - n..], &y[y.len() - n..]);
    let mut shared = 0;
    while shared + 16 <= n {
        let at = n - shared - 16;
        let differ = word(x, at) ^ word(y, at);
        if differ != 0 {
            return shared + differ.leading_zeros() as usize / 8;
        }
        shared += 16;
    }
    let rest = n - shared;
    shared
        + (x[..rest].iter().rev().zip(y[..rest].iter().rev()))
            .take_while(|(p, q)| p == q)
            .count()
}

/// Elements of two texts, compared as code points (one text may be ASCII and the other not).
trait Element: Copy + Into<u32> {}
impl Element for u8 {}
impl Element for char {}

/// How many elements `x` and `y` share at their start, compared a chunk at a time: blocks run
/// hundreds of elements.
fn common_prefix<X: Element, Y: Element>(x: &[X], y: &[Y]) -> usize {
    let whole = x
        .chunks_exact(16)
        .zip(y.chunks_exact(16))
        .take_while(|(p, q)| same(p, q))
        .count()
        * 16;
    whole
        + x[whole..]
            .iter()
            .zip(&y[whole..])
            .take_while(|(p, q)| (**p).into() == (**q).into())
            .count()
}

/// Whether two chunks are equal, compared without a branch per element (vectorised, where a
/// slice comparison calls `memcmp` for each chunk).
fn same<X: Element, Y: Element>(p: &[X], q: &[Y]) -> bool {
    p.iter()
        .zip(q)
        .fold(0, |differ, (x, y)| differ | ((*x).into() ^ (*y).into()))
        == 0
}

/// How many elements `x` and `y` share at their end.
fn common_suffix<X: Element, Y: Element>(x: &[X], y: &[Y]) -> usize {
    let whole = x
        .rchunks_exact(16)
        .zip(y.rchunks_exact(16))
        .take_while(|(p, q)| same(p, q))
        .count()
        * 16;
    whole
        + x[..x.len() - whole]
            .iter()
            .rev()
            .zip(y[..y.len() - whole].iter().rev())
            .take_while(|(p, q)| (**p).into() == (**q).into())
            .count()
}

/// The words of `marks` (a bit each) that hold positions in `lo..hi` (not empty), each with its
/// place and only those positions' bits.
fn marked_words(marks: &[u64], lo: usize, hi: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
    let (first, last) = (lo / 64, (hi - 1) / 64);
    (first..=last).map(move |w| {
        let mut bits = marks[w];
        if w == first {
            bits &= !0 << (lo % 64);
        }
        if w == last {
            bits &= !0 >> (63 - (hi - 1) % 64);
        }
        (w, bits)
    })
}

/// The first position marked in `marks` (a bit each) within `lo..hi` (not empty) for which
/// `found` gives a value, and that value; positions in ascending order.
fn find_marked<T>(
    marks: &[u64],
    lo: usize,
    hi: usize,
    mut found: impl FnMut(usize) -> Option<T>,
) -> Option<T> {
    for (w, mut bits) in marked_words(marks, lo, hi) {
        while bits != 0 {
            if let Some(value) = found(w * 64 + bits.trailing_zeros() as usize) {
                return Some(value);
            }
            bits &= bits - 1;
        }
    }
    None
}

/// The part of ascending `positions` in `lo..hi`, searched for only where it is neither none
/// nor all of them: a range of `b` mostly holds all or none of a non-popular element's few
/// positions.
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
    let need = scratch.fewest_matches(a.len() + b.b.len(), threshold);
    a.len().min(b.b.len()) >= need && a.intersection(&b.b) >= need && {
        b.mark(a, scratch);
        b.match_blocks(a, scratch, |matched, open| {
            matched >= need || matched + open < need
        })
        .0 >= need
    }
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
        Matcher::new(Text::new(b)).ratio(&Text::new(a))
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

    /// Draws below `n` from a xorshift generator seeded so.
    fn xorshift(mut state: u64) -> impl FnMut(usize) -> usize {
        move |n| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        }
    }

    /// Random texts and edited copies of them (some 200 long or more, so autojunk applies, some
    /// with non-ASCII elements): the ratio equals plain difflib's to the bit, and `similar`
    /// decides `ratio ≥ θ` exactly, at fixed thresholds and right at and above each ratio, which
    /// the length bound, the multiset bound, the early stops and the full search each settle. A
    /// scratch kept for each fixed threshold reuses its remembered fewest matches across texts.
    #[test]
    fn similar_decides_as_the_plain_ratio() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut scratch = Scratch::default();
        let mut kept: [Scratch; 5] = Default::default();
        let (mut above, mut below) = (0, 0);
        // Rounds 3 and 4: long texts of a few frequent elements and many rare ones, ASCII and
        // not, so that autojunk leaves some elements popular and others not, and runs of
        // non-popular ones (runs of cells) occur.
        let rare_ascii = "bcdfghjklmnpqrsuvwxyzBCDFGHJKLMNPQRSTVWXYZ0123456789.,;:!?-()";
        let rare_other = "bcdfghjklmnpqrsuvwxyz√éüß中文字αβγδ€£→←0123456789";
        for round in 0..5000 {
            let (frequent, alphabet): (Vec<char>, Vec<char>) = match round % 5 {
                0 => (vec![], "ab c".chars().collect()),
                1 => (vec![], "abcdefgh ijk.,\n".chars().collect()),
                2 => (vec![], "xy z√é".chars().collect()),
                3 => ("etaoi ".chars().collect(), rare_ascii.chars().collect()),
                _ => ("etaoi ".chars().collect(), rare_other.chars().collect()),
            };
            let len = [
                next(12),
                next(150),
                150 + next(300),
                200 + next(600),
                200 + next(600),
            ][round % 5];
            let alphabet: Vec<char> = match frequent.is_empty() {
                true => alphabet,
                // Three in five draws from the frequent few.
                false => (frequent.iter().cycle().take(3 * alphabet.len() / 2))
                    .chain(&alphabet)
                    .copied()
                    .collect(),
            };
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
            let (text, matcher) = (Text::new(&a), Matcher::new(Text::new(&b)));
            let r = plain_ratio(&a, &b);
            assert_eq!(matcher.ratio(&text), r, "{a:?} {b:?}");
            let up = f64::from_bits(r.to_bits() + 1);
            for (k, t) in [0.1, 0.5, 0.8, 0.9, 0.95, r, up].into_iter().enumerate() {
                let expected = r >= t;
                let scratch = kept.get_mut(k).unwrap_or(&mut scratch);
                assert_eq!(
                    similar(&text, &matcher, t, scratch),
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
        assert!(above > 5000 && below > 5000, "{above} {below}");
    }

    /// Rows marked from the bytes (AVX2, where the CPU has it) are those marked element by
    /// element: ASCII texts of every length around a word's 64, with NUL and DEL among their
    /// elements (the bytes' padding is NUL), against representatives of 200 or more elements
    /// (so some are popular) and fewer.
    #[test]
    fn rows_marked_from_bytes_are_rows_marked_by_element() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let alphabet: Vec<char> = "\0\x7f eatoin.,\nbcdfgXYZ019".chars().collect();
        let mut compared = 0;
        for len in (0..200).chain([255, 256, 257, 300, 640]) {
            let a: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            let b: String = (0..[len, 150 + next(400)][next(2)])
                .map(|_| alphabet[next(alphabet.len())])
                .collect();
            let (text, matcher) = (Text::new(&a), Matcher::new(Text::new(&b)));
            let words = text.len().div_ceil(64);
            let (mut from_bytes, mut by_element) = (vec![0; words], vec![0; words]);
            let bytes = text.bytes().unwrap();
            let nibbles = matcher.ascii_nibbles.as_ref().unwrap();
            if mark_rows(bytes, text.len(), nibbles, &mut from_bytes) {
                matcher.mark_by_element(&text, &mut by_element);
                assert_eq!(from_bytes, by_element, "{a:?} {b:?}");
                compared += 1;
            }
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            assert_eq!(compared, 205);
        }
    }

    /// The shared start and end of two byte strings, a word at a time, are those counted element
    /// by element: strings of 0 to 40 bytes that differ at each place in turn, or nowhere.
    #[test]
    fn shared_starts_and_ends_by_the_word_are_counted_by_the_element() {
        let base: Vec<u8> = (0..40u8).map(|k| b'a' + k % 26).collect();
        for n in 0..=40 {
            for other in 0..=n + 2 {
                let x = &base[..n];
                let mut y = base[..other.min(40)].to_vec();
                for differ in (0..y.len()).map(Some).chain([None]) {
                    if let Some(at) = differ {
                        y[at] ^= 0x20;
                    }
                    let chars = |v: &[u8]| v.iter().map(|&b| b as char).collect::<Vec<_>>();
                    let (cx, cy) = (chars(x), chars(&y));
                    assert_eq!(common_prefix_bytes(x, &y), common_prefix(&cx, &cy));
                    assert_eq!(common_suffix_bytes(x, &y), common_suffix(&cx, &cy));
                    if let Some(at) = differ {
                        y[at] ^= 0x20;
                    }
                }
            }
        }
    }

    /// The multiset intersection in 16-bit counts (texts shorter than [`SHORT`]) and in 32-bit
    /// starts (longer ones) is the count of shared elements, element by element.
    #[test]
    fn intersections_count_shared_elements_at_any_length() {
        let mut next = xorshift(0x5851_f42d_4c95_7f2d);
        let alphabet = b"ab c.\n";
        for len in [0, 1, 63, 1000, SHORT - 1, SHORT, SHORT + 1000] {
            let x: String = (0..len).map(|_| alphabet[next(6)] as char).collect();
            let y: String = (0..len / 2 + next(100))
                .map(|_| alphabet[next(6)] as char)
                .collect();
            let count = |t: &str, c: u8| t.bytes().filter(|&b| b == c).count();
            let shared: usize = (alphabet.iter())
                .map(|&c| count(&x, c).min(count(&y, c)))
                .sum();
            let (tx, ty) = (Text::new(&x), Text::new(&y));
            assert_eq!(tx.short_counts.is_some(), len < SHORT);
            assert_eq!(tx.intersection(&ty), shared, "{len}");
            assert_eq!(ty.intersection(&tx), shared, "{len}");
        }
    }

    #[test]
    fn bounds_settle_before_the_search() {
        let mut scratch = Scratch::default();
        // Lengths: 2·3/13 < 0.5 whatever the order.
        assert!(!similar(
            &Text::new("abc"),
            &Matcher::new(Text::new("abcdefghij")),
            0.5,
            &mut scratch
        ));
        // Same elements, reversed: the multiset bound passes (1.0), the ratio is 2·1/6.
        let (a, m) = (Text::new("abc"), Matcher::new(Text::new("cba")));
        assert_eq!(m.ratio(&a), 1.0 / 3.0);
        assert!(similar(&a, &m, 1.0 / 3.0, &mut scratch));
        assert!(!similar(&a, &m, 0.34, &mut scratch));
        assert!(similar(
            &Text::new(""),
            &Matcher::new(Text::new("")),
            0.99,
            &mut scratch
        ));
    }
}
