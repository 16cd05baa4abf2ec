package bernstein

import (
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Research activities (docs/research.md, schemas/documents/research.py): the artifact is RFC 8785
// canonical JSON, a bernstein.research.report/v1 report (journalled only as completed/ok) or an abort
// record (bernstein.research.refusal/v1 as refused/budget_exhausted, .../failure/v1 as
// failed/fetch_failed). Every cited page and every fetched page of an abort record must be among the
// stage's observations (kind "page", ref = the planned source URL). ResearchReport.Result refuses
// what the scheduler refuses, with the same codes prefixed RESEARCH_; the quote-in-page check needs
// the page text and is left to the verifier.

// Research document formats and constants.
const (
	ResearchReportFormat  = "bernstein.research.report/v1"
	ResearchRefusalFormat = "bernstein.research.refusal/v1"
	ResearchFailureFormat = "bernstein.research.failure/v1"
	QuoteNormalisation    = "bernstein.quote-normalisation/v1"
	PageObservation       = "page"
)

var claimIDRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$`)

// Redirect is one redirect hop.
type Redirect struct {
	Status int
	URL    string
}

// ResearchSource is how one planned source was fetched and the hash of the bytes it returned.
type ResearchSource struct {
	SourceRef       string
	FinalURL        string
	Status          *int    // nil: no HTTP status
	ContentType     *string // nil: none declared
	Redirects       []Redirect
	PageContentHash string
	Size            int64
}

// FetchedPage is the source record and the page observation of fetched bytes.
func FetchedPage(sourceRef, finalURL string, status int, contentType string, body []byte) (ResearchSource, Observation) {
	src := ResearchSource{SourceRef: sourceRef, FinalURL: finalURL, Status: &status, PageContentHash: ContentHash(body), Size: int64(len(body))}
	if contentType != "" {
		src.ContentType = &contentType
	}
	return src, Observe(PageObservation, sourceRef, body)
}

// Citation pins a claim on the exact bytes it was drawn from.
type Citation struct {
	ClaimID, SourceRef, PageContentHash, Quote string
}

// Claim is one statement of a report with its citations.
type Claim struct {
	ClaimID, Statement string
	Citations          []Citation
}

// ResearchReport is a bernstein.research.report/v1 document.
type ResearchReport struct {
	Query   string
	Plan    []string
	Sources []ResearchSource
	Claims  []Claim
}

// Document is the report as a JSON document (canonical JSON of it is the artifact).
func (r *ResearchReport) Document() map[string]any {
	sources := []any{}
	for _, s := range r.Sources {
		redirects := []any{}
		for _, h := range s.Redirects {
			redirects = append(redirects, map[string]any{"status": h.Status, "url": h.URL})
		}
		var status, contentType any
		if s.Status != nil {
			status = *s.Status
		}
		if s.ContentType != nil {
			contentType = *s.ContentType
		}
		sources = append(sources, map[string]any{
			"source_ref": s.SourceRef, "final_url": s.FinalURL, "status": status, "content_type": contentType,
			"redirects": redirects, "page_content_hash": s.PageContentHash, "size": s.Size,
		})
	}
	claims := []any{}
	for _, c := range r.Claims {
		citations := []any{}
		for _, ct := range c.Citations {
			citations = append(citations, map[string]any{"claim_id": ct.ClaimID, "source_ref": ct.SourceRef, "page_content_hash": ct.PageContentHash, "quote": ct.Quote})
		}
		claims = append(claims, map[string]any{"claim_id": c.ClaimID, "statement": c.Statement, "citations": citations})
	}
	plan := append([]string{}, r.Plan...)
	return map[string]any{"format": ResearchReportFormat, "query": r.Query, "plan": plan, "sources": sources, "claims": claims, "quote_normalisation": QuoteNormalisation}
}

// NormaliseText is the quote normalisation's step 3: NFC, whitespace runs to one space, trimmed.
func NormaliseText(text string) string {
	return strings.Join(strings.FieldsFunc(norm.NFC.String(text), isPySpace), " ")
}

// Problem is the first scheduler rule the report breaks (nil: none), as the scheduler's refusal code.
func (r *ResearchReport) Problem(observations []Observation) *ActivityRejected {
	reject := func(code, format string, args ...any) *ActivityRejected {
		return &ActivityRejected{Reason: "RESEARCH_" + code, Msg: fmt.Sprintf(format, args...)}
	}
	refs := map[string]bool{}
	plan := map[string]bool{}
	for _, p := range r.Plan {
		plan[p] = true
	}
	for i, s := range r.Sources {
		if refs[s.SourceRef] || !plan[s.SourceRef] {
			return reject("ARTIFACT_MALFORMED", "research report is malformed: report.sources: source_refs must be distinct members of the plan")
		}
		if !IsDigest(s.PageContentHash) {
			return reject("ARTIFACT_MALFORMED", "research report is malformed: report.sources[%d].page_content_hash: is not 'sha256:<64 hex>'", i)
		}
		refs[s.SourceRef] = true
	}
	observed := map[string]bool{}
	for _, o := range observations {
		observed[o.ContentHash] = true
	}
	if len(r.Claims) == 0 {
		return reject("NO_CLAIMS", "research report holds no claims")
	}
	seen := map[string]bool{}
	for position, c := range r.Claims {
		if !claimIDRE.MatchString(c.ClaimID) {
			return reject("INVALID_CLAIM_ID", "claim %d has an invalid claim_id %q (1-64 of A-Z a-z 0-9 _ . : -)", position+1, c.ClaimID)
		}
		if seen[c.ClaimID] {
			return reject("DUPLICATE_CLAIM_ID", "claim_id %q is used by more than one claim", c.ClaimID)
		}
		seen[c.ClaimID] = true
		if NormaliseText(c.Statement) == "" {
			return reject("EMPTY_STATEMENT", "claim %q has an empty statement", c.ClaimID)
		}
		if len(c.Citations) == 0 {
			return reject("UNCITED_CLAIM", "claim %q has no citation; every claim must quote a fetched page", c.ClaimID)
		}
		for i, ct := range c.Citations {
			at := fmt.Sprintf("claim %q citation %d", c.ClaimID, i)
			switch {
			case ct.ClaimID != c.ClaimID:
				return reject("CITATION_CLAIM_MISMATCH", "%s: citation names claim %q", at, ct.ClaimID)
			case NormaliseText(ct.Quote) == "":
				return reject("EMPTY_QUOTE", "%s: quoted span is empty", at)
			case !IsDigest(ct.PageContentHash):
				return reject("MALFORMED_PAGE_HASH", "%s: page content hash %q is not 'sha256:<64 hex>'", at, ct.PageContentHash)
			case !refs[ct.SourceRef]:
				return reject("SOURCE_NOT_FETCHED", "%s: cites source %q that the run did not fetch", at, ct.SourceRef)
			}
			for _, s := range r.Sources {
				if s.SourceRef == ct.SourceRef && s.PageContentHash != ct.PageContentHash {
					return reject("CITATION_SOURCE_MISMATCH", "%s: cites page %s but source %q was fetched as %s", at, ct.PageContentHash, ct.SourceRef, s.PageContentHash)
				}
			}
			if !observed[ct.PageContentHash] {
				return reject("CITATION_NOT_OBSERVED", "%s: cited page %s is not among the stage's observations", at, ct.PageContentHash)
			}
		}
	}
	return nil
}

// Result is the completed research result of the report over observations (the fetched pages).
func (r *ResearchReport) Result(observations []Observation) (*ActivityResult, error) {
	if problem := r.Problem(observations); problem != nil {
		return nil, problem
	}
	return BuildResult(KindResearch, r.Document(), observations, Outcome{TerminalState: Completed, ReasonCode: "ok"})
}

// FetchedRef is a page an aborted run fetched before it stopped.
type FetchedRef struct {
	SourceRef, PageContentHash string
}

// ResearchAbort is the result of a research run that stopped before its report: a budget refusal
// (refused: true; outcome must hold "code" and "source", e.g. {"code": "BUDGET_EXCEEDED", "source":
// url, "cap": "max_fetches", "limit": 1, "attempted": 2}) or a fetch failure (refused: false). Every
// fetched page must be among observations.
func ResearchAbort(refused bool, query string, plan []string, outcome map[string]any, fetched []FetchedRef, observations []Observation) (*ActivityResult, error) {
	format, member, state, reason := ResearchFailureFormat, "failure", Failed, "fetch_failed"
	if refused {
		format, member, state, reason = ResearchRefusalFormat, "refusal", Refused, "budget_exhausted"
	}
	code, _ := outcome["code"].(string)
	source, _ := outcome["source"].(string)
	if code == "" || source == "" {
		return nil, &ActivityRejected{Reason: "RESEARCH_ARTIFACT_MALFORMED", Msg: "research abort record is malformed: " + member + ": must be an object with string code and source"}
	}
	observed := map[string]bool{}
	for _, o := range observations {
		observed[o.ContentHash] = true
	}
	items := []any{}
	for i, f := range fetched {
		if !IsDigest(f.PageContentHash) {
			return nil, &ActivityRejected{Reason: "RESEARCH_ARTIFACT_MALFORMED", Msg: fmt.Sprintf("research abort record is malformed: fetched[%d]: must be {source_ref, page_content_hash: sha256:<hex>}", i)}
		}
		if !observed[f.PageContentHash] {
			return nil, &ActivityRejected{Reason: "RESEARCH_PAGE_NOT_OBSERVED", Msg: fmt.Sprintf("fetched page %s of source %q is not among the stage's observations", f.PageContentHash, f.SourceRef)}
		}
		items = append(items, map[string]any{"source_ref": f.SourceRef, "page_content_hash": f.PageContentHash})
	}
	doc := map[string]any{"format": format, "query": query, "plan": append([]string{}, plan...), member: outcome, "fetched": items}
	return BuildResult(KindResearch, doc, observations, Outcome{TerminalState: state, ReasonCode: reason})
}
