package sqlengine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestValidateCharset: 1 to 32 ASCII letters (either case), digits or '_';
// every neighbour of those ranges and every other length is refused.
func TestValidateCharset(t *testing.T) {
	for _, s := range []string{"utf8mb4", "UTF8", "latin1", "a", "Z", "_", "0", "9", strings.Repeat("z", 32)} {
		if err := ValidateCharset(s); err != nil {
			t.Errorf("ValidateCharset(%q) = %v, want nil", s, err)
		}
	}
	bad := map[string]string{
		"":                      "1 to 32",
		strings.Repeat("a", 33): "1 to 32",
		"utf-8":                 `"-"`,
		"utf8'":                 `"'"`,
		"a b":                   `" "`,
		"a@":                    `"@"`,   // '@' is just below 'A'
		"a[":                    `"["`,   // '[' is just above 'Z'
		"a`":                    "\"`\"", // '`' is just below 'a'
		"a{":                    `"{"`,   // '{' is just above 'z'
		"a/":                    `"/"`,   // '/' is just below '0'
		"a:":                    `":"`,   // ':' is just above '9'
		"a\x00":                 `"\x00"`,
	}
	for s, want := range bad {
		if err := ValidateCharset(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateCharset(%q) = %v, want an error containing %q", s, err, want)
		}
	}
}

// TestValidateIdentifierMessages: the error names the offending character,
// as a byte only when it is not printable ASCII, and adds the SQL hint only
// for quotes, ';', '\' and spaces.
func TestValidateIdentifierMessages(t *testing.T) {
	cases := []struct {
		in, want, not string
	}{
		{"a.b", `found "." at position 1`, "looks like SQL"},
		{"a~", `found "~" at position 1`, "byte"},
		{"a\x1f", "byte 0x1f at position 1", "looks like SQL"},
		{"a\x7f", "byte 0x7f at position 1", "looks like SQL"},
		{"ab;", `found ";" at position 2`, "byte"},
		{"a;", "looks like SQL", "byte"},
		{"Z9", `found "Z" at position 0`, "must start with"},
		{"9z", "must start with", "found"},
		{"a9-z_", "", ""},
		{"pg", "", ""},
		{"z", "", ""},
	}
	for _, tc := range cases {
		err := ValidateIdentifier(tc.in)
		if tc.want == "" {
			if err != nil {
				t.Errorf("ValidateIdentifier(%q) = %v, want nil", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.not) {
			t.Errorf("ValidateIdentifier(%q) = %v, want an error containing %q and not %q", tc.in, err, tc.want, tc.not)
		}
	}
}

// TestQuoteLiteral: printable ASCII without '\' is accepted and quoted;
// control bytes, DEL, non-ASCII and '\' are refused.
func TestQuoteLiteral(t *testing.T) {
	good := map[string]string{
		"":         "''",
		"a ~":      "'a ~'",
		"it's":     "'it''s'",
		`"a";--`:   `'"a";--'`,
		"Pa55w0rd": "'Pa55w0rd'",
	}
	for in, want := range good {
		if got, err := quoteLiteral(in); err != nil || got != want {
			t.Errorf("quoteLiteral(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"a\x00", "a\n", "\x1f", "a\x7f", "caf\xc3\xa9", `a\b`} {
		if got, err := quoteLiteral(in); err == nil {
			t.Errorf("quoteLiteral(%q) = %q, want an error", in, got)
		}
	}
}

// TestUnquote: only a string that QuotePostgres/QuoteMariaDB could have
// produced unquotes: quoted at both ends, every inner quote doubled.
func TestUnquote(t *testing.T) {
	good := map[string]string{
		`""`:       "",
		`"a"`:      "a",
		`"a""b"`:   `a"b`,
		`""""`:     `"`,
		"\"a``b\"": "a``b",
		`"x""; D"`: `x"; D`,
	}
	for in, want := range good {
		if got, ok := UnquotePostgres(in); !ok || got != want {
			t.Errorf("UnquotePostgres(%q) = %q, %v; want %q", in, got, ok, want)
		}
		mq := strings.ReplaceAll(in, `"`, "`")
		mwant := strings.ReplaceAll(want, `"`, "`")
		if strings.Contains(want, "`") {
			continue // the backticks of the input would change meaning
		}
		if got, ok := UnquoteMariaDB(mq); !ok || got != mwant {
			t.Errorf("UnquoteMariaDB(%q) = %q, %v; want %q", mq, got, ok, mwant)
		}
	}
	for _, in := range []string{``, `"`, `a`, `ab`, `"a`, `a"`, `"a"b"`, `"a""`, `"""`, `"a"x`, `x"a"`, "`a`"} {
		if got, ok := UnquotePostgres(in); ok {
			t.Errorf("UnquotePostgres(%q) = %q, true; want false", in, got)
		}
	}
	if got, ok := UnquoteMariaDB(`"a"`); ok {
		t.Errorf("UnquoteMariaDB(%q) = %q, true; want false", `"a"`, got)
	}
}

// TestIsDuplicate: only MariaDB's duplicate key error (1062), wrapped or
// not, is a claim someone else holds; other errors, MariaDB's or not, are
// not.
func TestIsDuplicate(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, true},
		{fmt.Errorf("claiming: %w", &mysql.MySQLError{Number: 1062}), true},
		{&mysql.MySQLError{Number: 1045, Message: "Access denied"}, false},
		{errors.New("connection refused"), false},
		{nil, false},
	}
	for _, tc := range cases {
		if got := isDuplicate(tc.err); got != tc.want {
			t.Errorf("isDuplicate(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
