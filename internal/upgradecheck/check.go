// Package upgradecheck compiles and evaluates the CEL checks of a
// MachineUpgrade (spec.preChecks and spec.postChecks). A check sees
// `machine` (the Machine) and `node` (its Node, or an empty map), both as
// maps as in CRD validation rules, and returns a bool. The admission
// webhook and the controller use the same compiler, so a check that is
// admitted compiles in the controller.
package upgradecheck

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// costLimit bounds the work of one evaluation, as the API server bounds CRD
// validation rules.
const costLimit = 1_000_000

var (
	envOnce sync.Once
	env     *cel.Env
	errEnv  error
)

func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		env, errEnv = cel.NewEnv(cel.Variable("machine", cel.DynType), cel.Variable("node", cel.DynType))
	})
	return env, errEnv
}

// Program is a compiled check.
type Program struct {
	src string
	prg cel.Program
}

// Compile parses and type-checks src; the error says what is wrong.
func Compile(src string) (*Program, error) {
	e, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression: %w", iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("invalid CEL expression: must return a bool, returns %s", t)
	}
	prg, err := e.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("invalid CEL expression: %w", err)
	}
	return &Program{src: src, prg: prg}, nil
}

// Eval evaluates the check. A missing field makes it false, not an error:
// a check on a status not yet written waits.
func (p *Program) Eval(machine, node map[string]any) (bool, error) {
	if node == nil {
		node = map[string]any{}
	}
	out, _, err := p.prg.Eval(map[string]any{"machine": machine, "node": node})
	if err != nil {
		if isNoSuchKey(err) {
			return false, nil
		}
		return false, fmt.Errorf("evaluating %q: %w", p.src, err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("evaluating %q: returned %s, want bool", p.src, out.Type().TypeName())
	}
	return bool(b), nil
}

func isNoSuchKey(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.HasPrefix(e.Error(), "no such key") {
			return true
		}
	}
	return false
}
