package sqlengine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Tools are the dump and load programs run by the manager. Empty fields use
// the defaults: pg_dump and psql from /usr/lib/postgresql/<major>/bin when
// that matches the server's major version, else from $PATH; mariadb-dump
// and mariadb from $PATH.
type Tools struct {
	PGDump, PSQL, MariaDBDump, MariaDB string
}

var pgMajor = regexp.MustCompile(`^(\d+)`)

// pgTool finds a PostgreSQL client of the server's major version; pg_dump
// refuses servers newer than itself.
func pgTool(name, override, serverVersion string) string {
	if override != "" {
		return override
	}
	if m := pgMajor.FindStringSubmatch(serverVersion); m != nil {
		p := filepath.Join("/usr/lib/postgresql", m[1], "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return name
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// DumpResult describes a finished dump.
type DumpResult struct {
	SizeBytes int64
	SHA256    string
	// Tool is the program's own --version line.
	Tool string
}

// Dump writes a plain SQL dump of c.Database (connected as c.User) to path,
// atomically: into path+".partial", synced, then renamed. Ownership and
// grants are left out, so the dump loads into a database with another owner.
// The password reaches the program through the environment (PostgreSQL) or
// a 0600 option file (MariaDB), never through argv.
func Dump(ctx context.Context, t Tools, c Config, serverVersion, path string) (DumpResult, error) {
	if err := ValidateIdentifier(c.Database); err != nil {
		return DumpResult{}, fmt.Errorf("database %q: %w", c.Database, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return DumpResult{}, fmt.Errorf("creating the backup directory: %w", err)
	}
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return DumpResult{}, fmt.Errorf("creating the dump file: %w", err)
	}
	defer func() { _ = os.Remove(tmp) }() // no-op after the rename
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	cmd, cleanup, err := dumpCommand(ctx, t, c, serverVersion)
	if err != nil {
		_ = f.Close()
		return DumpResult{}, err
	}
	defer cleanup()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = cw, &stderr
	runErr := cmd.Run()
	if runErr == nil && cw.err != nil {
		runErr = cw.err
	}
	if runErr != nil {
		_ = f.Close()
		return DumpResult{}, fmt.Errorf("%s: %w: %s", filepath.Base(cmd.Path), runErr, strings.TrimSpace(stderr.String()))
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return DumpResult{}, fmt.Errorf("syncing the dump file: %w", err)
	}
	if err := f.Close(); err != nil {
		return DumpResult{}, fmt.Errorf("closing the dump file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return DumpResult{}, fmt.Errorf("moving the dump into place: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return DumpResult{SizeBytes: cw.n, SHA256: hex.EncodeToString(h.Sum(nil)), Tool: toolVersion(ctx, cmd.Path)}, nil
}

// Restore verifies path against sha256 and loads it into c.Database as c.User
// (the new owner), stopping at the first error; on PostgreSQL in one
// transaction, so a failed load leaves the database empty.
func Restore(ctx context.Context, t Tools, c Config, serverVersion, path, wantSHA256 string) error {
	if err := ValidateIdentifier(c.Database); err != nil {
		return fmt.Errorf("database %q: %w", c.Database, err)
	}
	got, err := FileSHA256(path)
	if err != nil {
		return err
	}
	if wantSHA256 != "" && got != wantSHA256 {
		return fmt.Errorf("the dump %s has SHA-256 %s, the backup recorded %s: refusing to load a changed file", path, got, wantSHA256)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening the dump: %w", err)
	}
	defer func() { _ = f.Close() }()
	c, hostaddr, err := c.pin(ctx)
	if err != nil {
		return err
	}
	var cmd *exec.Cmd
	var cleanup func()
	switch c.Engine {
	case Postgres:
		cmd = exec.CommandContext(ctx, pgTool("psql", t.PSQL, serverVersion), "--no-psqlrc", "--quiet", "--set", "ON_ERROR_STOP=1", "--single-transaction", "--file", "-")
		cmd.Env, cleanup, err = pgEnv(c, hostaddr)
		if err != nil {
			return err
		}
	case MariaDB:
		var opt string
		opt, cleanup, err = mariaOptionFile(c)
		if err != nil {
			return err
		}
		cmd = exec.CommandContext(ctx, orDefault(t.MariaDB, "mariadb"), "--defaults-extra-file="+opt, "--batch", "--database="+c.Database)
	default:
		return fmt.Errorf("unsupported engine %q", c.Engine)
	}
	defer cleanup()
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(cmd.Path), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// FileSHA256 returns the hex SHA-256 of a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func dumpCommand(ctx context.Context, t Tools, c Config, serverVersion string) (*exec.Cmd, func(), error) {
	c, hostaddr, err := c.pin(ctx)
	if err != nil {
		return nil, nil, err
	}
	switch c.Engine {
	case Postgres:
		cmd := exec.CommandContext(ctx, pgTool("pg_dump", t.PGDump, serverVersion), "--format=plain", "--no-owner", "--no-privileges", "--no-password")
		env, cleanup, err := pgEnv(c, hostaddr)
		if err != nil {
			return nil, nil, err
		}
		cmd.Env = env
		return cmd, cleanup, nil
	case MariaDB:
		opt, cleanup, err := mariaOptionFile(c)
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.CommandContext(ctx, orDefault(t.MariaDBDump, "mariadb-dump"), "--defaults-extra-file="+opt,
			"--single-transaction", "--routines", "--triggers", "--skip-lock-tables", "--no-tablespaces", "--", c.Database)
		return cmd, cleanup, nil
	default:
		return nil, nil, fmt.Errorf("unsupported engine %q", c.Engine)
	}
}

// pin resolves and checks the host against c.Egress for the client
// programs, which resolve on their own: PostgreSQL's connect to the checked
// address (PGHOSTADDR; the name still verifies TLS), MariaDB's too unless
// VerifyFull needs the name (then the check precedes the client's own
// lookup by moments). Without Egress nothing changes.
func (c Config) pin(ctx context.Context) (Config, string, error) {
	if c.Egress == nil {
		return c, "", nil
	}
	a, err := c.Egress.ResolveHost(ctx, c.Host)
	if err != nil {
		return c, "", fmt.Errorf("reaching %s: %w", c.Host, err)
	}
	if c.Engine == MariaDB && c.TLSMode != TLSVerifyFull {
		c.Host = a.String()
	}
	return c, a.String(), nil
}

// pgEnv passes the connection through libpq's environment variables, so no
// value can be mistaken for an option. With VerifyFull the CA goes to a
// private temporary file named by PGSSLROOTCERT (removed by cleanup) and
// libpq verifies the chain and the host name (sslmode=verify-full).
func pgEnv(c Config, hostaddr string) ([]string, func(), error) {
	cleanup := func() {}
	mode := "require"
	switch c.TLSMode {
	case TLSDisable:
		mode = "disable"
	case TLSVerifyFull:
		mode = "verify-full"
	}
	env := []string{
		"PGHOST=" + c.Host, "PGPORT=" + strconv.Itoa(c.Port), "PGUSER=" + c.User,
		"PGPASSWORD=" + c.Password, "PGDATABASE=" + c.Database, "PGSSLMODE=" + mode,
		"PGCONNECT_TIMEOUT=10", "PGAPPNAME=converge", "PATH=" + os.Getenv("PATH"),
		// Never the manager's ~/.postgresql/root.crt or client certificate.
		"PGSSLCERT=/nonexistent", "PGSSLKEY=/nonexistent",
	}
	if hostaddr != "" {
		env = append(env, "PGHOSTADDR="+hostaddr)
	}
	if c.TLSMode == TLSVerifyFull {
		ca, rm, err := caFile(c.CAPEM)
		if err != nil {
			return nil, nil, err
		}
		cleanup = rm
		env = append(env, "PGSSLROOTCERT="+ca)
	}
	return env, cleanup, nil
}

// caFile writes the CA bundle to a private temporary file for the client
// programs.
func caFile(pemData []byte) (string, func(), error) {
	if len(bytes.TrimSpace(pemData)) == 0 {
		return "", nil, errors.New("tls VerifyFull: no CA certificate (the CA Secret's key ca.crt is empty)")
	}
	f, err := os.CreateTemp("", "converge-ca-*.crt")
	if err != nil {
		return "", nil, fmt.Errorf("creating the CA file: %w", err)
	}
	rm := func() { _ = os.Remove(f.Name()) }
	_, err = f.Write(pemData)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		rm()
		return "", nil, fmt.Errorf("writing the CA file: %w", err)
	}
	return f.Name(), rm, nil
}

// mariaOptionFile writes the connection to a private option file for the
// MariaDB clients (the password stays out of argv and the environment).
// Require: ssl; VerifyFull: ssl-ca and ssl-verify-server-cert, so the client
// checks the chain and the host name.
func mariaOptionFile(c Config) (string, func(), error) {
	for _, v := range []string{c.User, c.Password, c.Host} {
		if strings.ContainsAny(v, "\n\r\"\\") {
			return "", nil, errors.New("connection values must not contain newlines, quotes or backslashes")
		}
	}
	removeCA := func() {}
	ssl := "ssl=1\n"
	switch c.TLSMode {
	case TLSDisable:
		ssl = "ssl=0\n"
	case TLSVerifyFull:
		ca, rm, err := caFile(c.CAPEM)
		if err != nil {
			return "", nil, err
		}
		removeCA = rm
		ssl = "ssl=1\nssl-ca=\"" + ca + "\"\nssl-verify-server-cert\n"
	}
	f, err := os.CreateTemp("", "converge-mariadb-*.cnf")
	if err != nil {
		removeCA()
		return "", nil, fmt.Errorf("creating the client option file: %w", err)
	}
	cleanup := func() { _ = os.Remove(f.Name()); removeCA() }
	_, err = fmt.Fprintf(f, "[client]\nuser=\"%s\"\npassword=\"%s\"\nhost=\"%s\"\nport=%d\nprotocol=TCP\n%s", c.User, c.Password, c.Host, c.Port, ssl)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("writing the client option file: %w", err)
	}
	return f.Name(), cleanup, nil
}

func toolVersion(ctx context.Context, path string) string {
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return filepath.Base(path)
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}
