//! Deterministic samples of positions (`verify --sample K --seed S`): the
//! same K positions on every machine and for both forms of the same cache,
//! because they depend on nothing but the number of sequences, K and S.
//!
//! The algorithm, fully specified so that another program can reproduce it:
//!
//! - the generator is SplitMix64 seeded with S: each draw adds
//!   0x9E3779B97F4A7C15 to the state and returns the state mixed by
//!   `z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
//!   z *= 0x94D049BB133111EB; z ^= z >> 31` (all mod 2^64);
//! - a number below m is drawn by rejection, without bias: draw x until
//!   x ≥ (2^64 − m) mod m, then return x mod m;
//! - K distinct positions of `count` by Floyd's algorithm: for j from
//!   count − K to count − 1, draw t below j + 1 and take t, or j when t is
//!   already taken;
//! - the positions are returned in ascending order; K ≥ count gives every
//!   position.
//!
//! Hand-written rather than `rand`'s `index::sample`, whose output may change
//! between versions of the crate: a sample must stay the same sample.

use std::collections::BTreeSet;

/// SplitMix64 (Steele, Lea and Flood, 2014).
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..m` (`m` > 0), by rejection of the draws below (2^64 − m) mod m.
    pub fn below(&mut self, m: u64) -> u64 {
        let threshold = m.wrapping_neg() % m;
        loop {
            let x = self.next_u64();
            if x >= threshold {
                return x % m;
            }
        }
    }
}

/// `k` distinct positions of `0..count` chosen by `seed` (module comment),
/// ascending; every position when `k >= count`.
pub fn sample_positions(count: usize, k: usize, seed: u64) -> Vec<usize> {
    if k >= count {
        return (0..count).collect();
    }
    let mut rng = SplitMix64::new(seed);
    let mut taken = BTreeSet::new();
    for j in count - k..count {
        let t = rng.below(j as u64 + 1) as usize;
        if !taken.insert(t) {
            taken.insert(j);
        }
    }
    taken.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_gives_the_published_sequence() {
        // The first outputs of Vigna's reference splitmix64.c for seed 0.
        let mut r = SplitMix64::new(0);
        assert_eq!([r.next_u64(), r.next_u64(), r.next_u64()], [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F]);
        // Twin: another seed, another sequence.
        assert_ne!(SplitMix64::new(1).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn a_sample_is_distinct_sorted_in_range_and_the_same_for_the_same_seed() {
        for (count, k) in [(10, 3), (1000, 999), (1000, 1), (5, 5), (5, 50), (0, 3), (7, 0)] {
            let s = sample_positions(count, k, 42);
            assert_eq!(s.len(), k.min(count), "{count} {k}");
            assert!(s.windows(2).all(|w| w[0] < w[1]), "ascending and distinct: {s:?}");
            assert!(s.iter().all(|&p| p < count));
            assert_eq!(s, sample_positions(count, k, 42), "deterministic");
        }
        // Positions computed by an independent implementation of the module
        // comment (Python): a change of algorithm changes every recorded sample.
        assert_eq!(sample_positions(100, 5, 7), [33, 56, 74, 86, 87]);
        assert_eq!(sample_positions(1_000_000, 4, 2026), [237_350, 313_771, 642_842, 771_186]);
        assert_eq!(sample_positions(10, 9, 1), [0, 1, 2, 3, 5, 6, 7, 8, 9]);
        assert_ne!(sample_positions(100, 5, 7), sample_positions(100, 5, 8), "twin: the seed matters");
        assert_eq!(sample_positions(4, 4, 1), [0, 1, 2, 3]);
    }

    /// How often each of `count` positions is in a sample of `k`, over `seeds` seeds.
    fn frequencies(count: usize, k: usize, seeds: u64, sample: fn(usize, usize, u64) -> Vec<usize>) -> Vec<usize> {
        let mut hits = vec![0; count];
        for seed in 0..seeds {
            for p in sample(count, k, seed) {
                hits[p] += 1;
            }
        }
        hits
    }

    fn about(hits: &[usize], expected: usize) -> bool {
        hits.iter().all(|&h| h.abs_diff(expected) < expected / 20)
    }

    #[test]
    fn every_position_is_about_equally_likely() {
        assert!(about(&frequencies(4, 1, 40_000, sample_positions), 10_000));
        assert!(about(&frequencies(5, 2, 50_000, sample_positions), 20_000));
        // Twin: Floyd's draw one short (below j, not j + 1) never picks the last position.
        fn short(count: usize, k: usize, seed: u64) -> Vec<usize> {
            let mut rng = SplitMix64::new(seed);
            let mut taken = BTreeSet::new();
            for j in count - k..count {
                let t = rng.below(j.max(1) as u64) as usize;
                if !taken.insert(t) {
                    taken.insert(j);
                }
            }
            taken.into_iter().collect()
        }
        assert!(!about(&frequencies(4, 1, 40_000, short), 10_000));
    }

    #[test]
    fn below_never_reaches_its_bound_and_rejects_the_biased_draws() {
        let mut r = SplitMix64::new(3);
        assert!((0..10_000).all(|_| r.below(3) < 3));
        assert_eq!(SplitMix64::new(9).below(1), 0);
        // m = 2^63 + 1: the threshold is 2^63 − 1, so about half the draws are rejected.
        let m = (1u64 << 63) + 1;
        assert!((0..1000).all(|_| r.below(m) < m));
    }
}
