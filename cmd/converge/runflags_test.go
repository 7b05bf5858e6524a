package main

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"

	"github.com/converge-dev/converge/internal/setup"
)

// TestDefenceFlagsReachTheOptions: each flag of `converge run` that turns
// a defence on or sets its bound lands in the setup.Options field that
// setup.New wires into the defence. The other half of the chain, from the
// field to the defence, is tested on the real platform through setup.New
// (test/security: TestSyncWithoutServiceAccountInLockdownIsRefused,
// TestGitOpsBoundFlagsReachTheirLimits, TestGitOpsRenderTimeoutFlagReachesTheRender,
// TestPKIACMEDirectoryNotAllowed, TestPKIKeySizeBounded, ...), and the chart's
// values to these flags in test/packaging.
func TestDefenceFlagsReachTheOptions(t *testing.T) {
	parse := func(t *testing.T, args ...string) setup.Options {
		t.Helper()
		o := setup.DefaultOptions()
		var port int
		f := pflag.NewFlagSet("run", pflag.ContinueOnError)
		addRunFlags(f, &o, &port)
		if err := f.Parse(args); err != nil {
			t.Fatalf("parsing %v: %v", args, err)
		}
		return o
	}

	t.Run("defaults", func(t *testing.T) {
		g := NewWithT(t)
		o := parse(t)
		g.Expect(o.GitOps.Lockdown).To(BeTrue(), "lockdown is on unless turned off")
		g.Expect(o.GitOps.DefaultServiceAccount).To(BeEmpty())
		g.Expect(o.GitOps.AllowCrossNamespaceRefs).To(BeFalse())
		g.Expect(o.CacheAllSecretData).To(BeFalse())
		g.Expect(o.GitOps.MaxFetchSize).To(BeNumerically(">", 0))
		g.Expect(o.GitOps.MaxArtifactSize).To(BeNumerically(">", 0))
		g.Expect(o.GitOps.MaxFileSize).To(BeNumerically(">", 0))
		g.Expect(o.GitOps.MaxManifests).To(BeNumerically(">", 0))
		g.Expect(o.GitOps.RenderTimeout).To(BeNumerically(">", 0))
		g.Expect(o.PKI.MaxRSAKeySize).To(BeNumerically(">", 0))
		g.Expect(o.PKI.ACMEAllowedDirectories).NotTo(BeEmpty(), "the manager talks to no ACME server but the allowed ones")
		g.Expect(o.PKI.ACMENamespacedDNSNames).To(BeEmpty(), "namespaced ACME Issuers order no name unless the admin says which")
	})

	t.Run("set", func(t *testing.T) {
		g := NewWithT(t)
		o := parse(t,
			"--gitops-lockdown=false",
			"--gitops-default-service-account=deployer",
			"--gitops-allow-cross-namespace-refs",
			"--gitops-max-fetch-size=1Ki",
			"--gitops-max-artifact-size=2Ki",
			"--gitops-max-file-size=3Ki",
			"--gitops-max-manifests=7",
			"--gitops-render-timeout=9s",
			"--gitops-render-cache-objects=11",
			"--cache-all-secret-data",
			"--secret-cache-max-bytes=4Ki",
			"--acme-allowed-directories=https://a.example/dir,https://b.example/dir",
			"--max-rsa-key-size=3072",
			"--acme-namespaced-dns-names=*.{namespace}.apps.example.com,{namespace}.example.com",
			"--bmc-expose=Service",
			"--lb-max-listeners-per-namespace=13",
			"--lb-max-assignments-per-pool=17",
			"--receiver-rate=1.5",
			"--receiver-source-burst=3",
		)
		g.Expect(o.GitOps.Lockdown).To(BeFalse())
		g.Expect(o.GitOps.DefaultServiceAccount).To(Equal("deployer"))
		g.Expect(o.GitOps.AllowCrossNamespaceRefs).To(BeTrue())
		g.Expect(o.GitOps.MaxFetchSize).To(Equal(int64(1 << 10)))
		g.Expect(o.GitOps.MaxArtifactSize).To(Equal(int64(2 << 10)))
		g.Expect(o.GitOps.MaxFileSize).To(Equal(int64(3 << 10)))
		g.Expect(o.GitOps.MaxManifests).To(Equal(7))
		g.Expect(o.GitOps.RenderTimeout).To(Equal(9 * time.Second))
		g.Expect(o.GitOps.RenderCacheObjects).To(Equal(11))
		g.Expect(o.CacheAllSecretData).To(BeTrue())
		g.Expect(o.SecretCacheMaxBytes).To(Equal(int64(4 << 10)))
		g.Expect(o.PKI.ACMEAllowedDirectories).To(Equal([]string{"https://a.example/dir", "https://b.example/dir"}))
		g.Expect(o.PKI.MaxRSAKeySize).To(Equal(3072))
		g.Expect(o.PKI.ACMENamespacedDNSNames).To(Equal([]string{"*.{namespace}.apps.example.com", "{namespace}.example.com"}))
		g.Expect(o.BMC.Expose).To(Equal("Service"))
		g.Expect(o.LBMaxListenersPerNamespace).To(Equal(13))
		g.Expect(o.LBMaxAssignmentsPerPool).To(Equal(17))
		g.Expect(o.Receiver.Rate).To(Equal(1.5))
		g.Expect(o.Receiver.SourceBurst).To(Equal(3))
	})
}
