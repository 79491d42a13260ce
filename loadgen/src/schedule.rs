//! Arrival times of an open-loop run: when each unit is due, as an offset from the run's start.
//!
//! The schedule is fixed before anything is sent and does not wait for answers, which is what
//! makes a run open-loop: a slow server meets the same arrivals as a fast one, and each unit's
//! latency is taken from its due time. Uniform spacing gives the steadiest load; Poisson arrivals
//! (exponential gaps, seeded so a run can be repeated) give the bursts that real independent
//! users make. Offsets of the uniform schedule are computed as `i / rate`, not summed, so they
//! do not drift over a long run.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// How arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// Exactly `1 / rate` apart.
    Uniform,
    /// Exponentially distributed gaps with mean `1 / rate`, from this seed.
    Poisson { seed: u64 },
}

impl Arrivals {
    /// The name used in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Arrivals::Uniform => "uniform",
            Arrivals::Poisson { .. } => "poisson",
        }
    }
}

/// An endless iterator of due times (offsets from the start), the first at zero.
pub struct Schedule {
    rate: f64,
    index: u64,
    /// The next Poisson offset in seconds, and the generator of its gaps.
    poisson: Option<(f64, SmallRng)>,
}

impl Schedule {
    /// Arrivals at `rate` per second (must be positive and finite).
    pub fn new(rate: f64, arrivals: Arrivals) -> Self {
        assert!(rate.is_finite() && rate > 0.0, "rate must be positive");
        let poisson = match arrivals {
            Arrivals::Uniform => None,
            Arrivals::Poisson { seed } => Some((0.0, SmallRng::seed_from_u64(seed))),
        };
        Schedule {
            rate,
            index: 0,
            poisson,
        }
    }
}

impl Iterator for Schedule {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let seconds = match &mut self.poisson {
            None => self.index as f64 / self.rate,
            Some((at, rng)) => {
                let due = *at;
                // 1 - u is in (0, 1], so the logarithm is finite.
                let u: f64 = rng.random();
                *at += -(1.0 - u).ln() / self.rate;
                due
            }
        };
        self.index += 1;
        Some(Duration::from_secs_f64(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_arrivals_are_evenly_spaced_without_drift() {
        let offsets: Vec<Duration> = Schedule::new(400.0, Arrivals::Uniform)
            .take(1_000_001)
            .collect();
        assert_eq!(offsets[0], Duration::ZERO);
        assert_eq!(offsets[1], Duration::from_micros(2500));
        assert_eq!(offsets[3], Duration::from_micros(7500));
        let gaps_ok = offsets.windows(2).all(|w| {
            let gap = (w[1] - w[0]).as_nanos() as i64;
            (gap - 2_500_000).abs() <= 1
        });
        assert!(gaps_ok, "every gap is 2.5 ms");
        assert_eq!(offsets[1_000_000], Duration::from_secs(2500));
    }

    #[test]
    fn poisson_gaps_have_the_rate_as_mean_and_exponential_spread() {
        let rate = 250.0;
        let n = 200_000;
        let offsets: Vec<f64> = Schedule::new(rate, Arrivals::Poisson { seed: 7 })
            .take(n + 1)
            .map(|d| d.as_secs_f64())
            .collect();
        let gaps: Vec<f64> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        let expected = 1.0 / rate;
        assert!((mean / expected - 1.0).abs() < 0.01, "mean gap {mean}");
        // An exponential's standard deviation equals its mean (uniform spacing would give 0).
        assert!(
            (variance.sqrt() / expected - 1.0).abs() < 0.02,
            "sd {}",
            variance.sqrt()
        );
        assert!(gaps.iter().all(|g| *g >= 0.0));
    }

    #[test]
    fn poisson_schedules_repeat_with_their_seed() {
        let a: Vec<Duration> = Schedule::new(10.0, Arrivals::Poisson { seed: 3 })
            .take(50)
            .collect();
        let b: Vec<Duration> = Schedule::new(10.0, Arrivals::Poisson { seed: 3 })
            .take(50)
            .collect();
        let c: Vec<Duration> = Schedule::new(10.0, Arrivals::Poisson { seed: 4 })
            .take(50)
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
