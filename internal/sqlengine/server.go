package sqlengine

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/converge-dev/converge/internal/egress"
)

func init() {
	// The driver logs stale pooled connections (closed by a server restart
	// or KILL) itself; the error reaches the caller anyway.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
}

// Engine names an engine, as in the instance contract's status.engine.
type Engine string

const (
	// Postgres is PostgreSQL.
	Postgres Engine = "postgres"
	// MariaDB is MariaDB.
	MariaDB Engine = "mariadb"
)

// TLSMode is Disable, Require or VerifyFull (the instance spec's tls.mode).
// The empty mode means Require: TLS is never turned off by omission.
type TLSMode string

// TLS modes.
const (
	TLSDisable    TLSMode = "Disable"
	TLSRequire    TLSMode = "Require"
	TLSVerifyFull TLSMode = "VerifyFull"
)

// Config says how to reach and log in to a server.
type Config struct {
	Engine   Engine
	Host     string
	Port     int
	User     string
	Password string
	// Database to connect to; empty uses the engine's maintenance database
	// (postgres) or none (MariaDB).
	Database string
	TLSMode  TLSMode
	// CAPEM verifies the server with VerifyFull.
	CAPEM []byte
	// MaxConns bounds the pool; 0 means 4.
	MaxConns int
	// ConnectTimeout bounds each connection attempt; 0 means 5 s.
	ConnectTimeout time.Duration
	// Egress refuses hosts whose address the cluster admin denies, checked
	// on every address dialled; nil refuses nothing.
	Egress *egress.Policy
}

func (c Config) addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

func (c Config) key() string {
	h := sha256.Sum256([]byte(c.Password + "\x00" + string(c.CAPEM)))
	return fmt.Sprintf("%s|%s|%s|%s|%s|%s", c.Engine, c.addr(), c.User, c.Database, c.TLSMode, hex.EncodeToString(h[:8]))
}

func (c Config) tlsConfig() (*tls.Config, error) {
	switch c.TLSMode {
	case TLSDisable:
		return nil, nil
	case "", TLSRequire:
		return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, nil //nolint:gosec // Require means encrypted, unverified, as libpq's sslmode=require
	case TLSVerifyFull:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CAPEM) {
			return nil, errors.New("tls VerifyFull: the CA Secret holds no PEM certificate (key ca.crt)")
		}
		return &tls.Config{RootCAs: pool, ServerName: c.Host, MinVersion: tls.VersionTLS12}, nil
	default:
		return nil, fmt.Errorf("unknown TLS mode %q", c.TLSMode)
	}
}

func (c Config) timeout() time.Duration {
	if c.ConnectTimeout > 0 {
		return c.ConnectTimeout
	}
	return 5 * time.Second
}

