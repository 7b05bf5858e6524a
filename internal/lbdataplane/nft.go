package lbdataplane

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/converge-dev/converge/internal/netns"
)

// NFT drives the nft binary in one network namespace.
type NFT struct {
	// NetNS is the namespace name; "" is the current one.
	NetNS string
}

// Apply replaces Converge's table with ruleset in one transaction: the
// kernel sees the old table or the new one, never a mix, and other tables
// are not touched. The leading "table" line makes the delete valid when the
// table does not exist yet.
func (n NFT) Apply(ctx context.Context, ruleset string) error {
	in := fmt.Sprintf("table ip %s\ndelete table ip %s\n%s", Table, Table, ruleset)
	cmd := netns.Command(ctx, n.NetNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying nftables table %s: %w: %s", Table, err, bytes.TrimSpace(out))
	}
	return nil
}

// List returns the kernel's listing of Converge's table ("" when absent),
// used to detect rules edited or deleted by someone else.
func (n NFT) List(ctx context.Context) (string, error) {
	cmd := netns.Command(ctx, n.NetNS, "nft", "list", "table", "ip", Table)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "No such file") {
			return "", nil
		}
		return "", fmt.Errorf("listing nftables table %s: %w: %s", Table, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// Delete removes Converge's table; absent is fine.
func (n NFT) Delete(ctx context.Context) error {
	cmd := netns.Command(ctx, n.NetNS, "nft", "delete", "table", "ip", Table)
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such file") {
		return fmt.Errorf("deleting nftables table %s: %w: %s", Table, err, bytes.TrimSpace(out))
	}
	return nil
}

// Available reports whether the nft binary is installed.
func Available() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("the nft binary (Debian package nftables) is not installed: %w", err)
	}
	return nil
}
