package reconcile_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/converge-dev/converge/pkg/reconcile"
)

// TestTruncate: short text is kept as is; long text is cut to the bound,
// ends in "...", and stays valid UTF-8 when the bound falls inside a rune.
func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "abc", 10, "abc"},
		{"exact", "abcdefghij", 10, "abcdefghij"},
		{"cut", "abcdefghijk", 10, "abcdefg..."},
		// "é" is 2 bytes (6 and 7): a cut at 7 would split it.
		{"rune", "abcdeféghijk", 10, "abcdef..."},
		{"tiny", "abcdef", 2, ".."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reconcile.Truncate(tc.in, tc.n)
			if got != tc.want {
				t.Fatalf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
	long := strings.Repeat("日本語", 1000)
	got := reconcile.Truncate(long, reconcile.MaxMessageBytes)
	if len(got) > reconcile.MaxMessageBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
		t.Fatalf("Truncate of %d bytes of CJK: %d bytes, valid UTF-8 %v, %q...", len(long), len(got), utf8.ValidString(got), got[len(got)-10:])
	}
}
