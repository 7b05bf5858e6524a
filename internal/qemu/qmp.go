package qemu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// qmp runs QMP commands on a VM's socket: it connects, negotiates
// capabilities, runs each command and closes.
func qmp(socket string, timeout time.Duration, cmds ...string) ([]json.RawMessage, error) {
	conn, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return nil, fmt.Errorf("connecting to QMP %s: %w", socket, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReader(conn)
	if _, err := r.ReadBytes('\n'); err != nil { // greeting
		return nil, fmt.Errorf("reading the QMP greeting: %w", err)
	}
	var out []json.RawMessage
	for _, c := range append([]string{"qmp_capabilities"}, cmds...) {
		if _, err := fmt.Fprintf(conn, `{"execute":%q}`+"\n", c); err != nil {
			return nil, fmt.Errorf("sending %s: %w", c, err)
		}
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				if c == "quit" {
					return out, nil // QEMU may close before answering
				}
				return nil, fmt.Errorf("reading the answer to %s: %w", c, err)
			}
			var msg struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Desc string `json:"desc"`
				} `json:"error"`
			}
			if err := json.Unmarshal(line, &msg); err != nil {
				return nil, fmt.Errorf("decoding QMP: %w", err)
			}
			if msg.Error != nil {
				return nil, fmt.Errorf("QMP %s: %s", c, msg.Error.Desc)
			}
			if msg.Return != nil {
				if c != "qmp_capabilities" {
					out = append(out, msg.Return)
				}
				break
			}
			// An event: read on.
		}
	}
	return out, nil
}
