package localcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// asUserError fails unless err is a *UserError, and returns it.
func asUserError(g Gomega, err error) *UserError {
	var ue *UserError
	g.Expect(errors.As(err, &ue)).To(BeTrue(), "want a *UserError, got %T: %v", err, err)
	return ue
}

func TestUserErrorMessage(t *testing.T) {
	g := NewWithT(t)
	cause := errors.New("permission denied")
	e := &UserError{Problem: "cannot create data directory /x", Err: cause, Fix: "pass a writable --data-dir"}
	g.Expect(e.Error()).To(Equal("cannot create data directory /x: permission denied\n  fix: pass a writable --data-dir"))
	g.Expect(errors.Is(e, cause)).To(BeTrue())
	g.Expect((&UserError{Problem: "p"}).Error()).To(Equal("p"))
}

func TestCheckBinaries(t *testing.T) {
	// populate creates the named files in dir with mode perm.
	populate := func(t *testing.T, dir string, perm os.FileMode, names ...string) {
		t.Helper()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), perm); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name        string
		cfg         Config
		present     []string
		perm        os.FileMode
		wantMissing []string // nil: no error
		notMissing  []string
	}{
		{name: "empty dir", wantMissing: []string{Etcd, APIServer},
			notMissing: []string{ControllerManager, Scheduler, Kwok}},
		{name: "empty dir, every component", cfg: Config{ControllerManager: true, Scheduler: true, Nodes: 1},
			wantMissing: []string{Etcd, APIServer, ControllerManager, Scheduler, Kwok}},
		{name: "all present", present: []string{Etcd, APIServer}, perm: 0o755},
		{name: "all present, every component", cfg: Config{ControllerManager: true, Scheduler: true, Nodes: 2},
			present: []string{Etcd, APIServer, ControllerManager, Scheduler, Kwok}, perm: 0o755},
		{name: "one missing", cfg: Config{Scheduler: true}, present: []string{Etcd, APIServer}, perm: 0o755,
			wantMissing: []string{Scheduler}, notMissing: []string{Etcd, APIServer}},
		{name: "not executable", present: []string{Etcd, APIServer}, perm: 0o644,
			wantMissing: []string{Etcd, APIServer}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			populate(t, dir, tc.perm, tc.present...)
			cfg := tc.cfg
			cfg.BinDir = dir
			err := checkBinaries(&cfg)
			if tc.wantMissing == nil {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			ue := asUserError(g, err)
			msg := ue.Error()
			g.Expect(msg).To(ContainSubstring("make tools"))
			g.Expect(msg).To(ContainSubstring(dir))
			_, list, ok := strings.Cut(ue.Problem, dir+": ")
			g.Expect(ok).To(BeTrue(), "the problem lists the missing binaries after the directory: %q", ue.Problem)
			g.Expect(strings.Split(list, ", ")).To(ConsistOf(tc.wantMissing))
			for _, n := range tc.notMissing {
				g.Expect(strings.Split(list, ", ")).NotTo(ContainElement(n))
			}
		})
	}
	t.Run("a directory is not a binary", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		populate(t, dir, 0o755, Etcd)
		g.Expect(os.Mkdir(filepath.Join(dir, APIServer), 0o755)).To(Succeed())
		ue := asUserError(g, checkBinaries(&Config{BinDir: dir}))
		g.Expect(ue.Problem).To(HaveSuffix(": " + APIServer))
	})
}

func writeDataInfo(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, dataInfoFile), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckDataDirFresh(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "a", "b") // created on demand
	g.Expect(checkDataDir(dir)).To(Succeed())
	data, err := os.ReadFile(filepath.Join(dir, dataInfoFile))
	g.Expect(err).NotTo(HaveOccurred())
	var got dataInfo
	g.Expect(json.Unmarshal(data, &got)).To(Succeed())
	g.Expect(got).To(Equal(dataInfo{Format: dataFormat, Kubernetes: KubernetesVersion}))
	_, err = os.Stat(filepath.Join(dir, dataInfoFile+".tmp"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "no temporary file left behind")

	// Reusing the directory (a restart) is fine and keeps the file.
	g.Expect(checkDataDir(dir)).To(Succeed())
	again, err := os.ReadFile(filepath.Join(dir, dataInfoFile))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(data))
}

