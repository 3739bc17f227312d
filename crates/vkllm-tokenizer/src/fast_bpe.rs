//! A faster encode for byte-level BPE `tokenizer.json` pipelines (GPT-2, Llama 3, Qwen2,
//! SmolLM2): the steps of the `tokenizers` crate's encode (added tokens split out, NFC, the
//! regex splits, GPT-2's byte map, the model's BPE with its word cache) on string slices,
//! without the per-character alignment bookkeeping that is most of that crate's encode time.
//! Pipelines with any other step keep going through `tokenizers`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use serde_json::Value as Json;
use tokenizers::utils::SysRegex;
use tokenizers::{Model, ModelWrapper, NormalizedString, Normalizer, NormalizerWrapper};

use crate::token_bytes::byte_level_chars;
use crate::tokenizer::EncodeOptions;

/// The byte-level pre-tokenizer's own split (`ByteLevel { use_regex: true }`).
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Words [`FastBpe`] keeps the ids of, at most, and the longest (bytes).
const WORD_CACHE: usize = 1 << 16;
const WORD_CACHE_LEN: usize = 64;

/// Added (or special) tokens matched leftmost-longest in one pass: the automaton and each
/// pattern's id.
pub(crate) struct AddedSet {
    trie: AhoCorasick,
    ids: Vec<u32>,
}

impl AddedSet {
    pub(crate) fn new(tokens: &[(String, u32)]) -> Option<AddedSet> {
        let trie = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(tokens.iter().map(|(t, _)| t))
            .ok()?;
        Some(AddedSet {
            trie,
            ids: tokens.iter().map(|&(_, id)| id).collect(),
        })
    }

    /// The leftmost token in `text` (longest there): (byte offset, length, id).
    pub(crate) fn find(&self, text: &str) -> Option<(usize, usize, u32)> {
        let m = self.trie.find(text)?;
        Some((m.start(), m.len(), self.ids[m.pattern().as_usize()]))
    }

    /// `text` cut around the added tokens it holds, as `tokenizers`' `find_matches`: leftmost
    /// longest matches, those `skip` names left in the text (specials under
    /// `encode_special_tokens`).
    fn split<'t>(&self, text: &'t str, skip: impl Fn(u32) -> bool) -> Vec<(&'t str, Option<u32>)> {
        let mut out = Vec::new();
        let mut at = 0;
        for m in self.trie.find_iter(text) {
            let id = self.ids[m.pattern().as_usize()];
            if skip(id) {
                continue;
            }
            if at < m.start() {
                out.push((&text[at..m.start()], None));
            }
            out.push((&text[m.start()..m.end()], Some(id)));
            at = m.end();
        }
        if at < text.len() || out.is_empty() {
            out.push((&text[at..], None));
        }
        out
    }
}

/// The ids a post-processor puts around one sequence with `add_special_tokens`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Affixes {
    pub(crate) before: Vec<u32>,
    pub(crate) after: Vec<u32>,
}

impl Affixes {
    /// From a post-processor's JSON: none, `ByteLevel` (offsets only), `TemplateProcessing`
    /// (its `single` template) or a `Sequence` of those; `None` for anything else.
    fn of(pp: &Json) -> Option<Affixes> {
        match pp["type"].as_str()? {
            "ByteLevel" => Some(Affixes::default()),
            "Sequence" => {
                let mut found = Affixes::default();
                for p in pp["processors"].as_array()? {
                    let a = Affixes::of(p)?;
                    if a != Affixes::default() {
                        if found != Affixes::default() {
                            return None;
                        }
                        found = a;
                    }
                }
                Some(found)
            }
            "TemplateProcessing" => {
                let mut a = Affixes::default();
                let mut seen_a = false;
                for piece in pp["single"].as_array()? {
                    if let Some(name) = piece["SpecialToken"]["id"].as_str() {
                        let ids = pp["special_tokens"][name]["ids"].as_array()?;
                        let side = if seen_a { &mut a.after } else { &mut a.before };
                        for id in ids {
                            side.push(u32::try_from(id.as_u64()?).ok()?);
                        }
                    } else if piece["Sequence"]["id"] == "A" && !seen_a {
                        seen_a = true;
                    } else {
                        return None;
                    }
                }
                seen_a.then_some(a)
            }
            _ => None,
        }
    }
}

/// The look-ahead ending of GPT-2's, Llama 3's and Qwen2's split patterns: a whitespace run
/// before a non-space keeps its last character for the next piece.
const WS_TAIL: &str = r"|\s+(?!\S)|\s+";

