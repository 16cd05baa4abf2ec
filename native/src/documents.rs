//! The accept path of the modality document rules (`schemas/documents/`, docs/modality_rules.md).
//!
//! `accepts` answers one question: do the Python reference's research or
//! data/ops rules *certainly* pass for this submission? Only then does the
//! native core journal it itself. Every other case (a broken rule, and
//! anything this port does not model exactly: a string with an escape, a
//! float, a non-ASCII key, deep nesting, a non-ASCII refusal code...) returns
//! false, and the core hands the record to the reference (`Fallback`), which
//! decides it and words any refusal. So this file never writes a refusal and
//! cannot make the cores differ on one; a wrong `true` could, which is why
//! each check below mirrors `schemas/documents/{research,dataops}.py` and
//! doubts are answered with false.
//!
//! The artifact must be canonical JSON (RFC 8785) for every rule; the parser
//! accepts exactly the canonical spellings of the values it models (no
//! whitespace, keys in strictly increasing order, integers in canonical form
//! within +/-(2**53-1), strings without escapes or control characters), so a
//! successful parse is the canonical-bytes check.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::records::submission::{Observation, Submission};
use crate::text::{is_blank, is_digest};

const MAX_DEPTH: usize = 32;
const MAX_SAFE_INT: i64 = (1 << 53) - 1;

const REPORT_FORMAT: &str = "bernstein.research.report/v1";
const RESEARCH_REFUSAL_FORMAT: &str = "bernstein.research.refusal/v1";
const RESEARCH_FAILURE_FORMAT: &str = "bernstein.research.failure/v1";
const NORMALISATION_VERSION: &str = "bernstein.quote-normalisation/v1";
const RECEIPT_FORMAT: &str = "bernstein.dataops.receipt/v1";
const DATAOPS_REFUSAL_FORMAT: &str = "bernstein.dataops.refusal/v1";

