//! Zeroed buffers with every memory page written up front: fresh memory that is read before it is
//! written (not Parquet's pages, which `ingest/pages.rs` reads).

/// `len` zeros, each page of them written now. Memory the allocator gets from the system reads as
/// zeros, every page mapped to the one shared zero page until it is written; a buffer read before
/// it is written (a table probed before an insert, a sum added to) then copies each page on its
/// first write and flushes the page from the other cores' TLBs, an interrupt to each (8k of them
/// for the identity tables of 1M single-row groups). A page written first is mapped once.
pub(crate) fn written_zeros<T: Copy + Default>(len: usize) -> Vec<T> {
    let mut values = vec![T::default(); len];
    let per_page = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for page in values.chunks_mut(per_page) {
        // SAFETY: a valid, aligned element of the vector; volatile, so that the write is not
        // dropped as one of a value already there.
        unsafe { std::ptr::write_volatile(page.as_mut_ptr(), T::default()) };
    }
    values
}

#[cfg(test)]
mod tests {
    #[test]
    fn written_zeros_are_zeros() {
        for len in [0, 1, 511, 512, 513, 100_000] {
            let words: Vec<u64> = super::written_zeros(len);
            assert_eq!(words.len(), len);
            assert!(words.iter().all(|&w| w == 0));
        }
        let sums: Vec<f64> = super::written_zeros(3000);
        assert!(sums.iter().all(|&s| s.to_bits() == 0));
    }
}
