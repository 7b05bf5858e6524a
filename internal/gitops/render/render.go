// Package render turns a directory of an artifact into Kubernetes objects: a
// kustomize build when the directory holds a kustomization file (built-in
// transformers only: no exec or Go plugins), else every .yaml, .yml and
// .json file below it, recursively, with any number of documents each.
// Errors name the file and, for invalid YAML, the line.
//
// Renders are confined to their artifact: every file is read through a
// ConfinedFS (an os.Root on the artifact's directory), and a kustomization
// is checked field by field before the build so that kustomize never
// fetches a URL or clones a remote base. A render is bounded by Options.
package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// ErrPathNotFound is returned when the path does not exist in the artifact.
var ErrPathNotFound = errors.New("path not found")

// ErrLimitExceeded is wrapped by the errors of a render that exceeded one of
// its Options: too many objects, a file too large, or too long.
var ErrLimitExceeded = errors.New("limit exceeded")

// LimitError is a bound a render (or a fetch) exceeded; it wraps
// ErrLimitExceeded.
type LimitError struct {
	// What was measured ("objects rendered", "file a.yaml size").
	What string
	// Limit is the bound and Value what was found (at least).
	Limit, Value int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s %d exceeds the limit of %d", e.What, e.Value, e.Limit)
}

// Unwrap makes errors.Is(err, ErrLimitExceeded) true.
func (e *LimitError) Unwrap() error { return ErrLimitExceeded }

// Defaults of Options.
const (
	DefaultMaxManifests       = 10000
	DefaultMaxFileSize  int64 = 16 << 20
	DefaultTimeout            = 2 * time.Minute
)

// Options bound a render; zero fields take the defaults.
type Options struct {
	// MaxManifests bounds the number of objects a render returns.
	MaxManifests int
	// MaxFileSize bounds the size of each file a render reads.
	MaxFileSize int64
	// Timeout bounds the time of a render.
	Timeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxManifests <= 0 {
		o.MaxManifests = DefaultMaxManifests
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = DefaultMaxFileSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// Render renders root/path. The objects are in a stable order (files
// sorted, documents in file order; kustomize's own order). Every file is
// read through a ConfinedFS on root, nothing is fetched: a read outside
// root or of a URL fails with ErrRefused, a render beyond o with
// ErrLimitExceeded.
func Render(ctx context.Context, root, path string, o Options) ([]*unstructured.Unstructured, error) {
	o = o.withDefaults()
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	type result struct {
		objs []*unstructured.Unstructured
		err  error
	}
	// kustomize takes no context: the build runs aside and its file system
	// fails every call once rctx is done, so it stops soon after.
	done := make(chan result, 1)
	go func() {
		objs, err := renderConfined(rctx, root, path, o)
		done <- result{objs, err}
	}()
	timeout := func() error {
		return fmt.Errorf("%w: the render did not finish within %s", ErrLimitExceeded, o.Timeout)
	}
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() == nil && errors.Is(r.err, context.DeadlineExceeded) {
			return nil, timeout()
		}
		return r.objs, r.err
	case <-rctx.Done():
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, timeout()
	}
}

func renderConfined(ctx context.Context, root, path string, o Options) ([]*unstructured.Unstructured, error) {
	cfs, err := NewConfinedFS(ctx, root, o.MaxFileSize)
	if err != nil {
		return nil, err
	}
	defer cfs.Close()
	if filepath.IsAbs(path) || !filepath.IsLocal(filepath.Clean(filepath.FromSlash(path))) && filepath.Clean(path) != "." {
		return nil, &RefusedError{File: path, Reason: "the path is outside the repository"}
	}
	dir, err := cfs.Resolve(path)
	if err != nil {
		return nil, err
	}
	fi, err := cfs.root.Stat(dir)
	if err != nil || !fi.IsDir() {
		if err := cfs.wrap(dir, err); errors.Is(err, ErrRefused) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %q does not exist in the revision (or is not a directory)", ErrPathNotFound, path)
	}
	for _, k := range kustomizationFiles {
		if fi, err := cfs.root.Lstat(joinRel(dir, k)); err == nil && !fi.IsDir() {
			return kustomize(cfs, dir, o)
		}
	}
	return plain(ctx, cfs, dir, o)
}

// joinRel joins root-relative slash paths.
func joinRel(elem ...string) string { return pathpkg.Join(elem...) }

func kustomize(cfs *ConfinedFS, dir string, o Options) ([]*unstructured.Unstructured, error) {
	if err := scan(cfs, dir); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = types.DisabledPluginConfig()
	// Bases elsewhere in the repository (../base) are allowed: the
	// confined file system stops every read at the artifact root.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	k := krusty.MakeKustomizer(opts)
	rm, err := k.Run(cfs, cfs.abs(dir))
	if err != nil {
		if f := cfs.Failure(); f != nil {
			return nil, fmt.Errorf("kustomize build %s: %w", dir, f)
		}
		return nil, fmt.Errorf("kustomize build %s: %s", dir, strings.ReplaceAll(err.Error(), cfs.Dir()+string(filepath.Separator), ""))
	}
	if n := rm.Size(); n > o.MaxManifests {
		return nil, &LimitError{What: "objects rendered", Limit: int64(o.MaxManifests), Value: int64(n)}
	}
	var out []*unstructured.Unstructured
	for _, res := range rm.Resources() {
		// Through JSON: kustomize's maps hold Go ints, which unstructured
		// objects cannot hold.
		js, err := res.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("kustomize build: %w", err)
		}
		if err := check(u); err != nil {
			return nil, fmt.Errorf("kustomize build: %w", err)
		}
		out = append(out, u)
	}
	return out, dedupe(out)
}

