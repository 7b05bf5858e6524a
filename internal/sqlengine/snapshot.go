package sqlengine

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Snapshot is what one server holds, read at once for every database and
// role, so that the drift of many Databases on one server is observed with
// one query (PostgreSQL) or two (MariaDB) instead of several per Database.
// It sees what the catalogs show: databases, roles (and whether they may log
// in), their markers, database owners and the owners' privileges. It does
// not see passwords (that needs a login per role) or extensions (they live
// in each database's own catalog).
type Snapshot struct {
	// Databases by name.
	Databases map[string]SnapshotDatabase
	// Roles by name (MariaDB: users 'name'@'%').
	Roles  map[string]SnapshotRole
	engine Engine
}

// SnapshotDatabase is one database of a Snapshot.
type SnapshotDatabase struct {
	// Claim is the database's marker (zero if none).
	Claim Claim
	// Owner is the owner role (PostgreSQL only).
	Owner string
	// Privileges are what the owner holds on it: PostgreSQL CONNECT, CREATE,
	// TEMPORARY of the owner role; MariaDB the schema privileges, by grantee
	// user.
	Privileges map[string][]string
}

// SnapshotRole is one role of a Snapshot.
type SnapshotRole struct {
	// Claim is the role's marker (MariaDB: from converge_meta.owned_users).
	Claim Claim
	// CanLogin is false for a NOLOGIN role (PostgreSQL) or a locked account
	// (MariaDB).
	CanLogin bool
	// Privileged is set for a PostgreSQL role with SUPERUSER, CREATEROLE,
	// CREATEDB, REPLICATION or BYPASSRLS itself (its memberships are
	// judged by the full observation only).
	Privileged bool
}

// snapshotPostgres reads every database and role in one statement. The
// privileges are those of each database's owner, which is all Drift needs:
// an owner other than the spec's is drift by itself.
const snapshotPostgres = `
SELECT 'r', r.rolname, COALESCE(pg_catalog.shobj_description(r.oid, 'pg_authid'), ''), r.rolcanlogin, '',
       r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls, false, false
  FROM pg_catalog.pg_roles r WHERE r.rolname NOT LIKE 'pg\_%'
UNION ALL
SELECT 'd', d.datname, COALESCE(pg_catalog.shobj_description(d.oid, 'pg_database'), ''), true, pg_catalog.pg_get_userbyid(d.datdba),
       pg_catalog.has_database_privilege(d.datdba, d.oid, 'CONNECT'),
       pg_catalog.has_database_privilege(d.datdba, d.oid, 'CREATE'),
       pg_catalog.has_database_privilege(d.datdba, d.oid, 'TEMPORARY')
  FROM pg_catalog.pg_database d WHERE NOT d.datistemplate`

// Snapshot reads the server's databases and roles at once.
func (s *Server) Snapshot(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{Databases: map[string]SnapshotDatabase{}, Roles: map[string]SnapshotRole{}, engine: s.cfg.Engine}
	if s.cfg.Engine == Postgres {
		return snap, s.snapshotPostgres(ctx, snap)
	}
	return snap, s.snapshotMariaDB(ctx, snap)
}

