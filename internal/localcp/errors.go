package localcp

import "fmt"

// UserError is an error a person can act on: its message says what is wrong
// and what to do, and it is printed without a stack trace or wrapping chain.
type UserError struct {
	// Problem says what went wrong.
	Problem string
	// Fix says what to do about it; may be empty.
	Fix string
	// Err is the underlying cause, if any.
	Err error
}

func (e *UserError) Error() string {
	msg := e.Problem
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Fix != "" {
		msg += "\n  fix: " + e.Fix
	}
	return msg
}

func (e *UserError) Unwrap() error { return e.Err }

func userErrorf(fix, format string, args ...any) *UserError {
	return &UserError{Problem: fmt.Sprintf(format, args...), Fix: fix}
}
