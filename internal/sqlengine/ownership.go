package sqlengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Claim names the Database object that created (or adopted) a database or a
// role on a server. It is recorded on the server itself, so that whoever
// looks at the server (Converge or a person) can tell Converge's objects from
// everyone else's:
//
//   - PostgreSQL: COMMENT ON DATABASE / COMMENT ON ROLE;
//   - MariaDB databases: the schema COMMENT (CREATE DATABASE ... COMMENT,
//     information_schema.SCHEMATA.SCHEMA_COMMENT);
//   - MariaDB users, which have no comment in 10.11: a row in the
//     bookkeeping table converge_meta.owned_users (see ClaimsDatabase).
type Claim struct {
	// UID is the Database object's metadata.uid.
	UID string
	// Namespace and Name are the Database object's, for people and for
	// adopting what an earlier object of the same name retained.
	Namespace, Name string
}

// IsZero reports whether no claim is set.
func (c Claim) IsZero() bool { return c.UID == "" }

// SameObjectName reports whether both claims name the same namespace/name
// (possibly different incarnations, with different UIDs).
func (c Claim) SameObjectName(o Claim) bool {
	return c.Namespace == o.Namespace && c.Name == o.Name
}

// String is the marker text stored on the server.
func (c Claim) String() string {
	return fmt.Sprintf("converge.dev/owner uid=%s database=%s/%s", c.UID, c.Namespace, c.Name)
}

var claimRE = regexp.MustCompile(`^converge\.dev/owner uid=([0-9a-zA-Z-]{1,64}) database=([a-z0-9.-]{0,253})/([a-z0-9.-]{0,253})$`)

// ParseClaim reads a marker; ok is false for any other text (a foreign
// comment, or none).
func ParseClaim(s string) (Claim, bool) {
	m := claimRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Claim{}, false
	}
	return Claim{UID: m[1], Namespace: m[2], Name: m[3]}, true
}

// ClaimsDatabase is the MariaDB database holding the bookkeeping table
// owned_users (MariaDB 10.11 has no comment on users). Its name is reserved:
// no Database can be named so.
const ClaimsDatabase = "converge_meta"

// Ownership is what the server says about who created an object.
type Ownership struct {
	// Exists is whether the database or role exists.
	Exists bool
	// Claim is the marker found; zero when the object is unmarked (created
	// by someone else, or, for a PostgreSQL database, by Converge in the
	// instant between CREATE DATABASE and COMMENT; see OwnerRoleClaim).
	Claim Claim
	// OwnerRole is, for a PostgreSQL database, its owner role.
	OwnerRole string
	// OwnerRoleClaim is the marker of OwnerRole. Converge creates a database
	// OWNER a role it created and marked in one transaction, so an unmarked
	// database whose owner role carries a claim was created by that claim's
	// Database and the COMMENT did not happen (a crash).
	OwnerRoleClaim Claim
}

// EffectiveClaim is the claim to judge the object by: its own marker, else
// (a PostgreSQL database only) its owner role's.
func (o Ownership) EffectiveClaim() Claim {
	if !o.Claim.IsZero() {
		return o.Claim
	}
	return o.OwnerRoleClaim
}

// DatabaseOwnership reads the marker of a database.
func (s *Server) DatabaseOwnership(ctx context.Context, name string) (Ownership, error) {
	var o Ownership
	var comment, roleComment sql.NullString
	var err error
	if s.cfg.Engine == Postgres {
		err = s.db.QueryRowContext(ctx,
			`SELECT pg_catalog.shobj_description(d.oid, 'pg_database'), pg_catalog.pg_get_userbyid(d.datdba),
			        pg_catalog.shobj_description(d.datdba, 'pg_authid')
			   FROM pg_catalog.pg_database d WHERE d.datname = $1`, name).Scan(&comment, &o.OwnerRole, &roleComment)
	} else {
		err = s.db.QueryRowContext(ctx,
			"SELECT SCHEMA_COMMENT FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&comment)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Ownership{}, nil
	}
	if err != nil {
		return Ownership{}, fmt.Errorf("reading the owner marker of database %q: %w", name, err)
	}
	o.Exists = true
	o.Claim, _ = ParseClaim(comment.String)
	o.OwnerRoleClaim, _ = ParseClaim(roleComment.String)
	return o, nil
}

// RoleOwnership reads the marker of a role (PostgreSQL) or user 'name'@'%'
// (MariaDB). On MariaDB a claim can exist without the user: the claim is
// written first, so a crash never leaves a user of ours unmarked.
func (s *Server) RoleOwnership(ctx context.Context, name string) (Ownership, error) {
	var o Ownership
	if s.cfg.Engine == Postgres {
		var comment sql.NullString
		err := s.db.QueryRowContext(ctx,
			"SELECT pg_catalog.shobj_description(oid, 'pg_authid') FROM pg_catalog.pg_roles WHERE rolname = $1", name).Scan(&comment)
		if errors.Is(err, sql.ErrNoRows) {
			return Ownership{}, nil
		}
		if err != nil {
			return Ownership{}, fmt.Errorf("reading the owner marker of role %q: %w", name, err)
		}
		o.Exists = true
		o.Claim, _ = ParseClaim(comment.String)
		return o, nil
	}
	exists, err := s.RoleExists(ctx, name)
	if err != nil {
		return Ownership{}, err
	}
	o.Exists = exists
	if err := s.ensureClaimsTable(ctx); err != nil {
		return Ownership{}, err
	}
	var marker string
	err = s.db.QueryRowContext(ctx, "SELECT claim FROM `"+ClaimsDatabase+"`.`owned_users` WHERE user = ?", name).Scan(&marker)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Ownership{}, fmt.Errorf("reading the claim on user %q: %w", name, err)
	}
	o.Claim, _ = ParseClaim(marker)
	return o, nil
}

