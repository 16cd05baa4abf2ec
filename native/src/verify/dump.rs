//! Dump lines (`verifier.sources`): a strict subset of JSON, and canonical base64.
//!
//! A line outside the subset whose meaning is certain (blank lines, escapes, floats, unknown or
//! duplicate keys, non-canonical base64, ...) is not parsed here: orjson and `binascii` decide,
//! and name the error. `bindings::dump` builds the rows.

/// A parsed dump line, borrowed from the line.
pub struct DumpLine<'a> {
    pub topic: &'a str,
    pub partition: i64,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a str>,
    pub value: Option<&'a str>,
    pub headers: Vec<(&'a str, Option<&'a str>)>,
}

struct Json<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

const MAX_DEPTH: usize = 64;

#[inline]
fn has_control(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |acc, &c| acc | (c < 0x20))
}

impl<'a> Json<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.s.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// The raw text of a string up to its closing quote, with no escapes;
    /// control characters are NOT checked (the caller checks, or decodes the
    /// text as base64, which refuses them).
    #[inline]
    fn raw_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let end = start + memchr::memchr2(b'"', b'\\', &self.s[start..])?;
        if self.s[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        Some(&self.text[start..end])
    }

    /// A string without escapes or control characters (its text, borrowed).
    #[inline]
    fn plain_string(&mut self) -> Option<&'a str> {
        let text = self.raw_string()?;
        if has_control(text.as_bytes()) {
            return None;
        }
        Some(text)
    }

    /// Any string with the short escapes (not \u), skipped.
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let start = self.i;
            let at = start + memchr::memchr2(b'"', b'\\', &self.s[start..])?;
            if has_control(&self.s[start..at]) {
                return None;
            }
            self.i = at + 1;
            if self.s[at] == b'"' {
                return Some(());
            }
            let e = *self.s.get(self.i)?;
            if !matches!(e, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') {
                return None;
            }
            self.i += 1;
        }
    }

    /// `-?(0|[1-9][0-9]*)` with at most 18 digits, not followed by a fraction or exponent.
    #[inline]
    fn int(&mut self) -> Option<i64> {
        let negative = self.eat(b'-').is_some();
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        let digits = &self.s[start..self.i];
        if digits.is_empty() || digits.len() > 18 || (digits[0] == b'0' && digits.len() > 1) {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        if negative && digits == b"0" {
            return None;
        }
        let mut n: i64 = 0;
        for &d in digits {
            n = n * 10 + i64::from(d - b'0');
        }
        Some(if negative { -n } else { n })
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.s.get(self.i..self.i + word.len())? == word {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    #[inline]
    fn null_or<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            Some(None)
        } else {
            f(self).map(Some)
        }
    }

    /// Any JSON value in the subset (no \u escapes, no floats, bounded depth), skipped.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.skip_string(),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.int().map(|_| ()),
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_some() {
                        self.ws();
                        continue;
                    }
                    return self.eat(b']');
                }
            }
            b'{' => {
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.skip_string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.skip_value(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_some() {
                        self.ws();
                        continue;
                    }
                    return self.eat(b'}');
                }
            }
            _ => None,
        }
    }

    /// `[[name, value-or-null], ...]` (the headers of our dumps).
    fn header_pairs(&mut self) -> Option<Vec<(&'a str, Option<&'a str>)>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        self.ws();
        if self.eat(b']').is_some() {
            return Some(out);
        }
        loop {
            self.eat(b'[')?;
            self.ws();
            let name = self.plain_string()?;
            self.ws();
            self.eat(b',')?;
            self.ws();
            let value = self.null_or(Self::raw_string)?;
            self.ws();
            self.eat(b']')?;
            out.push((name, value));
            self.ws();
            if self.eat(b',').is_some() {
                self.ws();
                continue;
            }
            self.eat(b']')?;
            return Some(out);
        }
    }
}

