// Package sqlengine talks to database servers for the sql.converge.dev
// controllers: PostgreSQL through github.com/jackc/pgx/v5 and MariaDB through
// github.com/go-sql-driver/mysql, both behind database/sql with one pool per
// server and credentials. It validates and quotes identifiers (every
// identifier in every statement is quoted, never interpolated raw; values are
// bind parameters, and the only literals, generated passwords, are checked
// and quoted), classifies errors (unreachable vs. refused credentials), and
// runs the engines' own dump and load programs (pg_dump/psql,
// mariadb-dump/mariadb) for backups and restores.
//
// The controllers declare the interfaces they need; this package provides
// the implementation.
package sqlengine
