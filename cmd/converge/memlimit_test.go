package main

import (
	"io/fs"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{name: "v2 limit", files: map[string]string{"/sys/fs/cgroup/memory.max": "268435456\n"}, want: 256 << 20},
		{name: "v2 unlimited", files: map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}, want: 0},
		{name: "v1 limit", files: map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912"}, want: 512 << 20},
		{name: "v1 unlimited", files: map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"}, want: 0},
		{name: "no cgroup", files: nil, want: 0},
		{name: "garbage", files: map[string]string{"/sys/fs/cgroup/memory.max": "lots"}, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := cgroupMemoryLimit(func(p string) ([]byte, error) {
				if s, ok := tc.files[p]; ok {
					return []byte(s), nil
				}
				return nil, fs.ErrNotExist
			})
			if got != tc.want {
				t.Errorf("cgroupMemoryLimit = %d, want %d", got, tc.want)
			}
		})
	}
}
