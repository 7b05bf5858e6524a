package receiver

import (
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

func TestVerify(t *testing.T) {
	body, tok := []byte(`{"ref":"refs/heads/main"}`), []byte("s3cret")
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	cases := []struct {
		name     string
		hdr      http.Header
		provider string
		ok       bool
	}{
		{"github good", h("X-Hub-Signature-256", Sign(body, tok)), "github", true},
		{"github bad", h("X-Hub-Signature-256", Sign(body, []byte("other"))), "github", false},
		{"github sha1 only", h("X-Hub-Signature-256", "sha1=abc"), "github", false},
		{"gitlab good", h("X-Gitlab-Token", "s3cret"), "gitlab", true},
		{"gitlab bad", h("X-Gitlab-Token", "nope"), "gitlab", false},
		{"generic hmac", h("X-Signature-256", Sign(body, tok)), "generic", true},
		{"generic bearer", h("Authorization", "Bearer s3cret"), "generic", true},
		{"generic bearer bad", h("Authorization", "Bearer x"), "generic", false},
		{"nothing", h(), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p, ok := Verify(tc.hdr, body, tok)
			g.Expect(p).To(Equal(tc.provider))
			g.Expect(ok).To(Equal(tc.ok))
		})
	}
}
