//! Identities of units and trajectories, and the table of every one seen.
//!
//! The assembler keeps each unit and trajectory it has seen (to catch a closed unit whose rows
//! come back, and a trajectory in two groups) under a 128-bit identity, a few bytes however long
//! the id. A log of single-row groups makes those tables large (1M groups: ~100 MB) and looks up
//! a new entry of each on every row, which misses the cache every time. [`IdTable`] is an
//! open-addressing table whose slot for an identity is known before it is read, so the assembler
//! asks for the slots of the rows ahead ([`IdTable::prefetch`]) while it places the current one,
//! and the misses overlap instead of adding up.

/// A 128-bit identity of a unit or trajectory key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct Id(u64, u64);

/// The identity of the id `name` in `iteration` (a group's or a trajectory's; `""` for a unit
/// that is an iteration or the whole input): xxh3's 128-bit hash of the name seeded with the
/// iteration, one pass over its bytes. Without an iteration the seed is 0 and the first half is
/// flipped, so that those rows are not iteration 0's.
pub(crate) fn id(iteration: Option<i64>, name: &str) -> Id {
    let (seed, flip) = match iteration {
        Some(iteration) => (iteration as u64, 0),
        None => (0, u64::MAX),
    };
    let hash = xxhash_rust::xxh3::xxh3_128_with_seed(name.as_bytes(), seed);
    Id((hash >> 64) as u64 ^ flip, hash as u64)
}

/// Every identity seen, with a value each, kept in the order they came ([`IdTable::insert_at`]
/// appends). A look-up goes through an index of one word a slot, probed linearly from the
/// identity's first half (already a hash): a word holds the entry's number beside a fingerprint
/// of the identity, so a probe compares the whole identity only where the fingerprint matches.
/// At most three quarters full. The index is all that a look-up of an identity not seen reads:
/// 8 bytes a slot (16 MiB for 1M identities), where slots that held the identity beside its value
/// took 24–48 bytes and filled the TLB three times as fast.
pub(crate) struct IdTable<V> {
    /// 0 for a free slot, else [`FINGERPRINT`] bits of the identity's second half above the
    /// entry's number + 1 (up to 2⁴⁰).
    index: Vec<u64>,
    entries: Vec<(Id, V)>,
}

/// The bits of an index word that hold a fingerprint.
const FINGERPRINT: u64 = !0 << 40;

/// Where an identity is in a table, or where it would go: a slot of the index.
pub(crate) enum Probe {
    Found(usize),
    Vacant(usize),
}

