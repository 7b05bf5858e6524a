// Package sqltest starts throwaway PostgreSQL and MariaDB servers for tests:
// each in its own temporary directory, on a free loopback port, with its
// unix socket inside that directory, run as a non-root user (the Debian
// "postgres" user when the tests run as root), with an admin account that
// logs in over TCP with a password. Nothing relies on a system service.
//
// When the server programs are missing, suites skip with a loud message,
// except in CI (CI=true), where they fail.
package sqltest

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/sqlengine"
)

// PostgresBinDir is where Debian installs the PostgreSQL 15 server programs.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// Server is a running throwaway database server.
type Server struct {
	Engine        sqlengine.Engine
	Host          string
	Port          int
	AdminUser     string
	AdminPassword string
	// Dir holds the data directory, socket and log.
	Dir string
	// CAPEM is the CA that signed the server's certificate; empty when the
	// server was started without TLS (Options.NoTLS).
	CAPEM []byte

	cmd     *exec.Cmd
	done    chan error
	exitErr error
}

// Admin returns the admin connection configuration (TLS VerifyFull against
// the server's CA, or Disable for a server without TLS).
func (s *Server) Admin() sqlengine.Config {
	return s.Config(s.AdminUser, s.AdminPassword, "")
}

// Config returns a configuration for another user and database.
func (s *Server) Config(user, password, database string) sqlengine.Config {
	c := sqlengine.Config{Engine: s.Engine, Host: s.Host, Port: s.Port, User: user, Password: password, Database: database, TLSMode: sqlengine.TLSDisable}
	if len(s.CAPEM) > 0 {
		c.TLSMode, c.CAPEM = sqlengine.TLSVerifyFull, s.CAPEM
	}
	return c
}

// Options change how a server is started.
type Options struct {
	// NoTLS starts the server without TLS (by default it serves TLS with a
	// certificate for 127.0.0.1 from a CA generated for it: Server.CAPEM).
	NoTLS bool
}

