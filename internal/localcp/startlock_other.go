//go:build !unix

package localcp

import "context"

func acquireStartLock(context.Context, func(string, ...any)) (func(), error) { return func() {}, nil }
