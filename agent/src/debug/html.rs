//! What every HTML page shares: escaping, URL pieces, time and age
//! formatting, and the page shell with its Content-Security-Policy (inline
//! style and script allowed only by their SHA-256 hashes, nothing else
//! loaded from anywhere).

use jiff::{Timestamp, tz::TimeZone};
use std::fmt::Write as _;

use crate::debug::assets;
use crate::model::MembersSnapshot;
use crate::view::Readiness;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes one URL path segment or query value (everything but
/// RFC 3986's unreserved characters).
pub fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes a percent-encoded path segment or query value (`+` is a space
/// in a query value: `plus_is_space`). Invalid escapes stay as they are;
/// bytes that are not UTF-8 become U+FFFD.
pub fn decode_component(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let hex = |c: u8| char::from(c).to_digit(16);
        match b {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 3;
                    continue;
                }
                _ => out.push(b),
            },
            b'+' if plus_is_space => out.push(b' '),
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `key=value` pairs of a query string, decoded.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode_component(k, true), decode_component(v, true))
        })
        .collect()
}

/// The link to an instance's page.
pub fn instance_href(namespace: &str, name: &str) -> String {
    format!(
        "/instances/{}/{}",
        encode_component(namespace),
        encode_component(name)
    )
}

/// `yes`, `no` or an en dash for unknown.
pub fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "–",
    }
}

/// A time of day in UTC (`10:42:03`), with the date when it is not on
/// `now`'s day, as a `<time>` element.
pub fn clock(at: Timestamp, now: Timestamp) -> String {
    let z = at.to_zoned(TimeZone::UTC);
    let today = now.to_zoned(TimeZone::UTC).date() == z.date();
    let shown = if today {
        z.strftime("%H:%M:%S").to_string()
    } else {
        z.strftime("%Y-%m-%d %H:%M").to_string()
    };
    format!(
        "<time datetime=\"{}\" title=\"{} UTC\">{}</time>",
        at,
        z.strftime("%Y-%m-%d %H:%M:%S"),
        shown
    )
}

/// The same time as plain text (`10:42:03`), for sentences and titles.
pub fn clock_text(at: Timestamp, now: Timestamp) -> String {
    let z = at.to_zoned(TimeZone::UTC);
    if now.to_zoned(TimeZone::UTC).date() == z.date() {
        z.strftime("%H:%M:%S").to_string()
    } else {
        z.strftime("%Y-%m-%d %H:%M:%S").to_string()
    }
}

/// Whole seconds from `from` to `to` (0 when `to` is earlier).
pub fn seconds_between(from: Timestamp, to: Timestamp) -> u64 {
    u64::try_from(to.duration_since(from).as_secs()).unwrap_or(0)
}

/// A duration for people: `45 s`, `12 min`, `3 h 4 min`, `2 d 5 h`.
pub fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        s => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The CSP source for inline content `text`: `'sha256-…'` (base64 of its
/// SHA-256).
fn csp_hash(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    format!("'sha256-{}'", base64(digest.as_ref()))
}

/// Standard base64 with padding (RFC 4648 §4), as CSP hash sources use.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The Content-Security-Policy of every page: nothing may load from
/// anywhere; inline style and script only when they hash to the pages'
/// one style sheet and one script ([`assets`]); the script may fetch the
/// page it is on (auto-refresh); forms and links stay on the agent.
/// Hashes rather than a nonce: the assets are constants, and a refreshed
/// page parsed by the script carries the same style, which a nonce of
/// another response would flag as a violation.
pub fn content_security_policy() -> &'static str {
    static POLICY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "default-src 'none'; style-src {}; script-src {}; connect-src 'self'; \
             form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
            csp_hash(assets::STYLE),
            csp_hash(assets::SCRIPT)
        )
    });
    &POLICY
}

/// Who owns (judges and writes) the instances this replica shows.
pub fn owner(members: Option<&MembersSnapshot>) -> String {
    match members {
        Some(m) => m.identity.clone(),
        None => "this agent".to_owned(),
    }
}

/// The parts of a page the shell wraps.
pub struct Page<'a> {
    /// The document title.
    pub title: &'a str,
    /// Auto-refresh on (`Some(true)`), paused by `?refresh=off`
    /// (`Some(false)`), or not offered (`None`).
    pub refresh: Option<bool>,
    /// The URL that pauses auto-refresh (or resumes it when paused), for
    /// browsers without script.
    pub toggle_href: &'a str,
    /// When the page was rendered.
    pub now: Timestamp,
    /// The agent's readiness.
    pub readiness: &'a Readiness,
    /// The sharding section's summary, when sharding is on.
    pub members: Option<&'a MembersSnapshot>,
}

