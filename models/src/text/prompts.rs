//! sentence-transformers' prompts (`config_sentence_transformers.json`): texts put before an
//! input by name, as bge and e5 models want `"query: "` before a query and nothing, or
//! `"passage: "`, before what is searched. A request names one; `default_prompt_name`, when
//! the folder sets it, applies to requests that name none, as `SentenceTransformer.encode`
//! does.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::LoadError;

/// The most bytes one prompt may have: prompts are instructions of a sentence or two, and
/// each is copied before every text of a request that uses it.
pub const MAX_PROMPT_BYTES: usize = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prompts {
    by_name: BTreeMap<String, String>,
    default: Option<String>,
}

#[derive(Deserialize)]
struct PromptsJson {
    #[serde(default)]
    prompts: BTreeMap<String, String>,
    #[serde(default)]
    default_prompt_name: Option<String>,
}

impl Prompts {
    /// The folder's prompts; none when it has no `config_sentence_transformers.json`.
    pub fn read(dir: &Path) -> Result<Prompts, LoadError> {
        let path = dir.join("config_sentence_transformers.json");
        if !path.is_file() {
            return Ok(Prompts::default());
        }
        let invalid = |reason: String| LoadError::Config {
            path: path.clone(),
            reason,
        };
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
            path: path.clone(),
            source,
        })?;
        let json: PromptsJson = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        if let Some((name, _)) = json
            .prompts
            .iter()
            .find(|(_, p)| p.len() > MAX_PROMPT_BYTES)
        {
            return Err(invalid(format!(
                "prompt {name:?} is longer than {MAX_PROMPT_BYTES} bytes"
            )));
        }
        if let Some(name) = &json.default_prompt_name
            && !json.prompts.contains_key(name)
        {
            return Err(invalid(format!(
                "default_prompt_name {name:?} is not one of the prompts ({})",
                Prompts::list(&json.prompts)
            )));
        }
        Ok(Prompts {
            by_name: json.prompts,
            default: json.default_prompt_name,
        })
    }

    /// The prompt a request gets: the one it names, or the folder's default. An unknown
    /// name is an error that lists the known ones.
    pub fn text(&self, name: Option<&str>) -> Result<Option<&str>, String> {
        let Some(name) = name.or(self.default.as_deref()) else {
            return Ok(None);
        };
        match self.by_name.get(name) {
            Some(p) => Ok(Some(p.as_str())),
            None => Err(format!(
                "prompt_name {name:?} is not one of the model's prompts ({})",
                Prompts::list(&self.by_name)
            )),
        }
    }

    /// The prompts by name, for the model's description.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    fn list(prompts: &BTreeMap<String, String>) -> String {
        if prompts.is_empty() {
            return "it has none".into();
        }
        prompts
            .keys()
            .map(|k| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(json: &str) -> (std::path::PathBuf, Result<Prompts, LoadError>) {
        let dir = std::env::temp_dir().join(format!(
            "tandem-prompts-{}-{:x}",
            std::process::id(),
            json.len() * 31 + json.bytes().map(usize::from).sum::<usize>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config_sentence_transformers.json"), json).unwrap();
        let prompts = Prompts::read(&dir);
        (dir, prompts)
    }

    #[test]
    fn a_named_prompt_or_the_default_or_none() {
        let (dir, p) = folder(
            r#"{"prompts": {"query": "query: ", "passage": "passage: "},
                                  "default_prompt_name": "passage"}"#,
        );
        let p = p.unwrap();
        assert_eq!(p.text(Some("query")), Ok(Some("query: ")));
        assert_eq!(p.text(None), Ok(Some("passage: ")));
        let unknown = p.text(Some("doc")).unwrap_err();
        assert!(unknown.contains(r#""passage", "query""#), "{unknown}");
        assert_eq!(p.names().collect::<Vec<_>>(), ["passage", "query"]);
        let _ = std::fs::remove_dir_all(dir);
        let none = Prompts::read(Path::new("/nonexistent")).unwrap();
        assert_eq!(none.text(None), Ok(None));
        assert!(
            none.text(Some("query"))
                .unwrap_err()
                .contains("it has none")
        );
    }

    #[test]
    fn a_bad_file_is_refused_by_name() {
        let long = format!(r#"{{"prompts": {{"q": "{}"}}}}"#, "x".repeat(2000));
        for (json, words) in [
            (
                r#"{"prompts": {"q": "q: "}, "default_prompt_name": "d"}"#,
                "default_prompt_name",
            ),
            (r#"{"prompts": ["q"]}"#, "invalid type"),
            (long.as_str(), "longer than 1024"),
        ] {
            let (dir, p) = folder(json);
            let e = p.unwrap_err().to_string();
            assert!(
                e.contains(words) && e.contains("config_sentence_transformers"),
                "{e}"
            );
            let _ = std::fs::remove_dir_all(dir);
        }
        // Other keys (sentence-transformers' versions, similarity) are no concern of ours.
        let (dir, p) =
            folder(r#"{"__version__": {"pytorch": "2"}, "similarity_fn_name": "cosine"}"#);
        assert_eq!(p.unwrap(), Prompts::default());
        let _ = std::fs::remove_dir_all(dir);
    }
}
