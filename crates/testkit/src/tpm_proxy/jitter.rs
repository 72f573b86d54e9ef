//! The seeded generator behind a profile's jitter.

/// A small seeded generator, SplitMix64 (Steele, Lea and Flood, 2014; the
/// generator behind Java's SplittableRandom): the jitter must be
/// reproducible from a seed, and the kit needs nothing more.
#[derive(Debug, Clone)]
pub(super) struct SplitMix64(pub(super) u64);

impl SplitMix64 {
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(super) fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
