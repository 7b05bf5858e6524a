// Package procmem reads a process's memory from /proc: the benchmark's own
// (RSS) or another process's, such as a `converge run` manager the
// benchmark started (Of, Mappings).
package procmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Memory is a process's resident set, in MiB.
type Memory struct {
	// RSS is VmRSS: every resident page the process maps.
	RSS int64
	// Anon is RssAnon: heap, stacks and other private memory.
	Anon int64
	// File is RssFile: resident pages of mapped files, mostly the
	// executable's code and read-only data.
	File int64
	// HWM is VmHWM, the peak RSS.
	HWM int64
}

// RSS returns the benchmark process's resident set in MiB: in all,
// anonymous, and file-backed (mostly the binary's code). -1 each when /proc
// is not there.
func RSS() (rss, anon, file int64) {
	m, err := read("/proc/self/status")
	if err != nil {
		return -1, -1, -1
	}
	return m.RSS, m.Anon, m.File
}

// Of reads process pid's resident set.
func Of(pid int) (Memory, error) {
	return read(fmt.Sprintf("/proc/%d/status", pid))
}

func read(path string) (Memory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	for l := range strings.SplitSeq(string(b), "\n") {
		for _, f := range []struct {
			prefix string
			v      *int64
		}{{"VmRSS:", &m.RSS}, {"RssAnon:", &m.Anon}, {"RssFile:", &m.File}, {"VmHWM:", &m.HWM}} {
			if v, ok := strings.CutPrefix(l, f.prefix); ok {
				if fs := strings.Fields(v); len(fs) > 0 {
					kb, _ := strconv.ParseInt(fs[0], 10, 64)
					*f.v = kb >> 10
				}
			}
		}
	}
	return m, nil
}

// Mapping is the resident memory of the mappings of one file (or of one
// kind of anonymous memory) in a process, in KiB.
type Mapping struct {
	// Name is the mapped file's path, or [heap], [stack], or "anonymous".
	Name string
	// Rss and Anonymous are the sums of the mappings' Rss and Anonymous
	// lines (a file's private pages written to count as anonymous).
	Rss, Anonymous int64
	// Huge is the part mapped with 2 MiB pages (FilePmdMapped,
	// AnonHugePages): a kernel that caches files in large folios maps a
	// binary's code that way, so one touched byte makes 2 MiB resident.
	Huge int64
}

// Mappings sums /proc/pid/smaps by mapped name, largest resident first
// (pid 0: this process).
func Mappings(pid int) ([]Mapping, error) {
	path := "/proc/self/smaps"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/smaps", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	by := map[string]*Mapping{}
	var cur *Mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		fs := strings.Fields(l)
		if len(fs) == 0 {
			continue
		}
		// A mapping's header: address range, perms, offset, dev, inode [name].
		if strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			name := "anonymous"
			if len(fs) >= 6 {
				name = strings.Join(fs[5:], " ")
			}
			if by[name] == nil {
				by[name] = &Mapping{Name: name}
			}
			cur = by[name]
			continue
		}
		if cur == nil || len(fs) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fs[1], 10, 64)
		switch fs[0] {
		case "Rss:":
			cur.Rss += kb
		case "Anonymous:":
			cur.Anonymous += kb
		case "FilePmdMapped:", "AnonHugePages:":
			cur.Huge += kb
		}
	}
	out := make([]Mapping, 0, len(by))
	for _, m := range by {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rss > out[j].Rss })
	return out, sc.Err()
}

// Summary formats the n largest mappings: "name rss MiB (anonymous a,
// in 2 MiB pages h)".
func Summary(ms []Mapping, n int) string {
	var parts []string
	for i, m := range ms {
		if i == n || m.Rss < 1024 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f MiB (anonymous %.1f, in 2 MiB pages %.1f)", m.Name, float64(m.Rss)/1024, float64(m.Anonymous)/1024, float64(m.Huge)/1024))
	}
	return strings.Join(parts, "; ")
}
