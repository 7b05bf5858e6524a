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

// desired decides the bundle: the Certificate's CAs first, then, during a
// rotation, the CAs the object trusted before that are not in the new set and
// have not expired, until the overlap ends. until and rotation are carried on
// the object (annotations) between reconciles: an old CA is kept only while
// until is in the future, and a rotation not seen before (rotation differs
// from the new set's fingerprint) starts the overlap at now. So clients keep
// trusting a server that still presents a certificate from the old CA while
// it reloads, and stop trusting the old CA once the overlap has passed.
func desired(caPEM, current []byte, until time.Time, rotation string, now time.Time, overlap time.Duration) (plan, error) {
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
	switch {
	case len(kept) == 0 || overlap <= 0:
		return plan{bundle: encodeBundle(next)}, nil
	case until.IsZero() || rotation != fp:
		// A rotation seen for the first time: the overlap starts now.
		until = now.Add(overlap)
	case !now.Before(until):
		return plan{bundle: encodeBundle(next)}, nil
	}
	return plan{bundle: encodeBundle(append(next, kept...)), until: until, rotation: fp}, nil
}
