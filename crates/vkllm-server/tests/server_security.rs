//! The server's checks against hostile clients (issue #34): without an API key only IP
//! addresses, `localhost` and `--allowed-host` names are answered (a DNS-rebinding page names
//! its own host: 403); JSON endpoints refuse other content types (415: a page cannot post JSON
//! as a "simple" text/plain request); `Bearer` in any case; `--metrics-public`; CORS answers
//! only listed origins. Every refusal carries the API's error JSON (hyper's 431 for oversized
//! headers too). The llama fixture as a
//! checkpoint directory on the CPU backend.

mod serve_harness;

use serve_harness::{Server, tiny_checkpoint};

const BODY: &str = r#"{"model": "x", "prompt": "w5 w7", "max_tokens": 2, "temperature": 0}"#;

fn status(reply: &str) -> u16 {
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {reply}"))
}

/// The JSON body of a reply's error, as OpenAI clients read it.
fn error_type(reply: &str) -> String {
    let body = reply.split("\r\n\r\n").nth(1).unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {reply}"));
    v["error"]["type"].as_str().unwrap_or("").to_string()
}

#[test]
fn hosts_content_types_keys_and_origins() {
    let dir = tiny_checkpoint("security-hosts");
    let model = dir.to_str().unwrap();
    let open = Server::start_args(&[
        "--model",
        model,
        "--device",
        "cpu",
        "--any-model",
        "--allowed-host",
        "vkllm.lan",
        "--cors",
        "https://app.example",
    ]);
    let post = |host: &str, ctype: &str| {
        open.raw(
            &format!("POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: {ctype}"),
            BODY,
        )
    };
    for host in ["localhost:8080", "127.0.0.1", "[::1]:80", "VKLLM.lan"] {
        let r = post(host, "application/json; charset=utf-8");
        assert_eq!(status(&r), 200, "{host}: {r}");
    }
    for host in [
        "evil.example",
        "evil.example:8080",
        "localhost.evil.example",
        "",
    ] {
        let r = post(host, "application/json");
        assert_eq!(status(&r), 403, "{host}: {r}");
        assert_eq!(error_type(&r), "permission_error", "{r}");
    }
    let r = post("localhost", "text/plain");
    assert_eq!(status(&r), 415, "{r}");
    assert_eq!(error_type(&r), "invalid_request_error", "{r}");
    // CORS: the listed origin is echoed, another gets no header.
    let get = |origin: &str| {
        open.raw(
            &format!("GET /v1/models HTTP/1.1\r\nHost: localhost\r\nOrigin: {origin}"),
            "",
        )
    };
    let r = get("https://app.example").to_ascii_lowercase();
    assert!(
        r.contains("access-control-allow-origin: https://app.example"),
        "{r}"
    );
    let r = get("https://evil.example").to_ascii_lowercase();
    assert!(!r.contains("access-control-allow-origin"), "{r}");
    drop(open);

    // With a key: any Host (the key protects), Bearer in any case, /metrics public on request.
    let keyed = Server::start_args(&[
        "--model",
        model,
        "--device",
        "cpu",
        "--any-model",
        "--api-key",
        "k3y",
        "--metrics-public",
    ]);
    let get = |path: &str, auth: &str| {
        keyed.raw(
            &format!("GET {path} HTTP/1.1\r\nHost: anything.example{auth}"),
            "",
        )
    };
    assert_eq!(
        status(&get("/v1/models", "\r\nAuthorization: bearer k3y")),
        200
    );
    assert_eq!(
        status(&get("/v1/models", "\r\nAuthorization: BEARER  k3y ")),
        200
    );
    let r = get("/v1/models", "\r\nAuthorization: Bearer wrong");
    assert_eq!(status(&r), 401, "{r}");
    assert_eq!(error_type(&r), "authentication_error");
    assert_eq!(status(&get("/v1/models", "")), 401);
    assert_eq!(status(&get("/metrics", "")), 200);
    drop(keyed);
    std::fs::remove_dir_all(&dir).ok();
}

/// `--ctx` below a useful minimum and CPU KV caches beyond the available memory are refused at
/// start (exit 1, the numbers named), not discovered by every request or by the OOM killer.
#[test]
fn impossible_sizes_are_refused_at_start() {
    let dir = tiny_checkpoint("security-sizes");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vkllm"))
            .args(["serve", "--device", "cpu", "--port", "0", "--model"])
            .arg(&dir)
            .args(extra)
            .output()
            .expect("running vkllm serve")
    };
    // (`--ctx 0` is the model's whole context, as in llama.cpp.)
    let out = run(&["--ctx", "8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--ctx 8: at least 16 positions"), "{err}");
    // The fixture's KV: 2 layers x 2 kv heads x 16 dims x 2 x 4 bytes = 512 bytes a position.
    let out = run(&["--slots", "1000000000", "--ctx", "2048"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--slots 1000000000 x --ctx") && err.contains("of memory available"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Connections cannot be held open for free: a client that never finishes its headers is cut
/// off after `--header-timeout`, one that never finishes its body gets 408 after
/// `--body-timeout`, and connections past `--max-connections` get 503 (then service resumes
/// when the idle ones go away).
#[test]
fn slow_and_idle_connections_are_bounded() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;
    let dir = tiny_checkpoint("security-conns");
    let model = dir.to_str().unwrap();
    let quick = Server::start_args(&[
        "--model",
        model,
        "--device",
        "cpu",
        "--any-model",
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
    ]);
    let connect = |port: u16| {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    };
    // A body that stops halfway: 408 with the API's error JSON.
    let mut s = connect(quick.port());
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: 200\r\n\r\n{{\"prompt\": \"w1"
    )
    .unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert_eq!(status(&reply), 408, "{reply}");
    assert_eq!(error_type(&reply), "invalid_request_error", "{reply}");
    // Headers over hyper's buffer: its 431, with the error JSON every other refusal has.
    let mut s = connect(quick.port());
    let big = "a".repeat(1 << 20);
    let _ = write!(
        s,
        "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: {big}\r\n\r\n"
    );
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert_eq!(status(&reply), 431, "{reply}");
    assert_eq!(error_type(&reply), "invalid_request_error", "{reply}");
    // Headers that never end: the server closes the connection (a read ends instead of waiting
    // out the client's 30 s limit).
    let mut s = connect(quick.port());
    write!(s, "GET /health HTTP/1.1\r\nHost: localhost\r\n").unwrap();
    let mut buf = Vec::new();
    let r = s.read_to_end(&mut buf);
    assert!(r.is_ok(), "the server kept a half-sent request open: {r:?}");
    drop(quick);

    let capped = Server::start_args(&[
        "--model",
        model,
        "--device",
        "cpu",
        "--any-model",
        "--max-connections",
        "2",
    ]);
    let idle: Vec<TcpStream> = (0..2).map(|_| connect(capped.port())).collect();
    let mut third = connect(capped.port());
    let mut reply = String::new();
    let _ = third.read_to_string(&mut reply);
    assert_eq!(status(&reply), 503, "{reply}");
    assert_eq!(error_type(&reply), "server_error", "{reply}");
    drop(idle);
    // The two idle connections close; requests are served again.
    let ok = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        status(&capped.raw("GET /health HTTP/1.1\r\nHost: localhost", "")) == 200
    });
    assert!(ok, "no request served after the idle connections closed");
    std::fs::remove_dir_all(&dir).ok();
}
