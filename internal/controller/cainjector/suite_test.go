package cainjector_test

import (
	"os"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// overlap is the suite's CA overlap: long enough to see both CAs, short
// enough to see the old one go.
const overlap = 6 * time.Second

// clusterResourceNamespace holds ClusterIssuers' CA Secrets.
const clusterResourceNamespace = "default"

// The suite runs the pki controllers that issue a CA Certificate and the
// injector, which writes its bundle into real webhook configurations, a CRD
// and an APIService.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"issuer", "clusterissuer", "certificaterequest", "certificate", "cainjector"}
		o.PKI.MinimumCertificateDuration = 2 * time.Second
		o.PKI.CAInjectionOverlap = overlap
		o.PKI.ClusterResourceNamespace = clusterResourceNamespace
	}}, &env))
}