// Open opens a database/sql pool as the admin, connected to database (empty
// for the default); closed when t ends.
func (s *Server) Open(t testing.TB, database string) *sql.DB {
	t.Helper()
	c := s.Admin()
	c.Database = database
	db, err := sqlengine.OpenDB(c)
	if err != nil {
		t.Fatalf("opening %s: %v", s.Engine, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Exec runs statements as the admin.
func (s *Server) Exec(t testing.TB, database string, stmts ...string) {
	t.Helper()
	db := s.Open(t, database)
	for _, st := range stmts {
		if _, err := db.ExecContext(t.Context(), st); err != nil {
			t.Fatalf("%s: %s: %v", s.Engine, st, err)
		}
	}
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	// A server stopped by a signal exits non-zero; the status is kept, not
	// reported.
	select {
	case s.exitErr = <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		s.exitErr = <-s.done
	}
	s.cmd = nil
	return os.RemoveAll(s.Dir)
}

// MissingError says a server program is not installed.
type MissingError struct{ What string }

func (e *MissingError) Error() string {
	return e.What + " is not installed (apt-get install postgresql mariadb-server mariadb-client)"
}

// runAs returns the command prefix that drops root privileges: servers refuse
// to run as root.
func runAs() ([]string, *user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, nil, errors.New(`running as root needs the "postgres" user to run the servers as (install postgresql)`)
	}
	return []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", "--"}, u, nil
}

func command(ctx context.Context, prefix []string, name string, args ...string) *exec.Cmd {
	all := append(append(append([]string{}, prefix...), name), args...)
	cmd := exec.CommandContext(ctx, all[0], all[1:]...) //nolint:gosec // test harness, fixed programs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func tempDir(u *user.User, prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func password() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartPostgres starts PostgreSQL 15 from PostgresBinDir, with TLS.
func StartPostgres(ctx context.Context) (*Server, error) {
	return StartPostgresWith(ctx, Options{})
}

// StartPostgresWith starts PostgreSQL 15 from PostgresBinDir.
func StartPostgresWith(ctx context.Context, o Options) (_ *Server, retErr error) {
	bin := PostgresBinDir
	if d := os.Getenv("CONVERGE_POSTGRES_BIN_DIR"); d != "" {
		bin = d
	}
	if _, err := os.Stat(filepath.Join(bin, "postgres")); err != nil { //nolint:gosec // a directory the test runner chose
		return nil, &MissingError{What: "PostgreSQL (" + filepath.Join(bin, "postgres") + ")"}
	}
	prefix, u, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir(u, "converge-pg-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	s := &Server{Engine: sqlengine.Postgres, Host: "127.0.0.1", AdminUser: "converge_admin", AdminPassword: password(), Dir: dir}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.AdminPassword+"\n"), 0o644); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	out, err := command(ctx, prefix, filepath.Join(bin, "initdb"), "-D", data, "-U", s.AdminUser, "--pwfile="+pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	var tlsArgs []string
	if !o.NoTLS {
		f, err := writeTLS(dir, u)
		if err != nil {
			return nil, err
		}
		s.CAPEM = f.CAPEM
		tlsArgs = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + f.Cert, "-c", "ssl_key_file=" + f.Key}
	}
	for attempt := 0; ; attempt++ {
		if s.Port, err = localcp.FreePort(); err != nil {
			return nil, err
		}
		args := append([]string{"-D", data, "-p", strconv.Itoa(s.Port),
			"-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "shared_buffers=32MB", "-c", "logging_collector=off"}, tlsArgs...)
		cmd := command(context.WithoutCancel(ctx), prefix, filepath.Join(bin, "postgres"), args...)
		if err = s.start(ctx, cmd, filepath.Join(dir, "postgres.log")); err == nil || attempt == 2 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// StartMariaDB starts mariadbd from $PATH or /usr/sbin, with TLS.
func StartMariaDB(ctx context.Context) (*Server, error) {
	return StartMariaDBWith(ctx, Options{})
}

// StartMariaDBWith starts mariadbd from $PATH or /usr/sbin.
func StartMariaDBWith(ctx context.Context, o Options) (_ *Server, retErr error) {
	mariadbd, err := lookPath("mariadbd")
	if err != nil {
		return nil, &MissingError{What: "MariaDB server (mariadbd)"}
	}
	installDB, err := lookPath("mariadb-install-db")
	if err != nil {
		return nil, &MissingError{What: "MariaDB server (mariadb-install-db)"}
	}
	client, err := lookPath("mariadb")
	if err != nil {
		return nil, &MissingError{What: "MariaDB client (mariadb)"}
	}
	prefix, u, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir(u, "converge-mariadb-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	s := &Server{Engine: sqlengine.MariaDB, Host: "127.0.0.1", AdminUser: "converge_admin", AdminPassword: password(), Dir: dir}
	data := filepath.Join(dir, "data")
	out, err := command(ctx, prefix, installDB, "--no-defaults", "--datadir="+data, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %w: %s", err, out)
	}
	sock := filepath.Join(dir, "mysqld.sock")
	var tlsArgs []string
	if !o.NoTLS {
		f, err := writeTLS(dir, u)
		if err != nil {
			return nil, err
		}
		s.CAPEM = f.CAPEM
		tlsArgs = []string{"--ssl-ca=" + f.CA, "--ssl-cert=" + f.Cert, "--ssl-key=" + f.Key}
	}
	for attempt := 0; ; attempt++ {
		if s.Port, err = localcp.FreePort(); err != nil {
			return nil, err
		}
		args := append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + sock,
			"--port=" + strconv.Itoa(s.Port), "--bind-address=127.0.0.1", "--skip-name-resolve", "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--tmpdir=" + dir, "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=0",
			"--skip-log-bin", "--max-connections=300", "--log-error=" + filepath.Join(dir, "error.log")}, tlsArgs...)
		cmd := command(context.WithoutCancel(ctx), prefix, mariadbd, args...)
		if err = s.startMaria(ctx, cmd, client, sock); err == nil || attempt == 2 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

func (s *Server) start(ctx context.Context, cmd *exec.Cmd, logPath string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	s.cmd, s.done = cmd, make(chan error, 1)
	go func() { s.done <- cmd.Wait(); _ = logf.Close() }()
	return s.waitReady(ctx, logPath)
}

func (s *Server) startMaria(ctx context.Context, cmd *exec.Cmd, client, sock string) error {
	if err := s.start(ctx, cmd, filepath.Join(s.Dir, "stdout.log")); err != nil {
		return err
	}
	// The admin account: root (no password, socket only) creates it.
	stmt := fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'; GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION;",
		s.AdminUser, s.AdminPassword, s.AdminUser)
	out, err := exec.CommandContext(ctx, client, "--no-defaults", "--socket="+sock, "--user=root", "-e", stmt).CombinedOutput()
	if err != nil {
		_ = s.Stop()
		return fmt.Errorf("creating the MariaDB admin: %w: %s", err, out)
	}
	return nil
}

// waitReady waits until the admin can log in over TCP.
func (s *Server) waitReady(ctx context.Context, logPath string) error {
	deadline := time.Now().Add(60 * time.Second)
	c := s.Admin()
	if s.Engine == sqlengine.MariaDB {
		c.User, c.Password = "root", "" // the admin is created once root is in
		return s.waitMaria(ctx, deadline, logPath)
	}
	for {
		_, err := sqlengine.Ping(ctx, c)
		if err == nil {
			return nil
		}
		select {
		case werr := <-s.done:
			s.cmd = nil
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s exited: %w: %s", s.Engine, werr, tail(log))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Stop()
			return fmt.Errorf("%s did not accept logins in time: %w", s.Engine, err)
		}
	}
}

func (s *Server) waitMaria(ctx context.Context, deadline time.Time, logPath string) error {
	for {
		if _, err := os.Stat(filepath.Join(s.Dir, "mysqld.sock")); err == nil {
			if out, err := exec.CommandContext(ctx, "mariadb-admin", "--no-defaults", "--socket="+filepath.Join(s.Dir, "mysqld.sock"), "--user=root", "ping").CombinedOutput(); err == nil && bytes.Contains(out, []byte("alive")) {
				return nil
			}
		}
		select {
		case werr := <-s.done:
			s.cmd = nil
			log, _ := os.ReadFile(filepath.Join(s.Dir, "error.log"))
			return fmt.Errorf("mariadbd exited: %w: %s", werr, tail(log))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.Stop()
			return errors.New("mariadbd did not start in time (see " + logPath + ")")
		}
	}
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

var skipReasons = map[sqlengine.Engine]string{}

// serversEnv carries the servers a fuzzing coordinator started to its fuzz
// workers (separate processes of the same test binary, which inherit its
// environment), so that every worker uses them instead of starting its own.
const serversEnv = "CONVERGE_SQLTEST_SERVERS"

// fuzzWorker reports whether this process is a fuzz worker (`go test
// -fuzz` starts one per -parallel, with -test.fuzzworker).
func fuzzWorker() bool {
	for _, a := range os.Args {
		if strings.HasPrefix(a, "-test.fuzzworker") {
			return true
		}
	}
	return false
}

// Main starts the servers asked for, runs run (normally testenv.Main), and
// stops them. A server that is not installed is skipped loudly outside CI
// and fails the suite in CI.
//
// Under `go test -fuzz`, the coordinating process starts the servers and
// passes them to its fuzz workers in the environment; a worker connects to
// them and neither starts nor stops a server. A worker whose coordinator
// started none (an old binary, or a server missing outside CI) skips as the
// coordinator would.
func Main(run func() int, pg, maria **Server) int {
	ctx := context.Background() //nolint:forbidigo // TestMain has no test context
	if fuzzWorker() {
		// The exported fields only: a worker's Server has no process, so
		// Stop leaves it (and its directory) to the coordinator.
		var servers []*Server
		if err := json.Unmarshal([]byte(os.Getenv(serversEnv)), &servers); err != nil {
			fmt.Fprintf(os.Stderr, "sqltest: a fuzz worker without its coordinator's servers (%s): %v\n", serversEnv, err)
			return 1
		}
		for _, s := range servers {
			switch {
			case s.Engine == sqlengine.Postgres && pg != nil:
				*pg = s
			case s.Engine == sqlengine.MariaDB && maria != nil:
				*maria = s
			}
		}
		return run()
	}
	start := []struct {
		e     sqlengine.Engine
		dst   **Server
		start func(context.Context) (*Server, error)
	}{{sqlengine.Postgres, pg, StartPostgres}, {sqlengine.MariaDB, maria, StartMariaDB}}
	for _, st := range start {
		if st.dst == nil {
			continue
		}
		s, err := st.start(ctx)
		if err != nil {
			var me *MissingError
			if errors.As(err, &me) && os.Getenv("CI") == "" {
				skipReasons[st.e] = err.Error()
				fmt.Fprintf(os.Stderr, "\n*** SKIPPING %s tests: %v ***\n\n", st.e, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "sqltest: starting %s: %v\n", st.e, err)
			stopAll(pg, maria)
			return 1
		}
		*st.dst = s
	}
	var servers []*Server
	for _, s := range []**Server{pg, maria} {
		if s != nil && *s != nil {
			servers = append(servers, *s)
		}
	}
	b, err := json.Marshal(servers)
	if err != nil {
		stopAll(pg, maria)
		fmt.Fprintf(os.Stderr, "sqltest: %v\n", err)
		return 1
	}
	if err := os.Setenv(serversEnv, string(b)); err != nil {
		stopAll(pg, maria)
		fmt.Fprintf(os.Stderr, "sqltest: %v\n", err)
		return 1
	}
	code := run()
	stopAll(pg, maria)
	return code
}

func stopAll(servers ...**Server) {
	for _, s := range servers {
		if s != nil && *s != nil {
			_ = (*s).Stop()
		}
	}
}

// Need skips t when the server could not be started outside CI.
func Need(t testing.TB, s *Server, e sqlengine.Engine) {
	t.Helper()
	if s == nil {
		r := skipReasons[e]
		if r == "" {
			r = string(e) + " server was not started (is TestMain calling sqltest.Main?)"
		}
		t.Skip(r)
	}
}
