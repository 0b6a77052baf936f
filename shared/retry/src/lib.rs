//! The one retry policy ([`Backoff`]) and bounded retries ([`retry`]) for
//! writes that must not be lost to a brief outage (a NATS restart, a leader
//! election): capped exponential backoff with jitter, giving up after a
//! total time budget with the last error. Only transient errors are retried:
//! a value too large for its bucket or a permission the credential lacks
//! fails at once, since no retry can fix it. Model calls, MCP reconnects,
//! task pulls and redelivery delays use the same [`Backoff`].
//!
//! A crate of its own because the model providers, the MCP client, the bus
//! and both binaries share the policy; it depends on nothing of
//! Flotilla's and must not (it sits below every crate that retries).

#![deny(missing_docs)]

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// First wait of [`retry`].
const INITIAL: Duration = Duration::from_millis(50);
/// Longest single wait of [`retry`].
const CAP: Duration = Duration::from_secs(2);

/// The one backoff policy of every Flotilla process: waits that double from
/// `initial` up to `cap`, with random jitter so that many processes retrying
/// the same outage spread out; it never runs out (callers bound the attempts
/// or the time). Built on the `backon` crate.
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    delays: ExponentialBackoff,
}

impl Backoff {
    /// Waits from `initial`, doubling, at most `cap` (before jitter).
    pub fn new(initial: Duration, cap: Duration) -> Self {
        Self { initial, cap, delays: Self::build(initial, cap) }
    }

    fn build(initial: Duration, cap: Duration) -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(initial)
            .with_max_delay(cap)
            .with_jitter()
            .without_max_times()
            .build()
    }

    /// The next wait.
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.cap)
    }

    /// Starts again from the first wait (after a success).
    pub fn reset(&mut self) {
        self.delays = Self::build(self.initial, self.cap);
    }

    /// The wait before retry number `n` (from 0) of this policy.
    pub fn nth(initial: Duration, cap: Duration, n: u32) -> Duration {
        Self::build(initial, cap).nth(n as usize).unwrap_or(cap)
    }
}

/// An error that knows whether trying again may help.
pub trait Retryable: std::fmt::Display {
    /// Whether trying again may succeed.
    fn is_transient(&self) -> bool;
}

/// Runs `op` until it succeeds, fails permanently, or `budget` has passed.
pub async fn retry<T, E, F, Fut>(what: &str, budget: Duration, mut op: F) -> Result<T, E>
where
    E: Retryable,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + budget;
    let mut backoff = Backoff::new(INITIAL, CAP);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => {
                let wait = backoff.next_delay();
                if tokio::time::Instant::now() + wait > deadline {
                    return Err(e);
                }
                tracing::warn!(error = %e, attempt, "{what} failed; retrying in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        let (initial, cap) = (Duration::from_millis(100), Duration::from_secs(5));
        let mut b = Backoff::new(initial, cap);
        for n in 0..30u32 {
            let exp = initial.saturating_mul(1 << n.min(16)).min(cap);
            let d = b.next_delay();
            // backon adds up to one more `exp` of jitter.
            assert!(d >= exp && d <= exp * 2, "{n}: {d:?} for {exp:?}");
            let nth = Backoff::nth(initial, cap, n);
            assert!(nth >= exp && nth <= exp * 2, "{n}: {nth:?}");
        }
        b.reset();
        assert!(b.next_delay() <= initial * 2, "reset starts over");
    }

    /// A test error: transient unless it says "permanent".
    #[derive(Debug, PartialEq)]
    struct E(String);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl Retryable for E {
        fn is_transient(&self) -> bool {
            !self.0.contains("permanent")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_or_budget() {
        let calls = AtomicU32::new(0);
        let r: Result<u32, E> = retry("op", Duration::from_secs(10), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n < 3 { Err(E(format!("fail {n}"))) } else { Ok(n) }
        })
        .await;
        assert_eq!(r, Ok(3));
        let r: Result<(), E> = retry("op", Duration::from_secs(1), || async { Err(E("down".into())) }).await;
        assert_eq!(r, Err(E("down".into())));
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let r: Result<(), E> = retry("op", Duration::from_secs(60), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(E("permanent: too large".into()))
        })
        .await;
        assert_eq!(r, Err(E("permanent: too large".into())));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "a permanent error is returned at once");
    }
}
