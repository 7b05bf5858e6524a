package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ErrRefused is wrapped by every error of a render that tried to read
// outside its artifact: an absolute path, a ".." escape, a symlink leaving
// the artifact, or a URL (renders never use the network).
var ErrRefused = errors.New("refused")

// RefusedError is a read a render refused; it wraps ErrRefused.
type RefusedError struct {
	// File is the root-relative file: the kustomization that names the
	// path, or the path itself.
	File string
	// Field is the kustomization field naming the path ("" when File is
	// the path).
	Field string
	// Value is the refused value of Field.
	Value string
	// Reason says why.
	Reason string
}

func (e *RefusedError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: refused: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("%s: %s: refused %q: %s", e.File, e.Field, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// ErrReadOnly is returned by the write methods of ConfinedFS.
var ErrReadOnly = errors.New("the artifact is read-only")

// maxSymlinks bounds the symlinks one path may traverse (as Linux's
// MAXSYMLINKS), so a cycle of links ends in an error.
const maxSymlinks = 40

// ConfinedFS is a read-only kustomize file system (filesys.FileSystem) on
// one directory, the artifact root. Every file is opened through an os.Root
// on that directory: absolute paths and ".." that leave it, and symlinks
// whose target leaves it (or is absolute), are refused with ErrRefused.
// Paths given to it are absolute paths under the root, as kustomize passes
// them, or paths relative to the root; paths it returns are absolute under
// the root with symlinks resolved. Reads larger than the file limit fail
// with ErrLimitExceeded, and every call fails once ctx is done, so a build
// that runs past its deadline stops at its next file access.
type ConfinedFS struct {
	ctx     context.Context //nolint:containedctx // bounds a kustomize build, which takes no context
	root    *os.Root
	dir     string
	maxFile int64

	mu sync.Mutex
	// failure is the first refusal or limit error returned: kustomize
	// rewords the errors of its file system, the render reports this one.
	failure error
}

// note records err if it is the first refusal or limit error.
func (c *ConfinedFS) note(err error) error {
	if err != nil && (errors.Is(err, ErrRefused) || errors.Is(err, ErrLimitExceeded)) {
		c.mu.Lock()
		if c.failure == nil {
			c.failure = err
		}
		c.mu.Unlock()
	}
	return err
}

// Failure is the first refusal or limit error the file system returned.
func (c *ConfinedFS) Failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure
}

// NewConfinedFS opens dir as the root of a ConfinedFS. maxFile bounds the
// size of one file read (0: no bound). Close releases the root.
func NewConfinedFS(ctx context.Context, dir string, maxFile int64) (*ConfinedFS, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("confining to %s: %w", dir, err)
	}
	// The root itself may sit behind a symlink (a temporary directory);
	// canonical paths are the ones kustomize compares.
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("confining to %s: %w", dir, err)
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("confining to %s: %w", dir, err)
	}
	return &ConfinedFS{ctx: ctx, root: r, dir: real, maxFile: maxFile}, nil
}

// Close releases the root directory.
func (c *ConfinedFS) Close() error { return c.root.Close() }

// Dir is the root directory (absolute, symlinks resolved).
func (c *ConfinedFS) Dir() string { return c.dir }

// Rel returns the root-relative slash path of p (absolute under the root
// or relative to it), refusing one that leaves the root lexically.
func (c *ConfinedFS) Rel(p string) (string, error) {
	if err := c.ctx.Err(); err != nil {
		return "", err
	}
	if strings.IndexByte(p, 0) >= 0 { // no file name holds one; the OS would refuse it with EINVAL
		return "", &RefusedError{File: strconv.Quote(p), Reason: "the path contains a NUL byte"}
	}
	if filepath.IsAbs(p) {
		rel, err := filepath.Rel(c.dir, filepath.Clean(p))
		if err != nil || !filepath.IsLocal(rel) { // IsLocal(".") is true
			return "", &RefusedError{File: p, Reason: "an absolute path outside the repository"}
		}
		p = rel
	}
	p = filepath.ToSlash(filepath.Clean(p))
	if !filepath.IsLocal(filepath.FromSlash(p)) {
		return "", &RefusedError{File: p, Reason: "the path leaves the repository"}
	}
	return p, nil
}