// OpenDB opens a database/sql pool for c (no connection is made yet).
func OpenDB(c Config) (*sql.DB, error) {
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	var db *sql.DB
	switch c.Engine {
	case Postgres:
		pc, err := pgx.ParseConfig("sslmode=disable")
		if err != nil {
			return nil, err
		}
		pc.Host, pc.Port, pc.User, pc.Password = c.Host, uint16(c.Port), c.User, c.Password //nolint:gosec // ports are validated to 1..65535
		pc.Database = c.Database
		if pc.Database == "" {
			pc.Database = "postgres"
		}
		pc.TLSConfig = tc
		pc.Fallbacks = nil
		pc.ConnectTimeout = c.timeout()
		if c.Egress != nil {
			pc.DialFunc = c.Egress.DialContext
		}
		pc.RuntimeParams = map[string]string{"application_name": "converge"}
		db = stdlib.OpenDB(*pc)
	case MariaDB:
		mc := mysql.NewConfig()
		mc.User, mc.Passwd, mc.Net, mc.Addr, mc.DBName = c.User, c.Password, "tcp", c.addr(), c.Database
		mc.Timeout = c.timeout()
		if c.Egress != nil {
			mc.DialFunc = c.Egress.DialContext
		}
		mc.ReadTimeout, mc.WriteTimeout = time.Minute, time.Minute
		mc.ParseTime = true
		if tc != nil {
			mc.TLS = tc
		}
		conn, err := mysql.NewConnector(mc)
		if err != nil {
			return nil, err
		}
		db = sql.OpenDB(conn)
	default:
		return nil, fmt.Errorf("unsupported engine %q", c.Engine)
	}
	n := c.MaxConns
	if n <= 0 {
		n = 4
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	// MariaDB applies a change of global privileges to new sessions only:
	// a pool that kept its connections forever would keep refusing after
	// the admin was granted what it lacked (or keep rights revoked from it).
	db.SetConnMaxLifetime(ConnMaxLifetime)
	return db, nil
}

// ConnMaxLifetime bounds how long a pooled connection is reused, so that
// privilege changes on the server are picked up within it.
const ConnMaxLifetime = 30 * time.Second

// Pools keeps one pool per server and credentials, so reconciles reuse
// connections. The zero value is ready to use.
type Pools struct {
	mu sync.Mutex
	m  map[string]*sql.DB
	// byServer maps engine|addr|user|db to the key in use, so a pool whose
	// password changed is closed.
	byServer map[string]string
}

func (p *Pools) get(c Config) (*sql.DB, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m, p.byServer = map[string]*sql.DB{}, map[string]string{}
	}
	k := c.key()
	if db, ok := p.m[k]; ok {
		return db, nil
	}
	db, err := OpenDB(c)
	if err != nil {
		return nil, err
	}
	sk := fmt.Sprintf("%s|%s|%s|%s", c.Engine, c.addr(), c.User, c.Database)
	if old, ok := p.byServer[sk]; ok {
		_ = p.m[old].Close()
		delete(p.m, old)
	}
	p.m[k], p.byServer[sk] = db, k
	return db, nil
}

// Close closes every pool.
func (p *Pools) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, db := range p.m {
		_ = db.Close()
		delete(p.m, k)
	}
}

// Admin returns a Server for the admin credentials in c, from the pool.
func (p *Pools) Admin(c Config) (*Server, error) {
	db, err := p.get(c)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: c, db: db}, nil
}

// Ping logs in with c (a fresh connection, not from a pool), runs SELECT 1
// and returns the server version.
func Ping(ctx context.Context, c Config) (string, error) {
	db, err := OpenDB(c)
	if err != nil {
		return "", err
	}
	defer func() { _ = db.Close() }()
	return (&Server{cfg: c, db: db}).Ping(ctx)
}

// CheckLogin logs in as c.User to c.Database with a fresh connection and
// runs SELECT 1: the proof that generated credentials work.
func CheckLogin(ctx context.Context, c Config) error {
	_, err := Ping(ctx, c)
	return err
}

// IsAuthError reports whether the server refused the credentials (or the
// user's access to the database), as opposed to being unreachable.
func IsAuthError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 28000 invalid_authorization_specification, 28P01 invalid_password,
		// 42501 insufficient_privilege (CONNECT revoked).
		return pe.Code == "28P01" || pe.Code == "28000" || pe.Code == "42501"
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		// 1045 access denied, 1044 access denied to database, 1698 access
		// denied (no password for a socket-auth user), 4151 account locked.
		return me.Number == 1045 || me.Number == 1044 || me.Number == 1698 || me.Number == 4151
	}
	return false
}

// IsPermissionDenied reports whether the server refused a statement because
// the connected user lacks a privilege (PostgreSQL 42501
// insufficient_privilege; MariaDB 1142 table, 1143 column, 1044 database,
// 1227 global privilege, 1410 GRANT not allowed), as opposed to the server
// being unreachable.
func IsPermissionDenied(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42501"
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1142, 1143, 1227, 1410:
			return true
		}
	}
	return false
}

// IsTLSUnavailable reports whether the server refused TLS (it has none
// configured) when the configuration asked for it.
func IsTLSUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, mysql.ErrNoTLS) {
		return true
	}
	return strings.Contains(err.Error(), "server refused TLS connection") // pgconn's words, not a typed error
}

// IsTLSVerifyError reports whether the server's certificate failed
// verification (unknown CA, wrong host name, expired).
func IsTLSVerifyError(err error) bool {
	if err == nil {
		return false
	}
	var ve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &ve) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) {
		return true
	}
	return strings.Contains(err.Error(), "x509: ") // drivers that flatten the error
}

