//! A model API that meters what it bills, speaking OpenAI's chat wire
//! format over HTTP like [`ChatEndpoint`](crate::chat_endpoint::ChatEndpoint).
//! A request is **billed** once its answer was written and the client read
//! it to the end (closed its side, `Connection: close`); a request whose
//! client went away first (a killed worker, a task handed back mid-call) is
//! **abandoned** and not billed, as a provider does not charge a response
//! nobody received.
//!
//! The endpoint can **hold** new requests: they wait, unanswered, until
//! [`release`](MeteredEndpoint::release). Tests that kill a worker hold
//! first and kill once every task of the victim waits on the endpoint, so
//! the kill never falls between a billed answer and its use, the one
//! window no journal can close (docs/RELIABILITY.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use std::sync::atomic::Ordering::SeqCst;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::chat_endpoint::read_request;

/// Decides the answer (an OpenAI chat completion) to one request body.
pub type Answer = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// What happened to the requests so far.
#[derive(Clone, Debug, Default)]
pub struct Meter {
    /// Requests answered and read, in order of billing.
    pub billed: Vec<Value>,
    /// Requests whose client left before the answer.
    pub abandoned: usize,
    /// Requests refused with a 503 ([`MeteredEndpoint::refuse_next`]).
    pub refused: usize,
    /// Requests waiting now (held or in their latency), not yet being
    /// answered: once [`hold`](MeteredEndpoint::hold) returned, none of
    /// these is answered before [`release`](MeteredEndpoint::release).
    pub waiting: Vec<Value>,
}

/// A running metered endpoint; it stops with the test's runtime.
pub struct MeteredEndpoint {
    /// Base URL, e.g. `http://127.0.0.1:40123/v1`: an `openai` model's `base_url`.
    pub url: String,
    meter: Arc<Mutex<Meter>>,
    held: watch::Sender<bool>,
    /// Requests still to be refused with a 503 (not billed).
    refuse: Arc<std::sync::atomic::AtomicUsize>,
}

impl MeteredEndpoint {
    /// Listens on a free loopback port; every answer takes `latency` and
    /// comes from `answer`.
    pub async fn start(latency: Duration, answer: Answer) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the model endpoint");
        let url = format!("http://{}/v1", listener.local_addr().expect("its address"));
        let meter = Arc::new(Mutex::new(Meter::default()));
        let (held, _) = watch::channel(false);
        let refuse = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (m, h, r) = (meter.clone(), held.clone(), refuse.clone());
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let refused = r.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok();
                tokio::spawn(serve(conn, latency, answer.clone(), m.clone(), h.subscribe(), refused));
            }
        });
        Self { url, meter, held, refuse }
    }

    /// The next `n` requests are answered `503 Service Unavailable` at
    /// once, unbilled: a provider outage the model client reports as a
    /// transient error.
    pub fn refuse_next(&self, n: usize) {
        self.refuse.store(n, SeqCst);
    }

    /// Requests from now on wait until [`release`](Self::release), and so
    /// do those in [`Meter::waiting`] now: an answer is started only under
    /// the meter's lock, which this takes too.
    pub fn hold(&self) {
        let _meter = self.meter.lock().unwrap();
        self.held.send_replace(true);
    }

    /// Lets held requests (and new ones) be answered.
    pub fn release(&self) {
        self.held.send_replace(false);
    }

    /// The meter now.
    pub fn meter(&self) -> Meter {
        self.meter.lock().unwrap().clone()
    }

    /// Billed requests per key (`key` of each billed body).
    pub fn billed_by<K: std::hash::Hash + Eq>(&self, key: impl Fn(&Value) -> K) -> HashMap<K, usize> {
        let mut m = HashMap::new();
        for b in &self.meter().billed {
            *m.entry(key(b)).or_default() += 1;
        }
        m
    }
}

fn remove(waiting: &mut Vec<Value>, body: &Value) {
    if let Some(i) = waiting.iter().position(|w| w == body) {
        waiting.remove(i);
    }
}

/// One `Connection: close` HTTP response with a JSON body.
fn response(status: &str, json: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
        json.len()
    )
    .into_bytes()
}

async fn serve(
    mut conn: tokio::net::TcpStream,
    latency: Duration,
    answer: Answer,
    meter: Arc<Mutex<Meter>>,
    mut held: watch::Receiver<bool>,
    refused: bool,
) {
    let Some(body) = read_request(&mut conn).await else { return };
    if refused {
        let text = r#"{"error": {"message": "overloaded", "type": "server_error"}}"#;
        let _ = conn.write_all(&response("503 Service Unavailable", text)).await;
        meter.lock().unwrap().refused += 1;
        return;
    }
    meter.lock().unwrap().waiting.push(body.clone());
    let (mut reader, mut writer) = conn.into_split();
    // The client sends nothing more: a read that ends is its going away.
    let mut probe = [0u8; 1];
    let gone = reader.read(&mut probe);
    // Whether to answer is decided under the meter's lock, which `hold`
    // takes too, and the request leaves `waiting` then: a request a test
    // saw waiting after `hold` returned is not answered, and billed, while
    // the test kills its worker (the answer used to be written after that
    // check, and counted billed when the killed client's socket closed).
    let ready = async {
        tokio::time::sleep(latency).await;
        loop {
            let _ = held.wait_for(|h| !*h).await;
            let answering = {
                let mut m = meter.lock().unwrap();
                let answering = !*held.borrow();
                if answering {
                    remove(&mut m.waiting, &body);
                }
                answering
            };
            if answering {
                break;
            }
        }
    };
    tokio::pin!(gone);
    tokio::select! {
        _ = &mut gone => {
            let mut m = meter.lock().unwrap();
            remove(&mut m.waiting, &body);
            m.abandoned += 1;
            return;
        }
        _ = ready => {}
    }
    let written = writer.write_all(&response("200 OK", &answer(&body).to_string())).await.is_ok();
    // Read to the end: the client closes once it has the whole answer.
    let read = written && tokio::time::timeout(Duration::from_secs(30), gone).await.is_ok();
    let mut m = meter.lock().unwrap();
    remove(&mut m.waiting, &body);
    if read {
        m.billed.push(body);
    } else {
        m.abandoned += 1;
    }
}
