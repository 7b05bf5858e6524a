package localcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// dataFormat is bumped whenever the layout of the data directory changes in a
// way an older or newer converge cannot read.
const dataFormat = 1

// minFreeBytes is the free space refused below: etcd needs room for its WAL
// and snapshots, and a full disk corrupts nothing only if we never start.
const minFreeBytes = 256 << 20

// dataInfo is written to <data-dir>/converge-data.json.
type dataInfo struct {
	Format     int    `json:"format"`
	Kubernetes string `json:"kubernetes"`
}

const dataInfoFile = "converge-data.json"

func preflight(cfg *Config) error {
	if err := checkBinaries(cfg); err != nil {
		return err
	}
	if err := checkDataDir(cfg.DataDir); err != nil {
		return err
	}
	return checkPorts(cfg)
}

func checkBinaries(cfg *Config) error {
	need := []string{Etcd, APIServer}
	if cfg.ControllerManager {
		need = append(need, ControllerManager)
	}
	if cfg.Scheduler {
		need = append(need, Scheduler)
	}
	if cfg.Nodes > 0 {
		need = append(need, Kwok)
	}
	var missing []string
	for _, n := range need {
		if fi, err := os.Stat(filepath.Join(cfg.BinDir, n)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return userErrorf("run `make tools` (it builds them from the modules pinned in hack/tools; about 11 minutes the first time on 2 cores), or pass --bin-dir",
			"control-plane binaries missing in %s: %s", cfg.BinDir, joinNames(missing))
	}
	return nil
}

func checkDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &UserError{Problem: "cannot create data directory " + dir, Err: err, Fix: "pass a writable --data-dir"}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil {
		free := st.Bavail * uint64(st.Bsize) //nolint:gosec // block size is positive
		if free < minFreeBytes {
			return userErrorf("free some disk space, or pass a --data-dir on another disk",
				"disk full: only %d MiB free at %s (the local control plane needs at least %d MiB)",
				free>>20, dir, minFreeBytes>>20)
		}
	}
	path := filepath.Join(dir, dataInfoFile)
	want := dataInfo{Format: dataFormat, Kubernetes: KubernetesVersion}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if entries, _ := os.ReadDir(filepath.Join(dir, "etcd")); len(entries) > 0 {
			return userErrorf("remove it (this deletes the local cluster) or pass another --data-dir",
				"%s holds etcd data but no %s: it was not made by converge", dir, dataInfoFile)
		}
		out, _ := json.MarshalIndent(want, "", "  ")
		return writeFileAtomic(path, append(out, '\n'), 0o644)
	case err != nil:
		return &UserError{Problem: "cannot read " + path, Err: err}
	}
	var got dataInfo
	if err := json.Unmarshal(data, &got); err != nil {
		return &UserError{Problem: path + " is corrupt", Err: err,
			Fix: "remove the data directory (this deletes the local cluster) or pass another --data-dir"}
	}
	if got.Format != dataFormat || !sameMinor(got.Kubernetes, KubernetesVersion) {
		return userErrorf("remove it (this deletes the local cluster), or pass another --data-dir, or use the converge that made it",
			"data directory %s was made by an incompatible converge (data format %d, Kubernetes %s; this one needs format %d, Kubernetes %s)",
			dir, got.Format, got.Kubernetes, dataFormat, KubernetesVersion)
	}
	return nil
}

// sameMinor compares "vMAJOR.MINOR" prefixes: etcd data written by one
// Kubernetes minor is read by a patch release of the same minor.
func sameMinor(a, b string) bool {
	var am, an, bm, bn int
	if _, err := fmt.Sscanf(a, "v%d.%d", &am, &an); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(b, "v%d.%d", &bm, &bn); err != nil {
		return false
	}
	return am == bm && an == bn
}

// CheckPortFree returns a UserError naming what needs port on 127.0.0.1 and
// the flag that moves it, when the port is taken.
func CheckPortFree(port int, what, flag string) error {
	if err := portFree(port); err != nil {
		return userErrorf(fmt.Sprintf("stop whatever listens there (another `converge up`?) or pass %s", flag),
			"port %d on 127.0.0.1, needed by %s, is in use", port, what)
	}
	return nil
}

func checkPorts(cfg *Config) error {
	var err error
	if cfg.APIServerPort == 0 {
		if cfg.APIServerPort, err = FreePort(); err != nil {
			return fmt.Errorf("finding a free port: %w", err)
		}
	}
	if cfg.EtcdPort == 0 {
		if cfg.EtcdPort, err = freePortPair(); err != nil {
			return fmt.Errorf("finding free ports: %w", err)
		}
	}
	for _, p := range []struct {
		port int
		what string
		flag string
	}{
		{cfg.APIServerPort, "kube-apiserver", "--port"},
		{cfg.EtcdPort, "etcd (client)", "--etcd-port"},
		{cfg.EtcdPort + 1, "etcd (peer)", "--etcd-port"},
	} {
		if err := CheckPortFree(p.port, p.what, p.flag); err != nil {
			return err
		}
	}
	return nil
}
