// Package upgradecheck compiles and evaluates the CEL checks of a
// MachineUpgrade (spec.preChecks and spec.postChecks). A check sees
// `machine` (the Machine) and `node` (its Node, or an empty map), both as
// maps as in CRD validation rules, and returns a bool. The admission
// webhook and the controller use the same compiler, so a check that is
// admitted compiles in the controller.
package upgradecheck

import "github.com/converge-dev/converge/internal/expr"

// env is the checks' environment: `machine` and `node`.
var env = expr.NewEnv("machine", "node")

// Program is a compiled check.
type Program struct{ p *expr.Program }

// Compile parses and type-checks src; the error says what is wrong.
func Compile(src string) (*Program, error) {
	p, err := env.Compile(src)
	if err != nil {
		return nil, err
	}
	return &Program{p: p}, nil
}

// Eval evaluates the check. A missing field makes it false, not an error:
// a check on a status not yet written waits.
func (p *Program) Eval(machine, node map[string]any) (bool, error) {
	if node == nil {
		node = map[string]any{}
	}
	return p.p.EvalVars(map[string]any{"machine": machine, "node": node})
}
