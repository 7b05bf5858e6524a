package cainjector

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"time"
)

// parseBundle returns the certificates of a PEM bundle, in order, skipping
// anything that is not a CERTIFICATE block or does not parse.
func parseBundle(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for len(data) > 0 {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			continue
		}
		out = append(out, c)
	}
	return out
}

func encodeBundle(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

func contains(certs []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range certs {
		if x.Equal(c) {
			return true
		}
	}
	return false
}

// plan is what to inject into one object.
type plan struct {
	// bundle is the PEM to write into every injection point.
	bundle []byte
	// until is when the previous CAs kept for the overlap stop being
	// trusted (zero: nothing kept).
	until time.Time
	// rotation identifies the CA set the overlap was started for, so a
	// second rotation during an overlap starts a new one.
	rotation string
	// leaves identifies the certificates signed by the kept CAs that issued
	// Secrets still held ("" when none), so a change restarts the overlap.
	leaves string
}

// fingerprint is a short hash of a set of certificates.
func fingerprint(certs []*x509.Certificate) string {
	h := sha256.New()
	for _, c := range certs {
		h.Write(c.Raw)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// errNoCA is returned when the Secret has no usable ca.crt.
var errNoCA = errors.New("no CERTIFICATE in ca.crt")

// overlapState is what the object records about an overlap in progress.
type overlapState struct {
	until    time.Time
	rotation string
	leaves   string
}

// signedBy returns the leaves, unexpired at now, that one of the CAs signed
// (the CAs themselves excluded).
func signedBy(cas, leaves []*x509.Certificate, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for _, l := range leaves {
		if !now.Before(l.NotAfter) || contains(cas, l) || contains(out, l) {
			continue
		}
		for _, ca := range cas {
			if len(l.AuthorityKeyId) > 0 && len(ca.SubjectKeyId) > 0 && !bytes.Equal(l.AuthorityKeyId, ca.SubjectKeyId) {
				continue // another key: no signature to check
			}
			if l.CheckSignatureFrom(ca) == nil {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// desired decides the bundle: the Certificate's CAs first, then, during a
// rotation, the CAs the object trusted before that are not in the new set and
// have not expired, until the overlap ends. The overlap state is carried on
// the object (annotations) between reconciles:
//
//   - a rotation not seen before (its rotation differs from the new set's
//     fingerprint) starts the overlap at now;
//   - while an issued Secret still holds an unexpired certificate signed by
//     a kept CA (leaves returns the certificates the issued Secrets in the
//     CA Certificate's namespace hold), the overlap does not end: a server
//     presenting it would be cut off;
//   - when that set of certificates changes (one was reissued from the new
//     CA), the overlap runs for at least its length again, so the server
//     has time to reload the new one;
//   - then the old CAs are dropped.
//
// So clients keep trusting a server that still presents a certificate from
// the old CA while it waits for its renewal and while it reloads, and stop
// trusting the old CA once nothing signed by it is issued any more and the
// overlap has passed. leaves is called only while an old CA is kept.
func desired(caPEM, current []byte, st overlapState, leaves func() ([]*x509.Certificate, error), now time.Time, overlap time.Duration) (plan, error) {
	next := parseBundle(caPEM)
	if len(next) == 0 {
		return plan{}, errNoCA
	}
	fp := fingerprint(next)
	var kept []*x509.Certificate
	for _, c := range parseBundle(current) {
		if !contains(next, c) && !contains(kept, c) && now.Before(c.NotAfter) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 || overlap <= 0 {
		return plan{bundle: encodeBundle(next)}, nil
	}
	all, err := leaves()
	if err != nil {
		return plan{}, err
	}
	var lfp string
	if inUse := signedBy(kept, all, now); len(inUse) > 0 {
		lfp = fingerprint(inUse)
	}
	until := st.until
	switch {
	case until.IsZero() || st.rotation != fp:
		// A rotation seen for the first time: the overlap starts now.
		until = now.Add(overlap)
	case lfp != st.leaves:
		// A certificate from an old CA was replaced: its server reloads.
		until = later(until, now.Add(overlap))
	case !now.Before(until) && lfp != "":
		// Still issued: keep trusting the old CA for another overlap.
		until = now.Add(overlap)
	case !now.Before(until):
		return plan{bundle: encodeBundle(next)}, nil
	}
	return plan{bundle: encodeBundle(append(next, kept...)), until: until, rotation: fp, leaves: lfp}, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
