//! Randomness, injected: message ids, lease tokens and backoff jitter all
//! draw from a [`RandomSource`], so a seeded source makes a run repeatable.

use std::sync::{Mutex, PoisonError};

use crate::future::{MaybeSend, MaybeSync};

/// A source of random 64-bit numbers.
///
/// Ids and lease tokens need uniqueness, not secrecy: a fast seeded generator
/// is the intended implementation.
pub trait RandomSource: MaybeSend + MaybeSync {
    /// The next random number.
    fn next_u64(&self) -> u64;

    /// A uniformly random number in `0 ..= max`.
    fn below_or_equal(&self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        // Rejection sampling keeps the result uniform.
        let range = max + 1;
        let zone = u64::MAX - (u64::MAX % range) - 1;
        loop {
            let value = self.next_u64();
            if value <= zone {
                return value % range;
            }
        }
    }
}

/// The default [`RandomSource`]: a wyrand generator (the `fastrand` crate),
/// seeded from the platform or from a given seed.
#[derive(Debug)]
pub struct FastRandom {
    rng: Mutex<fastrand::Rng>,
}

impl FastRandom {
    /// A generator whose sequence is fixed by `seed`.
    pub fn seeded(seed: u64) -> Self {
        FastRandom {
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
        }
    }

    /// A generator seeded from the platform: the process's hash keys natively,
    /// `Math.random()` on Workers.
    pub fn from_entropy() -> Self {
        Self::seeded(platform_seed())
    }
}

impl Default for FastRandom {
    fn default() -> Self {
        Self::from_entropy()
    }
}

impl RandomSource for FastRandom {
    fn next_u64(&self) -> u64 {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .u64(..)
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn platform_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // `RandomState` is keyed from the operating system's entropy source.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish()
}

#[cfg(target_arch = "wasm32")]
fn platform_seed() -> u64 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let draw = || (js_sys::Math::random() * (1u64 << 53) as f64) as u64;
    (draw() << 11) ^ draw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_fixes_the_sequence() {
        let a = FastRandom::seeded(7);
        let b = FastRandom::seeded(7);
        let first: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let second: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(first, second);
    }

    #[test]
    fn below_or_equal_stays_in_range() {
        let random = FastRandom::seeded(1);
        for max in [0, 1, 2, 999, u64::MAX / 3] {
            for _ in 0..100 {
                assert!(random.below_or_equal(max) <= max);
            }
        }
    }
}
