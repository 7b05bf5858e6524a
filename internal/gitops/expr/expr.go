// Package expr compiles and evaluates the CEL expressions of the gitops API
// (Sync dependsOn[].ready and healthChecks[].current/failed). An expression
// sees the object as `self` (a map, as in CRD validation rules) and must
// return a bool. The same compiler runs in the admission webhook, so an
// expression that is accepted compiles in the controller.
package expr

import (
	"errors"
	"fmt"
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
		env, errEnv = cel.NewEnv(cel.Variable("self", cel.DynType))
	})
	return env, errEnv
}

// Program is a compiled expression.
type Program struct {
	src string
	prg cel.Program
}

// Compile parses and checks src; the error says where it is malformed.
func Compile(src string) (*Program, error) {
	e, err := celEnv()
	if err != nil {
		return nil, err
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

// String returns the source.
func (p *Program) String() string { return p.src }

// Eval evaluates the expression against obj (an unstructured object's
// content). A missing field is not an error: the expression is false, so a
// `ready` gate on a status not yet written simply waits.
func (p *Program) Eval(obj map[string]any) (bool, error) {
	out, _, err := p.prg.Eval(map[string]any{"self": obj})
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
		if msg := e.Error(); len(msg) >= 11 && msg[:11] == "no such key" {
			return true
		}
	}
	return false
}
