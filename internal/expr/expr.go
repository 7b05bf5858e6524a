// Package expr compiles and evaluates Converge's CEL expressions: those of
// the gitops API (Sync dependsOn[].ready and healthChecks[].current/failed),
// which see the object as `self`, and, through an Env of their own
// variables, a MachineUpgrade's checks (internal/upgradecheck). Every
// variable is a map, as in CRD validation rules, and an expression must
// return a bool. The same compiler runs in the admission webhooks, so an
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

// Env compiles expressions over a fixed set of dynamic variables. It is
// built once, on first use.
type Env struct {
	vars []string
	once sync.Once
	env  *cel.Env
	err  error
}

// NewEnv returns an Env whose expressions see vars.
func NewEnv(vars ...string) *Env { return &Env{vars: vars} }

func (e *Env) cel() (*cel.Env, error) {
	e.once.Do(func() {
		opts := make([]cel.EnvOption, 0, len(e.vars))
		for _, v := range e.vars {
			opts = append(opts, cel.Variable(v, cel.DynType))
		}
		e.env, e.err = cel.NewEnv(opts...)
		if e.err != nil {
			e.err = fmt.Errorf("building the CEL environment: %w", e.err)
		}
	})
	return e.env, e.err
}

// self is the environment of the gitops expressions.
var self = NewEnv("self")

// Program is a compiled expression.
type Program struct {
	src string
	prg cel.Program
}

// Compile parses and checks a gitops expression (over `self`); the error
// says where it is malformed.
func Compile(src string) (*Program, error) { return self.Compile(src) }

// Compile parses and checks src; the error says where it is malformed.
func (e *Env) Compile(src string) (*Program, error) {
	env, err := e.cel()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression: %w", iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("invalid CEL expression: must return a bool, returns %s", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("invalid CEL expression: %w", err)
	}
	return &Program{src: src, prg: prg}, nil
}

// String returns the source.
func (p *Program) String() string { return p.src }

// Eval evaluates a gitops expression against obj (an unstructured
// object's content), as `self`.
func (p *Program) Eval(obj map[string]any) (bool, error) {
	return p.EvalVars(map[string]any{"self": obj})
}

// EvalVars evaluates the expression with its Env's variables bound to
// vars. A missing field is not an error: the expression is false, so a
// gate on a status not yet written simply waits.
func (p *Program) EvalVars(vars map[string]any) (bool, error) {
	out, _, err := p.prg.Eval(vars)
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