// IsUnknownDatabase reports whether the error says the database does not
// exist.
func IsUnknownDatabase(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "3D000"
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1049
	}
	return false
}

// Server runs administrative statements on one server.
type Server struct {
	cfg Config
	db  *sql.DB
}

// Engine returns the server's engine.
func (s *Server) Engine() Engine { return s.cfg.Engine }

// Ping runs SELECT 1 and returns the server version.
func (s *Server) Ping(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout()+5*time.Second)
	defer cancel()
	var one int
	if err := s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return "", err
	}
	q := "SELECT VERSION()"
	if s.cfg.Engine == Postgres {
		q = "SHOW server_version"
	}
	var v string
	if err := s.db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return "", fmt.Errorf("reading the server version: %w", err)
	}
	return v, nil
}

// Alive checks that a pooled connection to the server works (a cheap
// liveness check before a batch of statements).
func (s *Server) Alive(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout()+5*time.Second)
	defer cancel()
	return s.db.PingContext(ctx)
}

// DatabaseInfo is what the server says about a database.
type DatabaseInfo struct {
	Exists    bool
	Owner     string
	SizeBytes int64
}

// Spec is what a database should look like.
type Spec struct {
	Name       string
	Owner      string
	Charset    string
	Extensions []string
	// Claim is written on the database when it is created (zero: none).
	Claim Claim
}

func (sp Spec) validate() error {
	if err := ValidateIdentifier(sp.Name); err != nil {
		return fmt.Errorf("database name %q: %w", sp.Name, err)
	}
	if err := ValidateIdentifier(sp.Owner); err != nil {
		return fmt.Errorf("owner %q: %w", sp.Owner, err)
	}
	if sp.Charset != "" {
		if err := ValidateCharset(sp.Charset); err != nil {
			return fmt.Errorf("charset %q: %w", sp.Charset, err)
		}
	}
	for _, e := range sp.Extensions {
		if err := ValidateIdentifier(e); err != nil {
			return fmt.Errorf("extension %q: %w", e, err)
		}
	}
	return nil
}

func (s *Server) quote(id string) (string, error) {
	if s.cfg.Engine == Postgres {
		return QuotePostgres(id)
	}
	return QuoteMariaDB(id)
}

// mariaUser is 'name'@'%' for MariaDB statements.
func mariaUser(name string) (string, error) {
	l, err := quoteLiteral(name)
	if err != nil {
		return "", err
	}
	return l + "@'%'", nil
}

// Database observes a database.
func (s *Server) Database(ctx context.Context, name string) (DatabaseInfo, error) {
	var info DatabaseInfo
	if s.cfg.Engine == Postgres {
		err := s.db.QueryRowContext(ctx,
			"SELECT pg_catalog.pg_get_userbyid(datdba), pg_catalog.pg_database_size(oid) FROM pg_catalog.pg_database WHERE datname = $1",
			name).Scan(&info.Owner, &info.SizeBytes)
		if errors.Is(err, sql.ErrNoRows) {
			return DatabaseInfo{}, nil
		}
		if err != nil {
			return DatabaseInfo{}, fmt.Errorf("observing database %q: %w", name, err)
		}
		info.Exists = true
		return info, nil
	}
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil {
		return DatabaseInfo{}, fmt.Errorf("observing database %q: %w", name, err)
	}
	if n == 0 {
		return DatabaseInfo{}, nil
	}
	info.Exists = true
	if err := s.db.QueryRowContext(ctx,
		"SELECT CAST(COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) AS SIGNED) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?",
		name).Scan(&info.SizeBytes); err != nil {
		return DatabaseInfo{}, fmt.Errorf("observing the size of database %q: %w", name, err)
	}
	return info, nil
}

// HasTables reports whether the database holds any table (a restore target
// must be empty).
func (s *Server) HasTables(ctx context.Context, c Config) (bool, error) {
	if s.cfg.Engine == MariaDB {
		var n int
		err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", c.Database).Scan(&n)
		return n > 0, err
	}
	db, err := OpenDB(c)
	if err != nil {
		return false, err
	}
	defer func() { _ = db.Close() }()
	var n int
	err = db.QueryRowContext(ctx,
		"SELECT COUNT(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r','p','v','m','S') AND n.nspname NOT IN ('pg_catalog','information_schema') AND n.nspname NOT LIKE 'pg_toast%'").Scan(&n)
	return n > 0, err
}

