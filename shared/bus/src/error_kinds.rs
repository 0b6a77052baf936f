//! How a [`BusError`](crate::BusError) is classified: from the types and
//! kinds async-nats gives each failure (and the JetStream API's error codes),
//! never from an error's text. The planner's control flow (an oversized
//! result fails the job instead of being retried) and the job store's retries
//! depend on it, so a reworded message must not change a decision.
//!
//! Each link of the source chain is tried against the known error types; the
//! first that decides wins, and a chain nothing decides is an outage
//! (transient), as every other failure of a connected client.

use std::error::Error as StdError;

use async_nats::jetstream::{self, context, kv, object_store, stream};
use async_nats::{ConnectErrorKind, StatusCode};

use crate::BusErrorKind;
use crate::denials::Denial;

/// The kind of the chain starting at `error`.
pub(crate) fn classify(error: &(dyn StdError + 'static)) -> BusErrorKind {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(kind) = decide(e) {
            return kind;
        }
        next = e.source();
    }
    BusErrorKind::Transient
}

/// Tries `$e` against each listed error type; a match returns what its
/// mapping (over the type's `kind()`) decides, `None` meaning "ask the cause".
macro_rules! by_kind {
    ($e:expr; $($ty:ty => $map:expr),+ $(,)?) => {
        $(
            if let Some(err) = $e.downcast_ref::<$ty>() {
                let map: fn(&$ty) -> Option<BusErrorKind> = $map;
                return map(err);
            }
        )+
    };
}

