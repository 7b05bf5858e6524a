package acme

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Let's Encrypt's directories, the default of --acme-allowed-directories.
const (
	LetsEncryptProduction = "https://acme-v02.api.letsencrypt.org/directory"
	LetsEncryptStaging    = "https://acme-staging-v02.api.letsencrypt.org/directory"
)

// DefaultAllowedDirectories are the ACME directories the manager talks to
// unless the cluster admin says otherwise: Let's Encrypt's production and
// staging directories.
var DefaultAllowedDirectories = []string{LetsEncryptProduction, LetsEncryptStaging}

// ErrDirectoryNotAllowed says that an issuer names an ACME directory the
// cluster admin did not allow (--acme-allowed-directories).
var ErrDirectoryNotAllowed = errors.New("not an ACME directory the cluster admin allowed (--acme-allowed-directories)")

// MaxResponseBody bounds every ACME response body the manager reads (error
// documents included): beyond, reading fails.
const MaxResponseBody = 1 << 20

// MaxStatusText bounds the text of a remote error written to a status.
const MaxStatusText = 1024

// DirectoryAllowed says whether server is under one of the allowed URL
// prefixes: same scheme and host (port included), and a path starting with
// the prefix's path. A server URL with user information, a query, a
// fragment, escaped characters or dot segments in its path is never allowed
// (none of them has a place in a directory URL, and each could make a string
// prefix mean something else).
func DirectoryAllowed(server string, allowed []string) bool {
	u, err := url.Parse(server)
	if err != nil || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawPath != "" || u.Opaque != "" || u.Host == "" {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	for _, a := range allowed {
		p, err := url.Parse(strings.TrimSpace(a))
		if err != nil || p.Host == "" {
			continue
		}
		if strings.EqualFold(p.Scheme, u.Scheme) && strings.EqualFold(p.Host, u.Host) && strings.HasPrefix(u.Path, p.Path) {
			return true
		}
	}
	return false
}

// boundedTransport bounds every response body by MaxResponseBody.
type boundedTransport struct{ next http.RoundTripper }

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &boundedBody{rc: resp.Body, r: io.LimitReader(resp.Body, MaxResponseBody+1)}
	return resp, nil
}

// boundedBody fails once more than MaxResponseBody bytes were read.
type boundedBody struct {
	rc io.ReadCloser
	r  io.Reader
	n  int64
}

// ErrResponseTooLarge is returned by a read past MaxResponseBody.
var ErrResponseTooLarge = fmt.Errorf("the ACME server's response is larger than %d bytes", MaxResponseBody)

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.n >= MaxResponseBody {
		return 0, ErrResponseTooLarge
	}
	if rest := MaxResponseBody - b.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// StatusText turns a remote error into what a status may hold: valid UTF-8
// plain text on one line (control and format characters become spaces), at
// most MaxStatusText bytes, cut with "…" when longer.
func StatusText(err error) string {
	if err == nil {
		return ""
	}
	return BoundText(err.Error(), MaxStatusText)
}

// BoundText makes s valid printable UTF-8 of at most maxBytes bytes.
func BoundText(s string, maxBytes int) string {
	const ellipsis = "…"
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if !unicode.IsPrint(r) {
			r = ' '
		}
		b.WriteRune(r)
		if b.Len() > maxBytes {
			break
		}
	}
	out := b.String()
	if len(out) <= maxBytes {
		return out
	}
	cut := maxBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + ellipsis
}
