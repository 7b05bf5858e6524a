package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompareFlagsRegressions(t *testing.T) {
	base := map[string]figure{}
	for _, f := range parse(strings.NewReader("BENCH a.ratio 10 s 1.00\nBENCH a.value 100 MiB\nBENCH a.same 5 s\n")) {
		base[f.name] = f
	}
	cur := parse(strings.NewReader("noise\nBENCH a.ratio 30 s 1.10\nBENCH a.value 125 MiB\nBENCH a.same 5.5 s\nBENCH a.new 1 s\n"))
	var out bytes.Buffer
	n := print(&out, cur, base, 0.20)
	// a.ratio is compared by ratio (+10 %), not value (+200 %); a.value is
	// +25 %; a.same +10 %.
	if n != 1 {
		t.Fatalf("regressed = %d, want 1:\n%s", n, out.String())
	}
	for _, want := range []string{"+25% REGRESSED", "+10%", "new"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestWriteBaselineReplacesTheSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	readme := "# x\n\n" + beginMarker + "\nBENCH old.one 1 s\n" + endMarker + "\ntail\n"
	if err := os.WriteFile(p, []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeBaseline(p, readme, parse(strings.NewReader("BENCH new.one 2 s 1.50\n"))); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	sec, ok := section(string(b))
	if !ok {
		t.Fatalf("no section in:\n%s", b)
	}
	got := parse(strings.NewReader(sec))
	if len(got) != 1 || got[0].name != "new.one" || got[0].ratio != 1.5 {
		t.Errorf("baseline = %+v, want only new.one with ratio 1.5", got)
	}
	if !strings.HasSuffix(string(b), "tail\n") || !strings.HasPrefix(string(b), "# x") {
		t.Errorf("text around the section changed:\n%s", b)
	}
}
