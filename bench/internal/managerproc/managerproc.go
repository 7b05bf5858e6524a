// Package managerproc runs the manager as users run it for a benchmark:
// `converge run`, built from this tree as `make build` builds it
// (internal/replicas), as a process of its own against the benchmark's
// control plane, so that the benchmark can read that process's memory
// (bench/internal/procmem) apart from its own client and code.
package managerproc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/converge-dev/converge/bench/internal/procmem"
	"github.com/converge-dev/converge/internal/replicas"
	"github.com/converge-dev/converge/internal/testenv"
)

// Manager is a running `converge run` process.
type Manager struct {
	*replicas.Replica
	// Dir holds its log (manager.log) and kubeconfig.
	Dir string

	pprofAddr string
}

// Build compiles converge into dir unless exe names a binary already.
func Build(ctx context.Context, exe, dir string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	return replicas.Build(ctx, ".", dir)
}

// Start runs exe run against the cluster of env's admin kubeconfig with
// args after these: no admission webhook server (the benchmark's testenv
// serves the webhooks it installed), no metrics, probes or ACME HTTP-01
// listener, and pprof on a free loopback port (Heap).
//
// exe's pages are dropped from the page cache first, so the process reads
// its binary from disk as a container's first start does. How the file
// came into the page cache changes the RSS: a binary just written by an
// external linker (GNU ld writes, the kernel keeps 2 MiB folios) is mapped
// with 2 MiB pages, so nearly all of its code and read-only data becomes
// resident (82 MiB for converge on Linux 6.18, ext4), against 52-57 MiB
// read from disk (docs/architecture.md, "Memory").
func Start(env *testenv.Environment, exe, dir string, args ...string) (*Manager, error) {
	if err := dropPageCache(exe); err != nil {
		return nil, err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	m := &Manager{Dir: dir, pprofAddr: "127.0.0.1:" + strconv.Itoa(port)}
	base := []string{"--webhook-port", "0", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--acme-http01-bind-address", "0", "--pprof-bind-address", m.pprofAddr}
	base = append(base, testenv.EgressArgs()...)
	r, err := replicas.StartDirect(env.KubeconfigPath, exe, dir, "manager", append(base, args...)...)
	if err != nil {
		return nil, err
	}
	m.Replica = r
	return m, nil
}

// dropPageCache asks the kernel to forget the cached pages of file (pages
// mapped by a running process stay). The file is written back first: a
// binary just built may still be dirty in the page cache, and
// FADV_DONTNEED skips dirty pages. Without the sync one run of
// bench/certificates mapped 63 MiB of the binary, 22 MiB of it in 2 MiB
// pages, where the others mapped 49-51 MiB and none.
func dropPageCache(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// Log returns the manager's output so far.
func (m *Manager) Log() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "manager.log"))
	return string(b)
}

// Memory reads the process's memory as it is, with no GC forced and
// nothing returned to the OS first.
func (m *Manager) Memory() (procmem.Memory, error) { return procmem.Of(m.Pid()) }

// Describe reads the process's memory and returns one line saying what was
// measured, and the memory; it also prints the largest mappings and, with
// profile set, saves a heap profile there.
func (m *Manager) Describe(profile string) (string, procmem.Memory, error) {
	mem, err := m.Memory()
	if err != nil {
		return "", mem, err
	}
	if maps, err := procmem.Mappings(m.Pid()); err == nil {
		fmt.Fprintf(os.Stderr, "  manager mappings, largest resident first: %s\n", procmem.Summary(maps, 4))
	}
	heap := ""
	if h, err := m.Heap(profile); err != nil {
		fmt.Fprintf(os.Stderr, "  manager heap: %v\n", err)
	} else {
		heap = fmt.Sprintf(", Go heap in use %d MiB (reserved %d, next GC at %d)", h.InUse>>20, h.Sys>>20, h.NextGC>>20)
	}
	return fmt.Sprintf("RSS %d MiB as read (anonymous %d, file-backed %d: the converge binary's pages), peak %d MiB%s; the `converge run` process (pid %d) alone, no GC forced",
		mem.RSS, mem.Anon, mem.File, mem.HWM, heap, m.Pid()), mem, nil
}

// HeapStats are the manager's Go heap figures, in bytes, as of its last GC.
type HeapStats struct {
	// InUse is HeapInuse, Sys HeapSys (reserved), NextGC the heap goal.
	InUse, Sys, NextGC int64
}

// Heap reads the Go heap figures from the manager's pprof endpoint, and
// saves the heap profile to profile unless it is empty.
func (m *Manager) Heap(profile string) (HeapStats, error) {
	var h HeapStats
	body, err := m.get("/debug/pprof/heap?debug=1")
	if err != nil {
		return h, err
	}
	for l := range strings.SplitSeq(string(body), "\n") {
		for _, f := range []struct {
			prefix string
			v      *int64
		}{{"# HeapInuse = ", &h.InUse}, {"# HeapSys = ", &h.Sys}, {"# NextGC = ", &h.NextGC}} {
			if v, ok := strings.CutPrefix(l, f.prefix); ok {
				*f.v, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	if profile != "" {
		p, err := m.get("/debug/pprof/heap")
		if err != nil {
			return h, err
		}
		if err := os.WriteFile(profile, p, 0o644); err != nil {
			return h, err
		}
	}
	return h, nil
}

func (m *Manager) get(path string) ([]byte, error) {
	resp, err := http.Get("http://" + m.pprofAddr + path) //nolint:noctx // a benchmark, loopback
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
