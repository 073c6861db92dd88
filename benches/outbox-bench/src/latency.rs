//! A realistic downstream for throughput figures: each message's delivery
//! takes a log-normal time (median 150 ms, p99 2 s), and 1% hang past the
//! timeout. Times are scaled (×0.1 by default) so a run takes seconds; the
//! ratio to the ideal does not depend on the scale.
//!
//! The latency of a message is a pure function of its id, so every drain
//! algorithm meets exactly the same downstream.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use workers_outbox::drain::Deliver;
use workers_outbox::future::BoxFuture;
use workers_outbox::{ClaimedMessage, Delivery};

/// The median delivery time, unscaled.
const MEDIAN_MS: f64 = 150.0;
/// The 99th percentile, unscaled.
const P99_MS: f64 = 2_000.0;
/// z of the 99th percentile of the standard normal.
const Z99: f64 = 2.326_348;
/// Share of deliveries that hang until the timeout.
const HANGING: f64 = 0.01;

/// Waits a given time somewhere: a timer natively, a delaying HTTP sink on
/// Workers.
pub trait Sink: Send + Sync {
    /// Completes after about `ms` milliseconds.
    fn visit(&self, ms: f64) -> BoxFuture<'static, ()>;
}

/// What a message's delivery does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Behaviour {
    /// Answers after this many milliseconds (scaled).
    Answers(f64),
    /// Never answers before the timeout.
    Hangs,
}

/// The downstream's shape at a time scale.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    /// Multiplies every time (0.1: median 15 ms).
    pub scale: f64,
    /// The drainer's delivery timeout (scaled already).
    pub timeout: Duration,
}

impl Mix {
    /// How the delivery of message `id` behaves.
    pub fn behaviour(&self, id: &str) -> Behaviour {
        let mut state = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
        let mut uniform = || {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let (u1, u2, u3) = (uniform(), uniform(), uniform());
        if u3 < HANGING {
            return Behaviour::Hangs;
        }
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let sigma = (P99_MS / MEDIAN_MS).ln() / Z99;
        Behaviour::Answers(self.scale * (MEDIAN_MS.ln() + sigma * z).exp())
    }

    /// How long the delivery of `id` holds a slot: its answer time, or the
    /// timeout.
    pub fn slot_ms(&self, id: &str) -> f64 {
        let timeout = self.timeout.as_secs_f64() * 1000.0;
        match self.behaviour(id) {
            Behaviour::Answers(ms) => ms.min(timeout),
            Behaviour::Hangs => timeout,
        }
    }
}

/// Delivers through a [`Sink`] with the [`Mix`]'s times, keeping the slot
/// time of every attempt for the ideal throughput.
pub struct MixedDownstream {
    mix: Mix,
    sink: Arc<dyn Sink>,
    slots: Mutex<Vec<f64>>,
}

impl MixedDownstream {
    /// A downstream of `mix` reached through `sink`.
    pub fn new(mix: Mix, sink: Arc<dyn Sink>) -> Self {
        MixedDownstream {
            mix,
            sink,
            slots: Mutex::new(Vec::new()),
        }
    }

    /// Slot times of the attempts so far, in milliseconds.
    pub fn slots(&self) -> Vec<f64> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Deliver for MixedDownstream {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.mix.slot_ms(&message.id));
        let wait = match self.mix.behaviour(&message.id) {
            Behaviour::Answers(ms) => ms,
            Behaviour::Hangs => self.mix.timeout.as_secs_f64() * 1000.0 * 10.0,
        };
        let visit = self.sink.visit(wait);
        Box::pin(async move {
            visit.await;
            Delivery::Delivered
        })
    }
}

/// Throughput of one drain against the mixed downstream.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRun {
    /// `"streaming"` or `"batch-loop"`.
    pub algo: &'static str,
    /// Deliveries in flight.
    pub concurrency: usize,
    /// Attempts finished (delivered or timed out).
    pub attempts: u64,
    /// Wall time, ms.
    pub elapsed_ms: f64,
    /// Attempts per second.
    pub per_second: f64,
    /// `concurrency / mean slot time`, per second.
    pub ideal_per_second: f64,
    /// Database calls made.
    pub calls: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_its_median_and_share_of_hangs() {
        let mix = Mix {
            scale: 1.0,
            timeout: Duration::from_secs(10),
        };
        let mut answered: Vec<f64> = Vec::new();
        let mut hangs = 0;
        for n in 0..20_000 {
            match mix.behaviour(&format!("seed{n:012}")) {
                Behaviour::Answers(ms) => answered.push(ms),
                Behaviour::Hangs => hangs += 1,
            }
        }
        answered.sort_by(f64::total_cmp);
        let median = answered[answered.len() / 2];
        let p99 = answered[answered.len() * 99 / 100];
        assert!((130.0..170.0).contains(&median), "median {median}");
        assert!((1_600.0..2_500.0).contains(&p99), "p99 {p99}");
        assert!((140..260).contains(&hangs), "hangs {hangs}");
    }
}
