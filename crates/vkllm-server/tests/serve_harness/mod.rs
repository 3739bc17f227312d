//! Starts the real `vkllm serve` binary on a free loopback port with the real SmolLM2 model and
//! runs a Python script of `tests/py/` against it through the official `openai` and `anthropic`
//! packages. Needs `scripts/fetch-models.sh smollm2` and `pip install openai anthropic`; either
//! missing fails the test with that message. `VKLLM_SERVE_TEST_DEVICE` picks the device
//! (default `cpu`, faster than lavapipe here for a 135M model); `VKLLM_SERVE_TEST_BIN` another
//! build of the binary (default: this one). [`Server::start_args`] serves any model (no Python
//! needed) and [`Server::raw`] sends hand-written requests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The API key every test server requires.
pub const KEY: &str = "test-key-7f3a";

/// A running server; killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
    log: Arc<Mutex<String>>,
}

fn bin() -> String {
    std::env::var("VKLLM_SERVE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vkllm").into())
}

fn py_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py"))
}

impl Server {
    /// `vkllm serve --model smollm2 --port 0 --api-key KEY` plus `extra`.
    pub fn start(extra: &[&str]) -> Server {
        let device = std::env::var("VKLLM_SERVE_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
        Server::start_on(Some(&device), extra)
    }

    /// [`Server::start`] on `device` (`None`: the best Vulkan device, lavapipe in CI).
    pub fn start_on(device: Option<&str>, extra: &[&str]) -> Server {
        let (known, path) = vkllm_tokenizer::cache::known("smollm2").expect("smollm2 is known");
        assert!(
            path.exists(),
            "{}",
            vkllm_tokenizer::cache::missing_message(&known, &path)
        );
        let python = Command::new("python3")
            .args(["-c", "import openai, anthropic, jsonschema"])
            .output();
        assert!(
            python.is_ok_and(|o| o.status.success()),
            "the server tests need Python 3 with the official clients and jsonschema: pip install openai anthropic jsonschema"
        );
        let mut args = vec!["--model", "smollm2", "--api-key", KEY];
        if let Some(d) = device {
            args.extend(["--device", d]);
        }
        args.extend_from_slice(extra);
        Server::start_args(&args)
    }

    /// `vkllm serve --host 127.0.0.1 --port 0` plus `args` (no API key unless given).
    pub fn start_args(args: &[&str]) -> Server {
        let mut child = Command::new(bin())
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting vkllm serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        // Drain stderr for the whole run (a full pipe would block the server).
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("vkllm serve did not start:\n{}", log.lock().unwrap());
            }
        };
        // Loopback unless told otherwise.
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        Server { child, url, log }
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port in the url")
    }

    /// One HTTP/1.1 request (`head`: the request line and headers, without the blank line)
    /// with `body`; the whole response as text.
    pub fn raw(&self, head: &str, body: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port())).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        write!(
            s,
            "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// Runs `tests/py/<script>`; panics with its output and the server's log when it fails.
    pub fn python(&self, script: &str) {
        self.python_env(script, &[]);
    }

    /// [`Server::python`] with extra environment variables for the script.
    pub fn python_env(&self, script: &str, env: &[(&str, &str)]) {
        let out = Command::new("python3")
            .arg(py_dir().join(script))
            .current_dir(py_dir())
            .envs(env.iter().copied())
            .env("VKLLM_URL", &self.url)
            .env("VKLLM_KEY", KEY)
            .env("VKLLM_BIN", bin())
            .env("PYTHONUNBUFFERED", "1")
            .output()
            .expect("running python3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{script}:\n{stdout}{stderr}");
        if !out.status.success() {
            let log = self.log.lock().unwrap();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{script} failed:\n{stdout}{stderr}\n--- server log (last lines) ---\n{}",
                tail.join("\n")
            );
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The llama fixture (2 layers, hidden 64, 4 heads with 2 kv heads, vocab 256) as a Hugging Face
/// checkpoint directory with a word-level tokenizer of 256 words `w0` .. `w255`, in a temporary
/// directory named after `tag` (tests running at once pick different tags).
pub fn tiny_checkpoint(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vkllm-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fx = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/llama"));
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fx.join(f), dir.join(f)).unwrap();
    }
    let vocab: serde_json::Map<String, serde_json::Value> = (0..256)
        .map(|i| (format!("w{i}"), serde_json::json!(i)))
        .collect();
    let tok = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    dir
}
