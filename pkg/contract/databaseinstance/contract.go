// Package databaseinstance is the database instance contract in code: the
// status fields any instance kind (PostgresInstance, MariaDBInstance, or a
// third party's) publishes so that the generic Database controller can use
// it, read from unstructured objects so that the Database controller never
// imports a provider's Go types. docs/contracts/database-instance.md is the
// same contract in prose; the conformance subpackage tests a kind against it.
package databaseinstance

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Contract field paths, relative to the object root.
var (
	ReadyPath              = []string{"status", "ready"}
	EndpointHostPath       = []string{"status", "endpoint", "host"}
	EndpointPortPath       = []string{"status", "endpoint", "port"}
	EnginePath             = []string{"status", "engine"}
	VersionPath            = []string{"status", "version"}
	AdminSecretNamePath    = []string{"status", "adminSecretRef", "name"}
	ObservedGenerationPath = []string{"status", "observedGeneration"}
)

// Engines the contract knows. A new engine needs a client in the Database
// controller, so it is added here and there together.
var Engines = []string{"postgres", "mariadb"}

// Status is an instance's contract status.
type Status struct {
	// Ready is status.ready, and true only when observedGeneration is current.
	Ready bool
	// Stale is true when status.ready is true but status.observedGeneration
	// lags metadata.generation: the instance has not yet checked its spec.
	Stale bool
	// Host and Port are status.endpoint.
	Host string
	Port int
	// Engine is status.engine.
	Engine string
	// Version is status.version.
	Version string
	// AdminSecretName is status.adminSecretRef.name, a Secret in the
	// instance's namespace with the keys username and password.
	AdminSecretName string
}

// ViolationError says an instance's status breaks the contract.
type ViolationError struct{ Problems []string }

func (e *ViolationError) Error() string {
	return "the instance status does not honour the database instance contract: " + strings.Join(e.Problems, "; ")
}

// Read reads the contract from an instance. A not-ready instance need not
// publish anything else; a ready one must publish every field, or Read
// returns a *ViolationError.
func Read(u *unstructured.Unstructured) (Status, error) {
	var s Status
	var problems []string
	ready, found, err := unstructured.NestedBool(u.Object, ReadyPath...)
	if err != nil {
		problems = append(problems, "status.ready must be a boolean")
	}
	if !found || !ready {
		if len(problems) > 0 {
			return s, &ViolationError{Problems: problems}
		}
		return s, nil
	}
	og, _, err := unstructured.NestedInt64(u.Object, ObservedGenerationPath...)
	if err != nil {
		problems = append(problems, "status.observedGeneration must be an integer")
	}
	if og < u.GetGeneration() {
		s.Stale = true
	}
	s.Host, _, err = unstructured.NestedString(u.Object, EndpointHostPath...)
	if err != nil || s.Host == "" {
		problems = append(problems, "status.endpoint.host must be a non-empty string")
	}
	port, _, err := unstructured.NestedInt64(u.Object, EndpointPortPath...)
	if err != nil || port < 1 || port > 65535 {
		problems = append(problems, "status.endpoint.port must be an integer from 1 to 65535")
	}
	s.Port = int(port)
	s.Engine, _, err = unstructured.NestedString(u.Object, EnginePath...)
	if err != nil || !known(s.Engine) {
		problems = append(problems, fmt.Sprintf("status.engine must be one of %s (is %q)", strings.Join(Engines, ", "), s.Engine))
	}
	s.Version, _, err = unstructured.NestedString(u.Object, VersionPath...)
	if err != nil || s.Version == "" {
		problems = append(problems, "status.version must be a non-empty string")
	}
	s.AdminSecretName, _, err = unstructured.NestedString(u.Object, AdminSecretNamePath...)
	if err != nil || s.AdminSecretName == "" {
		problems = append(problems, "status.adminSecretRef.name must be a non-empty string")
	}
	if len(problems) > 0 {
		return Status{}, &ViolationError{Problems: problems}
	}
	s.Ready = !s.Stale
	return s, nil
}

// IsViolation reports whether err is a contract violation.
func IsViolation(err error) bool {
	var v *ViolationError
	return errors.As(err, &v)
}

func known(e string) bool {
	for _, k := range Engines {
		if e == k {
			return true
		}
	}
	return false
}

// Admin Secret keys.
const (
	UsernameKey = "username"
	PasswordKey = "password"
)
