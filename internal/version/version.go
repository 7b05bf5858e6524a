// Package version carries the build's version, set at link time with
// -ldflags "-X github.com/converge-dev/converge/internal/version.Version=...".
package version

import "runtime/debug"

// Version is the Converge version; "dev" when not set at link time.
var Version = "dev"

// Get returns Version, or the module version when installed with go install.
func Get() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}