// RoleExists reports whether the role (PostgreSQL) or user 'name'@'%'
// (MariaDB) exists.
func (s *Server) RoleExists(ctx context.Context, name string) (bool, error) {
	var n int
	var err error
	if s.cfg.Engine == Postgres {
		err = s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_catalog.pg_roles WHERE rolname = $1", name).Scan(&n)
	} else {
		err = s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.user WHERE User = ? AND Host = '%'", name).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("observing role %q: %w", name, err)
	}
	return n > 0, nil
}

// CreateRole creates a login role with the password, marked with the claim
// (unless the claim is zero). PostgreSQL: CREATE ROLE, COMMENT ON ROLE and
// the admin's membership in one transaction, so the role never exists
// unmarked. MariaDB: the claim is recorded first (converge_meta.owned_users),
// then CREATE USER, so a crash in between leaves a claim without a user,
// which the same Database completes and every other Database refuses.
func (s *Server) CreateRole(ctx context.Context, name, password string, claim Claim) error {
	if err := ValidateIdentifier(name); err != nil {
		return fmt.Errorf("role %q: %w", name, err)
	}
	pw, err := quoteLiteral(password)
	if err != nil {
		return fmt.Errorf("password: %w", err)
	}
	if s.cfg.Engine == MariaDB {
		return s.createMariaDBUser(ctx, name, pw, claim)
	}
	q, _ := QuotePostgres(name)
	stmts := []string{"CREATE ROLE " + q + " LOGIN PASSWORD " + pw}
	if !claim.IsZero() {
		lit, err := quoteLiteral(claim.String())
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		stmts = append(stmts, "COMMENT ON ROLE "+q+" IS "+lit)
	}
	// A non-superuser admin must be a member of the role to make it a
	// database owner (PostgreSQL 15 does not grant that automatically).
	var super bool
	if err := s.db.QueryRowContext(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return fmt.Errorf("reading admin privileges: %w", err)
	}
	if !super {
		stmts = append(stmts, "GRANT "+q+" TO CURRENT_USER")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("creating role %q: %w", name, err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("creating role %q: %w", name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("creating role %q: %w", name, err)
	}
	return nil
}

func (s *Server) createMariaDBUser(ctx context.Context, name, pw string, claim Claim) error {
	u, err := mariaUser(name)
	if err != nil {
		return err
	}
	if !claim.IsZero() {
		if err := s.claimUser(ctx, name, claim, false); err != nil {
			if !isDuplicate(err) {
				return err
			}
			o, rerr := s.RoleOwnership(ctx, name)
			if rerr != nil {
				return rerr
			}
			if o.Claim != claim {
				return fmt.Errorf("user %q is claimed by %s", name, o.Claim)
			}
			// Our own claim, from a run that crashed before CREATE USER.
		}
	}
	if _, err := s.db.ExecContext(ctx, "CREATE USER "+u+" IDENTIFIED BY "+pw); err != nil {
		var me *mysql.MySQLError
		if !claim.IsZero() && errors.As(err, &me) && me.Number == 1396 {
			// Someone else created the user since it was observed missing:
			// it is not ours, so the claim goes.
			_ = s.releaseUser(ctx, name, claim)
		}
		return fmt.Errorf("creating role %q: %w", name, err)
	}
	return nil
}

// SetPassword resets a role's password.
func (s *Server) SetPassword(ctx context.Context, name, password string) error {
	if err := ValidateIdentifier(name); err != nil {
		return fmt.Errorf("role %q: %w", name, err)
	}
	pw, err := quoteLiteral(password)
	if err != nil {
		return fmt.Errorf("password: %w", err)
	}
	var stmt string
	if s.cfg.Engine == Postgres {
		q, _ := QuotePostgres(name)
		stmt = "ALTER ROLE " + q + " WITH LOGIN PASSWORD " + pw
	} else {
		u, err := mariaUser(name)
		if err != nil {
			return err
		}
		stmt = "ALTER USER " + u + " IDENTIFIED BY " + pw + " ACCOUNT UNLOCK"
	}
	if _, err := s.db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("resetting the password of role %q: %w", name, err)
	}
	return nil
}

// CreateDatabase creates the database owned by (PostgreSQL) or granted to
// (MariaDB) the owner.
func (s *Server) CreateDatabase(ctx context.Context, sp Spec) error {
	if err := sp.validate(); err != nil {
		return err
	}
	db, _ := s.quote(sp.Name)
	var stmt string
	if s.cfg.Engine == Postgres {
		owner, _ := QuotePostgres(sp.Owner)
		stmt = "CREATE DATABASE " + db + " OWNER " + owner
		if sp.Charset != "" {
			stmt += " ENCODING '" + sp.Charset + "' TEMPLATE template0" // charset validated: [A-Za-z0-9_]
		}
	} else {
		stmt = "CREATE DATABASE " + db
		if sp.Charset != "" {
			stmt += " CHARACTER SET " + sp.Charset
		}
		if !sp.Claim.IsZero() {
			// One statement: a MariaDB database is never unmarked.
			lit, err := quoteLiteral(sp.Claim.String())
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			stmt += " COMMENT " + lit
		}
	}
	if _, err := s.db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("creating database %q: %w", sp.Name, err)
	}
	if s.cfg.Engine == Postgres && !sp.Claim.IsZero() {
		// CREATE DATABASE cannot run in a transaction. Until this COMMENT
		// lands, the database is recognised by its owner role, which was
		// created and marked in one transaction (Ownership.OwnerRoleClaim).
		if err := s.MarkDatabase(ctx, sp.Name, sp.Claim); err != nil {
			return err
		}
	}
	return nil
}

