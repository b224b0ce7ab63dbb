//! Text bounded in bytes: the one cut every bounded field of the crates
//! goes through (conditions' messages, Events' notes, errors kept in a
//! status, reports' free text).

/// The longest prefix of `s` within `max` bytes, cut at a character
/// boundary (never inside a UTF-8 sequence).
pub fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    &s[..s.floor_char_boundary(max)]
}

#[cfg(test)]
mod tests {
    use super::cut_at_char_boundary;

    #[test]
    fn a_cut_never_splits_a_character() {
        assert_eq!(cut_at_char_boundary("abc", 10), "abc");
        assert_eq!(cut_at_char_boundary("abc", 2), "ab");
        assert_eq!(cut_at_char_boundary("aé", 2), "a");
        assert_eq!(cut_at_char_boundary("aé", 3), "aé");
        assert_eq!(cut_at_char_boundary("", 0), "");
        assert_eq!(cut_at_char_boundary("é", 0), "");
    }
}
