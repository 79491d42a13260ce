//! A real `decide` process on a free loopback port, killed on drop.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test: `$DECIDE_TEST_BIN` (another build, such as an older commit's to show
/// a test fails on it, or a CUDA build), else the one cargo built with these tests.
pub fn binary() -> PathBuf {
    std::env::var_os("DECIDE_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_decide")))
}

/// The small test model: `$DECIDE_TEST_MODEL`, else `<repo>/.models/smol.gguf`.
pub fn model_path() -> PathBuf {
    let path = std::env::var_os("DECIDE_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(".models")
                .join("smol.gguf")
        });
    assert!(
        path.exists(),
        "test model {} is missing: run `scripts/fetch-model.sh smol` (or set DECIDE_TEST_MODEL)",
        path.display()
    );
    path
}

/// The lowest and highest `option_mass` of an OpenAI-format response's answers (their audit
/// blocks): a `min_option_mass` between the two makes some answers abstain and not others.
pub fn option_mass_range(body: &Value) -> (f64, f64) {
    body["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .map(|a| {
            a["extra"]["audit"]["option_mass"]
                .as_f64()
                .expect("option_mass")
        })
        .fold((f64::MAX, f64::MIN), |(l, h), m| (l.min(m), h.max(m)))
}

/// Directory holding the test-only guest plugins built by plugins/build.rs.
pub fn test_guest(name: &str) -> PathBuf {
    let path = PathBuf::from(decide_plugins::builtin::TEST_GUESTS_DIR).join(format!("{name}.wasm"));
    assert!(path.exists(), "test guest {} was not built", path.display());
    path
}

/// A fresh empty directory under the test target dir.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{name}-{}-{}",
        std::process::id(),
        unique()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

pub struct Server {
    child: Child,
    pub base: String,
    client: reqwest::blocking::Client,
    /// Its stderr lines when started by [`Server::start_logged`].
    log: Arc<Mutex<Vec<String>>>,
    /// The key `/metrics` needs (its `--metrics-key`, else its `--admin-key`), which
    /// [`Server::get`] sends there as a configured scraper would.
    metrics_key: Option<String>,
}

pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Server {
    /// Starts the binary with the test model and `extra` flags; returns once it listens
    /// (not necessarily ready: see [`Server::wait_ready`]).
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with(extra, false)
    }

    /// [`Server::start`] with its `info` log kept (see [`Server::log`]) instead of shown.
    pub fn start_logged(extra: &[&str]) -> Server {
        Server::start_with(extra, true)
    }

    /// The stderr lines so far of a server started by [`Server::start_logged`].
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// [`Server::log`] once a line contains `text` (panics, showing the log, after
    /// `within`). The lines reach the test through a pipe read by another thread, so a reply
    /// can arrive before the lines the server wrote ahead of it.
    pub fn log_once_it_has(&self, text: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        loop {
            let log = self.log();
            if log.iter().any(|line| line.contains(text)) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {text:?} within {within:?}: {log:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start_with(extra: &[&str], logged: bool) -> Server {
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-cache");
        let mut command = Command::new(binary());
        command.arg("serve");
        if !extra.contains(&"--model") {
            command.arg("--model").arg(model_path());
        }
        // Each server gets its own tenant store unless the test shares one on purpose.
        if !extra.contains(&"--data-dir") {
            command.arg("--data-dir").arg(scratch_dir("data"));
        }
        // Startup calibration reads hundreds of questions; only tests about it turn it on.
        if !extra.contains(&"--calibration-questions") {
            command.args(["--calibration-questions", "none"]);
        }
        // So does startup tuning (every renderer x label scheme over a question set).
        if !extra.contains(&"--tune-questions") {
            command.args(["--tune-questions", "none"]);
        }
        // Deadlines are tested on their own (robustness.rs). The default one (60 s) is off
        // here: on a loaded 2-core machine running many servers at once, other tests' large
        // requests take longer than that.
        if !extra.contains(&"--request-timeout-ms") {
            command.args(["--request-timeout-ms", "0"]);
        }
        let mut child = command
            .args(["--port", "0", "--host", "127.0.0.1"])
            .arg("--cache-dir")
            .arg(&cache)
            .args(extra)
            .env("DECIDE_LOG", if logged { "info" } else { "warn" })
            .stdout(Stdio::piped())
            .stderr(if logged {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("start decide");
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let lines = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let base = line
            .trim()
            .strip_prefix("decide listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        // Generous: on a 2-core machine shared with other builds and servers a request that
        // takes seconds alone can take minutes (issue 54 saw 120 s run out there); the tests
        // bound what they mean to bound themselves.
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()
            .unwrap();
        let flag = |name: &str| {
            extra
                .iter()
                .position(|a| *a == name)
                .and_then(|i| extra.get(i + 1))
                .map(|v| v.to_string())
        };
        Server {
            child,
            base,
            client,
            log,
            metrics_key: flag("--metrics-key").or_else(|| flag("--admin-key")),
        }
    }

    /// Starts and waits until `/health` says ok.
    pub fn ready(extra: &[&str]) -> Server {
        let server = Server::start(extra);
        server.wait_ready();
        server
    }

    pub fn wait_ready(&self) {
        self.wait_ready_within(Duration::from_secs(300));
    }

    /// Waits until `/health` says ok, failing after `limit`.
    pub fn wait_ready_within(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let reply = self.get("/health");
            if reply.status == 200 {
                return;
            }
            assert!(
                reply.body["status"] != "failed",
                "server failed to start: {}",
                reply.body
            );
            assert!(
                Instant::now() < deadline,
                "server not ready after {} s: {}",
                limit.as_secs(),
                reply.body
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET path`; on `/metrics` with the server's metrics key when it has one.
    pub fn get(&self, path: &str) -> Reply {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(key) = self.metrics_key.as_ref().filter(|_| path == "/metrics") {
            request = request.bearer_auth(key);
        }
        Self::reply(request.send().expect("GET"))
    }

    /// `GET path` with no `Authorization` header at all.
    pub fn get_anonymous(&self, path: &str) -> Reply {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .expect("GET");
        Self::reply(response)
    }

    pub fn post(&self, path: &str, body: &Value) -> Reply {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .expect("POST");
        Self::reply(response)
    }

    /// `method path` with `Authorization: Bearer key`, and a JSON body when given.
    pub fn send_as(&self, method: &str, path: &str, key: &str, body: Option<&Value>) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        Self::reply(request.send().expect("request"))
    }

    /// POST a JSON body with `Authorization: Bearer key`.
    pub fn post_as(&self, path: &str, key: &str, body: &Value) -> Reply {
        self.send_as("POST", path, key, Some(body))
    }

    /// PUT raw bytes (`content-type`) with `Authorization: Bearer key`.
    pub fn put_bytes_as(&self, path: &str, key: &str, bytes: Vec<u8>, content_type: &str) -> Reply {
        let response = self
            .client
            .put(format!("{}{path}", self.base))
            .bearer_auth(key)
            .header("content-type", content_type)
            .body(bytes)
            .send()
            .expect("PUT");
        Self::reply(response)
    }

    /// The value of an unlabelled metric in `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").body;
        let text = text.as_str().expect("metrics text");
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
            .parse()
            .expect("a number")
    }

    /// Sends the process a signal by name (`TERM`, `INT`), as a supervisor would.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {name} failed");
    }

    /// Waits for the process to exit within `limit`; its exit status, or `None` if it is
    /// still running.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn post_raw(&self, path: &str, body: &'static str, content_type: &str) -> Reply {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body)
            .send()
            .expect("POST");
        Self::reply(response)
    }

    /// A response as a [`Reply`]: its status, headers and body (JSON, else the text).
    pub fn reply(response: reqwest::blocking::Response) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply {
            status,
            body,
            headers,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