// plain reads every manifest below dir through the root. Symlinks are
// followed inside the repository only; one that leaves it is refused (a
// link to a directory is checked, not descended).
func plain(ctx context.Context, cfs *ConfinedFS, dir string, o Options) ([]*unstructured.Unstructured, error) {
	files, err := manifestFiles(ctx, cfs, dir)
	if err != nil {
		return nil, err
	}
	// Files are read in order and decoded a window of one per CPU at a
	// time, so the object limit still stops the render within a window of
	// where it is crossed.
	var out []*unstructured.Unstructured
	window := max(1, runtime.GOMAXPROCS(0))
	for len(files) > 0 {
		batch := files[:min(window, len(files))]
		files = files[len(batch):]
		results := make([]decoded, len(batch))
		var wg sync.WaitGroup
		for i, f := range batch {
			b, err := cfs.ReadFile(f)
			if err != nil {
				wg.Wait()
				return nil, err
			}
			wg.Go(func() {
				defer func() {
					if p := recover(); p != nil {
						results[i].err = fmt.Errorf("%s: decoding: %v", f, p)
					}
				}()
				results[i].objs, results[i].err = Decode(f, b)
			})
		}
		wg.Wait()
		for _, r := range results {
			if r.err != nil {
				return nil, r.err
			}
			out = append(out, r.objs...)
			if len(out) > o.MaxManifests {
				return nil, &LimitError{What: "objects rendered", Limit: int64(o.MaxManifests), Value: int64(len(out))}
			}
		}
	}
	return out, dedupe(out)
}

// manifestFiles lists the manifest files below dir, sorted.
func manifestFiles(ctx context.Context, cfs *ConfinedFS, dir string) ([]string, error) {
	var files []string
	err := fs.WalkDir(cfs.root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return cfs.wrap(p, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		isManifest := false
		switch strings.ToLower(pathpkg.Ext(p)) {
		case ".yaml", ".yml", ".json":
			isManifest = true
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := cfs.Resolve(p)
			if err != nil {
				return err
			}
			fi, err := cfs.root.Stat(target)
			if err != nil {
				return cfs.wrap(p, err)
			}
			if isManifest && fi.Mode().IsRegular() {
				files = append(files, p)
			}
		case d.Type().IsRegular() && isManifest:
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, cfs.note(err)
	}
	sort.Strings(files)
	return files, nil
}

// Locate names the file of root/path that an object matching match comes
// from, for error messages: the kustomization file when path is a
// kustomization (its build decides where an object comes from), else the
// first manifest file holding a matching object. It reads through a
// ConfinedFS as Render does, and returns "" when nothing matches.
func Locate(ctx context.Context, root, path string, o Options, match func(*unstructured.Unstructured) bool) (string, error) {
	o = o.withDefaults()
	cfs, err := NewConfinedFS(ctx, root, o.MaxFileSize)
	if err != nil {
		return "", err
	}
	defer cfs.Close()
	dir, err := cfs.Resolve(path)
	if err != nil {
		return "", err
	}
	for _, k := range kustomizationFiles {
		if fi, err := cfs.root.Lstat(joinRel(dir, k)); err == nil && !fi.IsDir() {
			return joinRel(dir, k), nil
		}
	}
	files, err := manifestFiles(ctx, cfs, dir)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, err := cfs.ReadFile(f)
		if err != nil {
			return "", err
		}
		objs, err := Decode(f, b)
		if err != nil {
			return "", err
		}
		for _, u := range objs {
			if match(u) {
				return f, nil
			}
		}
	}
	return "", nil
}

var lineRE = regexp.MustCompile(`line (\d+)`)

// Decode decodes the YAML (or JSON) documents of one file named name. Empty
// documents are skipped; `kind: List` is expanded. An error names the file
// and the line in the file; with several bad documents, the first one's.
// A file of many documents is decoded on every CPU (YAML decoding is most
// of a plain render's time), in the file's order.
func Decode(name string, data []byte) ([]*unstructured.Unstructured, error) {
	docs := splitDocuments(data)
	results := make([]decoded, len(docs))
	workers := min(runtime.GOMAXPROCS(0), len(docs)/parallelDecodeMin)
	if workers < 2 {
		for i, doc := range docs {
			results[i] = decodeDocument(name, doc)
			if results[i].err != nil {
				return nil, results[i].err
			}
		}
	} else {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := w; i < len(docs); i += workers {
					results[i] = decodeRecovering(name, docs[i])
				}
			})
		}
		wg.Wait()
	}
	var out []*unstructured.Unstructured
	for _, r := range results {
		if r.err != nil {
			return nil, r.err
		}
		out = append(out, r.objs...)
	}
	return out, nil
}

