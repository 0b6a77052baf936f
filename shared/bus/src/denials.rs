//! Makes NATS permission denials visible to the operation that caused them.
//!
//! A server that refuses a publish or a subscription does not fail the call:
//! it sends an asynchronous `-ERR 'Permissions Violation for Publish to "x"'`
//! and drops the message, so a request would just time out and a reader would
//! wait forever. The connection's event callback parses those errors into
//! [`Denial`]s on a broadcast channel; [`Denials::guard`] races an operation
//! against the denials that concern it and turns one into an immediate,
//! clear error naming the subject and the fix.

use std::future::Future;

use tokio::sync::broadcast;

/// Whether a publish or a subscription was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenialKind {
    /// Publishing to the subject.
    Publish,
    /// Subscribing to the subject.
    Subscribe,
}

/// One refusal by the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// Publish or subscribe.
    pub kind: DenialKind,
    /// The refused subject.
    pub subject: String,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            DenialKind::Publish => "publish to",
            DenialKind::Subscribe => "subscribe to",
        };
        write!(
            f,
            "permission denied: NATS does not allow this credential to {what} {:?} \
             (its role's permissions in the nats-server config do not cover it; see docs/SECURITY.md)",
            self.subject
        )
    }
}

impl std::error::Error for Denial {}

impl Denial {
    /// Parses a server error text such as
    /// `Permissions Violation for Publish to "a.b"` (case-insensitive prefix).
    pub fn parse(error: &str) -> Option<Self> {
        let lower = error.to_ascii_lowercase();
        let rest =
            lower.find("permissions violation for ").map(|i| &error[i + "permissions violation for ".len()..])?;
        let kind = if rest.to_ascii_lowercase().starts_with("publish") {
            DenialKind::Publish
        } else if rest.to_ascii_lowercase().starts_with("subscription") {
            DenialKind::Subscribe
        } else {
            return None;
        };
        let start = rest.find('"')? + 1;
        let len = rest[start..].find('"')?;
        Some(Self { kind, subject: rest[start..start + len].to_string() })
    }
}

/// The denials seen on one connection.
#[derive(Clone)]
pub struct Denials {
    tx: broadcast::Sender<Denial>,
}

impl Default for Denials {
    fn default() -> Self {
        Self { tx: broadcast::channel(64).0 }
    }
}

impl Denials {
    /// Records a server error; returns whether it was a permission denial.
    pub fn observe(&self, server_error: &str) -> bool {
        match Denial::parse(server_error) {
            Some(d) => {
                tracing::warn!(kind = ?d.kind, subject = %d.subject, "NATS permission denied");
                let _ = self.tx.send(d);
                true
            }
            None => false,
        }
    }

    /// Runs `op`, failing fast with the first denial that `concerns` it.
    pub async fn guard<T, E>(
        &self,
        op: impl Future<Output = Result<T, E>>,
        concerns: impl Fn(&Denial) -> bool,
    ) -> Result<T, GuardError<E>> {
        let mut rx = self.tx.subscribe();
        let denied = async {
            loop {
                match rx.recv().await {
                    Ok(d) if concerns(&d) => return d,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        tokio::select! {
            r = op => r.map_err(GuardError::Op),
            d = denied => Err(GuardError::Denied(d)),
        }
    }

    /// [`Denials::guard`] with the failure as a [`BusError`](crate::BusError)
    /// saying what was being done.
    pub async fn guarded<T, E>(
        &self,
        context: impl Into<String>,
        op: impl std::future::Future<Output = Result<T, E>>,
        concerns: impl Fn(&Denial) -> bool,
    ) -> Result<T, crate::BusError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.guard(op, concerns).await.map_err(|e| match e {
            GuardError::Denied(d) => crate::BusError::new(context, d),
            GuardError::Op(e) => crate::BusError::new(context, e),
        })
    }
}

/// The operation failed, or the server refused it.
#[derive(Debug)]
pub enum GuardError<E> {
    /// The server refused a publish or subscription the operation needed.
    Denied(Denial),
    /// The operation's own error.
    Op(E),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_permission_errors() {
        let d = Denial::parse(r#"Permissions Violation for Publish to "flotilla.api.b.submit""#).unwrap();
        assert_eq!(d, Denial { kind: DenialKind::Publish, subject: "flotilla.api.b.submit".into() });
        let d =
            Denial::parse(r#"permissions violation for subscription to "flotilla.task.>" using queue "q""#).unwrap();
        assert_eq!(d.kind, DenialKind::Subscribe);
        assert_eq!(d.subject, "flotilla.task.>");
        assert!(Denial::parse("authorization violation").is_none());
        assert!(d.to_string().contains("permission denied") && d.to_string().contains("flotilla.task.>"));
    }

    #[tokio::test]
    async fn guard_fails_fast_only_for_denials_that_concern_the_operation() {
        let denials = Denials::default();
        let d2 = denials.clone();
        let op = async {
            tokio::task::yield_now().await;
            d2.observe(r#"Permissions Violation for Publish to "other""#);
            d2.observe(r#"Permissions Violation for Publish to "mine""#);
            std::future::pending::<Result<(), ()>>().await
        };
        match denials.guard(op, |d| d.subject == "mine").await {
            Err(GuardError::Denied(d)) => assert_eq!(d.subject, "mine"),
            other => panic!("{other:?}"),
        }
        let ok: Result<u8, GuardError<()>> = denials.guard(async { Ok(7) }, |_| true).await;
        assert_eq!(ok.unwrap(), 7);
    }
}
