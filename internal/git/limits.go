package git

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/go-git/go-billy/v5"
)

// Defaults of Client's limits.
const (
	// DefaultMaxFetchSize bounds the bytes one fetch writes (the packs it
	// receives and their indexes).
	DefaultMaxFetchSize int64 = 512 << 20
	// DefaultMaxArtifactSize bounds the size of the files of one checkout.
	DefaultMaxArtifactSize int64 = 100 << 20
)

// ErrTooLarge is wrapped by the errors of a fetch or checkout beyond the
// Client's limits (test with errors.Is).
var ErrTooLarge = errors.New("too large")

// SizeError is a fetch or checkout beyond a limit; it wraps ErrTooLarge.
type SizeError struct {
	// What was measured.
	What string
	// Limit is the bound and Value what was found (at least).
	Limit, Value int64
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("%s %d bytes exceeds the limit of %d bytes", e.What, e.Value, e.Limit)
}

// Unwrap makes errors.Is(err, ErrTooLarge) true.
func (e *SizeError) Unwrap() error { return ErrTooLarge }

func (c Client) maxFetch() int64 {
	if c.MaxFetchSize > 0 {
		return c.MaxFetchSize
	}
	return DefaultMaxFetchSize
}

func (c Client) maxArtifact() int64 {
	if c.MaxArtifactSize > 0 {
		return c.MaxArtifactSize
	}
	return DefaultMaxArtifactSize
}

// limitFS is a billy file system whose files, together, accept at most
// limit bytes of writes: go-git's storage writes every received pack
// through it, so a fetch stops at the limit, whatever the pack inflates to.
type limitFS struct {
	billy.Filesystem
	limit   int64
	written *atomic.Int64
}

func newLimitFS(fs billy.Filesystem, limit int64) *limitFS {
	return &limitFS{Filesystem: fs, limit: limit, written: &atomic.Int64{}}
}

// exceeded reports whether a write was refused.
func (l *limitFS) exceeded() bool { return l.written.Load() > l.limit }

func (l *limitFS) wrap(f billy.File, err error) (billy.File, error) {
	if err != nil {
		return nil, err
	}
	return &limitFile{File: f, fs: l}, nil
}

func (l *limitFS) Create(name string) (billy.File, error) {
	return l.wrap(l.Filesystem.Create(name))
}

func (l *limitFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	return l.wrap(l.Filesystem.OpenFile(name, flag, perm))
}

func (l *limitFS) TempFile(dir, prefix string) (billy.File, error) {
	return l.wrap(l.Filesystem.TempFile(dir, prefix))
}

func (l *limitFS) Chroot(path string) (billy.Filesystem, error) {
	fs, err := l.Filesystem.Chroot(path)
	if err != nil {
		return nil, err
	}
	return &limitFS{Filesystem: fs, limit: l.limit, written: l.written}, nil
}

type limitFile struct {
	billy.File
	fs *limitFS
}

func (f *limitFile) Write(p []byte) (int, error) {
	if n := f.fs.written.Add(int64(len(p))); n > f.fs.limit {
		return 0, &SizeError{What: "fetch", Limit: f.fs.limit, Value: n}
	}
	return f.File.Write(p)
}