// parallelDecodeMin is the number of documents per extra decoding
// goroutine: below it, a file is decoded on one.
const parallelDecodeMin = 32

// decoded is what one document decodes to.
type decoded struct {
	objs []*unstructured.Unstructured
	err  error
}

// decodeRecovering is decodeDocument on a goroutine of its own: a panic in
// a decoder is that document's error, as it would be the reconcile's on
// the calling goroutine, not the process's end.
func decodeRecovering(name string, doc document) (d decoded) {
	defer func() {
		if p := recover(); p != nil {
			d = decoded{err: fmt.Errorf("%s:%d: decoding: %v", name, doc.line, p)}
		}
	}()
	return decodeDocument(name, doc)
}

// decodeDocument decodes one document of the file name.
func decodeDocument(name string, doc document) decoded {
	if len(bytes.TrimSpace(stripComments(doc.body))) == 0 {
		return decoded{}
	}
	js, err := yaml.YAMLToJSON(doc.body)
	if err != nil {
		return decoded{err: fmt.Errorf("%s: %s", name, relocate(err.Error(), doc.line))}
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return decoded{}
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return decoded{err: fmt.Errorf("%s:%d: %s", name, doc.line, objectError(err, js))}
	}
	if !u.IsList() {
		if err := check(u); err != nil {
			return decoded{err: fmt.Errorf("%s:%d: %w", name, doc.line, err)}
		}
		return decoded{objs: []*unstructured.Unstructured{u}}
	}
	l, err := u.ToList()
	if err != nil {
		return decoded{err: fmt.Errorf("%s:%d: %w", name, doc.line, err)}
	}
	out := make([]*unstructured.Unstructured, 0, len(l.Items))
	for i := range l.Items {
		item := l.Items[i]
		if err := check(&item); err != nil {
			return decoded{err: fmt.Errorf("%s:%d: item %d: %w", name, doc.line, i, err)}
		}
		out = append(out, &item)
	}
	return decoded{objs: out}
}

// objectError explains why a JSON document is not an object.
func objectError(err error, js []byte) string {
	var m map[string]any
	if yaml.Unmarshal(js, &m) != nil {
		return "the document is not a mapping (a Kubernetes object)"
	}
	if _, ok := m["kind"]; !ok {
		return "the document has no kind"
	}
	return err.Error()
}

func check(u *unstructured.Unstructured) error {
	switch {
	case u.GetAPIVersion() == "":
		return fmt.Errorf("%s %q has no apiVersion", kindOr(u), u.GetName())
	case u.GetKind() == "":
		return fmt.Errorf("object %q has no kind", u.GetName())
	case u.GetName() == "" && u.GetGenerateName() == "":
		return fmt.Errorf("%s has no metadata.name", u.GetKind())
	case u.GetName() == "":
		return fmt.Errorf("%s uses metadata.generateName, which cannot be synced (it would create a new object each time)", u.GetKind())
	}
	return nil
}

func kindOr(u *unstructured.Unstructured) string {
	if k := u.GetKind(); k != "" {
		return k
	}
	return "object"
}

func dedupe(objs []*unstructured.Unstructured) error {
	seen := map[string]bool{}
	for _, u := range objs {
		k := u.GroupVersionKind().GroupKind().String() + "/" + u.GetNamespace() + "/" + u.GetName()
		if seen[k] {
			return fmt.Errorf("%s %s/%s is defined more than once", u.GetKind(), u.GetNamespace(), u.GetName())
		}
		seen[k] = true
	}
	return nil
}

type document struct {
	body []byte
	line int // 1-based line of the document's first line in the file
}

// splitDocuments splits on lines that are exactly "---" (optionally
// followed by a comment or spaces), remembering where each document starts.
func splitDocuments(data []byte) []document {
	var docs []document
	lines := bytes.SplitAfter(data, []byte("\n"))
	start, cur := 1, []byte{}
	for i, l := range lines {
		t := bytes.TrimRight(l, "\r\n")
		if bytes.HasPrefix(t, []byte("---")) && (len(t) == 3 || t[3] == ' ' || t[3] == '\t' || t[3] == '#') {
			docs = append(docs, document{body: cur, line: start})
			cur, start = []byte{}, i+2
			continue
		}
		cur = append(cur, l...)
	}
	return append(docs, document{body: cur, line: start})
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
		}
	}
	return out
}

// relocate rewrites "line N" of a YAML error (relative to the document) to
// the line in the file.
func relocate(msg string, docLine int) string {
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	replaced := false
	msg = lineRE.ReplaceAllStringFunc(msg, func(s string) string {
		if replaced {
			return s
		}
		replaced = true
		n, _ := strconv.Atoi(lineRE.FindStringSubmatch(s)[1])
		return "line " + strconv.Itoa(n+docLine-1)
	})
	if !replaced {
		return fmt.Sprintf("document at line %d: %s", docLine, msg)
	}
	return msg
}
