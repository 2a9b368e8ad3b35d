//! How a checkpoint's tensor names are read: without the family's prefix, old spellings
//! modernised, and the tensors a model does not use set aside.

use crate::encoder::family::Family;
use crate::encoder::spec::EncoderConfig;

/// The name without the family's `prefix`, with old LayerNorm spellings (`gamma`, `beta`)
/// modernised.
pub(super) fn canonical_name(name: &str, prefix: &str) -> String {
    let name = name.strip_prefix(prefix).unwrap_or(name);
    if name.contains("LayerNorm.") {
        if let Some(base) = name.strip_suffix(".gamma") {
            return format!("{base}.weight");
        }
        if let Some(base) = name.strip_suffix(".beta") {
            return format!("{base}.bias");
        }
    }
    name.to_string()
}

/// Tensors a checkpoint may hold that the model does not use: the position ids buffer, the
/// pooler unless a BERT (or GTE) classifier's head reads it, a ModernBERT's masked-language
/// head, a GTE encoder's token classifier (gte-multilingual-base's), and a decoder's
/// language-model head.
pub(super) fn is_ignored(canonical: &str, c: &EncoderConfig) -> bool {
    let pooler_read = c.is_classifier() && matches!(c.family, Family::Bert | Family::Gte);
    // A ModernBERT saved with its masked-language head, as sentence-transformers reads it;
    // a classifier's head is also `head.`.
    let language_head = c.family == Family::ModernBert
        && ((canonical.starts_with("head.") && !c.is_classifier())
            || canonical.starts_with("decoder."));
    let token_classifier =
        c.family == Family::Gte && !c.is_classifier() && canonical.starts_with("classifier.");
    // A causal LM's head, which an encoder of embeddings does not read.
    let lm_head = c.decoder.is_some() && canonical == "lm_head.weight";
    lm_head
        || canonical == "embeddings.position_ids"
        || (!pooler_read && canonical.starts_with("pooler."))
        || language_head
        || token_classifier
}