/// Wraps `body` in the document: head with the style, the header bar
/// (readiness, owner, refresh control), and the script.
pub fn shell(page: &Page<'_>, body: &str) -> String {
    let mut html = String::with_capacity(body.len() + 8192);
    let _ = write!(
        html,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta name=\"referrer\" content=\"no-referrer\">\
<title>{}</title><style>{}</style>",
        escape(page.title),
        assets::STYLE
    );
    if page.refresh == Some(true) {
        html.push_str("<noscript><meta http-equiv=\"refresh\" content=\"10\"></noscript>");
    }
    html.push_str("</head>\n<body>\n<header class=\"bar\">");
    let _ = write!(
        html,
        "<a class=\"brand\" href=\"/\">kura-agent</a>\
<span class=\"ready {}\" id=\"readiness\" data-live>{}</span>\
<span class=\"muted\">owner: {}</span>\
<span class=\"spacer\"></span>\
<span class=\"muted\" id=\"updated\" data-live>updated {} UTC</span>",
        if page.readiness.ready {
            "is-ready"
        } else {
            "not-ready"
        },
        if page.readiness.ready {
            "agent ready".to_owned()
        } else {
            format!(
                "agent NOT ready: {}",
                escape(&page.readiness.reasons.join("; "))
            )
        },
        escape(&owner(page.members)),
        clock_text(page.now, page.now),
    );
    match page.refresh {
        Some(true) => {
            let _ = write!(
                html,
                "<button id=\"pause\" type=\"button\" aria-pressed=\"false\" hidden>Pause auto-refresh</button>\
<noscript><a class=\"button\" href=\"{}\">Pause auto-refresh</a></noscript>",
                escape(page.toggle_href)
            );
        }
        Some(false) => {
            let _ = write!(
                html,
                "<span class=\"muted\">auto-refresh paused</span><a class=\"button\" href=\"{}\">Resume</a>",
                escape(page.toggle_href)
            );
        }
        None => {}
    }
    html.push_str("</header>\n<main>\n");
    html.push_str(body);
    let _ = write!(
        html,
        "</main>\n<script>{}</script>\n</body></html>\n",
        assets::SCRIPT
    );
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn components_round_trip_and_bad_escapes_stay() {
        for s in ["kura", "a b/c?d&e=f", "<script>'x'</script>", "ünï", "%zz"] {
            assert_eq!(decode_component(&encode_component(s), false), s);
        }
        assert_eq!(decode_component("a+b%20c", true), "a b c");
        assert_eq!(decode_component("a+b", false), "a+b");
        assert_eq!(decode_component("100%", false), "100%");
        assert_eq!(decode_component("%4", false), "%4");
        assert_eq!(decode_component("%41", false), "A");
        assert_eq!(
            query_pairs("ns=kura&verdict=hard_stop&q=fd+time&x"),
            [
                ("ns".to_owned(), "kura".to_owned()),
                ("verdict".to_owned(), "hard_stop".to_owned()),
                ("q".to_owned(), "fd time".to_owned()),
                ("x".to_owned(), String::new()),
            ]
        );
    }

    #[test]
    fn times_and_ages_read_well() {
        let now: Timestamp = "2026-07-21T10:42:03Z".parse().expect("ts");
        assert!(clock(now, now).contains(">10:42:03<"));
        let yesterday: Timestamp = "2026-07-20T23:59:00Z".parse().expect("ts");
        assert!(clock(yesterday, now).contains(">2026-07-20 23:59<"));
        assert_eq!(clock_text(now, now), "10:42:03");
        assert_eq!(age(45), "45 s");
        assert_eq!(age(150), "2 min");
        assert_eq!(age(3 * 3600 + 240), "3 h 4 min");
        assert_eq!(age(2 * 86_400 + 5 * 3600), "2 d 5 h");
        assert_eq!(seconds_between(now, yesterday), 0);
    }

    #[test]
    fn base64_matches_rfc_4648() {
        for (raw, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), encoded);
        }
    }

    #[test]
    fn the_policy_allows_nothing_but_the_hashed_assets() {
        // SHA-256 of "abc" (FIPS 180-2 example), base64.
        assert_eq!(
            csp_hash("abc"),
            "'sha256-ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0='"
        );
        let csp = content_security_policy();
        assert!(csp.starts_with("default-src 'none';"));
        assert!(csp.contains(&format!("style-src {};", csp_hash(assets::STYLE))));
        assert!(csp.contains(&format!("script-src {};", csp_hash(assets::SCRIPT))));
        assert!(!csp.contains("unsafe"));
        assert!(!csp.contains("img-src"), "no image from anywhere");
    }
}
