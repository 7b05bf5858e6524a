package specerr

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestInvalid(t *testing.T) {
	gv := schema.GroupVersion{Group: "sql.converge.dev", Version: "v1alpha1"}
	if err := Invalid(gv, "Database", "app", nil); err != nil {
		t.Fatalf("no field errors: got %v, want nil", err)
	}
	err := Invalid(gv, "Database", "app", field.ErrorList{field.Required(field.NewPath("spec", "instanceRef"), "name an instance")})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want an Invalid status", err)
	}
	st := err.(apierrors.APIStatus).Status()
	if st.Details.Group != "sql.converge.dev" || st.Details.Kind != "Database" || st.Details.Name != "app" {
		t.Errorf("details = %+v, want group sql.converge.dev, kind Database, name app", st.Details)
	}
	if !strings.Contains(err.Error(), "spec.instanceRef") {
		t.Errorf("message %q does not name the field", err.Error())
	}
}