// TestCheckDataDirRestrictsModes starts from a data directory as an older
// converge left it (0755 directories, 0644 logs and files) and checks that
// everything the control plane keeps there becomes private to its owner.
func TestCheckDataDirRestrictsModes(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "data")
	writeDataInfo(t, dir, fmt.Sprintf(`{"format": %d, "kubernetes": %q}`, dataFormat, KubernetesVersion))
	g.Expect(os.Chmod(dir, 0o755)).To(Succeed())
	files := []string{"logs/etcd.log", "logs/etcd.log.1", "etcd/member/snap/db", "pki/ca.crt", "webhook/tls.crt", "kubeconfig", "kwok-stages.yaml"}
	for _, f := range files {
		g.Expect(os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)).To(Succeed())
	}
	g.Expect(checkDataDir(dir)).To(Succeed())
	g.Expect(filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		g.Expect(err).NotTo(HaveOccurred())
		fi, err := d.Info()
		g.Expect(err).NotTo(HaveOccurred())
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		g.Expect(fi.Mode().Perm()).To(Equal(want), path)
		return nil
	})).To(Succeed())
}

func TestCheckDataDirExisting(t *testing.T) {
	major, minor, ok := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	if !ok {
		t.Fatalf("unexpected KubernetesVersion %q", KubernetesVersion)
	}
	minorN, err := strconv.Atoi(strings.SplitN(minor, ".", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	samePatch0 := "v" + major + "." + strconv.Itoa(minorN) + ".0"
	prevMinor := "v" + major + "." + strconv.Itoa(minorN-1) + ".0"

	info := func(format int, k8s string) string {
		b, _ := json.Marshal(dataInfo{Format: format, Kubernetes: k8s})
		return string(b)
	}
	cases := []struct {
		name     string
		content  string // converge-data.json; empty: none
		etcdData bool   // put a file under etcd/
		wantErr  []string
	}{
		{name: "same version", content: info(dataFormat, KubernetesVersion)},
		{name: "another patch of the same minor", content: info(dataFormat, samePatch0)},
		{name: "another minor", content: info(dataFormat, prevMinor),
			wantErr: []string{"incompatible", prevMinor, KubernetesVersion, "remove it"}},
		{name: "hardcoded older minor", content: info(dataFormat, "v1.36.0"), wantErr: []string{"incompatible", "v1.36.0"}},
		{name: "another format", content: info(dataFormat+1, KubernetesVersion),
			wantErr: []string{"incompatible", "data format " + strconv.Itoa(dataFormat+1)}},
		{name: "no version", content: info(dataFormat, ""), wantErr: []string{"incompatible"}},
		{name: "corrupt", content: "{not json", wantErr: []string{"is corrupt"}},
		{name: "etcd data without marker", etcdData: true, wantErr: []string{"etcd data", "not made by converge"}},
		{name: "etcd data with marker", content: info(dataFormat, KubernetesVersion), etcdData: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			if tc.content != "" {
				writeDataInfo(t, dir, tc.content)
			}
			if tc.etcdData {
				g.Expect(os.MkdirAll(filepath.Join(dir, "etcd", "member"), 0o700)).To(Succeed())
			}
			err := checkDataDir(dir)
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			ue := asUserError(g, err)
			for _, s := range tc.wantErr {
				g.Expect(ue.Error()).To(ContainSubstring(s))
			}
			g.Expect(ue.Fix).NotTo(BeEmpty(), "a UserError says what to do")
			if tc.content == "" {
				_, statErr := os.Stat(filepath.Join(dir, dataInfoFile))
				g.Expect(os.IsNotExist(statErr)).To(BeTrue(), "a refused directory is not claimed")
			} else {
				data, _ := os.ReadFile(filepath.Join(dir, dataInfoFile))
				g.Expect(string(data)).To(Equal(tc.content), "a refused directory is left untouched")
			}
		})
	}
	t.Run("empty etcd dir is not data", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		g.Expect(os.Mkdir(filepath.Join(dir, "etcd"), 0o700)).To(Succeed())
		g.Expect(checkDataDir(dir)).To(Succeed())
	})
	t.Run("data dir is a file", func(t *testing.T) {
		g := NewWithT(t)
		f := filepath.Join(t.TempDir(), "file")
		g.Expect(os.WriteFile(f, nil, 0o644)).To(Succeed())
		ue := asUserError(g, checkDataDir(f))
		g.Expect(ue.Problem).To(ContainSubstring("cannot create data directory"))
	})
}

