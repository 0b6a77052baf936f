//! Bounded retries for bus writes that must not be lost to a brief outage
//! (a NATS restart, a leader election): capped exponential backoff with
//! jitter, giving up after a total time budget with the last error. Only
//! transient errors are retried: a value too large for its bucket or a
//! permission the credential lacks fails at once, since no retry can fix it.

use std::future::Future;
use std::time::Duration;

/// First wait.
const INITIAL: Duration = Duration::from_millis(50);
/// Longest single wait.
const CAP: Duration = Duration::from_secs(2);

/// Backoff before attempt `n` (from 1) of a retried operation: `base * 2^(n-1)`
/// capped at `cap`, with "equal jitter" (half fixed, half random).
pub fn backoff(n: u32, base: Duration, cap: Duration) -> Duration {
    let exp = base.saturating_mul(1u32 << n.saturating_sub(1).min(16)).min(cap);
    let half = exp / 2;
    half + half.mul_f64(fastrand::f64())
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
    let mut attempt = 0;
    loop {
        attempt += 1;
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => {
                let wait = backoff(attempt, INITIAL, CAP);
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
    fn backoff_grows_and_is_capped() {
        for n in 1..30 {
            let b = backoff(n, Duration::from_millis(100), Duration::from_secs(5));
            let exp = Duration::from_millis(100).saturating_mul(1 << (n - 1).min(16)).min(Duration::from_secs(5));
            assert!(b >= exp / 2 && b <= exp, "{n}: {b:?}");
        }
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
