//! The simulation's one source of chance, seeded, shared by every actor.

use std::sync::{Arc, Mutex, PoisonError};

#[derive(Clone)]
pub(crate) struct SimRandom(Arc<Mutex<fastrand::Rng>>);

impl SimRandom {
    pub(crate) fn seeded(seed: u64) -> Self {
        SimRandom(Arc::new(Mutex::new(fastrand::Rng::with_seed(seed))))
    }

    /// True with probability `p`.
    pub(crate) fn chance(&self, p: f64) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).f64() < p
    }

    /// A number in `0..n`.
    pub(crate) fn below(&self, n: u64) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .u64(0..n.max(1))
    }
}
