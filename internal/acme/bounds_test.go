package acme_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/acme"
)

// TestDirectoryAllowed: only URLs under an allowed prefix, with the same
// scheme and host, and nothing that could make a string prefix lie.
func TestDirectoryAllowed(t *testing.T) {
	allowed := []string{acme.LetsEncryptProduction, "https://127.0.0.1:14000/dir"}
	for server, want := range map[string]bool{
		acme.LetsEncryptProduction:                            true,
		"https://ACME-v02.api.letsencrypt.org/directory":      true,
		"https://127.0.0.1:14000/dir":                         true,
		"https://127.0.0.1:14000/dir/sub":                     true,
		acme.LetsEncryptStaging:                               false,
		"http://acme-v02.api.letsencrypt.org/directory":       false,
		"https://127.0.0.1:140001/dir":                        false,
		"https://127.0.0.1:14000/other":                       false,
		"https://127.0.0.1:14000/dir/../other":                false,
		"https://127.0.0.1:14000/dir/%2e%2e/other":            false,
		"https://user@127.0.0.1:14000/dir":                    false,
		"https://127.0.0.1:14000/dir?x=1":                     false,
		"https://127.0.0.1:14000/dir#x":                       false,
		"https://acme-v02.api.letsencrypt.org.evil/directory": false,
		"": false,
	} {
		if got := acme.DirectoryAllowed(server, allowed); got != want {
			t.Errorf("DirectoryAllowed(%q) = %v, want %v", server, got, want)
		}
	}
	if acme.DirectoryAllowed(acme.LetsEncryptProduction, nil) {
		t.Error("an empty allow list allowed a directory")
	}
}

// TestNewClientRefusesWithoutARequest: a directory not allowed gets no
// request at all.
func TestNewClientRefusesWithoutARequest(t *testing.T) {
	g := NewWithT(t)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, err := acme.NewClient(srv.URL+"/dir", []string{srv.URL + "/allowed"}, nil, key, "")
	g.Expect(errors.Is(err, acme.ErrDirectoryNotAllowed)).To(BeTrue(), "%v", err)
	g.Expect(hits.Load()).To(BeZero())
}

// TestHugeErrorBodyBounded: an allowed directory answering with a 64 MiB
// error body: the client reads at most MaxResponseBody of it and the text
// for the status is bounded, valid UTF-8 on one line.
func TestHugeErrorBodyBounded(t *testing.T) {
	g := NewWithT(t)
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		chunk := []byte(strings.Repeat("<b>\xff\x00 ☃ huge\n", 4096))
		for range 64 << 20 / len(chunk) {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c, err := acme.NewClient(srv.URL+"/dir", []string{srv.URL}, nil, key, "")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = acme.Register(t.Context(), c, "")
	g.Expect(err).To(HaveOccurred())
	txt := acme.StatusText(err)
	g.Expect(len(txt)).To(BeNumerically("<=", acme.MaxStatusText))
	g.Expect(utf8.ValidString(txt)).To(BeTrue())
	g.Expect(txt).NotTo(ContainSubstring("\n"))
	g.Expect(txt).NotTo(ContainSubstring("\x00"))
	g.Expect(txt).To(HaveSuffix("…"))
	g.Expect(len(err.Error())).To(BeNumerically("<=", acme.MaxResponseBody+4096), "the client kept at most the bound of the body")
}

// TestBoundText cuts on a rune boundary.
func TestBoundText(t *testing.T) {
	g := NewWithT(t)
	g.Expect(acme.BoundText("short", 10)).To(Equal("short"))
	s := acme.BoundText(strings.Repeat("☃", 100), 10)
	g.Expect(len(s)).To(BeNumerically("<=", 10))
	g.Expect(utf8.ValidString(s)).To(BeTrue())
	g.Expect(acme.BoundText("a\tb\x1bc", 100)).To(Equal("a b c"))
}