// mariaDBPrivileges are the privileges checked on MariaDB (a subset of ALL
// PRIVILEGES that an application owner needs).
var mariaDBPrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "INDEX", "REFERENCES", "CREATE VIEW", "TRIGGER"}

// MissingPrivileges lists the privileges the owner lacks on the database
// (including, on PostgreSQL, not owning it).
func (s *Server) MissingPrivileges(ctx context.Context, sp Spec) ([]string, error) {
	var missing []string
	if s.cfg.Engine == Postgres {
		var owner string
		if err := s.db.QueryRowContext(ctx,
			"SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_catalog.pg_database WHERE datname = $1", sp.Name).Scan(&owner); err != nil {
			return nil, fmt.Errorf("observing the owner of %q: %w", sp.Name, err)
		}
		if owner != sp.Owner {
			missing = append(missing, "OWNER (owned by "+owner+")")
		}
		for _, p := range []string{"CONNECT", "CREATE", "TEMPORARY"} {
			var ok bool
			if err := s.db.QueryRowContext(ctx, "SELECT pg_catalog.has_database_privilege($1, $2, $3)", sp.Owner, sp.Name, p).Scan(&ok); err != nil {
				return nil, fmt.Errorf("observing privileges on %q: %w", sp.Name, err)
			}
			if !ok {
				missing = append(missing, p)
			}
		}
		return missing, nil
	}
	rows, err := s.db.QueryContext(ctx,
		"SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = ? AND TABLE_SCHEMA = ?",
		"'"+sp.Owner+"'@'%'", mariaDBGrantPattern(sp.Name))
	if err != nil {
		return nil, fmt.Errorf("observing privileges on %q: %w", sp.Name, err)
	}
	defer func() { _ = rows.Close() }()
	have := map[string]bool{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		have[p] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, p := range mariaDBPrivileges {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// Grant makes the owner own (PostgreSQL) and hold every privilege on the
// database.
func (s *Server) Grant(ctx context.Context, sp Spec) error {
	if err := sp.validate(); err != nil {
		return err
	}
	var stmts []string
	if s.cfg.Engine == Postgres {
		db, _ := QuotePostgres(sp.Name)
		owner, _ := QuotePostgres(sp.Owner)
		stmts = []string{
			"ALTER DATABASE " + db + " OWNER TO " + owner,
			"GRANT ALL PRIVILEGES ON DATABASE " + db + " TO " + owner,
		}
	} else {
		db, _ := QuoteMariaDB(mariaDBGrantPattern(sp.Name))
		u, err := mariaUser(sp.Owner)
		if err != nil {
			return err
		}
		stmts = []string{"GRANT ALL PRIVILEGES ON " + db + ".* TO " + u}
	}
	for _, st := range stmts {
		if _, err := s.db.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("granting privileges on %q to %q: %w", sp.Name, sp.Owner, err)
		}
	}
	return nil
}

// EnsureExtensions creates the extensions (PostgreSQL only) in the database,
// connected to it as the admin.
func (s *Server) EnsureExtensions(ctx context.Context, sp Spec) error {
	if len(sp.Extensions) == 0 {
		return nil
	}
	if s.cfg.Engine != Postgres {
		return fmt.Errorf("extensions are a PostgreSQL feature; %s has none", s.cfg.Engine)
	}
	if err := sp.validate(); err != nil {
		return err
	}
	c := s.cfg
	c.Database, c.MaxConns = sp.Name, 1
	db, err := OpenDB(c)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	for _, e := range sp.Extensions {
		q, _ := QuotePostgres(e)
		if _, err := db.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS "+q); err != nil {
			return fmt.Errorf("creating extension %q: %w", e, err)
		}
	}
	return nil
}

// Drop terminates every connection to the database and of the owner, then
// drops the database and the owner role. Missing objects are not an error.
// It checks no ownership: the controller calls DropDatabase and DropRole
// only for what it owns.
func (s *Server) Drop(ctx context.Context, sp Spec) error {
	if err := sp.validate(); err != nil {
		return err
	}
	if err := s.DropDatabase(ctx, sp.Name); err != nil {
		return err
	}
	return s.DropRole(ctx, sp.Owner, sp.Claim)
}

// DropDatabase terminates every connection to the database and drops it.
// A missing database is not an error.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if err := ValidateIdentifier(name); err != nil {
		return fmt.Errorf("database %q: %w", name, err)
	}
	db, _ := s.quote(name)
	if s.cfg.Engine == Postgres {
		// WITH (FORCE) terminates the database's sessions (PostgreSQL 13+).
		if _, err := s.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("dropping database %q: %w", name, err)
		}
		return nil
	}
	if err := s.killConnections(ctx, false, name); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		return fmt.Errorf("dropping database %q: %w", name, err)
	}
	return nil
}