// abs turns a root-relative slash path into the absolute path shown to
// kustomize.
func (c *ConfinedFS) abs(rel string) string {
	if rel == "." {
		return c.dir
	}
	return filepath.Join(c.dir, filepath.FromSlash(rel))
}

// Resolve returns the root-relative slash path of p with every symlink
// resolved inside the root; a link that is absolute or leaves the root is
// refused. The last element need not exist (its parent must).
func (c *ConfinedFS) Resolve(p string) (string, error) {
	rel, err := c.Rel(p)
	if err != nil {
		return "", err
	}
	var done []string
	todo := strings.Split(rel, "/")
	if rel == "." {
		todo = nil
	}
	links := 0
	lastLink := ""
	leaves := func() error {
		if lastLink != "" {
			return &RefusedError{File: rel, Reason: "the symlink " + lastLink + " leaves the repository"}
		}
		return &RefusedError{File: rel, Reason: "the path leaves the repository"}
	}
	for len(todo) > 0 {
		el := todo[0]
		todo = todo[1:]
		switch el {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", leaves()
			}
			done = done[:len(done)-1]
			continue
		}
		cur := path.Join(append(done, el)...)
		fi, err := c.root.Lstat(cur)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// Nothing more to resolve; what is left is lexical.
				done = append(done, el)
				done = append(done, todo...)
				out := path.Clean(path.Join(done...))
				if !filepath.IsLocal(filepath.FromSlash(out)) {
					return "", leaves()
				}
				return out, nil
			}
			return "", c.wrap(rel, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, el)
			continue
		}
		links++
		lastLink = cur
		if links > maxSymlinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", rel)
		}
		target, err := c.root.Readlink(cur)
		if err != nil {
			return "", c.wrap(rel, err)
		}
		if filepath.IsAbs(target) {
			return "", &RefusedError{File: cur, Reason: "a symlink to an absolute path"}
		}
		todo = append(strings.Split(filepath.ToSlash(target), "/"), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

// wrap turns os.Root's escape error into ErrRefused, naming the path.
func (c *ConfinedFS) wrap(rel string, err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "escapes from parent") || strings.Contains(err.Error(), "path escapes") {
		return &RefusedError{File: rel, Reason: "a symlink leaves the repository"}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// Root-relative names in messages: never the manager's paths.
		return &fs.PathError{Op: pe.Op, Path: rel, Err: pe.Err}
	}
	return fmt.Errorf("%s: %w", rel, err)
}

// Open opens a file for reading.
func (c *ConfinedFS) Open(p string) (filesys.File, error) {
	f, err := c.open(p)
	return f, c.note(err)
}

func (c *ConfinedFS) open(p string) (filesys.File, error) {
	rel, err := c.Rel(p)
	if err != nil {
		return nil, err
	}
	f, err := c.root.Open(rel)
	if err != nil {
		return nil, c.wrap(rel, err)
	}
	return readOnlyFile{f}, nil
}

// ReadFile reads a whole file, at most the file limit.
func (c *ConfinedFS) ReadFile(p string) ([]byte, error) {
	b, err := c.readFile(p)
	return b, c.note(err)
}

func (c *ConfinedFS) readFile(p string) ([]byte, error) {
	rel, err := c.Rel(p)
	if err != nil {
		return nil, err
	}
	f, err := c.root.Open(rel)
	if err != nil {
		return nil, c.wrap(rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, c.wrap(rel, err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s: is a directory", rel)
	}
	if c.maxFile > 0 && fi.Size() > c.maxFile {
		return nil, &LimitError{What: "file " + rel + " size", Limit: c.maxFile, Value: fi.Size()}
	}
	var r io.Reader = f
	if c.maxFile > 0 {
		// A file that grows while read stops at the limit too.
		r = io.LimitReader(f, c.maxFile+1)
	}
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + 1)
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, c.wrap(rel, err)
	}
	if c.maxFile > 0 && int64(buf.Len()) > c.maxFile {
		return nil, &LimitError{What: "file " + rel + " size", Limit: c.maxFile, Value: int64(buf.Len())}
	}
	return buf.Bytes(), nil
}

