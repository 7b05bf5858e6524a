package sqlengine

import (
	"context"
	"os"
	"strings"
)

// QuoteLiteral exposes quoteLiteral to the fuzz targets that run it on the
// real servers.
var QuoteLiteral = quoteLiteral

// ClientConnection exposes what the client programs are given: the
// environment of the PostgreSQL ones, the option file of the MariaDB ones.
func ClientConnection(ctx context.Context, c Config) (string, error) {
	c, hostaddr, err := c.pin(ctx)
	if err != nil {
		return "", err
	}
	if c.Engine == Postgres {
		env, cleanup, err := pgEnv(c, hostaddr)
		if err != nil {
			return "", err
		}
		cleanup()
		return strings.Join(env, "\n"), nil
	}
	path, cleanup, err := mariaOptionFile(c)
	if err != nil {
		return "", err
	}
	defer cleanup()
	b, err := os.ReadFile(path)
	return string(b), err
}
