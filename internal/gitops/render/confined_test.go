package render

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

const secretMarker = "converge-secret-marker-7f3a"

// counting starts an HTTP server and a raw TCP listener (standing in for a
// git daemon or SSH server) on loopback that count what reaches them.
func counting(t *testing.T) (httpURL, tcpAddr string, hits *atomic.Int64) {
	t.Helper()
	hits = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = fmt.Fprintf(w, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fetched\ndata:\n  k: %s\n", secretMarker)
	}))
	t.Cleanup(srv.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			_ = c.Close()
		}
	}()
	return srv.URL, l.Addr().String(), hits
}

// escapeRepo makes <tmp>/secret.txt (outside) and <tmp>/repo (the root)
// with k/cm.yaml, k/abs -> <tmp>/secret.txt, k/rel -> ../../secret.txt
// and k/outdir -> ../.. (<tmp>).
func escapeRepo(t *testing.T) (root, outside string) {
	t.Helper()
	tmp := t.TempDir()
	outside = filepath.Join(tmp, "secret.txt")
	if err := os.WriteFile(outside, []byte("token="+secretMarker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(tmp, "repo")
	write(t, root, map[string]string{"k/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"})
	if err := os.Symlink(outside, filepath.Join(root, "k", "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret.txt", filepath.Join(root, "k", "rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../..", filepath.Join(root, "k", "outdir")); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

// TestKustomizeFieldsAreConfined tries every file-loading field of a
// kustomization with every way out of the artifact: each is refused, names
// the kustomization file and the field, reads nothing outside and contacts
// nothing.
func TestKustomizeFieldsAreConfined(t *testing.T) {
	httpURL, tcpAddr, hits := counting(t)
	fields := []struct{ field, tmpl string }{
		{"resources", "resources:\n- %s\n"},
		{"components", "components:\n- %s\n"},
		{"bases", "bases:\n- %s\n"},
		{"secretGenerator[0].files", "secretGenerator:\n- name: stolen\n  files:\n  - token=%s\n"},
		{"configMapGenerator[0].files", "configMapGenerator:\n- name: md\n  files:\n  - md=%s\n"},
		{"configMapGenerator[0].envs", "configMapGenerator:\n- name: md\n  envs:\n  - %s\n"},
		{"configMapGenerator[0].env", "configMapGenerator:\n- name: md\n  env: %s\n"},
		{"patches[0].path", "resources:\n- cm.yaml\npatches:\n- path: %s\n"},
		{"patchesStrategicMerge[0]", "resources:\n- cm.yaml\npatchesStrategicMerge:\n- %s\n"},
		{"patchesJson6902[0].path", "resources:\n- cm.yaml\npatchesJson6902:\n- target: {version: v1, kind: ConfigMap, name: cm}\n  path: %s\n"},
		{"replacements[0].path", "resources:\n- cm.yaml\nreplacements:\n- path: %s\n"},
		{"openapi.path", "resources:\n- cm.yaml\nopenapi:\n  path: %s\n"},
		{"crds", "resources:\n- cm.yaml\ncrds:\n- %s\n"},
		{"configurations", "resources:\n- cm.yaml\nconfigurations:\n- %s\n"},
		{"generators", "generators:\n- %s\n"},
		{"transformers", "resources:\n- cm.yaml\ntransformers:\n- %s\n"},
		{"validators", "resources:\n- cm.yaml\nvalidators:\n- %s\n"},
	}
	values := []struct{ name, value, why string }{
		{"absolute", "ABS", "an absolute path"},
		{"dotdot", "../../secret.txt", "the path leaves the repository"},
		{"absolute symlink", "abs", "a symlink to an absolute path"},
		{"relative symlink", "rel", "the symlink k/rel leaves the repository"},
		{"symlinked dir", "outdir/secret.txt", "the symlink k/outdir leaves the repository"},
		{"http", "HTTP/x.yaml", "a URL"},
		{"https", "https://" + "TCP/x.yaml", "a URL"},
		{"git", "git://TCP/repo.git", "a URL"},
		{"ssh", "ssh://git@TCP/repo.git", "a URL"},
		{"git over http", "HTTP/repo.git//deploy?ref=main", "a URL"},
		{"git::", "git::HTTP/repo.git", "a remote git repository"},
		{"scp", "git@127.0.0.1:repo.git", "a remote git repository"},
		{"user@host/path", "git@127.0.0.1/repo.git//deploy", "a remote git repository"},
	}
	for _, f := range fields {
		for _, v := range values {
			t.Run(f.field+"/"+v.name, func(t *testing.T) {
				g := NewWithT(t)
				root, outside := escapeRepo(t)
				val := strings.NewReplacer("ABS", outside, "HTTP", httpURL, "TCP", tcpAddr).Replace(v.value)
				write(t, root, map[string]string{"k/kustomization.yaml": fmt.Sprintf(f.tmpl, val)})
				objs, err := Render(t.Context(), root, "k", Options{})
				g.Expect(objs).To(BeEmpty())
				g.Expect(errors.Is(err, ErrRefused)).To(BeTrue(), "%v", err)
				g.Expect(err).To(MatchError(ContainSubstring("k/kustomization.yaml: " + f.field + ": refused")))
				g.Expect(err).To(MatchError(ContainSubstring(v.why)))
				g.Expect(err.Error()).NotTo(ContainSubstring(secretMarker))
			})
		}
	}
	// Plugin configurations name files too, in a file or inline.
	for _, tc := range []struct{ name, kust, file string }{
		{"PatchTransformer file", "resources:\n- cm.yaml\ntransformers:\n- t.yaml\n",
			"apiVersion: builtin\nkind: PatchTransformer\nmetadata:\n  name: p\npath: HTTP/p.yaml\n"},
		{"SecretGenerator file", "generators:\n- t.yaml\n",
			"apiVersion: builtin\nkind: SecretGenerator\nmetadata:\n  name: s\nfiles:\n- token=ABS\n"},
		{"ReplacementTransformer inline", "resources:\n- cm.yaml\ntransformers:\n- |-\n  apiVersion: builtin\n  kind: ReplacementTransformer\n  metadata:\n    name: r\n  replacements:\n  - path: HTTP/r.yaml\n", ""},
		{"helmCharts", "helmCharts:\n- name: x\n  repo: HTTP/charts\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			root, outside := escapeRepo(t)
			r := strings.NewReplacer("ABS", outside, "HTTP", httpURL)
			files := map[string]string{"k/kustomization.yaml": r.Replace(tc.kust)}
			if tc.file != "" {
				files["k/t.yaml"] = r.Replace(tc.file)
			}
			write(t, root, files)
			_, err := Render(t.Context(), root, "k", Options{})
			g.Expect(errors.Is(err, ErrRefused)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).NotTo(ContainSubstring(secretMarker))
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback servers saw %d requests from renders", n)
	}
}

// TestKustomizeInsideSymlinksWork: symlinks that stay in the repository are
// followed, for bases and generator files.
func TestKustomizeInsideSymlinksWork(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, map[string]string{
		"base/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n",
		"base/kustomization.yaml": "resources:\n- cm.yaml\n",
		"data/v.txt":              "hello",
		"app/kustomization.yaml":  "resources:\n- linked\nconfigMapGenerator:\n- name: gen\n  files:\n  - v.txt=data\n",
	})
	g.Expect(os.Symlink("../base", filepath.Join(root, "app", "linked"))).To(Succeed())
	g.Expect(os.Symlink("../data/v.txt", filepath.Join(root, "app", "data"))).To(Succeed())
	objs, err := Render(t.Context(), root, "app", Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(2))
}

// TestPlainIsConfined: the plain renderer follows no symlink out of the
// repository, neither in spec.path nor below it.
func TestPlainIsConfined(t *testing.T) {
	tmp := t.TempDir()
	other := filepath.Join(tmp, "team-b")
	write(t, other, map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + secretMarker + "\n"})
	root := filepath.Join(tmp, "team-a", "rev")
	write(t, root, map[string]string{
		"mine/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: mine\n",
		"inside/a.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
		"filelink/x.txt": "",
		"dirlink/x.txt":  "",
	})
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("../../team-b", filepath.Join(root, "up")))
	must(os.Symlink(filepath.Join(other, "app"), filepath.Join(root, "abs")))
	must(os.Symlink("../../../team-b/app/cm.yaml", filepath.Join(root, "filelink", "stolen.yaml")))
	must(os.Symlink("../../../team-b/app", filepath.Join(root, "dirlink", "stolen")))
	must(os.Symlink("../inside/a.yaml", filepath.Join(root, "mine", "a.yaml")))
	cases := []struct{ path, want string }{
		{"up/app", "up/app: refused: the symlink up leaves the repository"},
		{"abs", "abs: refused: a symlink to an absolute path"},
		{"filelink", "filelink/stolen.yaml: refused: the symlink filelink/stolen.yaml leaves the repository"},
		{"dirlink", "dirlink/stolen: refused: the symlink dirlink/stolen leaves the repository"},
		{"/etc", "/etc: refused"},
		{"../team-b", "../team-b: refused"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := Render(t.Context(), root, tc.path, Options{})
			g.Expect(objs).To(BeEmpty())
			g.Expect(errors.Is(err, ErrRefused)).To(BeTrue(), "%v", err)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	g := NewWithT(t)
	objs, err := Render(t.Context(), root, "mine", Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(2), "a symlink inside the repository is followed")
}

func TestRenderBounds(t *testing.T) {
	root := t.TempDir()
	var many strings.Builder
	for i := range 20 {
		fmt.Fprintf(&many, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c%d\n", i)
	}
	write(t, root, map[string]string{
		"many/cms.yaml":            many.String(),
		"kmany/cms.yaml":           many.String(),
		"kmany/kustomization.yaml": "resources:\n- cms.yaml\n",
		"big/big.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  k: " + strings.Repeat("x", 4096) + "\n",
		"kbig/kustomization.yaml":  "configMapGenerator:\n- name: g\n  files:\n  - big.txt\n",
		"kbig/big.txt":             strings.Repeat("x", 4096),
	})
	cases := []struct {
		name, path string
		o          Options
		want       string
	}{
		{"plain count", "many", Options{MaxManifests: 10}, "objects rendered 20 exceeds the limit of 10"},
		{"kustomize count", "kmany", Options{MaxManifests: 10}, "objects rendered 20 exceeds the limit of 10"},
		{"plain file size", "big", Options{MaxFileSize: 1024}, "file big/big.yaml size 4161 exceeds the limit of 1024"},
		{"kustomize file size", "kbig", Options{MaxFileSize: 1024}, "file kbig/big.txt size 4096 exceeds the limit of 1024"},
		{"timeout", "many", Options{Timeout: time.Nanosecond}, "the render did not finish within 1ns"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Render(t.Context(), root, tc.path, tc.o)
			g.Expect(errors.Is(err, ErrLimitExceeded)).To(BeTrue(), "%v", err)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

// TestRelRefusesWhatLeaves: the confined file system's own check, below
// the kustomization fields' (an absolute path kustomize builds itself
// reaches only this one): inside the repository, a path is made relative;
// an absolute path outside, a path climbing out and a NUL byte are refused,
// each with its reason.
func TestRelRefusesWhatLeaves(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	c, err := NewConfinedFS(t.Context(), dir, 1<<20)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = c.Close() }()
	for in, want := range map[string]string{dir: ".", dir + "/a/b": "a/b", "a/./b/..": "a", ".": "."} {
		got, err := c.Rel(in)
		g.Expect(err).NotTo(HaveOccurred(), in)
		g.Expect(got).To(Equal(want), in)
	}
	for in, why := range map[string]string{
		"/etc/passwd":     "an absolute path outside the repository",
		filepath.Dir(dir): "an absolute path outside the repository",
		"../x":            "the path leaves the repository",
		"a/../../x":       "the path leaves the repository",
		"a\x00b":          "the path contains a NUL byte",
	} {
		_, err := c.Rel(in)
		var re *RefusedError
		g.Expect(errors.As(err, &re)).To(BeTrue(), "%q: %v", in, err)
		g.Expect(re.Reason).To(Equal(why), in)
	}
}
