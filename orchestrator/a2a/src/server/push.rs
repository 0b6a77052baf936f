//! Push notifications: a task's webhooks (`TaskPushNotificationConfig`)
//! and their delivery. Each update of the task's stream ([`super::stream`])
//! is POSTed as its `StreamResponse` JSON to every webhook of the task,
//! with the config's `token` in `X-A2A-Notification-Token` and its
//! `authentication` as `Authorization: <scheme> <credentials>` (what the
//! `a2a-sdk` sender does), retried with the workspace backoff
//! (`flotilla-retry`) up to `[a2a.push] attempts`.
//!
//! A client names the URL, so the server must not become its way into the
//! server's network (SSRF): every URL passes `url_policy::check` (https
//! beyond loopback, no credentials, no link-local or metadata address), and
//! unless `[a2a.push] allow_private` the host's addresses must all be
//! public. The name is resolved at each try and the connection pinned to
//! the checked addresses, so DNS rebinding gains nothing; redirects are not
//! followed.
//!
//! The webhooks live in this process's memory while their task is
//! followed: a task's configs go when it ends (after its last
//! notification), and an orchestrator restart forgets them (a client that
//! needs them across restarts registers again, or subscribes).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use flotilla_client::Client;
use flotilla_config::a2a::A2aPushConfig;
use flotilla_config::url_policy;
use flotilla_protocol::ids::{JobId, Tenant};
use futures::StreamExt;

use super::{A2aError, A2aServer, Caller, stream, tasks};
use crate::wire::*;

type Key = (Tenant, JobId);

/// The webhooks of the tasks being followed.
pub(crate) struct Registry {
    config: A2aPushConfig,
    configs: Mutex<HashMap<Key, Vec<TaskPushNotificationConfig>>>,
    delivering: Mutex<HashSet<Key>>,
}

impl Registry {
    pub(crate) fn new(config: A2aPushConfig) -> Self {
        Self { config, configs: Mutex::default(), delivering: Mutex::default() }
    }

    fn of(&self, key: &Key) -> Vec<TaskPushNotificationConfig> {
        self.configs.lock().expect("push registry").get(key).cloned().unwrap_or_default()
    }
}

/// The first check of a webhook URL, when it is registered: its form and,
/// for an address literal, the address (a name is checked at each try).
fn check_url(cfg: &A2aPushConfig, url: &str) -> Result<(), A2aError> {
    let parsed = url_policy::check(url, cfg.allow_insecure_http)
        .map_err(|e| A2aError::InvalidParams(format!("push notification url: {e}")))?;
    let host = parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        allowed(cfg, ip).map_err(A2aError::InvalidParams)?;
    } else if !cfg.allow_private && (host == "localhost" || host.ends_with(".localhost")) {
        return Err(A2aError::InvalidParams(private_refusal(host)));
    }
    Ok(())
}

fn private_refusal(what: &str) -> String {
    format!(
        "push notification url: {what} is a loopback or private address; webhooks go to public addresses only \
         unless [a2a.push] allow_private = true"
    )
}

/// Loopback, RFC 1918, carrier-grade NAT and IPv6 unique-local addresses.
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private() || v4.is_loopback() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

fn allowed(cfg: &A2aPushConfig, ip: IpAddr) -> Result<(), String> {
    if url_policy::is_forbidden(ip) {
        return Err(format!("push notification url: {ip} is a link-local or metadata address: refused"));
    }
    if !cfg.allow_private && is_private(ip) {
        return Err(private_refusal(&ip.to_string()));
    }
    Ok(())
}

/// Adds (or replaces, by id) a webhook of task `cfg.task_id`, of
/// `client`'s tenant, and starts following the task for it.
pub(crate) async fn register(
    s: &A2aServer,
    client: &Client,
    mut cfg: TaskPushNotificationConfig,
    base: &str,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let reg = &s.inner.push;
    if !reg.config.enabled {
        return Err(A2aError::PushNotSupported("push notifications are off here ([a2a.push] enabled)".into()));
    }
    check_url(&reg.config, &cfg.url)?;
    let job = tasks::job_id(&cfg.task_id)?;
    if cfg.id.is_empty() {
        cfg.id = uuid::Uuid::new_v4().to_string();
    }
    cfg.tenant = client.tenant().to_string();
    let key = (client.tenant().clone(), job);
    {
        let mut all = reg.configs.lock().expect("push registry");
        let list = all.entry(key.clone()).or_default();
        list.retain(|c| c.id != cfg.id);
        if list.len() >= reg.config.max_configs_per_task {
            return Err(A2aError::InvalidRequest(format!(
                "task {job} has {} webhooks already ([a2a.push] max_configs_per_task): delete one first",
                list.len()
            )));
        }
        list.push(cfg.clone());
    }
    if reg.delivering.lock().expect("push registry").insert(key.clone()) {
        let first = tasks::current(client, job, base, None).await;
        match first {
            Ok(first) => {
                tokio::spawn(deliver_all(s.clone(), client.clone(), key, first, base.to_string()));
            }
            Err(e) => {
                reg.delivering.lock().expect("push registry").remove(&key);
                reg.configs.lock().expect("push registry").remove(&key);
                return Err(e);
            }
        }
    }
    Ok(cfg)
}

/// Follows the task and sends each update to its webhooks, in order; the
/// task's webhooks are forgotten after its last update.
async fn deliver_all(s: A2aServer, client: Client, key: Key, first: Task, base: String) {
    let reg = &s.inner.push;
    let http = Http::new(&reg.config);
    let mut updates = Box::pin(stream::updates(client, key.1, first, base));
    while let Some(update) = updates.next().await {
        let body = serde_json::to_vec(&update).unwrap_or_default();
        let targets = reg.of(&key);
        futures::future::join_all(targets.iter().map(|t| http.deliver(t, &body))).await;
    }
    reg.delivering.lock().expect("push registry").remove(&key);
    reg.configs.lock().expect("push registry").remove(&key);
}

