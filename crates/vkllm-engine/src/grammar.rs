//! Structured outputs: grammars (JSON Schema, JSON mode, Lark, regex) compiled by `llguidance`
//! against the model's vocabulary ([`Grammars`]), and the per-request [`Constraint`] that says
//! which tokens may come next. The generators apply its mask before sampling (the CPU sampler's
//! `apply_mask`, or the GPU sampler's mask buffer) and feed it every token drawn.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use llguidance::api::{GrammarWithLexer, TopLevelGrammar};
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value as Json, json};
use vkllm_tokenizer::{TokenBytes, Tokenizer};

use crate::error::EngineError;

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// A JSON Schema.
    JsonSchema(Json),
    /// llguidance's Lark-like grammar syntax (may embed `%json { schema }`).
    Lark(String),
    /// A regular expression the whole output matches.
    Regex(String),
}

impl GrammarSpec {
    /// A stable text for the compile cache.
    fn key(&self) -> String {
        match self {
            GrammarSpec::JsonObject => "json_object".into(),
            GrammarSpec::JsonSchema(s) => format!("schema:{s}"),
            GrammarSpec::Lark(g) => format!("lark:{g}"),
            GrammarSpec::Regex(r) => format!("regex:{r}"),
        }
    }

    fn top_level(&self) -> TopLevelGrammar {
        match self {
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(bound_whitespace(json!({"type": "object"})))
            }
            GrammarSpec::JsonSchema(s) => {
                TopLevelGrammar::from_json_schema(bound_whitespace(s.clone()))
            }
            GrammarSpec::Lark(g) => {
                TopLevelGrammar::from_grammar(GrammarWithLexer::from_lark(g.clone()))
            }
            GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
        }
    }
}

/// llguidance lets JSON take any run of whitespace between tokens; a model that keeps writing
/// spaces would then never finish. Between two tokens of the JSON at most one space, or a
/// newline and an indentation of up to 20 spaces or tabs, fit (pretty-printed JSON; the bound
/// llama.cpp's JSON grammars use), unless the schema sets its own `x-guidance` options. Lark
/// grammars that embed `%json` schemas pass them through this too.
pub fn bound_whitespace(mut schema: Json) -> Json {
    if let Some(o) = schema.as_object_mut()
        && !o.contains_key("x-guidance")
    {
        o.insert(
            "x-guidance".into(),
            json!({"whitespace_pattern": "(?:\\x20|\\x0A[\\x20\\x09]{0,20})"}),
        );
    }
    schema
}

/// Compiled grammars kept for reuse (agents send the same schema on every turn).
const CACHE_ENTRIES: usize = 64;

/// The grammar compiler for one model's vocabulary, with a cache of compiled grammars.
pub struct Grammars {
    factory: ParserFactory,
    /// Every end-of-generation id: allowed wherever the grammar allows its end.
    eog: Arc<[u32]>,
    vocab: usize,
    cache: Mutex<VecDeque<(String, Arc<Grammar>)>>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("vocab", &self.vocab)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

impl Grammars {
    /// The compiler for `tok`'s vocabulary, over a model with `vocab` logits (ids past the
    /// tokenizer's are never allowed).
    pub fn new(tok: &Tokenizer, vocab: usize) -> Result<Self, EngineError> {
        let bytes = tok.token_bytes()?;
        let mut words: Vec<Vec<u8>> = bytes
            .into_iter()
            .map(|b| match b {
                TokenBytes::Text(t) => t,
                TokenBytes::Special(s) => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(s.as_bytes());
                    w
                }
            })
            .collect();
        words.resize(vocab.max(words.len()), Vec::new());
        words.truncate(vocab.max(1));
        let eog: Vec<u32> = tok
            .eog_ids()
            .iter()
            .copied()
            .filter(|&i| (i as usize) < vocab)
            .collect();
        let eos = tok
            .special_ids()
            .eos
            .filter(|e| eog.contains(e))
            .or_else(|| eog.first().copied())
            .ok_or_else(|| EngineError::Grammar {
                reason: "the tokenizer has no end-of-generation token".into(),
            })?;
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(grammar_err)?;
        factory.quiet();
        Ok(Grammars {
            factory,
            eog: eog.into(),
            vocab: words.len(),
            cache: Mutex::new(VecDeque::new()),
        })
    }

    /// Logits per row the masks cover.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// `spec` compiled (or taken from the cache).
    ///
    /// # Errors
    /// [`EngineError::Grammar`] naming what is wrong with the schema, grammar or regex.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Arc<Grammar>, EngineError> {
        let key = spec.key();
        if let Ok(mut c) = self.cache.lock()
            && let Some(i) = c.iter().position(|(k, _)| *k == key)
            && let Some(hit) = c.remove(i)
        {
            let g = hit.1.clone();
            c.push_front(hit);
            return Ok(g);
        }
        let parser = self
            .factory
            .create_parser(spec.top_level())
            .map_err(grammar_err)?;
        let g = Arc::new(Grammar {
            start: Matcher::new(Ok(parser)),
            eog: self.eog.clone(),
            vocab: self.vocab,
        });
        if let Ok(mut c) = self.cache.lock() {
            c.push_front((key, g.clone()));
            c.truncate(CACHE_ENTRIES);
        }
        Ok(g)
    }
}

fn grammar_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Grammar {
        reason: e.to_string(),
    }
}

/// A compiled grammar: each request starts its own [`Constraint`] from it.
pub struct Grammar {
    start: Matcher,
    eog: Arc<[u32]>,
    vocab: usize,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar")
            .field("vocab", &self.vocab)
            .finish_non_exhaustive()
    }
}

impl Grammar {
    /// A fresh matcher at the start of the output.
    pub fn start(&self) -> Constraint {
        Constraint {
            m: self.start.deep_clone(),
            eog: self.eog.clone(),
            words: self.vocab.div_ceil(32),
        }
    }
}

/// One request's position in its grammar.
pub struct Constraint {
    m: Matcher,
    eog: Arc<[u32]>,
    words: usize,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("words", &self.words)
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// The allowed tokens of the next step: bit `i % 32` of word `i / 32` (the samplers'
    /// layout). Where the grammar may end, every end-of-generation token is allowed; once it
    /// must end (or the matcher failed), only those.
    pub fn mask(&mut self) -> Vec<u32> {
        let mut out = vec![0u32; self.words];
        match self.m.compute_mask_or_eos() {
            Ok(v) => {
                let src = v.as_slice();
                let n = src.len().min(out.len());
                out[..n].copy_from_slice(&src[..n]);
                let eos = self.m.tok_env().map(|e| e.tok_trie().eos_token()).ok();
                if eos.is_some_and(|e| v.is_allowed(e)) {
                    self.allow_eog(&mut out);
                }
            }
            Err(_) => self.allow_eog(&mut out),
        }
        out
    }

    fn allow_eog(&self, out: &mut [u32]) {
        for &e in self.eog.iter() {
            if let Some(w) = out.get_mut(e as usize / 32) {
                *w |= 1 << (e % 32);
            }
        }
    }

    /// Feeds the drawn token. An end-of-generation token ends the output (nothing is fed).
    ///
    /// # Errors
    /// [`EngineError::Grammar`] when the grammar rejects the token (a token drawn without the
    /// mask).
    pub fn commit(&mut self, token: u32) -> Result<(), EngineError> {
        if self.eog.contains(&token) {
            return Ok(());
        }
        self.m.consume_token(token).map_err(grammar_err)
    }

    /// The output is complete: only end-of-generation tokens may follow.
    pub fn is_done(&self) -> bool {
        self.m.is_stopped()
    }
}
