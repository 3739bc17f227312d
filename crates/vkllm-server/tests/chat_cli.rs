//! `vkllm chat` end to end with SmolLM2-135M-Instruct, greedy, on the CPU reference backend.
//!
//! The terminal test drives the program through a real pseudo-terminal (tests/pty_driver.py,
//! Python's `pty`), as a person would: Ctrl-C at the prompt, two turns where the second only
//! makes sense after the first, /stats, /save, /reset, Ctrl-C in the middle of an answer, a turn
//! after it, Ctrl-D to leave. The scripted test pipes plain lines into it (--load, a continued
//! line, /save, /quit). Needs python3 and the model in the cache
//! (scripts/fetch-models.sh smollm2).

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value as Json, json};

const MAX_TOKENS: usize = 48;

fn vkllm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vkllm"));
    c.env_remove("VKLLM_MODEL").env_remove("VKLLM_DEVICE");
    c
}

/// `vkllm run` greedy on the same model and settings: the reference answer.
fn run_answer(prompt: &str) -> String {
    let out = vkllm()
        .args(["run", "--device", "cpu", "--temperature", "0"])
        .args(["--max-tokens", &MAX_TOKENS.to_string(), prompt])
        .output()
        .expect("vkllm run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).expect("utf-8");
    s.strip_suffix('\n').unwrap_or(&s).to_string()
}

/// Token count of `messages` rendered with the generation prompt (`vkllm tokenize --chat`).
fn chat_tokens(dir: &Path, messages: Json) -> usize {
    let file = dir.join("count.json");
    std::fs::write(&file, messages.to_string()).unwrap();
    let out = vkllm()
        .args(["tokenize", "--chat"])
        .arg(&file)
        .output()
        .expect("vkllm tokenize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<u32> = serde_json::from_slice(&out.stdout).expect("ids");
    ids.len()
}

/// The numbers of a `/stats` output.
#[derive(Debug)]
struct Stats {
    cached: usize,
    prompt: usize,
    reused: usize,
    generated: usize,
    finish: String,
}

fn number_after(text: &str, key: &str) -> usize {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} not in {text:?}"));
    text[at + key.len()..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {text:?}"))
}

fn stats(segment: &str) -> Stats {
    let line = segment
        .lines()
        .find(|l| l.starts_with("last answer:"))
        .unwrap_or_else(|| panic!("no stats in {segment:?}"));
    let finish = line
        .split("finish ")
        .nth(1)
        .and_then(|r| r.split(" |").next())
        .unwrap_or_default()
        .to_string();
    Stats {
        cached: number_after(segment, "context:"),
        prompt: number_after(line, "prompt"),
        reused: number_after(line, "tokens ("),
        generated: number_after(line, "computed),"),
        finish,
    }
}

/// The answer in a segment `MESSAGE\nANSWER\n>>> `.
fn answer(segment: &str) -> String {
    let (_, rest) = segment.split_once('\n').expect("echoed line");
    rest.strip_suffix("\n>>> ")
        .unwrap_or_else(|| panic!("no prompt after {rest:?}"))
        .to_string()
}

#[test]
fn terminal_session_through_a_pty() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("saved.json");
    let q1 = "What is the capital of France?";
    let q2 = "And of Germany?";
    let story = "Write a long story about a dragon.";
    let prompt = "\n>>> ";
    let stats_done = "last answer:[^\n]*\n>>> ";
    let steps = json!([
        {"expect": ">>> ", "timeout": 600},
        // Ctrl-C at the prompt drops the line and the program goes on.
        {"send": "half a line\u{3}"}, {"expect": "/quit to leave\\)\n>>> "},        // 1
        {"send": format!("{q1}\r")}, {"expect": prompt, "timeout": 300},          // 2
        {"send": format!("{q2}\r")}, {"expect": prompt, "timeout": 300},          // 3
        {"send": "/stats\r"}, {"expect": stats_done},                              // 4
        {"send": format!("/save {}\r", saved.display())},
        {"expect": "\\(saved 4 messages[^\n]*\n>>> "},                            // 5
        {"send": "/reset\r"}, {"expect": "\\(conversation reset\\)\n>>> "},       // 6
        {"send": "/stats\r"}, {"expect": stats_done},                              // 7
        {"send": format!("{q2}\r")}, {"expect": prompt, "timeout": 300},          // 8
        {"send": "/stats\r"}, {"expect": stats_done},                              // 9
        // Ctrl-C once the answer has started.
        {"send": format!("{story}\r")}, {"expect": "dragon\\.\n.{8}", "timeout": 300}, // 10
        {"send": "\u{3}"}, {"expect": "\\[stopped\\]\n>>> "},                     // 11
        {"send": "/stats\r"}, {"expect": stats_done},                              // 12
        {"send": "Thank you.\r"}, {"expect": prompt, "timeout": 300},             // 13
        {"send": "/stats\r"}, {"expect": stats_done},                              // 14
        {"send": "\u{4}"}, {"eof": true, "timeout": 60},                          // 15 (Ctrl-D)
    ]);
    let script = dir.path().join("script.json");
    std::fs::write(&script, steps.to_string()).unwrap();
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pty_driver.py"))
        .arg(&script)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_vkllm"))
        .args([
            "chat",
            "--device",
            "cpu",
            "--temperature",
            "0",
            "--no-history",
        ])
        .args(["--max-tokens", &MAX_TOKENS.to_string()])
        .env("TERM", "xterm-256color")
        .env_remove("VKLLM_MODEL")
        .env_remove("VKLLM_DEVICE")
        .stderr(Stdio::inherit())
        .output()
        .expect("python3 tests/pty_driver.py");
    let report: Json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "driver output ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert!(out.status.success(), "{report:#}");
    let seg: Vec<&str> = report["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(report["status"], 0, "exit status");

    // Turn 1 is what `vkllm run` answers to the same prompt.
    let a1 = answer(seg[2]);
    assert_eq!(a1, run_answer(q1));
    assert!(a1.contains("Paris"), "{a1}");
    // Turn 2 only makes sense after turn 1; the model answers about the capital.
    let a2 = answer(seg[3]);
    assert!(a2.contains("Berlin"), "{a2}");

    // Turn 2's prompt reused turn 1's prompt and answer from the cache.
    let p1 = chat_tokens(dir.path(), json!([{"role": "user", "content": q1}]));
    let s3 = stats(seg[4]);
    assert_eq!(
        s3.prompt,
        chat_tokens(
            dir.path(),
            json!([
                {"role": "user", "content": q1},
                {"role": "assistant", "content": a1},
                {"role": "user", "content": q2},
            ])
        )
    );
    assert!(
        s3.reused > p1 && s3.reused < s3.prompt,
        "{s3:?}, turn 1 prompt {p1}"
    );
    assert_eq!(s3.cached, s3.prompt + s3.generated, "{s3:?}");
    assert_eq!(s3.finish, "end");

    // /save wrote the conversation.
    let saved: Json = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    assert_eq!(
        saved,
        json!([
            {"role": "user", "content": q1},
            {"role": "assistant", "content": a1},
            {"role": "user", "content": q2},
            {"role": "assistant", "content": a2},
        ])
    );

    // /reset empties the cache; the same question alone no longer knows what it refers to.
    assert!(seg[7].contains("context: 0 of"), "{}", seg[7]);
    assert!(seg[7].contains("last answer: none yet"), "{}", seg[7]);
    let s8 = stats(seg[9]);
    assert_eq!(s8.reused, 0, "{s8:?}");
    assert_ne!(answer(seg[8]), a2);

    // Ctrl-C stopped the story early, and the program went on.
    let s11 = stats(seg[12]);
    assert_eq!(s11.finish, "cancelled", "{s11:?}");
    assert!(s11.generated >= 1 && s11.generated < MAX_TOKENS, "{s11:?}");
    let s13 = stats(seg[14]);
    assert!(s13.finish == "end" || s13.finish == "length", "{s13:?}");
    assert!(!answer(seg[13]).is_empty());
    // The next turn reused the stopped turn's prompt and at least one of its tokens.
    assert!(s13.reused > s11.prompt, "{s11:?} then {s13:?}");
}

#[test]
fn scripted_session_from_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let conv = dir.path().join("conv.json");
    let out_file = dir.path().join("out.json");
    let history = json!([
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
    ]);
    std::fs::write(&conv, history.to_string()).unwrap();
    let input = format!(
        "/stats\nAnd of \\\nGermany?\n/stats\n/save {}\n/quit\n/stats\n",
        out_file.display()
    );
    let mut args = vec!["--device", "cpu", "--temperature", "0", "--no-history"];
    let max = MAX_TOKENS.to_string();
    let conv_arg = conv.display().to_string();
    args.extend(["--max-tokens", &max, "--load", &conv_arg]);
    let stdout = piped_chat(&input, &args);
    // Plain text: no prompts, no terminal escapes.
    assert!(
        !stdout.contains(">>>") && !stdout.contains('\x1b'),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    // Two /stats before /quit, none after it.
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("context:")).count(),
        2,
        "{stdout}"
    );
    assert!(lines[0].contains("conversation: 1 exchanges"), "{stdout}");
    assert_eq!(lines[1], "last answer: none yet");
    // The continued line is one message, asked after the loaded conversation.
    let stats_at = lines
        .iter()
        .rposition(|l| l.starts_with("context:"))
        .unwrap();
    let answer = lines[2..stats_at].join("\n");
    assert!(answer.contains("Berlin"), "{stdout}");
    let s = stats(&lines[stats_at..].join("\n"));
    let mut asked = history.as_array().unwrap().clone();
    asked.push(json!({"role": "user", "content": "And of \nGermany?"}));
    assert_eq!(s.prompt, chat_tokens(dir.path(), Json::Array(asked)));
    assert_eq!(s.reused, 0);
    let saved: Json = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(saved.as_array().unwrap().len(), 4);
    assert_eq!(saved[3]["content"], answer.as_str());
}

/// The stdout of `vkllm chat ARGS` fed `input` on a pipe (it must exit successfully).
fn piped_chat(input: &str, args: &[&str]) -> String {
    let mut child = vkllm()
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vkllm chat");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The last `/stats` of a piped chat session with `extra` flags (the Vulkan device: lavapipe in
/// CI), greedy, 8 tokens per answer.
fn piped_last_stats(input: &str, extra: &[&str]) -> Stats {
    let base = ["--temperature", "0", "--no-history", "--max-tokens", "8"];
    let stdout = piped_chat(input, &[&base[..], extra].concat());
    let at = stdout
        .rfind("context:")
        .unwrap_or_else(|| panic!("{stdout}"));
    stats(&stdout[at..])
}

/// `--prefix-cache-mb` on the batched GPU decoder: a conversation /loaded again after another
/// took the cache is copied back from the store (every prompt token reused but the last, whose
/// logits start the answer); without the store only what the two conversations share (the
/// template's system prompt) is.
#[test]
fn a_loaded_conversation_comes_back_from_the_prefix_store() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let conv_a = json!([
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
    ]);
    let conv_b = json!([
        {"role": "user", "content": "Name three colours of the rainbow."},
        {"role": "assistant", "content": "Red, orange and yellow."},
    ]);
    std::fs::write(&a, conv_a.to_string()).unwrap();
    std::fs::write(&b, conv_b.to_string()).unwrap();
    let input = format!(
        "/load {a}\nAnd of Germany?\n/load {b}\nAnd two more?\n/load {a}\nAnd of Germany?\n/stats\n",
        a = a.display(),
        b = b.display()
    );
    let slots = ["--decoder", "slots", "--ctx", "512", "--prefix-cache-mb"];
    let with = piped_last_stats(&input, &[&slots[..], &["64"]].concat());
    let without = piped_last_stats(&input, &[&slots[..], &["0"]].concat());
    let mut asked = conv_a.as_array().unwrap().clone();
    asked.push(json!({"role": "user", "content": "And of Germany?"}));
    let prompt = chat_tokens(dir.path(), Json::Array(asked));
    assert_eq!((with.prompt, without.prompt), (prompt, prompt));
    assert_eq!(with.reused, prompt - 1, "{with:?}");
    assert!(
        without.reused > 0 && without.reused < prompt / 2,
        "{without:?} of {prompt}"
    );
}
