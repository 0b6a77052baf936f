//! The HTTP client an OAuth session's MCP requests go through: reqwest, as
//! every other session, plus DPoP when the session's token is bound to a key
//! ([`super::dpop`]). rmcp's `AuthClient` supplies the token; this client
//! decides how it is presented: as a bearer token, or with the `DPoP`
//! scheme and a fresh proof for the request's method and URL.
//!
//! A resource server that demands a nonce answers 401 with
//! `WWW-Authenticate: DPoP error="use_dpop_nonce"` and the nonce in a
//! `DPoP-Nonce` header. rmcp's transport surfaces the challenge but not that
//! header, so the client learns the nonce with one request of its own (same
//! method and URL, a proof, no body: refused before any body is read) and
//! then sends the real request once more. A server that rotates its nonce
//! on every response therefore costs two extra requests per call.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use super::dpop::Dpop;

type HttpError = StreamableHttpError<reqwest::Error>;

/// reqwest with DPoP when `dpop` holds a bound token (see the module docs).
#[derive(Clone)]
pub struct SessionHttp {
    pub(crate) http: reqwest::Client,
    dpop: Option<Arc<Dpop>>,
}

impl SessionHttp {
    pub(crate) fn new(http: reqwest::Client, dpop: Option<Arc<Dpop>>) -> Self {
        SessionHttp { http, dpop }
    }

    /// The session's DPoP key, when it uses DPoP.
    pub(crate) fn dpop(&self) -> Option<&Arc<Dpop>> {
        self.dpop.as_ref()
    }

    /// The session's DPoP state, when its token is bound.
    fn bound(&self) -> Option<&Dpop> {
        self.dpop.as_deref().filter(|d| d.is_bound())
    }

    /// `headers` with the token under the DPoP scheme and a proof.
    fn with_proof(
        dpop: &Dpop,
        method: &str,
        uri: &str,
        token: &str,
        mut headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<HashMap<HeaderName, HeaderValue>, HttpError> {
        let internal = |e: String| StreamableHttpError::Auth(AuthError::InternalError(format!("DPoP proof: {e}")));
        let scheme = HeaderValue::from_str(&format!("DPoP {token}")).map_err(|e| internal(e.to_string()))?;
        headers.insert(AUTHORIZATION, scheme);
        headers.insert(HeaderName::from_static("dpop"), dpop.proof(method, uri, Some(token)).map_err(internal)?);
        Ok(headers)
    }

    /// Learns the resource server's nonce after a `use_dpop_nonce` refusal
    /// (see the module docs); true when a new one arrived.
    async fn learn_nonce(&self, dpop: &Dpop, method: reqwest::Method, uri: &str, token: &str) -> bool {
        let Ok(headers) = Self::with_proof(dpop, method.as_str(), uri, token, HashMap::new()) else { return false };
        let mut probe = self.http.request(method, uri);
        for (name, value) in headers {
            probe = probe.header(name, value);
        }
        match probe.send().await {
            Ok(response) => dpop.learn_nonce(uri, response.headers()),
            Err(_) => false,
        }
    }

    /// Runs `call` with DPoP headers for a bound token, once more with the
    /// server's nonce when it demands one; otherwise as a bearer request.
    async fn send<T, F, Fut>(
        &self,
        method: reqwest::Method,
        uri: &str,
        token: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        call: F,
    ) -> Result<T, HttpError>
    where
        F: Fn(Option<String>, HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let (Some(dpop), Some(token)) = (self.bound(), token.as_deref()) else { return call(token, headers).await };
        let result = call(None, Self::with_proof(dpop, method.as_str(), uri, token, headers.clone())?).await;
        match result {
            Err(StreamableHttpError::AuthRequired(challenge))
                if challenge.www_authenticate_header.contains("use_dpop_nonce")
                    && self.learn_nonce(dpop, method.clone(), uri, token).await =>
            {
                call(None, Self::with_proof(dpop, method.as_str(), uri, token, headers)?).await
            }
            other => other,
        }
    }
}

impl StreamableHttpClient for SessionHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits).await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.send(reqwest::Method::POST, &uri, auth_header, custom_headers, |token, headers| {
            let (uri, message, session_id) = (uri.clone(), message.clone(), session_id.clone());
            self.http.post_message_with_response_limits(uri, message, session_id, token, headers, limits)
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.send(reqwest::Method::DELETE, &uri, auth_header, custom_headers, |token, headers| {
            self.http.delete_session(uri.clone(), session_id.clone(), token, headers)
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.send(reqwest::Method::GET, &uri, auth_header, custom_headers, |token, headers| {
            self.http.get_stream(uri.clone(), session_id.clone(), last_event_id.clone(), token, headers)
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.send(reqwest::Method::GET, &uri, auth_header, custom_headers, |token, headers| {
            let (uri, session_id, last_event_id) = (uri.clone(), session_id.clone(), last_event_id.clone());
            self.http.get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                token,
                headers,
                max_sse_event_size,
            )
        })
        .await
    }
}
