//! Where a long text is cut into pieces to be tokenized one at a time: between words, so
//! that the pieces' tokens are the whole text's.

/// Where the first piece of `text` ends: where every tokenizer family splits words anyway.
/// Best before the last run of spaces that starts within `target` bytes, so that the next
/// piece begins with all of it: BERT's pre-tokenizer drops the spaces, while SentencePiece
/// (`▁word`) and byte-level BPE (`Ġword`) join a space to the word after it, and only a
/// space (not a tab or a newline) is SentencePiece's word boundary. Failing that, after the
/// last other whitespace, where BERT's pre-tokenizer splits. A run of `target` bytes with
/// no whitespace at all (base64, say) is cut where it reaches `target`: only there may the
/// pieces' tokens differ from the whole text's, and a BERT vocabulary makes any word past
/// 100 characters `[UNK]` either way.
pub(super) fn piece_end(text: &str, target: usize) -> usize {
    if text.len() <= target {
        return text.len();
    }
    let mut cut = target;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = &text[..cut];
    let before_spaces = head
        .rfind(' ')
        .map(|i| head[..i].trim_end_matches(' ').len());
    if let Some(end) = before_spaces.filter(|&end| end > 0) {
        return end;
    }
    let after_whitespace = head
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())
        .map(|(i, c)| i + c.len_utf8());
    after_whitespace.unwrap_or(cut)
}

/// Where the last piece of `text` starts, for a text read from its end: cut as
/// [`piece_end`] cuts, so that the pieces' tokens are the whole text's. Best before the run
/// of spaces that holds the first space of the last `target` bytes (the piece takes all of
/// the run, unless it is longer than `target`); failing that, after the first whitespace
/// there; failing that, where `target` bytes are left. The piece is never empty.
pub(super) fn piece_start(text: &str, target: usize) -> usize {
    if text.len() <= target {
        return 0;
    }
    let mut from = text.len() - target;
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let tail = &text[from..];
    let before_spaces = tail
        .find(' ')
        .map(|i| text[..from + i].trim_end_matches(' ').len());
    // A run of spaces longer than a piece is cut within it, as `piece_end` cuts it: a piece
    // is never more than twice `target`.
    let within_reach = |start: usize| start > 0 && from.saturating_sub(start) <= target;
    if let Some(start) = before_spaces.filter(|&start| within_reach(start)) {
        return start;
    }
    let after_whitespace = tail
        .char_indices()
        .find(|(_, c)| c.is_whitespace())
        .map(|(i, c)| from + i + c.len_utf8());
    after_whitespace
        .filter(|&start| start < text.len())
        .unwrap_or(from)
}

#[cfg(test)]
mod tests {
    use super::{piece_end, piece_start};

    #[test]
    fn pieces_from_the_end_start_before_spaces_or_after_whitespace() {
        let cases = [
            ("aaa bbb ccc", 5, " ccc"),
            ("aa   bb", 3, "   bb"),
            ("abcdefgh", 3, "fgh"),
            ("ab\ncd\nef", 4, "ef"),
            ("abcdef\n", 3, "ef\n"),
            ("ééé", 3, "éé"),
            ("   abc", 4, "abc"),
            ("short", 8, "short"),
            // A run of spaces longer than a piece is cut within it.
            ("a          b", 3, " b"),
        ];
        for (text, target, piece) in cases {
            assert_eq!(&text[piece_start(text, target)..], piece, "{text:?}");
        }
    }

    /// Read from either end, the pieces cover the text in order, none empty, each cut
    /// before a run of spaces or after other whitespace where the text has some in reach.
    #[test]
    fn pieces_from_either_end_cover_the_text_and_cut_between_words() {
        let text = "retrieval  augmented\tgeneration über 東京\n🙂 ".repeat(40);
        let between_words = |cut: usize| {
            let (before, after) = text.split_at(cut);
            (after.starts_with(' ') && !before.ends_with(' '))
                || before.ends_with(char::is_whitespace)
        };
        for target in [16, 64] {
            let (mut rest, mut cuts) = (text.as_str(), Vec::new());
            while !rest.is_empty() {
                let start = piece_start(rest, target);
                assert!(start < rest.len(), "an empty piece");
                rest = &rest[..start];
                cuts.push(start);
            }
            let mut covered = 0;
            for piece in std::iter::successors(Some(text.as_str()), |rest| {
                let end = piece_end(rest, target);
                (end < rest.len()).then(|| &rest[end..])
            }) {
                let end = piece_end(piece, target);
                assert!(end > 0, "an empty piece");
                covered += end;
                if end < piece.len() {
                    assert!(between_words(covered), "from the start, a cut at {covered}");
                }
            }
            assert_eq!(covered, text.len());
            for &cut in cuts.iter().filter(|&&c| c > 0) {
                assert!(between_words(cut), "from the end, a cut at {cut}");
            }
        }
    }
}
