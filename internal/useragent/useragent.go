// Package useragent is how a Converge component names itself to the API
// server: the User-Agent of its requests and the field manager of its
// writes. It is a leaf, so that agents (lbagent, machineagent) and the
// manager's wiring name themselves the same way without importing each
// other.
package useragent

import (
	"fmt"
	"runtime"

	"github.com/converge-dev/converge/internal/version"
)

// For is the User-Agent of a component's requests (a controller, an
// agent). The API server records the part before the first "/" as the
// field manager of writes that name none, so it follows the
// converge-<component> naming of the field managers.
func For(component string) string {
	return fmt.Sprintf("converge-%s/%s (%s/%s)", component, version.Get(), runtime.GOOS, runtime.GOARCH)
}

// FieldOwner is the field manager of the writes of the controller named
// controller that do not name their own: converge-<controller>, as its
// User-Agent.
func FieldOwner(controller string) string { return "converge-" + controller }