/// True only when the reference's document rules certainly accept `sub` (kinds research, data, ops).
pub fn accepts(sub: &Submission<'_>) -> bool {
    match sub.kind {
        "research" => research_accepts(sub),
        "data" | "ops" => dataops_accepts(sub),
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// canonical JSON, strictly
// ---------------------------------------------------------------------------

enum Json<'a> {
    Null,
    Bool,
    Int(i64),
    Str(&'a str),
    Arr(Vec<Json<'a>>),
    Obj(Vec<(&'a str, Json<'a>)>),
}

impl<'a> Json<'a> {
    fn str(&self) -> Option<&'a str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
    fn arr(&self) -> Option<&[Json<'a>]> {
        match self {
            Json::Arr(items) => Some(items),
            _ => None,
        }
    }
    fn obj(&self) -> Option<&[(&'a str, Json<'a>)]> {
        match self {
            Json::Obj(fields) => Some(fields),
            _ => None,
        }
    }
}

fn get<'b, 'a>(fields: &'b [(&'a str, Json<'a>)], key: &str) -> Option<&'b Json<'a>> {
    fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

fn keys_are(fields: &[(&str, Json<'_>)], expected_sorted: &[&str]) -> bool {
    fields.len() == expected_sorted.len()
        && fields.iter().zip(expected_sorted).all(|((k, _), e)| k == e)
}

fn keys_within(fields: &[(&str, Json<'_>)], allowed: &[&str]) -> bool {
    fields.iter().all(|(k, _)| allowed.contains(k))
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

fn parse_canonical(data: &[u8]) -> Option<Json<'_>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut p = Parser { text, pos: 0 };
    let value = p.value(0)?;
    (p.pos == text.len()).then_some(value)
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, literal: &str) -> bool {
        if self.text[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Option<Json<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(Json::Str),
            b'n' => self.eat("null").then_some(Json::Null),
            b't' => self.eat("true").then_some(Json::Bool),
            b'f' => self.eat("false").then_some(Json::Bool),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<Json<'a>> {
        self.pos += 1;
        let mut fields: Vec<(&'a str, Json<'a>)> = Vec::new();
        if self.eat("}") {
            return Some(Json::Obj(fields));
        }
        loop {
            let key = self.string()?;
            // ASCII keys in strictly increasing byte order = RFC 8785's UTF-16 order, without duplicates.
            if !key.is_ascii() || fields.last().is_some_and(|(last, _)| *last >= key) {
                return None;
            }
            if !self.eat(":") {
                return None;
            }
            let value = self.value(depth + 1)?;
            fields.push((key, value));
            if self.eat("}") {
                return Some(Json::Obj(fields));
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Json<'a>> {
        self.pos += 1;
        let mut items = Vec::new();
        if self.eat("]") {
            return Some(Json::Arr(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            if self.eat("]") {
                return Some(Json::Arr(items));
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    /// A string without escapes, control characters, DEL, U+2028 or U+2029 (their spelling is left to the reference).
    fn string(&mut self) -> Option<&'a str> {
        if !self.eat("\"") {
            return None;
        }
        let start = self.pos;
        let rest = &self.text[start..];
        let end = rest.find('"')?;
        let body = &rest[..end];
        if body
            .chars()
            .any(|c| c == '\\' || c < ' ' || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}')
        {
            return None;
        }
        self.pos = start + end + 1;
        Some(body)
    }

    fn integer(&mut self) -> Option<Json<'a>> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        if bytes[self.pos] == b'-' {
            self.pos += 1;
        }
        let digits = self.pos;
        while self.pos < bytes.len() && bytes[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let body = &self.text[digits..self.pos];
        // canonical: no leading zero, no "-0", no fraction or exponent (floats have no canonical form here)
        if body.is_empty()
            || (body.len() > 1 && body.starts_with('0'))
            || (body == "0" && digits != start)
            || body.len() > 16
            || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let value: i64 = self.text[start..self.pos].parse().ok()?;
        (-MAX_SAFE_INT..=MAX_SAFE_INT)
            .contains(&value)
            .then_some(Json::Int(value))
    }
}

/// `schemas.documents.quotes.normalise_text(text) == ""`: every character is Python whitespace (`str.isspace`);
/// NFC neither makes nor removes whitespace.
fn blank(text: &str) -> bool {
    is_blank(text)
}

fn list_of_str<'a>(value: Option<&Json<'a>>) -> Option<Vec<&'a str>> {
    value?.arr()?.iter().map(Json::str).collect()
}

fn non_empty_str<'a>(value: Option<&Json<'a>>) -> Option<&'a str> {
    value?.str().filter(|s| !s.is_empty())
}

fn digest<'a>(value: Option<&Json<'a>>) -> Option<&'a str> {
    value?.str().filter(|s| is_digest(s))
}

// ---------------------------------------------------------------------------
// research
// ---------------------------------------------------------------------------

fn research_accepts(sub: &Submission<'_>) -> bool {
    let Some(doc) = parse_canonical(sub.artifact) else {
        return false;
    };
    let Some(fields) = doc.obj() else {
        return false;
    };
    let observed: BTreeSet<&str> = sub.observations.iter().map(|o| o.content_hash).collect();
    match get(fields, "format").and_then(Json::str) {
        Some(REPORT_FORMAT) => {
            sub.terminal_state == "completed" && report_accepts(fields, &observed).is_some()
        }
        Some(RESEARCH_REFUSAL_FORMAT) => abort_accepts(
            sub,
            fields,
            "refusal",
            "refused",
            "budget_exhausted",
            &observed,
        ),
        Some(RESEARCH_FAILURE_FORMAT) => {
            abort_accepts(sub, fields, "failure", "failed", "fetch_failed", &observed)
        }
        _ => false,
    }
}

fn is_valid_claim_id(cid: &str) -> bool {
    let b = cid.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'))
}

fn report_accepts(fields: &[(&str, Json<'_>)], observed: &BTreeSet<&str>) -> Option<()> {
    if !keys_are(
        fields,
        &[
            "claims",
            "format",
            "plan",
            "query",
            "quote_normalisation",
            "sources",
        ],
    ) {
        return None;
    }
    get(fields, "query")?.str()?;
    if get(fields, "quote_normalisation")?.str()? != NORMALISATION_VERSION {
        return None;
    }
    let plan = list_of_str(get(fields, "plan"))?;
    // source_ref -> page_content_hash
    let mut sources: Vec<(&str, &str)> = Vec::new();
    for source in get(fields, "sources")?.arr()? {
        let s = source.obj()?;
        let expected = [
            "content_type",
            "final_url",
            "page_content_hash",
            "redirects",
            "size",
            "source_ref",
            "status",
        ];
        if !keys_are(s, &expected) {
            return None;
        }
        get(s, "final_url")?.str()?;
        if !matches!(get(s, "status")?, Json::Int(_) | Json::Null)
            || !matches!(get(s, "content_type")?, Json::Str(_) | Json::Null)
        {
            return None;
        }
        for hop in get(s, "redirects")?.arr()? {
            let h = hop.obj()?;
            if !keys_are(h, &["status", "url"]) || !matches!(get(h, "status")?, Json::Int(_)) {
                return None;
            }
            get(h, "url")?.str()?;
        }
        if !matches!(get(s, "size")?, Json::Int(_)) {
            return None;
        }
        let source_ref = get(s, "source_ref")?.str()?;
        let page_hash = digest(get(s, "page_content_hash"))?;
        if !plan.contains(&source_ref) || sources.iter().any(|(r, _)| *r == source_ref) {
            return None;
        }
        sources.push((source_ref, page_hash));
    }
    let claims = get(fields, "claims")?.arr()?;
    if claims.is_empty() {
        return None;
    }
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for claim in claims {
        let c = claim.obj()?;
        if !keys_are(c, &["citations", "claim_id", "statement"]) {
            return None;
        }
        let cid = get(c, "claim_id")?.str()?;
        if !is_valid_claim_id(cid) || !seen.insert(cid) || blank(get(c, "statement")?.str()?) {
            return None;
        }
        let citations = get(c, "citations")?.arr()?;
        if citations.is_empty() {
            return None;
        }
        for citation in citations {
            let t = citation.obj()?;
            if !keys_are(t, &["claim_id", "page_content_hash", "quote", "source_ref"]) {
                return None;
            }
            let page_hash = digest(get(t, "page_content_hash"))?;
            let source_ref = get(t, "source_ref")?.str()?;
            if get(t, "claim_id")?.str()? != cid || blank(get(t, "quote")?.str()?) {
                return None;
            }
            let fetched = sources.iter().find(|(r, _)| *r == source_ref)?.1;
            if fetched != page_hash || !observed.contains(page_hash) {
                return None;
            }
        }
    }
    Some(())
}

fn abort_accepts(
    sub: &Submission<'_>,
    fields: &[(&str, Json<'_>)],
    member: &str,
    state: &str,
    reason: &str,
    observed: &BTreeSet<&str>,
) -> bool {
    let check = || -> Option<()> {
        let mut expected = ["fetched", "format", "plan", "query", member];
        expected.sort_unstable();
        if !keys_are(fields, &expected) {
            return None;
        }
        get(fields, "query")?.str()?;
        list_of_str(get(fields, "plan"))?;
        let outcome = get(fields, member)?.obj()?;
        get(outcome, "code")?.str()?;
        get(outcome, "source")?.str()?;
        for item in get(fields, "fetched")?.arr()? {
            let f = item.obj()?;
            if !keys_are(f, &["page_content_hash", "source_ref"]) {
                return None;
            }
            get(f, "source_ref")?.str()?;
            if !observed.contains(digest(get(f, "page_content_hash"))?) {
                return None;
            }
        }
        Some(())
    };
    sub.terminal_state == state && sub.reason_code == reason && check().is_some()
}

// ---------------------------------------------------------------------------
// data / ops
// ---------------------------------------------------------------------------

fn dataops_accepts(sub: &Submission<'_>) -> bool {
    let unfinished = sub.terminal_state == "failed" || sub.terminal_state == "timed_out";
    if unfinished
        && !sub.artifact.contains(&b'\\')
        && !sub.artifact.windows(18).any(|w| w == b"bernstein.dataops.")
    {
        // no receipt and no refusal record can be spelled in these bytes: nothing signed to check
        return true;
    }
    let Some(doc) = parse_canonical(sub.artifact) else {
        return false;
    };
    let Some(fields) = doc.obj() else {
        return false;
    };
    match get(fields, "format").and_then(Json::str) {
        Some(DATAOPS_REFUSAL_FORMAT) => refusal_accepts(sub, fields).is_some(),
        Some(RECEIPT_FORMAT) => receipt_accepts(sub, fields).is_some(),
        _ => unfinished,
    }
}

/// No input observed after an output, and no output at all without a plan.
fn in_plan_order(observations: &[Observation<'_>], has_plan: bool) -> bool {
    let mut output_seen = false;
    for o in observations {
        match o.kind {
            "output" if !has_plan => return false,
            "output" => output_seen = true,
            "input" if output_seen => return false,
            _ => {}
        }
    }
    true
}

fn context_matches(sub: &Submission<'_>, fields: &[(&str, Json<'_>)]) -> Option<()> {
    let run_id = non_empty_str(get(fields, "run_id"))?;
    let stage_id = non_empty_str(get(fields, "stage_id"))?;
    let kind = non_empty_str(get(fields, "kind"))?;
    (run_id == sub.run_id && stage_id == sub.stage_id && kind == sub.kind).then_some(())
}

fn refusal_accepts(sub: &Submission<'_>, fields: &[(&str, Json<'_>)]) -> Option<()> {
    if !keys_are(
        fields,
        &[
            "code",
            "format",
            "inputs",
            "kind",
            "message",
            "plan_hash",
            "run_id",
            "stage_id",
        ],
    ) {
        return None;
    }
    let code = non_empty_str(get(fields, "code"))?;
    get(fields, "message")?.str()?;
    let inputs: Vec<&str> = get(fields, "inputs")?
        .arr()?
        .iter()
        .map(|h| digest(Some(h)))
        .collect::<Option<_>>()?;
    let has_plan = match get(fields, "plan_hash")? {
        Json::Null => false,
        Json::Str(h) if is_digest(h) => true,
        _ => return None,
    };
    context_matches(sub, fields)?;
    // str.lower() is modelled for ASCII codes only
    if sub.terminal_state != "refused"
        || !code.is_ascii()
        || sub.reason_code != code.to_ascii_lowercase()
    {
        return None;
    }
    if !in_plan_order(&sub.observations, has_plan) {
        return None;
    }
    let observed: Vec<&str> = sub
        .observations
        .iter()
        .filter(|o| o.kind == "input")
        .map(|o| o.content_hash)
        .collect();
    (observed == inputs).then_some(())
}

/// The receipt's items of one role: (ref, content_hash), checked as `_parse_items` does.
fn items<'a>(value: Option<&Json<'a>>, role: &str) -> Option<Vec<(&'a str, &'a str)>> {
    let mut out = Vec::new();
    for (position, item) in value?.arr()?.iter().enumerate() {
        let f = item.obj()?;
        if !keys_within(f, &["content_hash", "index", "ref", "role", "signature"])
            || get(f, "role")?.str()? != role
        {
            return None;
        }
        match get(f, "index")? {
            Json::Int(i) if *i == position as i64 => {}
            _ => return None,
        }
        if let Some(signature) = get(f, "signature") {
            signature.str()?;
        }
        out.push((
            non_empty_str(get(f, "ref"))?,
            digest(get(f, "content_hash"))?,
        ));
    }
    Some(out)
}

fn plan_hash(input_hashes: &[&str], steps: &[&str]) -> String {
    // canonical_json({"input_hashes": [...], "steps": [...]}); the strings need no escaping (checked by the parser)
    let mut h = Sha256::new();
    h.update(b"{\"input_hashes\":[");
    for (i, s) in input_hashes.iter().enumerate() {
        if i > 0 {
            h.update(b",");
        }
        h.update(b"\"");
        h.update(s.as_bytes());
        h.update(b"\"");
    }
    h.update(b"],\"steps\":[");
    for (i, s) in steps.iter().enumerate() {
        if i > 0 {
            h.update(b",");
        }
        h.update(b"\"");
        h.update(s.as_bytes());
        h.update(b"\"");
    }
    h.update(b"]}");
    let bytes = h.finalize();
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn receipt_accepts(sub: &Submission<'_>, fields: &[(&str, Json<'_>)]) -> Option<()> {
    let allowed = [
        "format",
        "inputs",
        "kind",
        "outputs",
        "plan",
        "receipt_signature",
        "run_id",
        "signer_key_id",
        "stage_id",
    ];
    if !keys_within(fields, &allowed) {
        return None;
    }
    let kind = non_empty_str(get(fields, "kind"))?;
    if kind != "data" && kind != "ops" {
        return None;
    }
    let plan = get(fields, "plan")?.obj()?;
    if !keys_within(plan, &["input_hashes", "plan_hash", "steps"]) {
        return None;
    }
    let input_hashes: Vec<&str> = get(plan, "input_hashes")?
        .arr()?
        .iter()
        .map(|h| digest(Some(h)))
        .collect::<Option<_>>()?;
    let steps = list_of_str(get(plan, "steps"))?;
    let declared_plan = digest(get(plan, "plan_hash"))?;
    if let Some(signature) = get(fields, "receipt_signature") {
        signature.str()?;
    }
    context_matches(sub, fields)?;
    let inputs = items(get(fields, "inputs"), "input")?;
    let outputs = items(get(fields, "outputs"), "output")?;
    digest(get(fields, "signer_key_id"))?;
    // the plan projection: sorted, de-duplicated input hashes and the steps
    let mut projected: Vec<&str> = inputs.iter().map(|(_, h)| *h).collect();
    projected.sort_unstable();
    projected.dedup();
    if projected != input_hashes || plan_hash(&projected, &steps) != declared_plan {
        return None;
    }
    if sub.terminal_state != "completed" || !in_plan_order(&sub.observations, true) {
        return None;
    }
    let observed = |role: &str| -> Vec<(&str, &str)> {
        sub.observations
            .iter()
            .filter(|o| o.kind == role)
            .map(|o| (o.reference, o.content_hash))
            .collect()
    };
    let only_roles = sub
        .observations
        .iter()
        .all(|o| o.kind == "input" || o.kind == "output");
    (only_roles && observed("input") == inputs && observed("output") == outputs).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::sha256_digest;

    fn parses(s: &str) -> bool {
        parse_canonical(s.as_bytes()).is_some()
    }

    #[test]
    fn only_canonical_spellings_parse() {
        assert!(!parses(
            r#"{"a":[1,-2,"x",null,true,false,{}],"b":"\u00e9"}"#
        )); // an escape
        assert!(parses(
            "{\"a\":[1,-2,\"x\",null,true,false,{}],\"b\":\"é\"}"
        ));
        assert!(!parses("{\"b\":1,\"a\":2}")); // key order
        assert!(!parses("{\"a\":1,\"a\":2}")); // duplicate
        assert!(!parses("{\"a\": 1}")); // whitespace
        assert!(!parses("[01]") && !parses("[-0]") && !parses("[1.0]") && !parses("[1e3]"));
        assert!(!parses("[9007199254740992]") && parses("[9007199254740991]"));
        assert!(!parses("[\"a\u{2028}\"]") && !parses("[\"\u{7f}\"]"));
        assert!(!parses("[1] "));
    }

    #[test]
    fn plan_hash_matches_the_reference_vector() {
        // schemas.canonical.plan_hash([], []) == sha256_digest(b'{"input_hashes":[],"steps":[]}')
        assert_eq!(
            plan_hash(&[], &[]),
            sha256_digest(b"{\"input_hashes\":[],\"steps\":[]}")
        );
    }

    #[test]
    fn blank_is_python_isspace() {
        assert!(blank("") && blank(" \t\n\u{a0}\u{3000}\u{1c}\u{85}"));
        assert!(!blank(" x ") && !blank("\u{200b}"));
    }
}
