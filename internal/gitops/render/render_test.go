package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPlainRecursiveMultiDoc(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, map[string]string{
		"app/a.yaml":         "# leading comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
		"app/sub/c.json":     `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`,
		"app/sub/list.yml":   "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: d\n",
		"app/README.md":      "not yaml: [",
		"app/.hidden/x.yaml": "broken: [",
	})
	objs, err := Render(t.Context(), root, "app", Options{})
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	g.Expect(names).To(Equal([]string{"a", "b", "c", "d"}))
}

func TestErrorsNameFileAndLine(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"bad yaml in second doc", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [b\n",
			"bad.yaml: yaml: line 9"},
		{"bad indentation", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n   labels: x\n", "bad.yaml: yaml: line 5"},
		{"no kind", "apiVersion: v1\nmetadata:\n  name: a\n", "bad.yaml:1: the document has no kind"},
		{"no name", "---\napiVersion: v1\nkind: ConfigMap\n", "bad.yaml:2: ConfigMap has no metadata.name"},
		{"scalar", "just a string\n", "bad.yaml:1: the document is not a mapping"},
		{"duplicate", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n", "ConfigMap /a is defined more than once"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			write(t, root, map[string]string{"dir/bad.yaml": tc.file})
			_, err := Render(t.Context(), root, "dir", Options{})
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestPathNotFound(t *testing.T) {
	g := NewWithT(t)
	_, err := Render(t.Context(), t.TempDir(), "missing", Options{})
	g.Expect(errors.Is(err, ErrPathNotFound)).To(BeTrue())
	_, err = Render(t.Context(), t.TempDir(), "../escape", Options{})
	g.Expect(err).To(MatchError(ContainSubstring("outside the repository")))
}

func TestKustomize(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, map[string]string{
		"base/cm.yaml":               "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  k: v\n",
		"base/kustomization.yaml":    "resources:\n- cm.yaml\n",
		"overlay/kustomization.yaml": "resources:\n- ../base\nnamePrefix: dev-\nlabels:\n- pairs:\n    env: dev\n",
		"broken/kustomization.yaml":  "resources:\n- missing.yaml\n",
		"bad/kustomization.yaml":     "resources:\n- cm.yaml\n",
		"bad/cm.yaml":                "kind: [\n",
	})
	objs, err := Render(t.Context(), root, "overlay", Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(1))
	g.Expect(objs[0].GetName()).To(Equal("dev-cfg"))
	g.Expect(objs[0].GetLabels()).To(HaveKeyWithValue("env", "dev"))

	_, err = Render(t.Context(), root, "broken", Options{})
	g.Expect(err).To(MatchError(ContainSubstring(`broken/kustomization.yaml: "missing.yaml" is not a file or directory of the repository`)))
	_, err = Render(t.Context(), root, "bad", Options{})
	g.Expect(err).To(MatchError(ContainSubstring("kustomize build bad")))
}

func TestKustomizeStaysInTheRepository(t *testing.T) {
	g := NewWithT(t)
	remote, root := t.TempDir(), t.TempDir()
	write(t, remote, map[string]string{"remote/kustomization.yaml": "resources:\n- github.com/org/repo//deploy?ref=main\n"})
	write(t, root, map[string]string{"escape/kustomization.yaml": "resources:\n- secret.yaml\n"})
	outside := filepath.Join(t.TempDir(), "secret.yaml")
	g.Expect(os.WriteFile(outside, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o644)).To(Succeed())
	g.Expect(os.Symlink(outside, filepath.Join(root, "escape", "secret.yaml"))).To(Succeed())

	_, err := Render(t.Context(), remote, "remote", Options{})
	g.Expect(err).To(MatchError(ContainSubstring(`remote/kustomization.yaml: resources: refused "github.com/org/repo//deploy?ref=main": a remote git repository`)))
	g.Expect(errors.Is(err, ErrRefused)).To(BeTrue())
	_, err = Render(t.Context(), root, "escape", Options{})
	g.Expect(err).To(MatchError(ContainSubstring(`escape/kustomization.yaml: resources: refused "secret.yaml": a symlink to an absolute path`)))
	g.Expect(errors.Is(err, ErrRefused)).To(BeTrue())
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: List\nitems: []\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`))
	f.Add([]byte("--- # c\n: [\n"))
	f.Add([]byte("apiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: x, labels: {a: \"1\"}}\n  data: {k: 0x10}\n"))
	f.Add([]byte("# only a comment\n---\n\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  a: 'yes'\n  b: 1e3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode("f.yaml", data)
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.GetKind() == "" || o.GetAPIVersion() == "" || o.GetName() == "" {
				t.Fatalf("decoded an object without kind, apiVersion or name: %v", o.Object)
			}
		}
		// Whatever Decode accepts, kubectl's decoder (apimachinery's
		// YAML-or-JSON stream decoder) reads as the same objects, in the
		// same order, with every value equal: what is applied is what the
		// file says to anyone else reading it.
		want, ok := apimachineryDecode(data)
		if !ok {
			return // a separator line with a trailing comment: see apimachineryDecode
		}
		if len(want) != len(objs) {
			t.Fatalf("Decode read %d objects, apimachinery %d, from %q", len(objs), len(want), data)
		}
		for i := range objs {
			// Compared as canonical JSON (sorted keys): Decode keeps integers
			// as int64, apimachinery's map decoding as float64.
			got, err1 := json.Marshal(objs[i].Object)
			exp, err2 := json.Marshal(want[i])
			if err1 != nil || err2 != nil || !bytes.Equal(got, exp) {
				t.Fatalf("object %d differs from apimachinery's reading of %q:\nDecode:       %s\napimachinery: %s", i, data, got, exp)
			}
		}
	})
}

// apimachineryDecode reads every document as kubectl does and expands Lists;
// ok is false for input the two split differently by design: Decode also
// takes "--- # comment" as a document separator (YAML allows it),
// apimachinery's reader only a bare "---".
func apimachineryDecode(data []byte) (objs []map[string]any, ok bool) {
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.HasPrefix(l, "---") && strings.TrimSpace(l[3:]) != "" {
			return nil, false
		}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, true
			}
			return nil, false
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, false
			}
			for _, it := range l.Items {
				objs = append(objs, it.Object)
			}
			continue
		}
		objs = append(objs, m)
	}
}

// TestPlainFollowsSymlinksToManifestsOnly: in a plain directory a symlink is
// rendered when its own name is a manifest's and it points at a regular
// file inside the repository; a symlink with another name (a README linking
// to a manifest) or to a directory is not read, so nothing is rendered twice.
func TestPlainFollowsSymlinksToManifestsOnly(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
		"shared/other.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n"})
	for link, target := range map[string]string{"app/notes.txt": "cm.yaml", "app/b.yaml": "../shared/other.yaml", "app/dir.yaml": "../shared"} {
		g.Expect(os.Symlink(target, filepath.Join(root, link))).To(Succeed())
	}
	objs, err := Render(t.Context(), root, "app", Options{})
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, u := range objs {
		names = append(names, u.GetName())
	}
	g.Expect(names).To(ConsistOf("a", "b"))
}

// TestSplitDocuments: a separator is a line of exactly "---", or "---"
// followed by a space, a tab or a comment; "----" or "---x" is content.
func TestSplitDocuments(t *testing.T) {
	g := NewWithT(t)
	in := "a: 1\n---\nb: 2\n--- # two\nc: 3\n---\td\n----\n---x\n---#e\nf: 4\r\n---\r\ng: 5\n"
	var got []string
	var lines []int
	for _, d := range splitDocuments([]byte(in)) {
		got = append(got, string(d.body))
		lines = append(lines, d.line)
	}
	g.Expect(got).To(Equal([]string{"a: 1\n", "b: 2\n", "c: 3\n", "----\n---x\n", "f: 4\r\n", "g: 5\n"}))
	g.Expect(lines).To(Equal([]int{1, 3, 5, 7, 10, 12}))
}

// TestManyDocumentsKeepTheirOrder renders files large enough to be decoded
// on several goroutines (and more files than a window): the objects come in
// file and document order, a List expands in place, and of two bad
// documents the error names the first.
func TestManyDocumentsKeepTheirOrder(t *testing.T) {
	g := NewWithT(t)
	cm := func(name string) string {
		return "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
	}
	var big strings.Builder
	var want []string
	for i := range 300 {
		n := fmt.Sprintf("big-%03d", i)
		if i == 150 {
			big.WriteString("---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: list-a}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: list-b}}\n")
			want = append(want, "list-a", "list-b")
		}
		big.WriteString(cm(n))
		want = append(want, n)
	}
	files := map[string]string{"app/a.yaml": big.String()}
	for i := range 9 {
		n := fmt.Sprintf("small-%d", i)
		files[fmt.Sprintf("app/b%d.yaml", i)] = cm(n)
		want = append(want, n)
	}
	root := t.TempDir()
	write(t, root, files)
	objs, err := Render(t.Context(), root, "app", Options{})
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	g.Expect(names).To(Equal(want))

	// Documents 100 and 250 are broken (6 lines per document, each
	// starting with its "---"; 100's body starts at line 602): the error is
	// the first's, whichever goroutine finds it.
	var bad strings.Builder
	for i := range 300 {
		if i == 100 || i == 250 {
			bad.WriteString("---\napiVersion: v1\nmetadata:\n  name: x\n  labels: {}\n  annotations: {}\n")
			continue
		}
		bad.WriteString(strings.Replace(cm(fmt.Sprintf("c-%03d", i)), "\n", "\n# pad\n", 1))
	}
	root = t.TempDir()
	write(t, root, map[string]string{"dir/bad.yaml": bad.String()})
	for range 5 {
		_, err = Render(t.Context(), root, "dir", Options{})
		g.Expect(err).To(MatchError(HaveSuffix("bad.yaml:602: the document has no kind")))
	}
}