/// What one link of a chain says, if it says anything.
fn decide(e: &(dyn StdError + 'static)) -> Option<BusErrorKind> {
    use BusErrorKind::{NotFound, Permission, TooLarge};
    if e.is::<Denial>() {
        return Some(Permission);
    }
    by_kind!(e;
        crate::BusError => |b| Some(b.kind()),
        jetstream::Error => api,
        async_nats::ConnectError => |c| {
            matches!(c.kind(), ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication)
                .then_some(Permission)
        },
        async_nats::PublishError => |p| {
            (p.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded).then_some(TooLarge)
        },
        async_nats::RequestError => |r| {
            (r.kind() == async_nats::RequestErrorKind::MaxPayloadExceeded).then_some(TooLarge)
        },
        // A publish with no stream for its subject waits for the orchestrator
        // to declare it (an outage); one refused by the stream says why in
        // its source, the API error.
        context::PublishError => |p| (p.kind() == context::PublishErrorKind::MaxPayloadExceeded).then_some(TooLarge),
        context::ConsumerInfoError => |c| match c.kind() {
            context::ConsumerInfoErrorKind::NotFound | context::ConsumerInfoErrorKind::StreamNotFound => {
                Some(NotFound)
            }
            context::ConsumerInfoErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        context::CreateStreamError => |c| match c.kind() {
            context::CreateStreamErrorKind::NotFound => Some(NotFound),
            context::CreateStreamErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        context::GetStreamError => |g| match g.kind() {
            context::GetStreamErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        context::GetStreamByNameError => |g| match g.kind() {
            context::GetStreamByNameErrorKind::NotFound => Some(NotFound),
            context::GetStreamByNameErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        context::UpdateKeyValueError => |u| (u.kind() == context::UpdateKeyValueErrorKind::NotFound).then_some(NotFound),
        kv::StatusError => |s| match s.kind() {
            kv::StatusErrorKind::JetStream(e) => api(&e),
            kv::StatusErrorKind::TimedOut => None,
        },
        stream::DirectGetError => |d| match d.kind() {
            stream::DirectGetErrorKind::NotFound => Some(NotFound),
            stream::DirectGetErrorKind::ErrorResponse(status, _) => (status == StatusCode::NOT_FOUND).then_some(NotFound),
            _ => None,
        },
        stream::LastRawMessageError => |l| match l.kind() {
            stream::LastRawMessageErrorKind::NoMessageFound => Some(NotFound),
            stream::LastRawMessageErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        stream::DeleteMessageError => |d| match d.kind() {
            stream::DeleteMessageErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        stream::PurgeError => |p| match p.kind() {
            stream::PurgeErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        stream::ConsumerError => |c| match c.kind() {
            stream::ConsumerErrorKind::JetStream(e) => api(&e),
            _ => None,
        },
        object_store::InfoError => |i| (i.kind() == object_store::InfoErrorKind::NotFound).then_some(NotFound),
        object_store::GetError => |g| (g.kind() == object_store::GetErrorKind::NotFound).then_some(NotFound),
        object_store::DeleteError => |d| (d.kind() == object_store::DeleteErrorKind::NotFound).then_some(NotFound),
    );
    None
}

/// A JetStream API error, by its error code (and the HTTP-like status for
/// the codes a server version may add).
fn api(e: &jetstream::Error) -> Option<BusErrorKind> {
    use jetstream::ErrorCode;
    match e.error_code() {
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM => Some(BusErrorKind::TooLarge),
        ErrorCode::STREAM_NOT_FOUND
        | ErrorCode::CONSUMER_NOT_FOUND
        | ErrorCode::NO_MESSAGE_FOUND
        | ErrorCode::SEQUENCE_NOT_FOUND => Some(BusErrorKind::NotFound),
        _ if e.code() == 404 => Some(BusErrorKind::NotFound),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::{self, context, kv, object_store, stream};

    use crate::{BusError, BusErrorKind};

    /// A JetStream API error as the server sends it.
    fn api(code: usize, err_code: u64, description: &str) -> jetstream::Error {
        let body = serde_json::json!({ "code": code, "err_code": err_code, "description": description });
        serde_json::from_value(body).expect("a JetStream API error")
    }

    fn kind(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BusErrorKind {
        BusError::new("cannot store job", source).kind()
    }

    #[test]
    fn oversized_messages_are_too_large_however_they_are_refused() {
        use BusErrorKind::TooLarge;
        // Over the server's max_payload: refused by the client before sending.
        assert_eq!(kind(context::PublishError::new(context::PublishErrorKind::MaxPayloadExceeded)), TooLarge);
        assert_eq!(
            kind(async_nats::PublishError::new(async_nats::client::PublishErrorKind::MaxPayloadExceeded)),
            TooLarge
        );
        // Over the stream's max_message_size: the stream's ack says so by code.
        let refused = api(400, 10054, "message size exceeds maximum allowed");
        let publish = context::PublishError::with_source(context::PublishErrorKind::Other, refused);
        assert_eq!(kind(publish), TooLarge);
        // A KV put wraps the publish error; the chain is read to the end.
        let nested = context::PublishError::new(context::PublishErrorKind::MaxPayloadExceeded);
        assert_eq!(kind(kv::PutError::with_source(kv::PutErrorKind::Publish, nested)), TooLarge);
    }

    #[test]
    fn missing_streams_consumers_and_keys_are_not_found() {
        use BusErrorKind::NotFound;
        assert_eq!(kind(context::ConsumerInfoError::new(context::ConsumerInfoErrorKind::NotFound)), NotFound);
        let no_stream =
            context::GetStreamError::new(context::GetStreamErrorKind::JetStream(api(404, 10059, "stream not found")));
        assert_eq!(kind(no_stream), NotFound);
        assert_eq!(kind(stream::DirectGetError::new(stream::DirectGetErrorKind::NotFound)), NotFound);
        assert_eq!(kind(object_store::GetError::new(object_store::GetErrorKind::NotFound)), NotFound);
        assert_eq!(kind(api(404, 10037, "no message found")), NotFound);
    }

    #[test]
    fn outages_are_transient_whatever_their_message_says() {
        use BusErrorKind::Transient;
        assert_eq!(kind(context::PublishError::new(context::PublishErrorKind::TimedOut)), Transient);
        assert_eq!(kind(context::RequestError::new(context::RequestErrorKind::NoResponders)), Transient);
        assert_eq!(kind(kv::EntryError::new(kv::EntryErrorKind::TimedOut)), Transient);
        // A leader election: a JetStream error with no kind of its own.
        assert_eq!(kind(api(503, 10008, "JetStream cluster not available")), Transient);
        // Text alone decides nothing: a string that reads like a size or
        // absence is still an outage.
        assert_eq!(kind("max payload size exceeded: not found"), Transient);
        assert!(BusError::new("x", context::PublishError::new(context::PublishErrorKind::BrokenPipe)).is_transient());
    }

    #[test]
    fn permission_denials_are_permission_errors() {
        let denial = crate::denials::Denial::parse("Permissions Violation for Publish to \"flotilla.api.x.submit\"")
            .expect("a denial");
        assert_eq!(kind(denial), BusErrorKind::Permission);
        assert_eq!(BusError::new("request", BusError::new("inner", kind_denial())).kind(), BusErrorKind::Permission);
    }

    fn kind_denial() -> crate::denials::Denial {
        crate::denials::Denial::parse("Permissions Violation for Subscription to \"flotilla.task.>\"").unwrap()
    }

    #[test]
    fn a_caller_that_knows_the_kind_says_it() {
        let e = BusError::with_kind(BusErrorKind::NotFound, "job 42", "not found");
        assert_eq!(e.kind(), BusErrorKind::NotFound);
        assert_eq!(e.to_string(), "job 42: not found");
    }
}
