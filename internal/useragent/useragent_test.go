package useragent_test

import (
	"strings"
	"testing"

	"github.com/converge-dev/converge/internal/useragent"
)

// TestFieldOwnerIsTheUserAgentProduct: the API server names the field
// manager of a write that names none after the User-Agent's product (the
// part before "/"); a controller's field owner is that same name, so a
// write is attributed alike whichever way it is named.
func TestFieldOwnerIsTheUserAgentProduct(t *testing.T) {
	for _, c := range []string{"sync", "loadbalancer-ipam", "machineagent"} {
		product, _, ok := strings.Cut(useragent.For(c), "/")
		if !ok || product != useragent.FieldOwner(c) || product != "converge-"+c {
			t.Errorf("%s: User-Agent %q, field owner %q", c, useragent.For(c), useragent.FieldOwner(c))
		}
	}
}
