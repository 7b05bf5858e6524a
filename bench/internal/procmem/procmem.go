// Package procmem reads the benchmark process's memory from /proc.
package procmem

import (
	"os"
	"strconv"
	"strings"
)

// RSS returns the process's resident set in MiB: in all, anonymous, and
// file-backed (mostly the binary's code). -1 each when /proc is not there.
func RSS() (rss, anon, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1, -1, -1
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		for _, f := range []struct {
			prefix string
			v      *int64
		}{{"VmRSS:", &rss}, {"RssAnon:", &anon}, {"RssFile:", &file}} {
			if v, ok := strings.CutPrefix(l, f.prefix); ok {
				if fs := strings.Fields(v); len(fs) > 0 {
					kb, _ := strconv.ParseInt(fs[0], 10, 64)
					*f.v = kb >> 10
				}
			}
		}
	}
	return rss, anon, file
}
