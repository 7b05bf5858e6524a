package render

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// scan checks, before kustomize runs, every path that any kustomization
// reached from dir names in a file-loading field. kustomize's loader
// fetches http(s) paths with its own HTTP client and clones remote bases
// with a git binary before it touches the file system, and its public API
// lets neither be replaced: so every URL or remote repository is refused
// here, by field, and ConfinedFS refuses whatever reaches the file system
// outside the root. Errors are RefusedErrors naming the kustomization file
// and the field.
func scan(cfs *ConfinedFS, dir string) error {
	s := &scanner{cfs: cfs, seen: map[string]bool{}}
	return s.dir(dir)
}

type scanner struct {
	cfs  *ConfinedFS
	seen map[string]bool
}

// field kinds: how kustomize uses a field's values.
const (
	// kindRoot: a directory kustomize builds (kustomization) or a file;
	// remote repositories are cloned by kustomize, so refused.
	kindRoot = iota
	// kindPlugin: as kindRoot, but a file holds plugin configurations
	// (generators, transformers, validators), themselves naming files.
	kindPlugin
	// kindFile: a file kustomize reads with its loader.
	kindFile
)

func (s *scanner) dir(dir string) error {
	if s.seen[dir] {
		return nil
	}
	s.seen[dir] = true
	for _, name := range kustomizationFiles {
		kf := joinRel(dir, name)
		fi, err := s.cfs.root.Lstat(kf)
		if err != nil || fi.IsDir() {
			continue
		}
		b, err := s.cfs.ReadFile(kf)
		if err != nil {
			return err
		}
		return s.kustomization(dir, kf, b)
	}
	return nil
}

func (s *scanner) kustomization(dir, kf string, b []byte) error {
	var k types.Kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		return fmt.Errorf("%s: %w", kf, err)
	}
	type entry struct {
		field, value string
		kind         int
	}
	var es []entry
	add := func(field string, kind int, values ...string) {
		for _, v := range values {
			if v != "" {
				es = append(es, entry{field, v, kind})
			}
		}
	}
	add("resources", kindRoot, k.Resources...)
	add("components", kindRoot, k.Components...)
	add("bases", kindRoot, k.Bases...) //nolint:staticcheck // deprecated, still loaded
	add("generators", kindPlugin, k.Generators...)
	add("transformers", kindPlugin, k.Transformers...)
	add("validators", kindPlugin, k.Validators...)
	add("crds", kindFile, k.Crds...)
	add("configurations", kindFile, k.Configurations...)
	add("openapi.path", kindFile, k.OpenAPI["path"])
	for i, p := range k.Patches {
		add(fmt.Sprintf("patches[%d].path", i), kindFile, p.Path)
	}
	for i, p := range k.PatchesJson6902 { //nolint:staticcheck // deprecated, still loaded
		add(fmt.Sprintf("patchesJson6902[%d].path", i), kindFile, p.Path)
	}
	for i, p := range k.PatchesStrategicMerge { //nolint:staticcheck // deprecated, still loaded
		// An entry is a file name or an inline patch.
		if v := string(p); !strings.Contains(v, "\n") {
			add(fmt.Sprintf("patchesStrategicMerge[%d]", i), kindFile, v)
		}
	}
	for i, r := range k.Replacements {
		add(fmt.Sprintf("replacements[%d].path", i), kindFile, r.Path)
	}
	gens := func(field string, args []types.GeneratorArgs) {
		for i, g := range args {
			for _, f := range g.FileSources {
				// [key=]path
				_, p, ok := strings.Cut(f, "=")
				if !ok {
					p = f
				}
				add(fmt.Sprintf("%s[%d].files", field, i), kindFile, p)
			}
			add(fmt.Sprintf("%s[%d].envs", field, i), kindFile, g.EnvSources...)
			add(fmt.Sprintf("%s[%d].env", field, i), kindFile, g.EnvSource)
		}
	}
	cms := make([]types.GeneratorArgs, 0, len(k.ConfigMapGenerator))
	for _, g := range k.ConfigMapGenerator {
		cms = append(cms, g.GeneratorArgs)
	}
	gens("configMapGenerator", cms)
	secrets := make([]types.GeneratorArgs, 0, len(k.SecretGenerator))
	for _, g := range k.SecretGenerator {
		secrets = append(secrets, g.GeneratorArgs)
	}
	gens("secretGenerator", secrets)
	if len(k.HelmCharts) > 0 || k.HelmGlobals != nil || len(k.HelmChartInflationGenerator) > 0 {
		return &RefusedError{File: kf, Field: "helmCharts", Value: "helm", Reason: "helm charts are not rendered (a render never runs helm or fetches a chart)"}
	}
	for _, e := range es {
		if err := s.entry(dir, kf, e.field, e.value, e.kind); err != nil {
			return err
		}
	}
	return nil
}

