package sqlengine

import (
	"errors"
	"fmt"
	"strings"
)

// MaxIdentifierLength is the longest database or role name accepted: the
// PostgreSQL limit (NAMEDATALEN-1), below MariaDB's 64 for databases and 80
// for users.
const MaxIdentifierLength = 63

// reserved are names that belong to the servers themselves; a Database must
// never create, own or drop them.
var reserved = map[string]bool{
	"postgres": true, "template0": true, "template1": true, "public": true,
	"current_user": true, "session_user": true, "current_role": true, "none": true, "all": true,
	"mysql": true, "information_schema": true, "performance_schema": true, "sys": true,
	"root": true, "mariadb.sys": true, "admin": true,
	ClaimsDatabase: true, // Converge's own bookkeeping on MariaDB
}

// ValidateIdentifier checks a database, role or extension name: 1 to 63
// characters, lowercase ASCII letters, digits, '_' and '-', starting with a
// letter or '_', not a name the servers reserve and not starting with "pg_".
// The rules are stricter than the engines need, so that one name means the
// same on every engine and in every tool (psql, mariadb-dump, URIs). The
// error says what is wrong in words a user can act on.
func ValidateIdentifier(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > MaxIdentifierLength {
		return fmt.Errorf("must be at most %d characters (is %d)", MaxIdentifierLength, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case (c >= '0' && c <= '9') || c == '-':
			if i == 0 {
				return errors.New("must start with a lowercase letter or '_'")
			}
		default:
			what := fmt.Sprintf("%q", string(c))
			if c < 0x20 || c >= 0x7f {
				what = fmt.Sprintf("byte 0x%02x", c)
			}
			msg := fmt.Sprintf("must contain only lowercase letters, digits, '_' and '-' (found %s at position %d)", what, i)
			if strings.ContainsAny(s, "'\";`\\ ") {
				msg += "; quotes, ';', '\\' and spaces are never part of a name (this looks like SQL, not an identifier)"
			}
			return errors.New(msg)
		}
	}
	if reserved[s] {
		return fmt.Errorf("%q is reserved by the database server", s)
	}
	if strings.HasPrefix(s, "pg_") {
		return errors.New(`names starting with "pg_" are reserved by PostgreSQL`)
	}
	return nil
}

// ValidateCharset checks a character set name: 1 to 32 ASCII letters, digits
// or '_'.
func ValidateCharset(s string) error {
	if s == "" || len(s) > 32 {
		return errors.New("must be 1 to 32 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return fmt.Errorf("must contain only letters, digits and '_' (found %q)", string(c))
		}
	}
	return nil
}

// QuotePostgres quotes an identifier for PostgreSQL: inside double quotes,
// with every double quote doubled. It refuses NUL, which PostgreSQL cannot
// store in a name.
func QuotePostgres(s string) (string, error) {
	if strings.ContainsRune(s, 0) {
		return "", errors.New("identifier contains a NUL byte")
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`, nil
}

// QuoteMariaDB quotes an identifier for MariaDB: inside backticks, with
// every backtick doubled. It refuses NUL.
func QuoteMariaDB(s string) (string, error) {
	if strings.ContainsRune(s, 0) {
		return "", errors.New("identifier contains a NUL byte")
	}
	return "`" + strings.ReplaceAll(s, "`", "``") + "`", nil
}

// mariaDBGrantPattern escapes the wildcards '_' and '%' in a database name
// used in GRANT ... ON db.*, where MariaDB treats them as patterns; the
// result is still to be quoted.
func mariaDBGrantPattern(s string) string {
	return strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(s)
}

// quoteLiteral quotes a string literal for either engine. It accepts only
// printable ASCII without backslashes, so the result means the same whatever
// standard_conforming_strings or NO_BACKSLASH_ESCAPES say; single quotes are
// doubled.
func quoteLiteral(s string) (string, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return "", fmt.Errorf("literal contains a forbidden byte 0x%02x", c)
		}
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'", nil
}

// UnquotePostgres is the inverse of QuotePostgres, for tests and fuzzing.
func UnquotePostgres(q string) (string, bool) { return unquote(q, '"') }

// UnquoteMariaDB is the inverse of QuoteMariaDB, for tests and fuzzing.
func UnquoteMariaDB(q string) (string, bool) { return unquote(q, '`') }

func unquote(q string, quote byte) (string, bool) {
	if len(q) < 2 || q[0] != quote || q[len(q)-1] != quote {
		return "", false
	}
	inner := q[1 : len(q)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		if inner[i] == quote {
			if i+1 >= len(inner) || inner[i+1] != quote {
				return "", false // a lone quote would end the identifier early
			}
			i++
		}
		b.WriteByte(inner[i])
	}
	return b.String(), true
}
