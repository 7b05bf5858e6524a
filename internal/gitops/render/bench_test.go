package render

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time: on a shared machine it
// varies far less than the wall time benchmarks report.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs f b.N times and reports its CPU time per op as cpu-ns/op.
func loopCPU(b *testing.B, f func()) {
	b.Helper()
	start := cpuTime()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(n), "cpu-ns/op")
}

// benchRepo writes 1000 objects (100 files of 10 Deployments) under plain/,
// the same in one file under onefile/, and under kustomize/ with a
// kustomization (prefix, labels).
func benchRepo(b *testing.B) string {
	b.Helper()
	root := b.TempDir()
	files := map[string]string{}
	var res strings.Builder
	res.WriteString("namePrefix: bench-\nlabels:\n- pairs:\n    team: a\nresources:\n")
	for f := range 100 {
		var sb strings.Builder
		for d := range 10 {
			fmt.Fprintf(&sb, `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%d-%d
  namespace: bench
  labels: {app: app-%d-%d}
spec:
  replicas: 2
  selector:
    matchLabels: {app: app-%d-%d}
  template:
    metadata:
      labels: {app: app-%d-%d}
    spec:
      containers:
      - name: app
        image: registry.example.com/app:1.2.3
        ports: [{containerPort: 8080}]
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
`, f, d, f, d, f, d, f, d)
		}
		name := fmt.Sprintf("f%03d.yaml", f)
		files["plain/"+name] = sb.String()
		files["kustomize/"+name] = sb.String()
		fmt.Fprintf(&res, "- %s\n", name)
	}
	files["kustomize/kustomization.yaml"] = res.String()
	var one strings.Builder
	for f := range 100 {
		one.WriteString(files[fmt.Sprintf("plain/f%03d.yaml", f)])
	}
	files["onefile/all.yaml"] = one.String()
	writeB(b, root, files)
	return root
}

// BenchmarkRender1000 renders the 1000-object Sync: plain YAML in 100
// files and in one, and a kustomize build.
func BenchmarkRender1000(b *testing.B) {
	root := benchRepo(b)
	for _, p := range []string{"plain", "onefile", "kustomize"} {
		b.Run(p, func(b *testing.B) {
			loopCPU(b, func() {
				objs, err := Render(b.Context(), root, p, Options{})
				if err != nil || len(objs) != 1000 {
					b.Fatalf("%d objects, %v", len(objs), err)
				}
			})
		})
	}
}

func writeB(tb testing.TB, root string, files map[string]string) {
	tb.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}