/// A split pattern `X|\s+(?!\S)|\s+` (X without look-around) run on the `regex` crate, whose
/// automata are several times faster than the backtracking `fancy-regex` the look-ahead needs:
/// `all` is `X|\s+`; where it matches whitespace that `X` (`head`, anchored) does not, the
/// look-ahead's match is taken instead (the run less its last character when a non-space
/// follows and the run has two or more).
pub(crate) struct WsSplit {
    all: regex::Regex,
    head: regex::Regex,
}

impl WsSplit {
    pub(crate) fn new(pattern: &str) -> Option<WsSplit> {
        let x = pattern.strip_suffix(WS_TAIL)?;
        // `head` runs on the text from the match on: word boundaries would lose what precedes.
        if x.contains(r"\b") || x.contains(r"\B") {
            return None;
        }
        let head = regex::Regex::new(&format!("^(?:{x})")).ok()?;
        // Empty matches would need fancy-regex's own stepping past them.
        if head.is_match("") {
            return None;
        }
        Some(WsSplit {
            all: regex::Regex::new(&format!(r"{x}|\s+")).ok()?,
            head,
        })
    }

    /// The matches of the whole pattern in `s`, in order, as `(start, end)`.
    pub(crate) fn find_iter(&self, s: &str, mut each: impl FnMut(usize, usize)) {
        let mut at = 0;
        while let Some(m) = self.all.find_at(s, at) {
            let (start, mut end) = (m.start(), m.end());
            if end == start {
                // Never from the patterns `new` takes; step past it rather than loop.
                match s[start..].chars().next() {
                    Some(c) => at = start + c.len_utf8(),
                    None => return,
                }
                continue;
            }
            let run = m.as_str();
            let ws = run.chars().all(char::is_whitespace);
            if end < s.len() && ws && !self.head.is_match(&s[start..]) {
                // `\s+` took the whole run; the look-ahead leaves its last character.
                let last = run.chars().next_back().map_or(0, char::len_utf8);
                if run.len() > last {
                    end -= last;
                }
            }
            each(start, end);
            at = end;
        }
    }
}

/// One pre-tokenizer split.
enum Split {
    /// `Split(Regex, Isolated)` and ByteLevel's own regex: matches and the text between them.
    Regex(SysRegex),
    /// The same for patterns [`WsSplit`] runs.
    Ws(WsSplit),
    /// `Digits`: each numeric character alone (`individual`) or runs of them, and the text
    /// between.
    Digits { individual: bool },
}

impl Split {
    /// The split for regex `pattern`: [`WsSplit`] where it applies, else `fancy-regex`.
    fn of(pattern: &str) -> Option<Split> {
        match WsSplit::new(pattern) {
            Some(ws) => Some(Split::Ws(ws)),
            None => SysRegex::new(pattern).ok().map(Split::Regex),
        }
    }

    /// The pieces of `s` in order (never empty ones).
    fn pieces<'t>(&self, s: &'t str) -> Vec<&'t str> {
        let mut out = Vec::new();
        let mut at = 0;
        let mut cut = |start: usize, end: usize, out: &mut Vec<&'t str>| {
            if at < start {
                out.push(&s[at..start]);
            }
            if start < end {
                out.push(&s[start..end]);
            }
            at = end;
        };
        match self {
            Split::Regex(re) => {
                for (start, end) in re.find_iter(s) {
                    cut(start, end, &mut out);
                }
            }
            Split::Ws(ws) => ws.find_iter(s, |start, end| cut(start, end, &mut out)),
            Split::Digits { individual } => {
                let mut run: Option<(usize, usize)> = None;
                for (i, c) in s.char_indices() {
                    let end = i + c.len_utf8();
                    match (c.is_numeric(), run) {
                        (true, Some((start, _))) if !individual => run = Some((start, end)),
                        (true, prev) => {
                            if let Some((a, b)) = prev {
                                cut(a, b, &mut out);
                            }
                            run = Some((i, end));
                        }
                        (false, Some((a, b))) => {
                            cut(a, b, &mut out);
                            run = None;
                        }
                        (false, None) => {}
                    }
                }
                if let Some((a, b)) = run {
                    cut(a, b, &mut out);
                }
            }
        }
        if at < s.len() {
            out.push(&s[at..]);
        }
        out
    }
}

