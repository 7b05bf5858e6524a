package sqlengine

import (
	"strings"
	"testing"
)

func TestValidateIdentifier(t *testing.T) {
	good := []string{"app", "app_db", "my-app", "_x", "a1", strings.Repeat("a", 63)}
	for _, s := range good {
		if err := ValidateIdentifier(s); err != nil {
			t.Errorf("ValidateIdentifier(%q) = %v, want nil", s, err)
		}
	}
	bad := map[string]string{
		"":                        "must not be empty",
		strings.Repeat("a", 64):   "at most 63",
		"App":                     "lowercase",
		"1app":                    "must start with",
		"-app":                    "must start with",
		`x"; DROP DATABASE y; --`: "looks like SQL",
		"x`; DROP DATABASE y; --": "looks like SQL",
		"x'":                      "looks like SQL",
		"a b":                     "looks like SQL",
		"a\x00b":                  "byte 0x00",
		"caf\xc3\xa9":             "byte 0xc3",
		"postgres":                "reserved",
		"mysql":                   "reserved",
		"pg_catalog2":             `"pg_"`,
		"a.b":                     `"."`,
	}
	for s, want := range bad {
		err := ValidateIdentifier(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateIdentifier(%q) = %v, want an error containing %q", s, err, want)
		}
	}
}

func TestQuote(t *testing.T) {
	cases := map[string][2]string{
		"app":      {`"app"`, "`app`"},
		`a"b`:      {`"a""b"`, "`a\"b`"},
		"a`b":      {"\"a`b\"", "`a``b`"},
		`x"; DROP`: {`"x""; DROP"`, "`x\"; DROP`"},
	}
	for in, want := range cases {
		pg, err := QuotePostgres(in)
		if err != nil || pg != want[0] {
			t.Errorf("QuotePostgres(%q) = %q, %v; want %q", in, pg, err, want[0])
		}
		my, err := QuoteMariaDB(in)
		if err != nil || my != want[1] {
			t.Errorf("QuoteMariaDB(%q) = %q, %v; want %q", in, my, err, want[1])
		}
	}
	if _, err := QuotePostgres("a\x00"); err == nil {
		t.Error("QuotePostgres accepted a NUL byte")
	}
	if _, err := quoteLiteral(`a\'b`); err == nil {
		t.Error("quoteLiteral accepted a backslash")
	}
	if got, _ := quoteLiteral("it's"); got != `'it''s'` {
		t.Errorf("quoteLiteral = %s", got)
	}
}

// FuzzValidateIdentifier: whatever the validator accepts needs no escaping
// at all on either engine, and its quoted form round-trips.
func FuzzValidateIdentifier(f *testing.F) {
	for _, s := range []string{"app", `x"; DROP DATABASE y; --`, "a`b", "pg_x", "ü", "_", "a-b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateIdentifier(s) != nil {
			return
		}
		if strings.ContainsAny(s, "\"`'\\; \x00") || len(s) > MaxIdentifierLength {
			t.Fatalf("validator accepted %q", s)
		}
		pg, err := QuotePostgres(s)
		if err != nil || pg != `"`+s+`"` {
			t.Fatalf("a valid identifier needed escaping: %q -> %q", s, pg)
		}
	})
}

// FuzzQuote: quoting any string yields one identifier token that unquotes to
// the same string, so no input can end the identifier and inject SQL.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"app", `a"b`, "a`b", `"`, "``", `x"; DROP DATABASE y; --`, "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, q := range []struct {
			quote   func(string) (string, error)
			unquote func(string) (string, bool)
		}{{QuotePostgres, UnquotePostgres}, {QuoteMariaDB, UnquoteMariaDB}} {
			out, err := q.quote(s)
			if err != nil {
				if !strings.ContainsRune(s, 0) {
					t.Fatalf("quote(%q) failed: %v", s, err)
				}
				continue
			}
			back, ok := q.unquote(out)
			if !ok || back != s {
				t.Fatalf("quote(%q) = %q does not round-trip (got %q, %v)", s, out, back, ok)
			}
		}
		if lit, err := quoteLiteral(s); err == nil {
			inner := lit[1 : len(lit)-1]
			if strings.Contains(strings.ReplaceAll(inner, "''", ""), "'") || strings.Contains(inner, `\`) {
				t.Fatalf("quoteLiteral(%q) = %q can end early", s, lit)
			}
		}
	})
}