// IsDir reports whether p is a directory inside the root.
func (c *ConfinedFS) IsDir(p string) bool {
	rel, err := c.Rel(p)
	if err != nil {
		return false
	}
	fi, err := c.root.Stat(rel)
	return err == nil && fi.IsDir()
}

// Exists reports whether p exists inside the root.
func (c *ConfinedFS) Exists(p string) bool {
	rel, err := c.Rel(p)
	if err != nil {
		return false
	}
	_, err = c.root.Stat(rel)
	return err == nil
}

// ReadDir lists the names in a directory, sorted.
func (c *ConfinedFS) ReadDir(p string) ([]string, error) {
	n, err := c.readDir(p)
	return n, c.note(err)
}

func (c *ConfinedFS) readDir(p string) ([]string, error) {
	rel, err := c.Rel(p)
	if err != nil {
		return nil, err
	}
	des, err := fs.ReadDir(c.root.FS(), rel)
	if err != nil {
		return nil, c.wrap(rel, err)
	}
	names := make([]string, 0, len(des))
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names, nil
}

// CleanedAbs resolves p inside the root: a directory is returned whole, a
// file as its directory and name.
func (c *ConfinedFS) CleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	d, f, err := c.cleanedAbs(p)
	return d, f, c.note(err)
}

func (c *ConfinedFS) cleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	rel, err := c.Resolve(p)
	if err != nil {
		return "", "", err
	}
	fi, err := c.root.Stat(rel)
	if err != nil {
		return "", "", c.wrap(rel, err)
	}
	if fi.IsDir() {
		return filesys.ConfirmedDir(c.abs(rel)), "", nil
	}
	d, f := path.Split(rel)
	if d == "" {
		d = "."
	}
	return filesys.ConfirmedDir(c.abs(path.Clean(d))), f, nil
}

// Glob matches pattern inside the root.
func (c *ConfinedFS) Glob(pattern string) ([]string, error) {
	m, err := c.glob(pattern)
	return m, c.note(err)
}

func (c *ConfinedFS) glob(pattern string) ([]string, error) {
	rel, err := c.Rel(pattern)
	if err != nil {
		return nil, err
	}
	m, err := fs.Glob(c.root.FS(), rel)
	if err != nil {
		return nil, c.wrap(rel, err)
	}
	out := make([]string, 0, len(m))
	for _, x := range m {
		out = append(out, c.abs(x))
	}
	sort.Strings(out)
	return out, nil
}

// Walk walks the tree at p without following symlinks.
func (c *ConfinedFS) Walk(p string, walkFn filepath.WalkFunc) error {
	rel, err := c.Rel(p)
	if err != nil {
		return err
	}
	return fs.WalkDir(c.root.FS(), rel, func(x string, d fs.DirEntry, err error) error {
		if cerr := c.ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			return walkFn(c.abs(x), nil, c.wrap(x, err))
		}
		fi, err := d.Info()
		if err != nil {
			return walkFn(c.abs(x), nil, c.wrap(x, err))
		}
		return walkFn(c.abs(x), fi, nil)
	})
}

// Create is refused: the artifact is read-only.
func (c *ConfinedFS) Create(p string) (filesys.File, error) { return nil, c.readOnly(p) }

// Mkdir is refused: the artifact is read-only.
func (c *ConfinedFS) Mkdir(p string) error { return c.readOnly(p) }

// MkdirAll is refused: the artifact is read-only.
func (c *ConfinedFS) MkdirAll(p string) error { return c.readOnly(p) }

// RemoveAll is refused: the artifact is read-only.
func (c *ConfinedFS) RemoveAll(p string) error { return c.readOnly(p) }

// WriteFile is refused: the artifact is read-only.
func (c *ConfinedFS) WriteFile(p string, _ []byte) error { return c.readOnly(p) }

func (c *ConfinedFS) readOnly(p string) error {
	return &fs.PathError{Op: "write", Path: p, Err: ErrReadOnly}
}

type readOnlyFile struct{ *os.File }

func (f readOnlyFile) Write([]byte) (int, error) { return 0, ErrReadOnly }

var _ filesys.FileSystem = (*ConfinedFS)(nil)