/// The fast path of one tokenizer (see the module doc).
pub(crate) struct FastBpe {
    /// What `add_special_tokens` adds.
    affixes: Affixes,
    /// Added tokens matched on the raw text, then those matched after normalization.
    raw: AddedSet,
    normalized: AddedSet,
    special: HashSet<u32>,
    /// The normalizer is NFC (the identity on ASCII).
    nfc: bool,
    /// The pre-tokenizer's splits in order (`Split` / `Digits` steps, then ByteLevel's own).
    splits: Vec<Split>,
    byte_chars: [char; 256],
    /// Pre-tokenized words already encoded (the model's own cache answers in its tokens'
    /// strings, one allocation each).
    words: RwLock<HashMap<String, Vec<u32>>>,
}

impl FastBpe {
    /// The fast path for `tok` where its pipeline is one this module reproduces exactly: a BPE
    /// model, no normalizer or NFC, isolating regex `Split`s then `ByteLevel` without a prefix
    /// space, added tokens without strip or single-word rules, a post-processor [`Affixes`]
    /// reads and neither truncation nor padding.
    pub(crate) fn for_tokenizer(tok: &tokenizers::Tokenizer) -> Option<FastBpe> {
        if !matches!(tok.get_model(), ModelWrapper::BPE(_))
            || tok.get_truncation().is_some()
            || tok.get_padding().is_some()
        {
            return None;
        }
        let affixes = match tok.get_post_processor() {
            None => Affixes::default(),
            Some(pp) => Affixes::of(&serde_json::to_value(pp).ok()?)?,
        };
        let nfc = match tok.get_normalizer() {
            None => false,
            Some(n) => serde_json::to_value(n).ok()?["type"] == "NFC",
        };
        if tok.get_normalizer().is_some() && !nfc {
            return None;
        }
        let pt = serde_json::to_value(tok.get_pre_tokenizer()?).ok()?;
        let steps = match pt["type"].as_str()? {
            "Sequence" => pt["pretokenizers"].as_array()?.clone(),
            _ => vec![pt],
        };
        let (last, before) = steps.split_last()?;
        if last["type"] != "ByteLevel" || last["add_prefix_space"] != Json::Bool(false) {
            return None;
        }
        let mut splits = Vec::new();
        for s in before {
            let isolated = s["type"] == "Split"
                && s["behavior"] == "Isolated"
                && s["invert"] == Json::Bool(false);
            if isolated {
                splits.push(Split::of(s["pattern"]["Regex"].as_str()?)?);
            } else if s["type"] == "Digits" {
                let individual = s["individual_digits"].as_bool()?;
                splits.push(Split::Digits { individual });
            } else {
                return None;
            }
        }
        if last["use_regex"] != Json::Bool(false) {
            splits.push(Split::of(GPT2_PATTERN)?);
        }
        let mut raw = Vec::new();
        let mut normalized = Vec::new();
        let mut special = HashSet::new();
        for (id, t) in tok.get_added_tokens_decoder() {
            if t.single_word || t.lstrip || t.rstrip {
                return None;
            }
            if t.special {
                special.insert(id);
            }
            if t.normalized {
                let mut n = NormalizedString::from(t.content.as_str());
                if let Some(norm) = tok.get_normalizer() {
                    norm.normalize(&mut n).ok()?;
                }
                normalized.push((n.get().to_string(), id));
            } else {
                raw.push((t.content, id));
            }
        }
        Some(FastBpe {
            affixes,
            raw: AddedSet::new(&raw)?,
            normalized: AddedSet::new(&normalized)?,
            special,
            nfc,
            splits,
            byte_chars: byte_level_chars(),
            words: RwLock::new(HashMap::new()),
        })
    }

    /// The ids of `text`, with the post-processor's around them when `add_special`; `None` where
    /// a step failed (the caller then encodes through `tokenizers`, which reports it).
    pub(crate) fn encode(
        &self,
        model: &ModelWrapper,
        normalizer: Option<&NormalizerWrapper>,
        text: &str,
        opts: EncodeOptions,
    ) -> Option<Vec<u32>> {
        let skip = |id: u32| !opts.parse_special && self.special.contains(&id);
        let mut out = Vec::with_capacity(text.len() / 3 + 3);
        if opts.add_special_tokens {
            out.extend_from_slice(&self.affixes.before);
        }
        let mut word = String::new();
        for (piece, id) in self.raw.split(text, skip) {
            if let Some(id) = id {
                out.push(id);
                continue;
            }
            let piece: Cow<str> = match normalizer {
                Some(n) if self.nfc && !piece.is_ascii() => {
                    let mut s = NormalizedString::from(piece);
                    n.normalize(&mut s).ok()?;
                    Cow::Owned(s.get().to_string())
                }
                _ => Cow::Borrowed(piece),
            };
            for (part, id) in self.normalized.split(&piece, skip) {
                match id {
                    Some(id) => out.push(id),
                    None => self.pre_split(part, 0, &mut |w| {
                        if self.extend_cached(w, &mut out) {
                            return Some(());
                        }
                        word.clear();
                        word.extend(w.bytes().map(|b| self.byte_chars[b as usize]));
                        let start = out.len();
                        out.extend(model.tokenize(&word).ok()?.iter().map(|t| t.id));
                        self.remember(w, &out[start..]);
                        Some(())
                    })?,
                }
            }
        }
        if opts.add_special_tokens {
            out.extend_from_slice(&self.affixes.after);
        }
        Some(out)
    }

