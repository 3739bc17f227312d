//! The conversation as chat messages: an optional system message and the turns. Saved and
//! loaded as a JSON list of `{"role", "content"}` messages (the form chat templates and the
//! OpenAI API use); loading also takes `{"messages": [...]}`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Value as Json, json};

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Conversation {
    pub system: Option<String>,
    /// User and assistant messages, in order.
    pub turns: Vec<Json>,
}

impl Conversation {
    pub fn new(system: Option<String>) -> Self {
        Conversation {
            system,
            turns: Vec::new(),
        }
    }

    /// Every message, the system message first.
    pub fn messages(&self) -> Json {
        let mut all = Vec::with_capacity(self.turns.len() + 1);
        if let Some(s) = &self.system {
            all.push(json!({"role": "system", "content": s}));
        }
        all.extend(self.turns.iter().cloned());
        Json::Array(all)
    }

    pub fn push(&mut self, role: &str, content: &str) {
        self.turns.push(json!({"role": role, "content": content}));
    }

    /// Drops the oldest exchange (everything up to the second user message); false when only
    /// the last user message is left.
    pub fn drop_oldest(&mut self) -> bool {
        let next_user = self
            .turns
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, m)| m["role"] == "user")
            .map(|(i, _)| i);
        match next_user {
            Some(i) => {
                self.turns.drain(..i);
                true
            }
            None => false,
        }
    }

    /// Completed user/assistant exchanges.
    pub fn exchanges(&self) -> usize {
        self.turns
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.messages())?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: Json = serde_json::from_str(&text)
            .with_context(|| format!("{}: not valid JSON", path.display()))?;
        Self::from_json(value).with_context(|| format!("{}", path.display()))
    }

    /// From a list of messages or an object with `messages`; every message needs a string
    /// `role` and a string `content`.
    pub fn from_json(value: Json) -> Result<Self> {
        let list = match value {
            Json::Array(l) => l,
            Json::Object(mut o) => match o.remove("messages") {
                Some(Json::Array(l)) => l,
                _ => bail!("an object needs a `messages` list"),
            },
            _ => bail!("expected a list of messages"),
        };
        let mut c = Conversation::default();
        for (i, m) in list.into_iter().enumerate() {
            let (Some(role), Some(content)) = (m["role"].as_str(), m["content"].as_str()) else {
                bail!("message {i}: needs a string `role` and a string `content`");
            };
            match role {
                "system" if i == 0 => c.system = Some(content.to_string()),
                "user" | "assistant" => c.push(role, content),
                other => bail!(
                    "message {i}: role `{other}` (expected user or assistant, or system first)"
                ),
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_then_load_is_the_same_conversation() {
        let mut c = Conversation::new(Some("Be brief.".into()));
        c.push("user", "Hi, I'm Ana.");
        c.push("assistant", "Hello Ana!\nHow can I help?");
        c.push("user", "What's my name?");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.json");
        c.save(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let v: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(v[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(v[2]["content"], "Hello Ana!\nHow can I help?");
        assert_eq!(v.as_array().unwrap().len(), 4);
        assert_eq!(Conversation::load(&p).unwrap(), c);
    }

    #[test]
    fn load_takes_an_object_and_rejects_bad_messages() {
        let c = Conversation::from_json(json!({"messages": [{"role": "user", "content": "x"}]}))
            .unwrap();
        assert_eq!(c.system, None);
        assert_eq!(c.turns.len(), 1);
        assert!(Conversation::from_json(json!([{"role": "user"}])).is_err());
        assert!(Conversation::from_json(json!([{"role": "tool", "content": "x"}])).is_err());
        assert!(
            Conversation::from_json(json!([
                {"role": "user", "content": "x"},
                {"role": "system", "content": "late"}
            ]))
            .is_err()
        );
        assert!(Conversation::from_json(json!("text")).is_err());
    }

    #[test]
    fn drop_oldest_removes_whole_exchanges() {
        let mut c = Conversation::new(None);
        c.push("user", "1");
        c.push("assistant", "a");
        c.push("user", "2");
        c.push("assistant", "b");
        c.push("user", "3");
        assert!(c.drop_oldest());
        assert_eq!(c.turns[0]["content"], "2");
        assert!(c.drop_oldest());
        assert_eq!(c.turns.len(), 1);
        assert!(!c.drop_oldest());
        assert_eq!(c.exchanges(), 0);
    }
}
