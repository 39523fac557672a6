//! The trainer's one source of randomness: a seeded SplitMix64 stream, so that a seed gives the
//! same initial weights, shuffles and dropout everywhere (no OS entropy, no thread-local state).

/// SplitMix64 (Steele et al. 2014): a tiny, seedable, well-mixed stream.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A seed of its own for each `parts` (a step, a layer, a projection) under `seed`: streams
    /// that a resumed run draws again exactly, whatever was drawn before.
    pub fn stream(seed: u64, parts: &[u64]) -> u64 {
        parts
            .iter()
            .fold(SplitMix64(seed), |mut rng, &part| {
                SplitMix64(rng.next_u64() ^ part)
            })
            .next_u64()
    }

    /// Uniform in [−1, 1), from the top 24 bits (an f32's mantissa).
    pub fn next_signed(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// Uniform in [0, 1), from the top 53 bits (an f64's mantissa).
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Fisher–Yates, from the last element down: one draw per element but the first.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // SplitMix64 with seed 0: first output 0xe220a8397b1dcdaf (Vigna's splitmix64.c).
        assert_eq!(SplitMix64(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }
}
