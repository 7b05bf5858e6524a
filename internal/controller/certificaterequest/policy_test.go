package certificaterequest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
)

// The default rule of a ClusterIssuer without allowedDNSNames: a
// cluster-internal name is signed only for its own namespace, whichever of
// its svc/pod labels names another.
func TestDefaultPolicyNames(t *testing.T) {
	ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ca"}}
	for name, refused := range map[string]bool{
		"web.a.svc":                       false,
		"web.a.svc.cluster.local":         false,
		"*.a.svc.cluster.local":           false,
		"web-0.nginx.a.svc.cluster.local": false,
		"svc.a.svc.cluster.local":         false, // a Service named svc
		"10-0-0-7.a.pod.cluster.local":    false,
		"www.example.com":                 false,
		"web.b.svc":                       true,
		"*.b.svc.cluster.local":           true,
		"10-0-0-7.b.pod.cluster.local":    true,
		"web.b.svc.other.domain":          true,
		"a.svc.b.svc.cluster.local":       true, // Pod "a" of b's headless Service "svc"
		"web-0.svc.b.svc.cluster.local":   true,
		"WEB.B.SVC.CLUSTER.LOCAL.":        true,
		"x.a.svc.example.com":             false,
		"x.b.svc.example.com":             true, // lifted only by allowedDNSNames
	} {
		why := dnsNameRefused(ci, nil, "a", "converge-system", name)
		if (why != "") != refused {
			t.Errorf("%s for namespace a: refused %v, want %v (%s)", name, why != "", refused, why)
		}
	}
	// The cluster resource namespace is exempt from the default rule.
	if why := dnsNameRefused(ci, nil, "converge-system", "converge-system", "web.b.svc"); why != "" {
		t.Errorf("cluster resource namespace refused: %s", why)
	}
	// allowedDNSNames, when set, decide alone.
	p := &pkiv1alpha1.ClusterIssuerPolicy{AllowedDNSNames: []string{"*.{namespace}.svc.cluster.local"}}
	if why := dnsNameRefused(ci, p, "a", "converge-system", "web.a.svc.cluster.local"); why != "" {
		t.Errorf("allowed name refused: %s", why)
	}
	if why := dnsNameRefused(ci, p, "a", "converge-system", "web.b.svc.cluster.local"); why == "" {
		t.Errorf("another namespace's name allowed by {namespace}")
	}
}