// ensureClaimsTable creates the MariaDB bookkeeping table (InnoDB, so a
// claim is durable once the INSERT returns).
func (s *Server) ensureClaimsTable(ctx context.Context) error {
	for _, st := range []string{
		"CREATE DATABASE IF NOT EXISTS `" + ClaimsDatabase + "` COMMENT 'Converge: which Database object created each user (MariaDB users have no comment)'",
		"CREATE TABLE IF NOT EXISTS `" + ClaimsDatabase + "`.`owned_users` (user VARCHAR(80) NOT NULL PRIMARY KEY, claim VARCHAR(600) NOT NULL, claimed_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB",
	} {
		if _, err := s.db.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("creating the claims table %s.owned_users: %w", ClaimsDatabase, err)
		}
	}
	return nil
}

// claimUser records the claim on a MariaDB user (insert, or overwrite when
// overwrite is set: adoption).
func (s *Server) claimUser(ctx context.Context, name string, c Claim, overwrite bool) error {
	if err := s.ensureClaimsTable(ctx); err != nil {
		return err
	}
	stmt := "INSERT INTO `" + ClaimsDatabase + "`.`owned_users` (user, claim) VALUES (?, ?)"
	if overwrite {
		stmt += " ON DUPLICATE KEY UPDATE claim = VALUES(claim)"
	}
	if _, err := s.db.ExecContext(ctx, stmt, name, c.String()); err != nil {
		return fmt.Errorf("claiming user %q: %w", name, err)
	}
	return nil
}

func (s *Server) releaseUser(ctx context.Context, name string, c Claim) error {
	if err := s.ensureClaimsTable(ctx); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, "DELETE FROM `"+ClaimsDatabase+"`.`owned_users` WHERE user = ? AND claim = ?", name, c.String()); err != nil {
		return fmt.Errorf("releasing the claim on user %q: %w", name, err)
	}
	return nil
}

// MarkDatabase writes the claim on an existing database (adoption, or the
// COMMENT a crash prevented).
func (s *Server) MarkDatabase(ctx context.Context, name string, c Claim) error {
	if err := ValidateIdentifier(name); err != nil {
		return fmt.Errorf("database %q: %w", name, err)
	}
	lit, err := quoteLiteral(c.String())
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	q, _ := s.quote(name)
	stmt := "ALTER DATABASE " + q + " COMMENT = " + lit //nolint:gosec // a quoted, validated identifier and a checked literal
	if s.cfg.Engine == Postgres {
		stmt = "COMMENT ON DATABASE " + q + " IS " + lit
	}
	if _, err := s.db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("marking database %q as created by %s: %w", name, c, err)
	}
	return nil
}

// MarkRole writes the claim on an existing role (adoption).
func (s *Server) MarkRole(ctx context.Context, name string, c Claim) error {
	if err := ValidateIdentifier(name); err != nil {
		return fmt.Errorf("role %q: %w", name, err)
	}
	if s.cfg.Engine == MariaDB {
		return s.claimUser(ctx, name, c, true)
	}
	lit, err := quoteLiteral(c.String())
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	q, _ := QuotePostgres(name)
	if _, err := s.db.ExecContext(ctx, "COMMENT ON ROLE "+q+" IS "+lit); err != nil {
		return fmt.Errorf("marking role %q as created by %s: %w", name, c, err)
	}
	return nil
}

