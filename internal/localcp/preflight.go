package localcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	return checkDataDir(cfg.DataDir)
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
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &UserError{Problem: "cannot create data directory " + dir, Err: err, Fix: "pass a writable --data-dir"}
	}
	if err := restrictDataDir(dir); err != nil {
		return &UserError{Problem: "cannot restrict the data directory " + dir + " to its owner", Err: err,
			Fix: "run converge as the owner of the data directory, or pass another --data-dir"}
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
		return writePrivateFile(path, append(out, '\n'))
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

// restrictDataDir makes the data directory and what the control plane keeps
// in it readable by its owner only (directories 0700, files 0600): etcd's
// data, the PKI, the kubeconfig, the webhook certificate and the logs. Data
// directories of an older converge were 0755 with 0644 logs. The directory
// itself being 0700 already keeps other local users out of everything below
// it; the modes below are a second fence, for copies and backups.
func restrictDataDir(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	// Inside an os.Root, so that a symlink in the data directory cannot
	// point the chmods elsewhere.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	for _, name := range []string{"etcd", "pki", "logs", "webhook", dataInfoFile, "kubeconfig", "kwok-stages.yaml"} {
		err := fs.WalkDir(root.FS(), name, func(path string, d fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil
			case err != nil:
				return err
			case d.IsDir():
				return root.Chmod(path, 0o700)
			case d.Type().IsRegular():
				return root.Chmod(path, 0o600)
			}
			return nil
		})
		if err != nil {
			return err
		}
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

// pickPorts fills in the ports left at 0. Every listener stays open until all
// are chosen, so the kernel never hands out the same port twice.
func pickPorts(cfg *Config) error {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	listen := func(port int) (int, error) {
		if port == 0 {
			// Below the ephemeral range where possible (see FreePort), or
			// an outgoing connection may take it before the component binds.
			p, err := FreePort()
			if err != nil {
				return 0, err
			}
			port = p
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	if cfg.EtcdPort == 0 {
		found := false
		for range 50 {
			p, err := listen(0)
			if err != nil {
				return fmt.Errorf("finding a free port: %w", err)
			}
			if _, err := listen(p + 1); err == nil {
				cfg.EtcdPort, found = p, true
				break
			}
		}
		if !found {
			return errors.New("no two adjacent free ports found for etcd")
		}
	}
	if cfg.APIServerPort == 0 {
		p, err := listen(0)
		if err != nil {
			return fmt.Errorf("finding a free port: %w", err)
		}
		cfg.APIServerPort = p
	}
	return nil
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

// checkPorts picks the ports left at 0 and checks the others are free. Call
// it under the start lock, right before the components bind them, so that
// another control plane starting on this machine cannot take them meanwhile.
func checkPorts(cfg *Config) error {
	if err := pickPorts(cfg); err != nil {
		return err
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