func TestSameMinor(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"v1.37.1", "v1.37.1", true},
		{"v1.37.0", "v1.37.1", true},
		{"v1.37.12", "v1.37.1", true},
		{"v1.37", "v1.37.1", true},
		{"v1.37.1-rc.0", "v1.37.1", true},
		{"v1.36.0", "v1.37.1", false},
		{"v1.3.0", "v1.37.1", false},
		{"v1.38.0", "v1.37.1", false},
		{"v2.37.1", "v1.37.1", false},
		{"1.37.1", "v1.37.1", false},
		{"", "v1.37.1", false},
		{"v1.37.1", "", false},
		{"garbage", "garbage", false},
	}
	for _, tc := range cases {
		t.Run(tc.a+"_vs_"+tc.b, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(sameMinor(tc.a, tc.b)).To(Equal(tc.want))
			g.Expect(sameMinor(tc.b, tc.a)).To(Equal(tc.want), "symmetric")
		})
	}
}

// holdPort listens on a free port of 127.0.0.1 until the test ends.
func holdPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// holdPortAfterFree holds a port p whose predecessor p-1 is free, so that an
// etcd client port of p-1 collides only through its peer port p.
func holdPortAfterFree(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		if p > 1 && portFree(p-1) == nil {
			t.Cleanup(func() { _ = l.Close() })
			return p
		}
		_ = l.Close()
	}
	t.Fatal("no port with a free predecessor found")
	return 0
}

func TestCheckPorts(t *testing.T) {
	t.Run("picks free ports", func(t *testing.T) {
		g := NewWithT(t)
		cfg := &Config{}
		g.Expect(checkPorts(cfg)).To(Succeed())
		g.Expect(cfg.APIServerPort).To(BeNumerically(">", 0))
		g.Expect(cfg.EtcdPort).To(BeNumerically(">", 0))
		g.Expect(cfg.EtcdPort+1).To(BeNumerically("<=", 65535), "the peer port follows the client port")
	})
	t.Run("given free ports are kept", func(t *testing.T) {
		g := NewWithT(t)
		a, err := FreePort()
		g.Expect(err).NotTo(HaveOccurred())
		picked := &Config{APIServerPort: a}
		g.Expect(pickPorts(picked)).To(Succeed())
		e := picked.EtcdPort
		cfg := &Config{APIServerPort: a, EtcdPort: e}
		g.Expect(checkPorts(cfg)).To(Succeed())
		g.Expect(cfg.APIServerPort).To(Equal(a))
		g.Expect(cfg.EtcdPort).To(Equal(e))
	})

	cases := []struct {
		name string
		cfg  func(port int) Config
		hold func(t *testing.T) int
		what string
		flag string
	}{
		{name: "API server port", hold: holdPort, cfg: func(p int) Config { return Config{APIServerPort: p} },
			what: "kube-apiserver", flag: "--port"},
		{name: "etcd client port", hold: holdPort, cfg: func(p int) Config { return Config{EtcdPort: p} },
			what: "etcd (client)", flag: "--etcd-port"},
		{name: "etcd peer port", hold: holdPortAfterFree, cfg: func(p int) Config { return Config{EtcdPort: p - 1} },
			what: "etcd (peer)", flag: "--etcd-port"},
	}
	for _, tc := range cases {
		t.Run(tc.name+" in use", func(t *testing.T) {
			g := NewWithT(t)
			port := tc.hold(t)
			cfg := tc.cfg(port)
			ue := asUserError(g, checkPorts(&cfg))
			g.Expect(ue.Problem).To(ContainSubstring("in use"))
			g.Expect(ue.Problem).To(ContainSubstring("port " + strconv.Itoa(port) + " "))
			g.Expect(ue.Problem).To(ContainSubstring(tc.what))
			g.Expect(ue.Fix).To(ContainSubstring(tc.flag))
		})
	}
}

// TestPickPortsNeverOverlap: the API server port, the etcd client port and
// the etcd peer port (client+1) are distinct and free, every time.
func TestPickPortsNeverOverlap(t *testing.T) {
	g := NewWithT(t)
	for range 50 {
		cfg := &Config{}
		g.Expect(pickPorts(cfg)).To(Succeed())
		ports := map[int]bool{cfg.APIServerPort: true, cfg.EtcdPort: true, cfg.EtcdPort + 1: true}
		g.Expect(ports).To(HaveLen(3), "ports overlap: %+v", cfg)
		for p := range ports {
			g.Expect(portFree(p)).To(Succeed())
		}
	}
}