// PrivilegedRole asks the server whether handing the role (its password)
// to a tenant would give away more than one database. It returns why, or ""
// when the role is a plain one. The admin user of the instance is always
// privileged. PostgreSQL: SUPERUSER, CREATEROLE, CREATEDB, REPLICATION or
// BYPASSRLS on the role or on any role it is a member of (directly or not),
// and membership in a predefined pg_* role or in the admin. MariaDB: any
// global privilege (beyond USAGE) or GRANT OPTION, held directly or through
// a granted role.
func (s *Server) PrivilegedRole(ctx context.Context, name, adminUser string) (string, error) {
	if name == adminUser {
		return fmt.Sprintf("%q is the instance's admin user", name), nil
	}
	if s.cfg.Engine == Postgres {
		rows, err := s.db.QueryContext(ctx, `
WITH RECURSIVE up(oid) AS (
    SELECT oid FROM pg_catalog.pg_roles WHERE rolname = $1
  UNION
    SELECT m.roleid FROM pg_catalog.pg_auth_members m JOIN up ON m.member = up.oid
)
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolreplication, r.rolbypassrls
  FROM up JOIN pg_catalog.pg_roles r ON r.oid = up.oid`, name)
		if err != nil {
			return "", fmt.Errorf("reading the attributes of role %q: %w", name, err)
		}
		defer func() { _ = rows.Close() }()
		var why []string
		for rows.Next() {
			var rn string
			var super, createRole, createDB, repl, bypass bool
			if err := rows.Scan(&rn, &super, &createRole, &createDB, &repl, &bypass); err != nil {
				return "", err
			}
			var attrs []string
			for a, on := range map[string]bool{"SUPERUSER": super, "CREATEROLE": createRole, "CREATEDB": createDB, "REPLICATION": repl, "BYPASSRLS": bypass} {
				if on {
					attrs = append(attrs, a)
				}
			}
			slices.Sort(attrs)
			switch {
			case rn == name && len(attrs) > 0:
				why = append(why, fmt.Sprintf("role %q has %s", name, strings.Join(attrs, ", ")))
			case rn != name && len(attrs) > 0:
				why = append(why, fmt.Sprintf("role %q is a member of %q, which has %s", name, rn, strings.Join(attrs, ", ")))
			case rn != name && (strings.HasPrefix(rn, "pg_") || rn == adminUser):
				why = append(why, fmt.Sprintf("role %q is a member of %q", name, rn))
			}
		}
		if err := rows.Err(); err != nil {
			return "", fmt.Errorf("reading the attributes of role %q: %w", name, err)
		}
		return strings.Join(why, "; "), nil
	}
	// The user and every role granted to it (roles have the host ''), as
	// the server's grant tables record them: any global privilege column.
	type account struct{ user, host string }
	accounts := []account{{name, "%"}}
	rows, err := s.db.QueryContext(ctx, "SELECT Role FROM mysql.roles_mapping WHERE User = ? AND Host = '%'", name)
	if err != nil {
		return "", fmt.Errorf("reading the roles of user %q: %w", name, err)
	}
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			_ = rows.Close()
			return "", err
		}
		accounts = append(accounts, account{r, ""})
	}
	_ = rows.Close()
	var why []string
	for _, a := range accounts {
		privs, err := s.globalPrivileges(ctx, a.user, a.host)
		if err != nil {
			return "", err
		}
		if len(privs) == 0 {
			continue
		}
		if len(privs) > 4 {
			privs = append(privs[:4], "...")
		}
		who := "user '" + a.user + "'@'" + a.host + "'"
		if a.host == "" {
			who = "its role '" + a.user + "'"
		}
		why = append(why, fmt.Sprintf("%s holds the global privileges %s", who, strings.Join(privs, ", ")))
	}
	return strings.Join(why, "; "), nil
}

// isDuplicate reports a MariaDB duplicate key (a claim someone else holds).
func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// globalPrivileges lists the global privileges (the *_priv columns of
// mysql.user set to Y; Grant_priv is GRANT OPTION) of a MariaDB account.
func (s *Server) globalPrivileges(ctx context.Context, user, host string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT * FROM mysql.user WHERE User = ? AND Host = ?", user, host)
	if err != nil {
		return nil, fmt.Errorf("reading the global privileges of '%s'@'%s': %w", user, host, err)
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var privs []string
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, c := range cols {
			if !strings.HasSuffix(c, "_priv") || string(vals[i]) != "Y" {
				continue
			}
			p := strings.ToUpper(strings.ReplaceAll(strings.TrimSuffix(c, "_priv"), "_", " "))
			if p == "GRANT" {
				p = "GRANT OPTION"
			}
			privs = append(privs, p)
		}
	}
	return privs, rows.Err()
}