func (s *Server) snapshotPostgres(ctx context.Context, snap *Snapshot) error {
	rows, err := s.db.QueryContext(ctx, snapshotPostgres)
	if err != nil {
		return fmt.Errorf("reading the server snapshot: %w", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var kind, name, comment, owner string
		// For a role, the column scanned into connect is "privileged".
		var login, connect, create, temp bool
		if err := rows.Scan(&kind, &name, &comment, &login, &owner, &connect, &create, &temp); err != nil {
			return fmt.Errorf("reading the server snapshot: %w", err)
		}
		claim, _ := ParseClaim(comment)
		if kind == "r" {
			snap.Roles[name] = SnapshotRole{Claim: claim, CanLogin: login, Privileged: connect}
			continue
		}
		var privs []string
		for p, ok := range map[string]bool{"CONNECT": connect, "CREATE": create, "TEMPORARY": temp} {
			if ok {
				privs = append(privs, p)
			}
		}
		snap.Databases[name] = SnapshotDatabase{Claim: claim, Owner: owner, Privileges: map[string][]string{owner: privs}}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the server snapshot: %w", err)
	}
	return nil
}

// snapshotMariaDBObjects lists users (with their lock), claims and schemas
// in one statement; the privileges are the second.
// (mysql.global_priv keeps the lock in its JSON; mysql.user is a view
// without it.)
const snapshotMariaDBObjects = "SELECT 'u', User, COALESCE(JSON_EXTRACT(Priv, '$.account_locked'), 'false') FROM mysql.global_priv WHERE Host = '%'" +
	" UNION ALL SELECT 'c', user, claim FROM `" + ClaimsDatabase + "`.`owned_users`" +
	" UNION ALL SELECT 's', SCHEMA_NAME, SCHEMA_COMMENT FROM information_schema.SCHEMATA"

func (s *Server) snapshotMariaDB(ctx context.Context, snap *Snapshot) error {
	rows, err := s.db.QueryContext(ctx, snapshotMariaDBObjects)
	if err != nil && IsUnknownDatabase(err) || err != nil && strings.Contains(err.Error(), "owned_users") {
		// No Database ever created a user here: no claims table yet.
		if err := s.ensureClaimsTable(ctx); err != nil {
			return err
		}
		rows, err = s.db.QueryContext(ctx, snapshotMariaDBObjects)
	}
	if err != nil {
		return fmt.Errorf("reading the server snapshot: %w", err)
	}
	claims := map[string]Claim{}
	for rows.Next() {
		var kind, name, val string
		if err := rows.Scan(&kind, &name, &val); err != nil {
			_ = rows.Close()
			return fmt.Errorf("reading the server snapshot: %w", err)
		}
		claim, _ := ParseClaim(val)
		switch kind {
		case "u":
			r := snap.Roles[name]
			r.CanLogin = val != "true"
			snap.Roles[name] = r
		case "c":
			claims[name] = claim
		default:
			snap.Databases[name] = SnapshotDatabase{Claim: claim, Privileges: map[string][]string{}}
		}
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the server snapshot: %w", err)
	}
	for name, c := range claims {
		if r, ok := snap.Roles[name]; ok {
			r.Claim = c
			snap.Roles[name] = r
		}
	}
	// The grants name a pattern (mariaDBGrantPattern), matched back to the
	// databases below.
	rows, err = s.db.QueryContext(ctx, "SELECT GRANTEE, TABLE_SCHEMA, PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES")
	if err != nil {
		return fmt.Errorf("reading the server's privileges: %w", err)
	}
	defer func() { _ = rows.Close() }()
	byPattern := map[string]map[string][]string{}
	for rows.Next() {
		var grantee, pattern, priv string
		if err := rows.Scan(&grantee, &pattern, &priv); err != nil {
			return fmt.Errorf("reading the server's privileges: %w", err)
		}
		user, ok := strings.CutSuffix(grantee, "'@'%'")
		if !ok || !strings.HasPrefix(user, "'") {
			continue
		}
		user = user[1:]
		if byPattern[pattern] == nil {
			byPattern[pattern] = map[string][]string{}
		}
		byPattern[pattern][user] = append(byPattern[pattern][user], priv)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the server's privileges: %w", err)
	}
	for name, d := range snap.Databases {
		if p, ok := byPattern[mariaDBGrantPattern(name)]; ok {
			d.Privileges = p
			snap.Databases[name] = d
		}
	}
	return nil
}

// Drift lists how the server differs from what a provisioned spec left:
// empty when it matches. It is what a full observation of the Database would
// correct or refuse (a missing database or role, a role that may not log in,
// a marker that no longer names the claim, another owner, missing
// privileges); passwords and extensions are not in a snapshot.
func (snap *Snapshot) Drift(sp Spec) []string {
	var out []string
	d, ok := snap.Databases[sp.Name]
	if !ok {
		out = append(out, fmt.Sprintf("database %q is missing", sp.Name))
	}
	r, rok := snap.Roles[sp.Owner]
	switch {
	case !rok:
		out = append(out, fmt.Sprintf("role %q is missing", sp.Owner))
	case !r.CanLogin:
		out = append(out, fmt.Sprintf("role %q may not log in", sp.Owner))
	case r.Privileged:
		out = append(out, fmt.Sprintf("role %q was given privileged attributes", sp.Owner))
	}
	if !sp.Claim.IsZero() {
		if ok && d.Claim != sp.Claim {
			out = append(out, fmt.Sprintf("the marker of database %q changed", sp.Name))
		}
		if rok && r.Claim != sp.Claim {
			out = append(out, fmt.Sprintf("the marker of role %q changed", sp.Owner))
		}
	}
	if !ok {
		return out
	}
	if snap.engine == Postgres && d.Owner != sp.Owner {
		out = append(out, fmt.Sprintf("database %q is owned by %q", sp.Name, d.Owner))
		return out
	}
	want := mariaDBPrivileges
	if snap.engine == Postgres {
		want = []string{"CONNECT", "CREATE", "TEMPORARY"}
	}
	var missing []string
	for _, p := range want {
		if !slices.Contains(d.Privileges[sp.Owner], p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("role %q lacks %s on %q", sp.Owner, strings.Join(missing, ", "), sp.Name))
	}
	return out
}