/// One dump line, when it is in the subset whose meaning is certain; else None.
pub fn parse_line(line: &[u8], with_headers: bool) -> Option<DumpLine<'_>> {
    let text = std::str::from_utf8(line).ok()?;
    let mut j = Json {
        s: line,
        text,
        i: 0,
    };
    j.ws();
    j.eat(b'{')?;
    let mut topic = None;
    let mut partition = None;
    let mut offset = None;
    let mut timestamp: Option<Option<i64>> = None;
    let mut key: Option<Option<&str>> = None;
    let mut value: Option<Option<&str>> = None;
    let mut headers: Option<Vec<(&str, Option<&str>)>> = None;
    let mut seen_headers = false;
    j.ws();
    if j.eat(b'}').is_none() {
        loop {
            let name = j.plain_string()?;
            j.ws();
            j.eat(b':')?;
            j.ws();
            match name {
                "topic" if topic.is_none() => topic = Some(j.plain_string()?),
                "partition" if partition.is_none() => partition = Some(j.int()?),
                "offset" if offset.is_none() => offset = Some(j.int()?),
                "timestamp" if timestamp.is_none() => timestamp = Some(j.null_or(Json::int)?),
                // base64 text: the decoder refuses control characters itself
                "key" if key.is_none() => key = Some(j.null_or(Json::raw_string)?),
                "value" if value.is_none() => value = Some(j.null_or(Json::raw_string)?),
                "headers" if !seen_headers => {
                    seen_headers = true;
                    if with_headers {
                        headers = j.null_or(Json::header_pairs)?;
                    } else {
                        j.skip_value(0)?;
                    }
                }
                _ => return None,
            }
            j.ws();
            if j.eat(b',').is_some() {
                j.ws();
                continue;
            }
            j.eat(b'}')?;
            break;
        }
    }
    j.ws();
    if j.i != line.len() {
        return None;
    }
    Some(DumpLine {
        topic: topic?,
        partition: partition?,
        offset: offset?,
        timestamp: timestamp.flatten().unwrap_or(0),
        key: key.flatten(),
        value: value.flatten(),
        headers: headers.unwrap_or_default(),
    })
}

