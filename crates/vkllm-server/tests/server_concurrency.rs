//! Concurrency and limits of the real `vkllm serve` binary through the official clients:
//! 16 streaming clients at once on 4 slots (tests/py/test_concurrency.py), disconnects freeing
//! slots, then a one-slot server with a queue of one and a 3-second time limit
//! (tests/py/test_limits.py): 429 when the queue is full, 504 past the time limit, CORS for
//! the one origin it allows.

mod serve_harness;

#[test]
fn concurrent_clients_disconnects_and_limits() {
    {
        let s = serve_harness::Server::start(&["--slots", "4", "--queue", "16", "--ctx", "512"]);
        s.python("test_concurrency.py");
    }
    let s = serve_harness::Server::start(&[
        "--slots",
        "1",
        "--queue",
        "1",
        "--timeout",
        "3",
        "--ctx",
        "512",
        "--cors",
        "https://app.example",
    ]);
    s.python("test_limits.py");
}
