//! The job API's operations as types: each request type names its
//! operation (the last token of `<prefix>.api.<tenant>.<op>`) and the type
//! of its reply's `ok` payload, so a client sends and a service answers an
//! operation from one declaration, and no operation name is written at a
//! call site (the typed client, shared/client; the dispatch,
//! orchestrator/src/service.rs).

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Message;
use crate::files_api::{
    FilesCommitReply, FilesCommitRequest, FilesGetReply, FilesGetRequest, FilesLsReply, FilesLsRequest, FilesPutReply,
    FilesPutRequest,
};
use crate::{
    ApprovalsReply, ApprovalsRequest, ApproveReply, ApproveRequest, CancelReply, CancelRequest, ListReply, ListRequest,
    PruneReply, PruneRequest, ResolveReply, ResolveRequest, StatusReply, StatusRequest, SubmitReply, SubmitRequest,
};

/// A job API request: its operation's name on the wire and its reply.
pub trait Op: Message {
    /// The operation, the last token of `<prefix>.api.<tenant>.<op>`.
    const OPERATION: &'static str;
    /// The `ok` payload of its [`crate::ApiReply`].
    type Reply: Serialize + DeserializeOwned;
}

/// Declares each request's operation and reply, and [`OPERATIONS`].
macro_rules! ops {
    ($($req:ty => $name:literal, $reply:ty;)*) => {
        $(impl Op for $req {
            const OPERATION: &'static str = $name;
            type Reply = $reply;
        })*
        /// Every operation of the job API, as the service's unknown-operation error lists them.
        pub const OPERATIONS: &[&str] = &[$($name),*];
    };
}

ops! {
    SubmitRequest => "submit", SubmitReply;
    StatusRequest => "status", StatusReply;
    ListRequest => "list", ListReply;
    CancelRequest => "cancel", CancelReply;
    PruneRequest => "prune", PruneReply;
    ApprovalsRequest => "approvals", ApprovalsReply;
    ApproveRequest => "approve", ApproveReply;
    ResolveRequest => "resolve", ResolveReply;
    FilesLsRequest => "files_ls", FilesLsReply;
    FilesGetRequest => "files_get", FilesGetReply;
    FilesPutRequest => "files_put", FilesPutReply;
    FilesCommitRequest => "files_commit", FilesCommitReply;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twelve_operations_each_named_once() {
        let mut names = OPERATIONS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 12, "{OPERATIONS:?}");
        assert_eq!(<FilesPutRequest as Op>::OPERATION, "files_put");
    }
}