    /// Appends the ids of pre-tokenized word `w` to `out` if it was seen before.
    fn extend_cached(&self, w: &str, out: &mut Vec<u32>) -> bool {
        let Ok(words) = self.words.read() else {
            return false;
        };
        words.get(w).map(|ids| out.extend_from_slice(ids)).is_some()
    }

    /// Keeps `ids` as word `w`'s (short words, up to [`WORD_CACHE`] of them).
    fn remember(&self, w: &str, ids: &[u32]) {
        if w.len() > WORD_CACHE_LEN {
            return;
        }
        if let Ok(mut words) = self.words.write()
            && words.len() < WORD_CACHE
        {
            words.insert(w.to_string(), ids.to_vec());
        }
    }

    /// Cuts `s` by the splits from `level` on and hands each final piece to `word`.
    fn pre_split(
        &self,
        s: &str,
        level: usize,
        word: &mut dyn FnMut(&str) -> Option<()>,
    ) -> Option<()> {
        match self.splits.get(level) {
            None if s.is_empty() => Some(()),
            None => word(s),
            Some(split) => {
                for piece in split.pieces(s) {
                    self.pre_split(piece, level + 1, word)?;
                }
                Some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random strings over characters that sit on every edge of the patterns: spaces, tabs,
    /// CR / LF, Unicode spaces (NBSP, ideographic), letters with and without marks, digits
    /// (ASCII and Arabic-Indic), apostrophes of the contractions in both cases, punctuation.
    fn random_text(seed: &mut u64, len: usize) -> String {
        const CHARS: &[char] = &[
            ' ', ' ', ' ', '\t', '\n', '\r', '\u{a0}', '\u{3000}', 'a', 'S', 't', 'L', 'é',
            '\u{301}', 'ж', '中', '1', '2', '٣', '\'', '\'', 'r', 'e', 'v', 'D', 'm', '.', ',',
            '!', '-', '(', '😀', '_', '\u{2028}',
        ];
        (0..len)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                CHARS[(*seed >> 33) as usize % CHARS.len()]
            })
            .collect()
    }

    #[test]
    fn ws_split_matches_the_look_ahead_pattern() {
        let patterns = [
            GPT2_PATTERN,
            crate::gguf::bpe::LLAMA3,
            crate::gguf::bpe::QWEN2,
            crate::tiktoken::QWEN35_PATTERN,
        ];
        let mut seed = 7u64;
        for p in patterns {
            let ws = WsSplit::new(p).expect("a look-ahead pattern");
            let re = SysRegex::new(p).expect("pattern");
            for i in 0..4000 {
                let text = random_text(&mut seed, 1 + i % 40);
                let want: Vec<(usize, usize)> = re.find_iter(&text).collect();
                let mut got = Vec::new();
                ws.find_iter(&text, |a, b| got.push((a, b)));
                assert_eq!(got, want, "{p:?} on {text:?}");
            }
        }
    }

    #[test]
    fn other_patterns_keep_fancy_regex() {
        assert!(WsSplit::new(r"\p{N}{1,3}").is_none());
        assert!(WsSplit::new(r"\b\w+|\s+(?!\S)|\s+").is_none());
        assert!(WsSplit::new(r"(?<=a)b|\s+(?!\S)|\s+").is_none());
        assert!(WsSplit::new(r"a*|\s+(?!\S)|\s+").is_none());
        assert!(WsSplit::new(r"$|\s+(?!\S)|\s+").is_none());
        assert!(matches!(Split::of(r"(?<=a)b"), Some(Split::Regex(_))));
        assert!(matches!(Split::of(GPT2_PATTERN), Some(Split::Ws(_))));
    }
}
