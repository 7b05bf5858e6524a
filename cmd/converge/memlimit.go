package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitFraction is the share of the container's memory limit given to
// the Go runtime as its soft limit; the rest is for what the runtime does
// not count (the binary's mapped pages, cgo, the kernel's page cache
// charged to the cgroup).
const memoryLimitFraction = 0.9

// cgroupMemoryFiles are where the container's memory limit is read from:
// cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// setMemoryLimit derives the Go runtime's soft memory limit (GOMEMLIMIT)
// from the container's memory limit, so that the garbage collector works
// harder as the process nears the limit instead of the process being
// killed. An explicit GOMEMLIMIT wins; without a cgroup limit nothing
// changes. It returns the limit set, or 0.
func setMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := cgroupMemoryLimit(os.ReadFile)
	if limit <= 0 {
		return 0
	}
	soft := int64(float64(limit) * memoryLimitFraction)
	debug.SetMemoryLimit(soft)
	return soft
}

// cgroupMemoryLimit reads the container's memory limit in bytes; 0 when
// there is none ("max", or v1's page-counter maximum).
func cgroupMemoryLimit(read func(string) ([]byte, error)) int64 {
	for _, f := range cgroupMemoryFiles {
		b, err := read(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0
		}
		return n
	}
	return 0
}