const fn b64_table() -> [u8; 256] {
    let mut t = [0xFFu8; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        t[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    t
}

static B64: [u8; 256] = b64_table();

/// The decoded length of what may be canonical base64 (groups of four, `=`
/// only as the last one or two characters); `b64_decode_into` confirms it.
pub fn b64_len(s: &[u8]) -> Option<usize> {
    if s.len() % 4 != 0 {
        return None;
    }
    let pad = if s.ends_with(b"==") {
        2
    } else if s.ends_with(b"=") {
        1
    } else {
        0
    };
    Some(s.len() / 4 * 3 - pad)
}

/// Decode canonical base64 into `out` (`b64_len(s)` bytes); false when a
/// character is outside the alphabet. Leftover bits are ignored, as binascii does.
pub fn b64_decode_into(s: &[u8], out: &mut [u8]) -> bool {
    let full = if s.ends_with(b"=") {
        s.len() - 4
    } else {
        s.len()
    };
    let mut bad = 0u8;
    let o = full / 4 * 3;
    // eight characters to six bytes a step, four to three for the rest (no bounds checks in the loops)
    let (wide, narrow) = s[..full].split_at(full / 8 * 8);
    let (out_wide, out_narrow) = out[..o].split_at_mut(wide.len() / 8 * 6);
    for (chunk, dst) in wide.chunks_exact(8).zip(out_wide.chunks_exact_mut(6)) {
        let mut n = 0u64;
        for &c in chunk {
            let v = B64[c as usize];
            bad |= v;
            n = (n << 6) | u64::from(v);
        }
        dst.copy_from_slice(&n.to_be_bytes()[2..]);
    }
    for (chunk, dst) in narrow.chunks_exact(4).zip(out_narrow.chunks_exact_mut(3)) {
        let a = B64[chunk[0] as usize];
        let b = B64[chunk[1] as usize];
        let c = B64[chunk[2] as usize];
        let d = B64[chunk[3] as usize];
        bad |= a | b | c | d;
        let n = (u32::from(a) << 18) | (u32::from(b) << 12) | (u32::from(c) << 6) | u32::from(d);
        dst[0] = (n >> 16) as u8;
        dst[1] = (n >> 8) as u8;
        dst[2] = n as u8;
    }
    if full < s.len() {
        let chunk = &s[full..];
        let a = B64[chunk[0] as usize];
        let b = B64[chunk[1] as usize];
        bad |= a | b;
        out[o] = (a << 2) | (b >> 4);
        if chunk[2] != b'=' {
            let c = B64[chunk[2] as usize];
            bad |= c;
            out[o + 1] = ((b & 0x0F) << 4) | (c >> 2);
        }
    }
    bad & 0x80 == 0
}

/// A block's line, parsed (None: outside the strict subset) with its value decoded into the arena
/// (None: not canonical base64; `Some(None)`: a null value).
pub type ScannedLine<'a> = (
    &'a [u8],
    Option<(DumpLine<'a>, Option<Option<std::ops::Range<usize>>>)>,
);

/// The lines of `block` (as `parse_dump_block` counts them), each parsed, the values decoded into one
/// arena; and where the lines end.
pub fn scan_block(
    block: &[u8],
    with_headers: bool,
    eof: bool,
) -> (Vec<ScannedLine<'_>>, Vec<u8>, usize) {
    let mut lines = Vec::new();
    let mut arena = Vec::with_capacity(block.len() / 4 * 3);
    let mut start = 0;
    while start < block.len() {
        let end = match memchr::memchr(b'\n', &block[start..]) {
            Some(at) => start + at + 1,
            None if eof => block.len(),
            None => break,
        };
        let line = &block[start..end];
        let scanned = parse_line(line, with_headers).map(|parsed| {
            let value = match parsed.value {
                None => Some(None),
                Some(text) => b64_len(text.as_bytes()).and_then(|len| {
                    let at = arena.len();
                    arena.resize(at + len, 0);
                    if b64_decode_into(text.as_bytes(), &mut arena[at..]) {
                        Some(Some(at..at + len))
                    } else {
                        arena.truncate(at);
                        None
                    }
                }),
            };
            (parsed, value)
        });
        lines.push((line, scanned));
        start = end;
    }
    (lines, arena, start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_canonical_only() {
        assert_eq!(b64_len(b""), Some(0));
        assert_eq!(b64_len(b"QQ=="), Some(1));
        assert_eq!(b64_len(b"QUI="), Some(2));
        assert_eq!(b64_len(b"QUJD"), Some(3));
        assert_eq!(b64_len(b"QUJ"), None);
        let decodes = |s: &[u8]| {
            let mut out = vec![0u8; b64_len(s)?];
            b64_decode_into(s, &mut out).then_some(out)
        };
        assert_eq!(decodes(b"Q==="), None);
        assert_eq!(decodes(b"=QQ="), None);
        assert_eq!(decodes(b"QQ==QQ=="), None);
        assert_eq!(decodes(b"QU\nJ"), None);
        assert_eq!(decodes(b"QR==").as_deref(), Some(&b"A"[..]));
        assert_eq!(decodes(b"QUJDRA==").as_deref(), Some(&b"ABCD"[..]));
        // every length through the eight- and four-character loops and the padded tail
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for len in 0..64usize {
            let raw: Vec<u8> = (0..len).map(|i| (i * 37 + len * 11) as u8).collect();
            let mut text = Vec::new();
            for group in raw.chunks(3) {
                let n = group
                    .iter()
                    .enumerate()
                    .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
                for i in 0..4 {
                    text.push(if i <= group.len() {
                        alphabet[(n >> (18 - 6 * i) & 63) as usize]
                    } else {
                        b'='
                    });
                }
            }
            assert_eq!(decodes(&text).as_deref(), Some(&raw[..]), "length {len}");
            if !text.is_empty() {
                let mut bad = text.clone();
                bad[len % text.len().max(1) / 2] = b'*';
                assert_eq!(decodes(&bad), None, "length {len}");
            }
        }
    }

    #[test]
    fn dump_line_subset() {
        let line = br#"{"topic":"t","partition":0,"offset":5,"timestamp":null,"key":null,"value":"QQ==","headers":[["a","QQ=="]]}"#;
        let parsed = parse_line(line, true).unwrap();
        assert_eq!(parsed.offset, 5);
        assert_eq!(parsed.timestamp, 0);
        assert_eq!(parsed.headers, vec![("a", Some("QQ=="))]);
        assert!(parse_line(br#"{"topic":"t","partition":0}"#, false).is_none());
        assert!(parse_line(br#"{"topic":"t","partition":0,"offset":1.5}"#, false).is_none());
        assert!(parse_line(
            br#"{"topic":"t","partition":0,"offset":1,"offset":2}"#,
            false
        )
        .is_none());
        assert!(parse_line(
            br#"{"topic":"t","partition":0,"offset":1,"headers":{"a":[1,2,"\n"]}}"#,
            false
        )
        .is_some());
        assert!(parse_line(
            br#"{"topic":"t","partition":0,"offset":1,"headers":"\u0041"}"#,
            false
        )
        .is_none());
    }
}
