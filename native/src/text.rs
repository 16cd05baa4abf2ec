//! String predicates with exactly Python's semantics (code points, `str.isspace`,
//! the `re` patterns of `schemas.records` / `schemas.canonical`, `repr()` of ASCII).

use std::borrow::Cow;

/// `schemas.records.is_valid_id`: `[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,127}` (ASCII only).
#[inline]
pub fn is_valid_id(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 128 {
        return false;
    }
    let first = b[0];
    if !(first.is_ascii_alphanumeric() || first == b'_') {
        return false;
    }
    b[1..].iter().all(|&c| {
        c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'@' | b'+' | b'=' | b'-')
    })
}

/// `schemas.canonical.is_digest`: exactly `sha256:` + 64 lowercase hex digits.
#[inline]
pub fn is_digest(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 71
        && b.starts_with(b"sha256:")
        && b[7..]
            .iter()
            .all(|&c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Python's `str.isspace()` for one character (Unicode 14 / CPython 3.11:
/// general category Zs or bidirectional class WS, B or S). The set is checked
/// against the running interpreter by the tests.
#[inline]
pub fn py_isspace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0b}' | '\u{0c}' | '\r' | '\u{1c}'..='\u{1f}' | ' ' | '\u{85}' | '\u{a0}' | '\u{1680}'
            | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}'
    )
}

/// `value.strip() == ""`
#[inline]
pub fn is_blank(s: &str) -> bool {
    s.chars().all(py_isspace)
}

/// `len(value)` in code points.
#[inline]
pub fn char_len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// `_CONTROL_RE.search(value) is not None` with `[\x00-\x1f\x7f]`.
#[inline]
pub fn has_control(s: &str) -> bool {
    s.bytes().any(|c| c < 0x20 || c == 0x7F)
}

/// `step._clip` for a string: at most `limit` code points, else the first
/// `limit - 3` code points and `...`.
pub fn clip(s: &str, limit: usize) -> Cow<'_, str> {
    if s.len() <= limit {
        // byte length bounds code-point length
        return Cow::Borrowed(s);
    }
    if char_len(s) <= limit {
        return Cow::Borrowed(s);
    }
    let keep = limit.saturating_sub(3);
    let end = s.char_indices().nth(keep).map_or(s.len(), |(i, _)| i);
    let mut out = String::with_capacity(end + 3);
    out.push_str(&s[..end]);
    out.push_str("...");
    Cow::Owned(out)
}

/// Python's `repr()` of a string made only of ASCII characters; `None` for any
/// other string (whose repr depends on the interpreter's Unicode database).
pub fn repr_ascii(s: &str) -> Option<String> {
    if !s.is_ascii() {
        return None;
    }
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    Some(out)
}