// entry checks one path named by field of kustomization kf in dir.
func (s *scanner) entry(dir, kf, field, v string, kind int) error {
	refuse := func(why string) error {
		return &RefusedError{File: kf, Field: field, Value: v, Reason: why}
	}
	if kind != kindFile && strings.Contains(v, "\n") {
		// An inline configuration (generators, transformers, validators).
		return s.plugins(kf, field, []byte(v))
	}
	if r := remote(v); r != "" {
		return refuse(r + "; a render never uses the network")
	}
	if filepath.IsAbs(v) || path.IsAbs(v) {
		return refuse("an absolute path; a render reads only files of the repository")
	}
	joined := path.Join(dir, filepath.ToSlash(v))
	if !filepath.IsLocal(filepath.FromSlash(joined)) { // IsLocal(".") is true
		return refuse("the path leaves the repository")
	}
	resolved, err := s.cfs.Resolve(joined)
	if err != nil {
		var re *RefusedError
		if errors.As(err, &re) {
			return refuse(re.Reason + " (" + re.File + ")")
		}
		return err
	}
	fi, err := s.cfs.root.Stat(resolved)
	if err != nil {
		if err := s.cfs.wrap(resolved, err); errors.Is(err, ErrRefused) {
			return refuse("a symlink leaves the repository")
		}
		if kind == kindRoot {
			return fmt.Errorf("%s: %q is not a file or directory of the repository (remote bases are not allowed)", kf, v)
		}
		// kustomize reports the missing file.
		return nil
	}
	switch {
	case fi.IsDir() && kind != kindFile:
		return s.dir(resolved)
	case kind == kindPlugin:
		b, err := s.cfs.ReadFile(resolved)
		if err != nil {
			return err
		}
		return s.plugins(resolved, field, b)
	}
	return nil
}

// pluginFileKeys are the keys of built-in plugin configurations whose
// values are paths kustomize loads.
var pluginFileKeys = map[string]bool{
	"path": true, "paths": true, "files": true, "envs": true, "env": true,
	"valuesFile": true, "additionalValuesFiles": true, "chartHome": true,
	"targetFilePath": true, "argsFromFile": true, "repo": true,
}

// plugins checks the plugin configurations of file f (from field): every
// value of a key that names a file must be a local path.
func (s *scanner) plugins(f, field string, b []byte) error {
	for _, doc := range splitDocuments(b) {
		var m any
		if err := yaml.Unmarshal(doc.body, &m); err != nil {
			// kustomize reports it.
			continue
		}
		var walk func(key string, v any) error
		walk = func(key string, v any) error {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					if err := walk(k, e); err != nil {
						return err
					}
				}
			case []any:
				for _, e := range x {
					if err := walk(key, e); err != nil {
						return err
					}
				}
			case string:
				if !pluginFileKeys[key] {
					return nil
				}
				p := x
				if key == "files" {
					if _, after, ok := strings.Cut(x, "="); ok {
						p = after
					}
				}
				if r := remote(p); r != "" {
					return &RefusedError{File: f, Field: field + " " + key, Value: x, Reason: r + "; a render never uses the network"}
				}
				if filepath.IsAbs(p) || path.IsAbs(p) {
					return &RefusedError{File: f, Field: field + " " + key, Value: x, Reason: "an absolute path; a render reads only files of the repository"}
				}
			}
			return nil
		}
		if err := walk("", m); err != nil {
			return err
		}
	}
	return nil
}

// remote says what v is when kustomize would fetch it rather than read a
// file: a URL, or a git repository spec it would clone. "" for a path.
func remote(v string) string {
	l := strings.ToLower(strings.TrimSpace(v))
	switch {
	case strings.HasPrefix(l, "git::"):
		return "a remote git repository"
	case strings.Contains(l, "://"):
		return "a URL"
	case strings.HasPrefix(l, "github.com/"), strings.HasPrefix(l, "github.com:"):
		return "a remote git repository"
	}
	if u, err := url.Parse(l); err == nil && u.Scheme != "" {
		return "a URL"
	}
	// A user name before the first slash (user@host:path, user@host/path)
	// makes kustomize read a git repository spec.
	if at := strings.Index(l, "@"); at >= 0 && !strings.Contains(l[:at], "/") {
		return "a remote git repository"
	}
	if before, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(before, "/") {
		return "a URL"
	}
	return ""
}