struct Http {
    config: A2aPushConfig,
}

impl Http {
    fn new(config: &A2aPushConfig) -> Self {
        flotilla_config::tls::install_crypto_provider();
        Self { config: config.clone() }
    }

    /// One notification to one webhook, retried while trying again may help.
    async fn deliver(&self, target: &TaskPushNotificationConfig, body: &[u8]) {
        let mut backoff = flotilla_retry::Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let shown = url_policy::redact(&target.url);
        for attempt in 1..=self.config.attempts {
            match self.try_once(target, body).await {
                Ok(()) => return,
                Err((why, retry)) => {
                    if !retry || attempt == self.config.attempts {
                        tracing::warn!(url = %shown, task = %target.task_id, attempt, error = %why, "A2A push notification dropped");
                        return;
                    }
                    tracing::debug!(url = %shown, attempt, error = %why, "A2A push notification failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    async fn try_once(&self, target: &TaskPushNotificationConfig, body: &[u8]) -> Result<(), (String, bool)> {
        let parsed =
            url_policy::check(&target.url, self.config.allow_insecure_http).map_err(|e| (e.to_string(), false))?;
        let host = parsed.host_str().unwrap_or_default().to_string();
        let port = parsed.port_or_known_default().unwrap_or(443);
        let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare.as_str(), port))
                .await
                .map_err(|e| (format!("cannot resolve {bare}: {e}"), true))?
                .collect(),
        };
        for a in &addrs {
            allowed(&self.config, a.ip()).map_err(|e| (e, false))?;
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(self.config.timeout_secs))
            .resolve_to_addrs(&bare, &addrs)
            .build()
            .map_err(|e| (e.to_string(), false))?;
        let mut req = client.post(parsed.as_str()).header("content-type", "application/json").body(body.to_vec());
        if !target.token.is_empty() {
            req = req.header("X-A2A-Notification-Token", &target.token);
        }
        if let Some(auth) = &target.authentication
            && !auth.scheme.is_empty()
            && !auth.credentials.is_empty()
        {
            req = req.header("Authorization", format!("{} {}", auth.scheme, auth.credentials));
        }
        let resp = req.send().await.map_err(|e| (format!("{}", e.without_url()), true))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        // A refusal stays a refusal; an overloaded or failing receiver may recover.
        let retry = status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429;
        Err((format!("the webhook answered {status}"), retry))
    }
}

/// `CreateTaskPushNotificationConfig`: for a task the caller sees.
pub(crate) async fn create(
    s: &A2aServer,
    caller: &Caller,
    cfg: TaskPushNotificationConfig,
    base: &str,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let client = s.client_for(caller.tenant_for(&cfg.tenant)?);
    // The task must be the caller's (not found otherwise, as a missing one).
    tasks::current(&client, tasks::job_id(&cfg.task_id)?, base, Some(0)).await?;
    register(s, &client, cfg, base).await
}

fn key_of(caller: &Caller, req: &PushConfigRequest) -> Result<Key, A2aError> {
    Ok((caller.tenant_for(&req.tenant)?, tasks::job_id(&req.task_id)?))
}

/// `GetTaskPushNotificationConfig`.
pub(crate) async fn get(
    s: &A2aServer,
    caller: &Caller,
    req: PushConfigRequest,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let key = key_of(caller, &req)?;
    s.inner.push.of(&key).into_iter().find(|c| c.id == req.id).ok_or_else(|| {
        A2aError::TaskNotFound(format!("task {} has no push notification config {}", req.task_id, req.id))
    })
}

/// `ListTaskPushNotificationConfigs`: every webhook of the task, one page.
pub(crate) async fn list(
    s: &A2aServer,
    caller: &Caller,
    req: PushConfigRequest,
) -> Result<ListPushConfigsResponse, A2aError> {
    let key = key_of(caller, &req)?;
    Ok(ListPushConfigsResponse { configs: s.inner.push.of(&key), next_page_token: String::new() })
}

/// `DeleteTaskPushNotificationConfig`.
pub(crate) async fn delete(s: &A2aServer, caller: &Caller, req: PushConfigRequest) -> Result<(), A2aError> {
    let key = key_of(caller, &req)?;
    let mut all = s.inner.push.configs.lock().expect("push registry");
    let list =
        all.get_mut(&key).ok_or_else(|| A2aError::TaskNotFound(format!("task {} has no webhooks", req.task_id)))?;
    let before = list.len();
    list.retain(|c| c.id != req.id);
    if list.len() == before {
        return Err(A2aError::TaskNotFound(format!("task {} has no push notification config {}", req.task_id, req.id)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_into_private_networks_need_allow_private() {
        let strict = A2aPushConfig::default();
        for url in ["http://127.0.0.1:9/h", "https://10.1.2.3/h", "https://[fd00::1]/h", "http://localhost:8/h"] {
            let e = check_url(&strict, url).unwrap_err();
            assert!(matches!(&e, A2aError::InvalidParams(m) if m.contains("allow_private")), "{url}: {e:?}");
        }
        assert!(check_url(&strict, "https://hooks.example/a2a").is_ok());
        assert!(check_url(&strict, "http://hooks.example/a2a").is_err(), "plain http beyond loopback");
        let open = A2aPushConfig { allow_private: true, ..Default::default() };
        assert!(check_url(&open, "http://127.0.0.1:9/h").is_ok());
        let e = check_url(&open, "http://169.254.169.254/latest").unwrap_err();
        assert!(matches!(&e, A2aError::InvalidParams(m) if m.contains("link-local")), "{e:?}");
    }
}
