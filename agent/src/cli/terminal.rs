//! Foreign text on the terminal: every line a command prints about what it
//! read (a node's `incarnation`, a URL, an error naming a key of a file)
//! goes through [`line`], which escapes control characters (escape
//! sequences, bell, carriage return, line feeds that would fake a line) and
//! the bidirectional-override characters, and cuts the line at
//! [`MAX_LINE_CHARS`] characters, saying how much was cut.

use std::fmt::Write as _;

/// At most this many characters of a line are printed.
pub const MAX_LINE_CHARS: usize = 4096;

/// Characters that reorder how text is shown (Unicode bidirectional
/// controls): printed escaped, as control characters are.
fn reorders(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` made safe to print as one line: control and bidirectional
/// characters escaped (`\n`, `\u{1b}`), at most [`MAX_LINE_CHARS`] characters
/// of it, then ` … (N more bytes)` when cut.
pub fn line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_LINE_CHARS) + 32);
    for (shown, (at, c)) in text.char_indices().enumerate() {
        if shown == MAX_LINE_CHARS {
            let _ = write!(out, " … ({} more bytes)", text.len() - at);
            break;
        }
        if c.is_control() || reorders(c) {
            let _ = write!(out, "{}", c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_reordering_characters_are_escaped() {
        assert_eq!(
            line("inc\u{1b}[31mred\u{7}\r\nkura-agent baseline: fake\u{202E}"),
            "inc\\u{1b}[31mred\\u{7}\\r\\nkura-agent baseline: fake\\u{202e}"
        );
        assert_eq!(line("ok: ünïcode, tabs\tno"), "ok: ünïcode, tabs\\tno");
        assert_eq!(line("\u{9b}31m"), "\\u{9b}31m", "C1 control (CSI)");
    }

    #[test]
    fn a_long_line_is_cut_saying_how_much() {
        let long = format!("key {}", "k".repeat(1_000_000));
        let shown = line(&long);
        assert!(
            shown.chars().count() < MAX_LINE_CHARS + 40,
            "{}",
            shown.len()
        );
        assert!(shown.ends_with(&format!(" … ({} more bytes)", long.len() - MAX_LINE_CHARS)));
        assert_eq!(
            line(&"x".repeat(MAX_LINE_CHARS)),
            "x".repeat(MAX_LINE_CHARS)
        );
    }
}
