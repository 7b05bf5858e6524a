package git

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
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
	return fmt.Sprintf("%s: %d bytes exceed the limit of %d bytes", e.What, e.Value, e.Limit)
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
// through it, so a fetch stops at the limit. Each pack is also scanned as
// it is written, and one holding an object larger than maxObject (inflated)
// is cut off there: go-git's indexer holds every object whole in memory, so
// a 2 GiB blob of zeros, a few MB on the wire, would otherwise take 2 GiB.
type limitFS struct {
	billy.Filesystem
	limit     int64
	maxObject int64
	written   *atomic.Int64
	failure   *atomic.Pointer[SizeError]
}

func newLimitFS(fs billy.Filesystem, limit, maxObject int64) *limitFS {
	return &limitFS{Filesystem: fs, limit: limit, maxObject: maxObject,
		written: &atomic.Int64{}, failure: &atomic.Pointer[SizeError]{}}
}

// err is the limit a write exceeded, nil if none.
func (l *limitFS) err() error {
	if e := l.failure.Load(); e != nil {
		return e
	}
	return nil
}

func (l *limitFS) fail(e *SizeError) error {
	l.failure.CompareAndSwap(nil, e)
	return l.failure.Load()
}

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
	f, err := l.wrap(l.Filesystem.TempFile(dir, prefix))
	if err == nil && strings.HasPrefix(prefix, "tmp_pack_") {
		lf := f.(*limitFile)
		lf.guard = newPackGuard(l)
	}
	return f, err
}

func (l *limitFS) Chroot(path string) (billy.Filesystem, error) {
	fs, err := l.Filesystem.Chroot(path)
	if err != nil {
		return nil, err
	}
	return &limitFS{Filesystem: fs, limit: l.limit, maxObject: l.maxObject, written: l.written, failure: l.failure}, nil
}

type limitFile struct {
	billy.File
	fs    *limitFS
	guard *packGuard
}

func (f *limitFile) Write(p []byte) (int, error) {
	if n := f.fs.written.Add(int64(len(p))); n > f.fs.limit {
		return 0, f.fs.fail(&SizeError{What: "fetch", Limit: f.fs.limit, Value: n})
	}
	if f.guard != nil {
		if err := f.guard.write(p); err != nil {
			return 0, err
		}
	}
	return f.File.Write(p)
}

func (f *limitFile) Close() error {
	if f.guard != nil {
		f.guard.close()
	}
	return f.File.Close()
}

// packGuard reads a pack as it is written, object header by object header,
// inflating into nothing: it fails the write that brings the header of an
// object (or the target size of a delta) larger than the limit.
type packGuard struct {
	fs   *limitFS
	pw   *io.PipeWriter
	done chan struct{}
}

func newPackGuard(l *limitFS) *packGuard {
	pr, pw := io.Pipe()
	g := &packGuard{fs: l, pw: pw, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		err := g.scan(pr)
		// Whatever follows (the checksum, or the rest after a failure) is
		// consumed, so writes never block.
		_ = pr.CloseWithError(err)
	}()
	return g
}

func (g *packGuard) write(p []byte) error {
	if _, err := g.pw.Write(p); err != nil {
		if e := g.fs.err(); e != nil {
			return e
		}
		// The scan ended (end of the pack, or a pack it cannot read; the
		// indexer reports that): the rest is not scanned.
		return nil
	}
	return nil
}

func (g *packGuard) close() {
	_ = g.pw.Close()
	<-g.done
}

// deltaHead captures the start of a delta: its source and target sizes.
type deltaHead struct{ b []byte }

func (d *deltaHead) Write(p []byte) (int, error) {
	if n := 32 - len(d.b); n > 0 {
		d.b = append(d.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (g *packGuard) scan(r io.Reader) error {
	s := packfile.NewScanner(r)
	_, n, err := s.Header()
	if err != nil {
		return nil
	}
	for range n {
		oh, err := s.NextObjectHeader()
		if err != nil {
			return nil
		}
		size := oh.Length
		if oh.Type.IsDelta() {
			d := &deltaHead{}
			if _, _, err := s.NextObject(d); err != nil {
				return nil
			}
			// Delta header: varint source size, varint target size.
			_, rest := readVarint(d.b)
			size, _ = readVarint(rest)
		} else if size <= g.fs.maxObject {
			if _, _, err := s.NextObject(io.Discard); err != nil {
				return nil
			}
		}
		if size > g.fs.maxObject {
			return g.fs.fail(&SizeError{What: "an object (a file) of the fetch", Limit: g.fs.maxObject, Value: size})
		}
	}
	return nil
}

func readVarint(b []byte) (int64, []byte) {
	var v int64
	var shift uint
	for i, c := range b {
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			return v, b[i+1:]
		}
	}
	return v, nil
}