impl<V: Copy> IdTable<V> {
    pub fn new() -> Self {
        IdTable {
            index: crate::zeroed_pages::written_zeros(16),
            entries: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    fn fingerprint(id: Id) -> u64 {
        id.1 & FINGERPRINT
    }

    /// The entry an index word numbers.
    fn entry(word: u64) -> usize {
        (word & !FINGERPRINT) as usize - 1
    }

    pub fn find(&self, id: Id) -> Probe {
        let (mask, fingerprint) = (self.mask(), Self::fingerprint(id));
        let mut at = id.0 as usize & mask;
        loop {
            match self.index[at] {
                0 => return Probe::Vacant(at),
                word if word & FINGERPRINT == fingerprint
                    && self.entries[Self::entry(word)].0 == id =>
                {
                    return Probe::Found(at)
                }
                _ => at = (at + 1) & mask,
            }
        }
    }

    pub fn get(&self, id: Id) -> Option<&V> {
        match self.find(id) {
            Probe::Found(at) => Some(self.value(at)),
            Probe::Vacant(_) => None,
        }
    }

    pub fn value(&self, at: usize) -> &V {
        &self.entries[Self::entry(self.index[at])].1
    }

    /// The number of the entry found at slot `at`: entries are numbered in the order they came.
    pub fn number(&self, at: usize) -> usize {
        Self::entry(self.index[at])
    }

    /// Puts `id` in the vacant slot `at` that [`IdTable::find`] gave (nothing changed since);
    /// returns its number.
    pub fn insert_at(&mut self, at: usize, id: Id, value: V) -> usize {
        debug_assert!(self.index[at] == 0);
        self.entries.push((id, value));
        self.index[at] = Self::fingerprint(id) | self.entries.len() as u64;
        if !Self::fits(self.entries.len(), self.index.len()) {
            self.resize(2 * self.index.len());
        }
        self.entries.len() - 1
    }

    pub fn insert(&mut self, id: Id, value: V) {
        match self.find(id) {
            Probe::Found(at) => {
                let entry = Self::entry(self.index[at]);
                self.entries[entry].1 = value;
            }
            Probe::Vacant(at) => {
                self.insert_at(at, id, value);
            }
        }
    }

    fn fits(len: usize, slots: usize) -> bool {
        4 * len <= 3 * slots
    }

    /// Room for `additional` more identities without growing.
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
        let len = self.entries.len() + additional;
        let mut slots = self.index.len();
        while !Self::fits(len, slots) {
            slots *= 2;
        }
        if slots > self.index.len() {
            self.resize(slots);
        }
    }

    fn resize(&mut self, slots: usize) {
        self.index = crate::zeroed_pages::written_zeros(slots);
        let mask = self.mask();
        for (number, &(id, _)) in self.entries.iter().enumerate() {
            let mut at = id.0 as usize & mask;
            while self.index[at] != 0 {
                at = (at + 1) & mask;
            }
            self.index[at] = Self::fingerprint(id) | (number + 1) as u64;
        }
    }

    /// Asks the processor for `id`'s slot now, so that a look-up soon after finds it in cache.
    pub fn prefetch(&self, id: Id) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let word = &self.index[id.0 as usize & self.mask()];
            // SAFETY: prefetching is a hint that never faults, whatever the address.
            unsafe { _mm_prefetch(word as *const u64 as *const i8, _MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_table_holds_what_a_map_holds_through_growth() {
        let mut table: IdTable<u32> = IdTable::new();
        let mut map = HashMap::new();
        for i in 0..50_000u32 {
            // Some keys come twice (a second value replaces the first); some share the first
            // half of their identity, so they collide on every probe.
            let key = if i % 7 == 0 {
                Id(42, i as u64 + 1)
            } else {
                id(Some((i % 40_000) as i64), "g")
            };
            table.insert(key, i);
            map.insert(key, i);
            assert_eq!(table.len(), map.len());
        }
        for (key, value) in &map {
            assert_eq!(table.get(*key), Some(value));
        }
        assert_eq!(table.get(id(None, "never inserted")), None);
        assert!(4 * table.len() <= 3 * table.index.len());
    }

    #[test]
    fn find_then_insert_at_is_insert_and_reserve_keeps_everything() {
        let mut table: IdTable<u64> = IdTable::new();
        for i in 0..1000u64 {
            let key = id(None, &i.to_string());
            match table.find(key) {
                Probe::Vacant(at) => assert_eq!(table.insert_at(at, key, i * 3), i as usize),
                Probe::Found(_) => panic!("{i} was not inserted yet"),
            }
            table.prefetch(key);
        }
        table.reserve(100_000);
        let slots = table.index.len();
        assert!(
            4 * 101_000 <= 3 * slots && 4 * 101_000 > 3 * slots / 2,
            "{slots} slots"
        );
        for i in 0..1000u64 {
            match table.find(id(None, &i.to_string())) {
                Probe::Found(at) => {
                    assert_eq!(*table.value(at), i * 3);
                    assert_eq!(table.number(at), i as usize);
                }
                Probe::Vacant(_) => panic!("{i} went missing"),
            }
        }
    }

    #[test]
    fn identities_differ_where_keys_do() {
        let keys = [
            (None, ""),
            (Some(0), ""),
            (Some(-1), ""),
            (None, "g"),
            (Some(0), "g"),
            (Some(1), "g"),
            (Some(0), "g\0"),
            (Some(0), "h"),
        ];
        let ids: std::collections::HashSet<Id> =
            keys.iter().map(|&(it, name)| id(it, name)).collect();
        assert_eq!(ids.len(), keys.len());
        assert_eq!(id(Some(7), "traj-3"), id(Some(7), &String::from("traj-3")));
    }
}
