//! Identities of units and trajectories, and the table of every one seen.
//!
//! The assembler keeps each unit and trajectory it has seen (to catch a closed unit whose rows
//! come back, and a trajectory in two groups) under a 128-bit identity, a few bytes however long
//! the id. A log of single-row groups makes those tables large (1M groups: ~150 MB) and looks up
//! a new entry of each on every row, which misses the cache every time. [`IdTable`] is an
//! open-addressing table whose slot for an identity is known before it is read, so the assembler
//! asks for the slots of the rows ahead ([`IdTable::prefetch`]) while it places the current one,
//! and the misses overlap instead of adding up; a slot holds the identity beside its value, so
//! a look-up or an insert touches one place (a `HashMap` reads its control bytes, then writes
//! the entry elsewhere).

use std::hash::{BuildHasher, Hash};

/// A 128-bit identity of a unit or trajectory key. Never all zeros: that marks a free slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct Id(u64, u64);

const FREE: Id = Id(0, 0);

/// The identity of a key: one fast fixed hasher, twice (the second salted).
pub(crate) fn id<T: Hash>(value: &T) -> Id {
    let state = polars::prelude::PlSeedableRandomStateQuality::fixed();
    let a = state.hash_one(value);
    let b = state.hash_one((0x9e37_79b9_7f4a_7c15_u64, value));
    // The one pair that would read as a free slot (a chance of 2⁻¹²⁸) is moved next to it.
    Id(a, if a == 0 && b == 0 { 1 } else { b })
}

/// Every identity seen, with a value each, in slots probed linearly from the identity's first
/// half (already a hash). At most three quarters full: as much memory as a `HashMap` of the same
/// entries (10M trajectories: 768 MiB), and a probe mostly ends in the cache lines fetched.
pub(crate) struct IdTable<V> {
    slots: Vec<(Id, V)>,
    len: usize,
}

/// Where an identity is in a table, or where it would go.
pub(crate) enum Probe {
    Found(usize),
    Vacant(usize),
}

impl<V: Copy + Default> IdTable<V> {
    pub fn new() -> Self {
        IdTable {
            slots: vec![(FREE, V::default()); 16],
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    pub fn find(&self, id: Id) -> Probe {
        let mask = self.mask();
        let mut at = id.0 as usize & mask;
        loop {
            match self.slots[at].0 {
                k if k == id => return Probe::Found(at),
                FREE => return Probe::Vacant(at),
                _ => at = (at + 1) & mask,
            }
        }
    }

    pub fn get(&self, id: Id) -> Option<&V> {
        match self.find(id) {
            Probe::Found(at) => Some(&self.slots[at].1),
            Probe::Vacant(_) => None,
        }
    }

    pub fn value(&self, at: usize) -> &V {
        &self.slots[at].1
    }

    /// Puts `id` in the vacant slot `at` that [`IdTable::find`] gave (nothing changed since).
    pub fn insert_at(&mut self, at: usize, id: Id, value: V) {
        debug_assert!(self.slots[at].0 == FREE);
        self.slots[at] = (id, value);
        self.len += 1;
        if !Self::fits(self.len, self.slots.len()) {
            self.resize(2 * self.slots.len());
        }
    }

    pub fn insert(&mut self, id: Id, value: V) {
        match self.find(id) {
            Probe::Found(at) => self.slots[at].1 = value,
            Probe::Vacant(at) => self.insert_at(at, id, value),
        }
    }

    fn fits(len: usize, slots: usize) -> bool {
        4 * len <= 3 * slots
    }

    /// Room for `additional` more identities without growing.
    pub fn reserve(&mut self, additional: usize) {
        let len = self.len + additional;
        let mut slots = self.slots.len();
        while !Self::fits(len, slots) {
            slots *= 2;
        }
        if slots > self.slots.len() {
            self.resize(slots);
        }
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![(FREE, V::default()); slots]);
        for (id, value) in old.into_iter().filter(|&(id, _)| id != FREE) {
            if let Probe::Vacant(at) = self.find(id) {
                self.slots[at] = (id, value);
            }
        }
    }

    /// Asks the processor for `id`'s slot now, so that a look-up soon after finds it in cache.
    pub fn prefetch(&self, id: Id) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let slot = &self.slots[id.0 as usize & self.mask()];
            let start = slot as *const (Id, V) as *const i8;
            let end = start.wrapping_add(std::mem::size_of::<(Id, V)>() - 1);
            // SAFETY: prefetching is a hint that never faults, whatever the address; both are
            // within the slot.
            unsafe {
                _mm_prefetch(start, _MM_HINT_T0);
                // A slot can straddle two cache lines.
                if (start as usize ^ end as usize) >> 6 != 0 {
                    _mm_prefetch(end, _MM_HINT_T0);
                }
            }
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
                id(&(i % 40_000))
            };
            table.insert(key, i);
            map.insert(key, i);
            assert_eq!(table.len(), map.len());
        }
        for (key, value) in &map {
            assert_eq!(table.get(*key), Some(value));
        }
        assert_eq!(table.get(id(&"never inserted")), None);
        assert!(4 * table.len() <= 3 * table.slots.len());
    }

    #[test]
    fn find_then_insert_at_is_insert_and_reserve_keeps_everything() {
        let mut table: IdTable<u64> = IdTable::new();
        for i in 0..1000u64 {
            let key = id(&i);
            match table.find(key) {
                Probe::Vacant(at) => table.insert_at(at, key, i * 3),
                Probe::Found(_) => panic!("{i} was not inserted yet"),
            }
            table.prefetch(key);
        }
        table.reserve(100_000);
        let slots = table.slots.len();
        assert!(
            4 * 101_000 <= 3 * slots && 4 * 101_000 > 3 * slots / 2,
            "{slots} slots"
        );
        for i in 0..1000u64 {
            match table.find(id(&i)) {
                Probe::Found(at) => assert_eq!(*table.value(at), i * 3),
                Probe::Vacant(_) => panic!("{i} went missing"),
            }
        }
    }

    #[test]
    fn no_identity_is_the_free_slot() {
        assert_ne!(id(&()), FREE);
        assert_ne!(id(&(Some(0i64), "g")), FREE);
    }
}