func TestDiagnose(t *testing.T) {
	cases := []struct {
		name       string
		tail       string
		wantNil    bool
		problem    []string
		fixContain string
	}{
		{name: "disk full", tail: "E0101 12:00:00.000000 1 wal.go:1] write /data/etcd/member/wal/0.tmp: no space left on device",
			problem: []string{"disk full"}, fixContain: "disk space"},
		{name: "port in use",
			tail:    "I0101 starting\nE0101 12:00:00 1 run.go:72] failed to listen on 127.0.0.1:6443: listen tcp 127.0.0.1:6443: bind: address already in use\nI0101 exiting",
			problem: []string{"port", "already in use", "127.0.0.1:6443"}, fixContain: "--port"},
		{name: "etcd cluster mismatch", tail: `{"level":"fatal","msg":"request cluster ID mismatch"}`,
			problem: []string{"etcd data"}, fixContain: "remove the data directory"},
		{name: "etcd storage version", tail: "unsupported storage version 3.7", problem: []string{"etcd data"}},
		{name: "unknown failure", tail: "E0101 something else broke", wantNil: true},
		{name: "empty", tail: "", wantNil: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ue := diagnose(tc.tail)
			if tc.wantNil {
				g.Expect(ue).To(BeNil())
				return
			}
			g.Expect(ue).NotTo(BeNil())
			for _, s := range tc.problem {
				g.Expect(ue.Problem).To(ContainSubstring(s))
			}
			g.Expect(ue.Fix).To(ContainSubstring(tc.fixContain))
		})
	}
	t.Run("port message shows only the matching line", func(t *testing.T) {
		g := NewWithT(t)
		ue := diagnose("I0101 first\nE0101 bind 127.0.0.1:2379: address already in use\nI0101 last")
		g.Expect(ue.Problem).NotTo(ContainSubstring("first"))
		g.Expect(ue.Problem).NotTo(ContainSubstring("last"))
	})
}

func TestErrorLines(t *testing.T) {
	log := strings.Join([]string{
		"I0101 12:00:00.000000       1 server.go:1] starting",
		"W0101 12:00:00.000000       1 server.go:2] a warning",
		"E0101 12:00:01.000000       1 server.go:3] first error",
		"I0101 12:00:01.500000       1 server.go:4] info in between",
		`{"level":"error","msg":"json error"}`,
		`{"level":"info","msg":"json info"}`,
		"F0101 12:00:02.000000       1 server.go:5] fatal",
		"Error: not klog", // 'E' followed by a letter: not a klog line
	}, "\n")
	cases := []struct {
		name string
		tail string
		n    int
		want []string
	}{
		{name: "keeps E, F and JSON error lines", tail: log, n: 10, want: []string{
			"E0101 12:00:01.000000       1 server.go:3] first error",
			`{"level":"error","msg":"json error"}`,
			"F0101 12:00:02.000000       1 server.go:5] fatal",
		}},
		{name: "keeps the last n", tail: log, n: 2, want: []string{
			`{"level":"error","msg":"json error"}`,
			"F0101 12:00:02.000000       1 server.go:5] fatal",
		}},
		{name: "JSON fatal", tail: "x\n" + `{"level":"fatal","msg":"boom"}`, n: 5, want: []string{`{"level":"fatal","msg":"boom"}`}},
		{name: "no error lines: last n lines", tail: "I one\nI two\nI three", n: 2, want: []string{"I two", "I three"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(strings.Split(errorLines(tc.tail, tc.n), "\n")).To(Equal(tc.want))
		})
	}
}

func TestTailFile(t *testing.T) {
	g := NewWithT(t)
	p := filepath.Join(t.TempDir(), "x.log")
	g.Expect(os.WriteFile(p, []byte("1\n2\n3\n4\n"), 0o644)).To(Succeed())
	g.Expect(tailFile(p, 2)).To(Equal("3\n4"))
	g.Expect(tailFile(p, 10)).To(Equal("1\n2\n3\n4"))
	g.Expect(tailFile(filepath.Join(t.TempDir(), "missing"), 2)).To(BeEmpty())
}
