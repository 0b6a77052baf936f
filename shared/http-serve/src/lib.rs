//! The serve loop of Flotilla's own HTTP servers, the dashboard + HTTP API
//! (the `flotilla-dashboard` crate, bound by `flotilla orchestrator`) and
//! `flotilla mcp serve --listen` (the `flotilla-mcp-server` crate), against
//! slow and many clients (docs/SECURITY.md, "HTTP servers"). `axum::serve`
//! sets neither of the two bounds below, so a few hundred unauthenticated
//! connections that never finish their headers would stay open for good;
//! this loop drives each connection with hyper's HTTP/1 builder instead.
//!
//! A crate of its own because both servers use it and neither should
//! depend on the other: it must not depend on any Flotilla crate, only on
//! hyper and axum's `Router`.
//!
//! - **Header-read timeout**: a connection must deliver a request's complete
//!   headers within `header_timeout` of the server starting to wait for
//!   them, or it is closed. The wait starts when the connection opens and
//!   again after each response, so the same bound closes an idle keep-alive
//!   connection. A request being answered (an SSE stream, a long MCP call)
//!   is not affected.
//! - **Connection cap**: at most `max_connections` connections at once. One
//!   more is answered `503` with `Retry-After` and closed at once, so a
//!   flood costs a socket for a moment and never a task, and requests on the
//!   open connections go on. A connection's slot is given back before its
//!   socket closes, so a client that sees the close may connect again.
//!
//! Shutdown is a parameter, as in mini-redis: when it completes, the loop
//! stops accepting and in-flight requests finish (hyper's graceful shutdown).

#![deny(missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long in-flight requests may run on after shutdown (SSE streams never
/// end by themselves).
const DRAIN: Duration = Duration::from_secs(5);
/// How long a refused connection may take to receive its 503.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// The bounds of one server, validated by its config (`[dashboard]` keys,
/// `flotilla mcp serve` flags).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The longest a connection may take to send a request's headers, and
    /// the longest an idle keep-alive connection stays open.
    pub header_timeout: Duration,
    /// Connections open at once; more are refused with 503.
    pub max_connections: usize,
    /// The config key or flag naming `max_connections`, for the refusal.
    pub connections_key: &'static str,
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, mostly: the backlog waits meanwhile.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, limits));
            continue;
        };
        let io = TokioIo::new(Counted { _slot: slot, stream });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(io, TowerToHyperService::new(router.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::debug!("HTTP connections still open at shutdown were closed");
    }
}

/// Answers a connection over the cap with 503 and closes it.
async fn refuse(mut stream: TcpStream, limits: Limits) {
    let body = format!(
        "too many connections: this server holds at most {} at once ({}); retry shortly\n",
        limits.max_connections, limits.connections_key
    );
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE, async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// A connection's socket with its slot under the cap. Fields drop in order:
/// the slot is free again before the socket closes.
struct Counted {
    _slot: OwnedSemaphorePermit,
    stream: TcpStream,
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn started(limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(listener, router, limits, std::future::pending()));
        addr
    }

    /// Reads until the server closes; returns what it sent.
    async fn until_closed(s: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn half_a_header_is_closed_after_the_timeout_and_a_full_one_is_answered() {
        let limits = Limits { header_timeout: Duration::from_millis(200), max_connections: 4, connections_key: "test" };
        let addr = started(limits).await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        until_closed(&mut slow).await;
        let mut ok = TcpStream::connect(addr).await.unwrap();
        ok.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        assert!(until_closed(&mut ok).await.starts_with("HTTP/1.1 200"));
    }
}
