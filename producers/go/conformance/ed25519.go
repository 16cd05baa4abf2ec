package conformance

import (
	"crypto/ed25519"
	"strings"
)

// --- ed25519.json -----------------------------------------------------------------------------
//
// The verification rule of the scheduler and the verifier (ZIP 215) accepts every signature an
// RFC 8032 verifier accepts. A producer SDK only signs, so what it can reproduce is that promise:
// every case Go's crypto/ed25519 accepts is one the system accepts (valid), and the honest case
// verifies here. Cases Go refuses (small-order and non-canonical points the cofactored rule
// accepts) contradict nothing: a stricter verifier than the system's is not a producer's concern.

func runEd25519(r *Runner, doc obj) {
	if !strings.Contains(doc.str("rule"), "ZIP 215") {
		r.miss("ed25519/rule", "the rule changed: %q", doc.str("rule"))
	} else {
		r.pass("ed25519/rule")
	}
	honest := false
	for _, c := range doc.objs("cases") {
		c.onlyKeys("name", "public_key_hex", "signature_hex", "message_hex", "valid", "why")
		name := "ed25519/" + c.str("name")
		public, signature, message := c.hex("public_key_hex"), c.hex("signature_hex"), c.hex("message_hex")
		raw, _ := c.raw("valid")
		valid, isBool := raw.(bool)
		if !isBool {
			r.miss(name, "valid is not a boolean")
			continue
		}
		accepts := len(public) == ed25519.PublicKeySize && ed25519.Verify(public, message, signature)
		switch {
		case accepts && !valid:
			r.miss(name, "crypto/ed25519 accepts a signature the system's rule refuses")
		case c.str("name") == "honest" && !accepts:
			r.miss(name, "crypto/ed25519 refuses the honest signature")
		default:
			honest = honest || (c.str("name") == "honest" && accepts)
			r.pass(name)
		}
	}
	if !honest {
		r.miss("ed25519/honest", "no honest case verified")
	}
}
