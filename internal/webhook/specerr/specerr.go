// Package specerr turns the field errors an admission webhook found into the
// one response every Converge webhook gives: a 422 Invalid status naming the
// kind, the object and each offending field, or nil when there is nothing to
// refuse.
package specerr

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Invalid returns nil when errs is empty, and otherwise the Invalid status
// error for the object name of kind in gv, listing errs. kubectl prints it as
// `The <Kind> "<name>" is invalid: <field>: <detail>`.
func Invalid(gv schema.GroupVersion, kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: gv.Group, Kind: kind}, name, errs)
}
