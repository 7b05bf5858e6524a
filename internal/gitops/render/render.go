// Package render turns a directory of an artifact into Kubernetes objects: a
// kustomize build when the directory holds a kustomization file (built-in
// transformers only: no exec or Go plugins), else every .yaml, .yml and
// .json file below it, recursively, with any number of documents each.
// Errors name the file and, for invalid YAML, the line.
package render

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ErrPathNotFound is returned when the path does not exist in the artifact.
var ErrPathNotFound = errors.New("path not found")

var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// Render renders root/path. The objects are in a stable order (files
// sorted, documents in file order; kustomize's own order).
func Render(root, path string) ([]*unstructured.Unstructured, error) {
	dir := filepath.Join(root, filepath.FromSlash(path))
	rel, err := filepath.Rel(root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("path %q is outside the repository", path)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: %q does not exist in the revision (or is not a directory)", ErrPathNotFound, path)
	}
	for _, k := range kustomizationFiles {
		if _, err := os.Stat(filepath.Join(dir, k)); err == nil {
			return kustomize(root, dir)
		}
	}
	return plain(root, dir)
}

func kustomize(root, dir string) ([]*unstructured.Unstructured, error) {
	if err := checkConfined(root, dir); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = types.DisabledPluginConfig()
	// Bases elsewhere in the repository (../base) are allowed; the artifact
	// holds nothing but the repository.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	k := krusty.MakeKustomizer(opts)
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		rel, _ := filepath.Rel(root, dir)
		return nil, fmt.Errorf("kustomize build %s: %s", filepath.ToSlash(rel), strings.ReplaceAll(err.Error(), root+string(filepath.Separator), ""))
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

func plain(root, dir string) ([]*unstructured.Unstructured, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
				files = append(files, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		objs, err := Decode(filepath.ToSlash(rel), b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, dedupe(out)
}

var lineRE = regexp.MustCompile(`line (\d+)`)

// Decode decodes the YAML (or JSON) documents of one file named name. Empty
// documents are skipped; `kind: List` is expanded. An error names the file
// and the line in the file.
func Decode(name string, data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, doc := range splitDocuments(data) {
		if len(bytes.TrimSpace(stripComments(doc.body))) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc.body)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", name, relocate(err.Error(), doc.line))
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("%s:%d: %s", name, doc.line, objectError(err, js))
		}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, doc.line, err)
			}
			for i := range l.Items {
				item := l.Items[i]
				if err := check(&item); err != nil {
					return nil, fmt.Errorf("%s:%d: item %d: %w", name, doc.line, i, err)
				}
				out = append(out, &item)
			}
			continue
		}
		if err := check(u); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, doc.line, err)
		}
		out = append(out, u)
	}
	return out, nil
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

// checkConfined refuses what would let a kustomize build of dir read
// outside the revision: a resource, component or base (followed through the
// kustomizations it reaches) that is not a path inside the repository
// (kustomize would fetch a remote base with a git binary), or a symlink
// pointing out of the repository.
func checkConfined(root, dir string) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	r, err := os.OpenRoot(realRoot)
	if err != nil {
		return err
	}
	defer r.Close()
	inside := func(p string) (string, error) {
		rel, _ := filepath.Rel(root, p)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", filepath.ToSlash(rel), err)
		}
		t, err := filepath.Rel(realRoot, real)
		if err != nil || t == ".." || strings.HasPrefix(t, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("%s: symlink points outside the repository", filepath.ToSlash(rel))
		}
		return t, nil
	}
	seen := map[string]bool{}
	var visit func(d string) error
	visit = func(d string) error {
		relDir, err := inside(d)
		if err != nil || seen[relDir] {
			return err
		}
		seen[relDir] = true
		// Files a kustomization reads without naming them as resources
		// (patches, generator sources) live beside it: no symlink out.
		err = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.Type()&fs.ModeSymlink != 0 {
				_, err = inside(p)
			}
			return err
		})
		if err != nil {
			return err
		}
		for _, k := range kustomizationFiles {
			b, err := r.ReadFile(filepath.Join(relDir, k))
			if err != nil {
				continue
			}
			var kz struct {
				Resources  []string `json:"resources"`
				Components []string `json:"components"`
				Bases      []string `json:"bases"`
			}
			relK := filepath.ToSlash(filepath.Join(relDir, k))
			if err := yaml.Unmarshal(b, &kz); err != nil {
				return fmt.Errorf("%s: %w", relK, err)
			}
			for _, res := range slices.Concat(kz.Resources, kz.Components, kz.Bases) {
				p := filepath.Join(d, filepath.FromSlash(res))
				fi, err := os.Stat(p)
				if err != nil {
					return fmt.Errorf("%s: %q is not a file or directory of the repository (remote bases are not allowed)", relK, res)
				}
				if _, err := inside(p); err != nil {
					return err
				}
				if fi.IsDir() {
					if err := visit(p); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return nil
	}
	return visit(dir)
}