// DropRole terminates the role's sessions and drops it, then releases the
// claim (the MariaDB bookkeeping row) when one is given. A missing role is
// not an error.
func (s *Server) DropRole(ctx context.Context, name string, claim Claim) error {
	if err := ValidateIdentifier(name); err != nil {
		return fmt.Errorf("role %q: %w", name, err)
	}
	if s.cfg.Engine == Postgres {
		owner, _ := QuotePostgres(name)
		if _, err := s.db.ExecContext(ctx,
			"SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = $1 AND pid <> pg_catalog.pg_backend_pid()",
			name); err != nil {
			return fmt.Errorf("terminating the sessions of %q: %w", name, err)
		}
		if _, err := s.db.ExecContext(ctx, "DROP ROLE IF EXISTS "+owner); err != nil {
			return fmt.Errorf("dropping role %q: %w", name, err)
		}
		return nil
	}
	if err := s.killConnections(ctx, true, name); err != nil {
		return err
	}
	u, err := mariaUser(name)
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, "DROP USER IF EXISTS "+u); err != nil {
		return fmt.Errorf("dropping user %q: %w", name, err)
	}
	if !claim.IsZero() {
		return s.releaseUser(ctx, name, claim)
	}
	return nil
}

// killConnections kills the MariaDB connections to the database arg, or
// (byUser) of the user arg.
func (s *Server) killConnections(ctx context.Context, byUser bool, arg string) error {
	q := "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()"
	if byUser {
		q = "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? AND ID <> CONNECTION_ID()"
	}
	rows, err := s.db.QueryContext(ctx, q, arg)
	if err != nil {
		return fmt.Errorf("listing connections of %q: %w", arg, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	_ = rows.Close()
	for _, id := range ids {
		if _, err := s.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err != nil {
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1094 { // 1094: unknown thread (already gone)
				return fmt.Errorf("terminating connection %d of %q: %w", id, arg, err)
			}
		}
	}
	return nil
}

// NewServer wraps an open pool (for one-off use; Pools.Admin is the pooled
// way).
func NewServer(c Config, db *sql.DB) *Server { return &Server{cfg: c, db: db} }
