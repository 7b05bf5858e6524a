package upgradecheck

import (
	"strings"
	"testing"
)

func TestCompileAndEval(t *testing.T) {
	machine := map[string]any{"metadata": map[string]any{"name": "m"}, "status": map[string]any{"phase": "Running"}}
	node := map[string]any{"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}}
	tests := []struct {
		expr    string
		node    map[string]any
		want    bool
		wantErr string
	}{
		{expr: `machine.status.phase == "Running"`, want: true},
		{expr: `machine.status.phase == "Failed"`, want: false},
		{expr: `node.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`, node: node, want: true},
		// A Machine without a Node: node is an empty map, a field of it is missing: false.
		{expr: `node.status.conditions.exists(c, c.type == "Ready")`, want: false},
		{expr: `machine.spec.image == "v2"`, want: false},
		{expr: `machine.status.phase`, wantErr: `returned string, want bool`},
	}
	for _, tc := range tests {
		p, err := Compile(tc.expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.expr, err)
		}
		got, err := p.Eval(machine, tc.node)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Eval(%q) error = %v, want %q", tc.expr, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Eval(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
	for _, bad := range []string{`machine.status.phase ==`, `1 + 1`, `nodes.x`} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("Compile(%q) accepted", bad)
		}
	}
}
