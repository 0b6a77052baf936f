//! Headless Chromium driven over the DevTools protocol, for clicking the
//! dashboard's buttons as a person would (the browser sends its own
//! `Origin`, `Sec-Fetch-Site` and cookies, so the CSRF check sees a real
//! browser). `--remote-debugging-pipe` reads commands on fd 3 and writes
//! replies on fd 4, NUL-separated JSON; two FIFOs wired to those fds by
//! `sh` stand in for the pipes, so no WebSocket client is needed.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_testkit::TempDir;
use serde_json::{Value, json};

/// One browser with one page.
pub struct Browser {
    child: Child,
    commands: std::fs::File,
    replies: std::fs::File,
    buffer: Vec<u8>,
    next_id: u64,
    session: String,
    _dir: TempDir,
}

impl Browser {
    /// Starts `bin` headless with a fresh profile and opens a blank page.
    pub fn start(bin: &str) -> Self {
        let dir = TempDir::new("cdp");
        let (cmd_fifo, reply_fifo) = (dir.path().join("cmd"), dir.path().join("reply"));
        for f in [&cmd_fifo, &reply_fifo] {
            assert!(Command::new("mkfifo").arg(f).status().expect("mkfifo").success());
        }
        let script = format!(
            "exec {bin} --headless --no-sandbox --disable-gpu --disable-background-networking \
             --disable-component-update --disable-sync --no-first-run --disable-dev-shm-usage \
             --user-data-dir={} --remote-debugging-pipe 3<{} 4>{}",
            dir.path().join("profile").display(),
            cmd_fifo.display(),
            reply_fifo.display()
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        // Each open waits for the other end: the shell opens them in this order.
        let commands = std::fs::OpenOptions::new().write(true).open(&cmd_fifo).expect("command pipe");
        let replies = std::fs::File::open(&reply_fifo).expect("reply pipe");
        let mut b =
            Self { child, commands, replies, buffer: Vec::new(), next_id: 0, session: String::new(), _dir: dir };
        let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().expect("target id").to_string();
        let attached = b.call(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true}));
        b.session = attached["sessionId"].as_str().expect("session id").to_string();
        b
    }

    /// Sends one command and returns its `result` (or `error`, as `{"error": …}`).
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).expect("write to chromium");
        loop {
            while let Some(end) = self.buffer.iter().position(|b| *b == 0) {
                let raw: Vec<u8> = self.buffer.drain(..=end).collect();
                let v: Value = serde_json::from_slice(&raw[..raw.len() - 1]).expect("chromium's JSON");
                if v["id"] == id {
                    return if v["error"].is_object() { json!({"error": v["error"]}) } else { v["result"].clone() };
                }
            }
            let mut chunk = [0u8; 65536];
            let n = self.replies.read(&mut chunk).expect("read from chromium");
            assert!(n > 0, "chromium closed its pipe during {method}");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// Evaluates `js` in the page (awaiting a promise); `None` when it threw
    /// or the page was navigating.
    pub fn eval(&mut self, js: &str) -> Option<Value> {
        let session = self.session.clone();
        let params = json!({"expression": js, "awaitPromise": true, "returnByValue": true});
        let r = self.call(Some(&session), "Runtime.evaluate", params);
        if r.get("error").is_some() || r.get("exceptionDetails").is_some() {
            return None;
        }
        Some(r["result"]["value"].clone())
    }

    /// Makes the page's window `width` x `height` CSS pixels, as a phone or
    /// a narrow browser window is.
    pub fn viewport(&mut self, width: u32, height: u32) {
        let session = self.session.clone();
        let metrics = json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        self.call(Some(&session), "Emulation.setDeviceMetricsOverride", metrics);
    }

    /// Saves what the page shows now as a PNG at `path`.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        let session = self.session.clone();
        let metrics = json!({"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": false});
        self.call(Some(&session), "Emulation.setDeviceMetricsOverride", metrics);
        let r = self.call(
            Some(&session),
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let data = r["data"].as_str().unwrap_or_else(|| panic!("Page.captureScreenshot answered {r}"));
        std::fs::write(path, decode_base64(data)).expect("write the screenshot");
    }

    /// Opens `url` in the page.
    pub fn open(&mut self, url: &str) {
        let session = self.session.clone();
        let r = self.call(Some(&session), "Page.navigate", json!({"url": url}));
        assert!(r.get("error").is_none() && r.get("errorText").is_none(), "navigate {url}: {r}");
    }

    /// Waits until the expression `js` is true in the page, up to
    /// `timeout`: the page re-checks it on each DOM change (a
    /// MutationObserver), and a page that is navigating is asked again.
    pub fn until(&mut self, timeout: Duration, what: &str, js: &str) {
        let waiter = format!(
            "new Promise(res => {{ const check = () => {{ try {{ return !!({js}); }} catch (e) {{ return false; }} }};
               if (document.readyState !== 'loading' && check()) return res(true);
               const obs = new MutationObserver(() => {{ if (check()) {{ obs.disconnect(); res(true); }} }});
               obs.observe(document, {{subtree: true, childList: true, attributes: true, characterData: true}});
               setTimeout(() => {{ obs.disconnect(); res(check()); }}, 2000); }})"
        );
        let start = Instant::now();
        loop {
            match self.eval(&waiter) {
                Some(Value::Bool(true)) => return,
                Some(_) => {}
                // Between two documents: nothing to observe yet.
                None => std::thread::sleep(Duration::from_millis(50)),
            }
            if start.elapsed() >= timeout {
                let page = self.eval("[...document.querySelectorAll('li.ev')].slice(-40).map(l => l.textContent).join('\\n') + '\\n' + (document.body ? document.body.innerText.slice(0, 600) : '')");
                panic!("timed out waiting for {what}; the page shows:\n{}", page.unwrap_or_default());
            }
        }
    }
}

impl Drop for Browser {
    /// Asks the browser to close (so it ends its helper processes), then
    /// kills it if it has not after a few seconds.
    fn drop(&mut self) {
        let msg = b"{\"id\":999999,\"method\":\"Browser.close\",\"params\":{}}\0";
        let _ = self.commands.write_all(msg);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 decoding (for screenshots; the tests crate has no base64 dependency).
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, c)| n | (value(*c) as u32) << (18 - 6 * i));
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}
