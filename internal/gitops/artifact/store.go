// Package artifact is the in-process store of fetched git revisions: the
// GitRepository controller puts a checked-out tree (without .git and ignored
// files) under a directory keyed by namespace, name and revision, and the
// Sync controller renders from it. It is a cache: after a restart the
// GitRepository controller fetches again what is missing.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Store keeps artifacts under Dir.
type Store struct {
	// Dir is the root directory.
	Dir string
}

// Key names an artifact's directory: a digest of the revision and the
// artifact's content digest (ignore rules change the content, not the
// revision).
func Key(revision, digest string) string {
	h := sha256.Sum256([]byte(revision + "\n" + digest))
	return hex.EncodeToString(h[:12])
}

func (s Store) repoDir(namespace, name string) string {
	return filepath.Join(s.Dir, namespace, name)
}

// Path is the directory of an artifact; it exists only if Has is true.
func (s Store) Path(namespace, name, revision, digest string) string {
	return filepath.Join(s.repoDir(namespace, name), Key(revision, digest))
}

// Has reports whether an artifact is stored.
func (s Store) Has(namespace, name, revision, digest string) bool {
	fi, err := os.Stat(s.Path(namespace, name, revision, digest))
	return err == nil && fi.IsDir()
}

// TempDir returns a new directory to build an artifact in, on the same file
// system as the store so Put is an atomic rename.
func (s Store) TempDir(namespace, name string) (string, error) {
	d := s.repoDir(namespace, name)
	// Private to the manager: artifacts may hold a tenant's secrets.
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("creating the artifact directory: %w", err)
	}
	return os.MkdirTemp(d, ".tmp-")
}

// Put moves dir into the store as the artifact of revision and digest; an
// existing artifact is kept (the content is the same).
func (s Store) Put(namespace, name, revision, digest, dir string) error {
	dst := s.Path(namespace, name, revision, digest)
	if err := os.Rename(dir, dst); err != nil {
		if s.Has(namespace, name, revision, digest) {
			return os.RemoveAll(dir)
		}
		return fmt.Errorf("storing the artifact: %w", err)
	}
	return nil
}

// GC removes a repository's artifacts except the newest keep ones and any
// whose key is in pinned (Syncs may still be rendering the previous one).
func (s Store) GC(namespace, name string, keep int, pinned ...string) error {
	entries, err := os.ReadDir(s.repoDir(namespace, name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	type e struct {
		name string
		mod  int64
	}
	var all []e
	for _, de := range entries {
		fi, err := de.Info()
		if err != nil {
			continue
		}
		all = append(all, e{de.Name(), fi.ModTime().UnixNano()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod > all[j].mod })
	var errs []error
	for i, x := range all {
		if i < keep || slices.Contains(pinned, x.name) {
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(s.repoDir(namespace, name), x.name)))
	}
	return errors.Join(errs...)
}

// Remove deletes every artifact of a repository.
func (s Store) Remove(namespace, name string) error {
	return os.RemoveAll(s.repoDir(namespace, name))
}
