package packaging

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/internal/install"
	"github.com/converge-dev/converge/internal/localcp"
	"github.com/converge-dev/converge/internal/testenv"
)

// What both renderings install: the chart as release "converge" in
// converge-system, and config/default.
const (
	namespace          = "converge-system"
	webhookService     = "converge-webhook-service"
	receiverService    = "converge-receiver"
	acmeService        = "converge-acme-http01"
	webhookCertSecret  = "converge-webhook-cert"
	managerClusterRole = "converge-manager-role"
	// The DHCP agents' ClusterRole and ServiceAccount (cluster mode:
	// always in config/default, with dhcpAgent.enabled in the chart).
	dhcpAgentClusterRole = "converge-dhcp-agent-role"
	dhcpAgentSA          = "converge-dhcp-agent"
	fieldManager         = "packaging-test"
)

// rendering is one way of installing Converge, rendered to manifests.
type rendering struct {
	name string
	yaml []byte
	objs []*unstructured.Unstructured
}

// renderAll renders the chart and the kustomize bases.
func renderAll(t *testing.T, root, bin string) []rendering {
	t.Helper()
	helm := run(t, root, nil, nil, filepath.Join(bin, "helm"),
		"template", "converge", "charts/converge", "--namespace", namespace, "--include-crds")
	helmDHCP := run(t, root, nil, nil, filepath.Join(bin, "helm"),
		"template", "converge", "charts/converge", "--namespace", namespace, "--include-crds", "--set", "dhcpAgent.enabled=true")
	kustomize := run(t, root, nil, nil, filepath.Join(bin, "kubectl"), "kustomize", "config/default")
	return []rendering{
		{name: "helm", yaml: helm, objs: decode(t, helm)},
		{name: "helm-dhcp-agent", yaml: helmDHCP, objs: decode(t, helmDHCP)},
		{name: "kustomize", yaml: kustomize, objs: decode(t, kustomize)},
	}
}

// TestRenderingsAreSafe checks, on both renderings, the properties that keep
// an installed Converge from harming the cluster it runs in.
func TestRenderingsAreSafe(t *testing.T) {
	root, bin := repoRoot(t), binDir(t)
	needBinaries(t, bin, "helm", "kubectl")
	for _, r := range renderAll(t, root, bin) {
		t.Run(r.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(r.objs).NotTo(BeEmpty())
			checkNamespaces(g, r.objs)
			checkCRDs(g, r.objs)
			checkWebhooks(g, r.objs)
			checkRBAC(t, g, root, r.objs)
			checkTenantRoles(t, g, root, r.objs)
			checkDeployment(g, r.objs)
			checkTmp(g, r.objs, "256Mi")
			checkReceiver(g, r.objs)
			checkACMEHTTP01(g, r.objs)
		})
	}
}

// TestRenderingsApplyToAPIServer applies both renderings to a real API
// server: the CRDs for real (so that they are validated and established),
// then everything with a server-side dry run, which runs defaulting,
// validation and admission on every object without persisting it.
func TestRenderingsApplyToAPIServer(t *testing.T) {
	if os.Getenv("CONVERGE_SKIP_ENVTEST") != "" {
		t.Skip("CONVERGE_SKIP_ENVTEST is set")
	}
	root, bin := repoRoot(t), binDir(t)
	needBinaries(t, bin, "helm", "kubectl", localcp.Etcd, localcp.APIServer)
	renderings := renderAll(t, root, bin)

	cp, err := localcp.Start(t.Context(), localcp.Config{DataDir: t.TempDir(), BinDir: bin, Ephemeral: true})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	env := []string{"KUBECONFIG=" + cp.KubeconfigPath()}
	kubectl := filepath.Join(bin, "kubectl")

	// Helm does not create the release namespace (kustomize does, but a
	// dry-run Namespace does not exist for the dry-run objects in it).
	run(t, root, env, nil, kubectl, "create", "namespace", namespace)

	for _, r := range renderings {
		t.Run(r.name, func(t *testing.T) {
			g := NewWithT(t)
			crds := ofKind(r.objs, "CustomResourceDefinition")
			g.Expect(crds).NotTo(BeEmpty())
			// A dry run of a custom resource needs its CRD installed for real;
			// the renderings hold none, so installing the CRDs first is enough.
			g.Expect(customResources(r.objs, crds)).To(BeEmpty(),
				"the rendering holds custom resources: they cannot be dry-run before their CRDs exist")

			run(t, root, env, encode(t, crds), kubectl,
				"apply", "--server-side", "--field-manager="+fieldManager, "-f", "-")
			// Poll rather than `kubectl wait --for=condition=...`, which errors
			// out instead of waiting while status.conditions is still absent.
			for _, crd := range crds {
				g.Eventually(func() string {
					cmd := exec.CommandContext(t.Context(), kubectl, "get", "crd/"+crd.GetName(),
						"-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
					cmd.Dir, cmd.Env = root, append(os.Environ(), env...)
					out, _ := cmd.Output()
					return string(out)
				}).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(Equal("True"),
					"CRD %s established", crd.GetName())
			}

			out := run(t, root, env, r.yaml, kubectl,
				"apply", "--server-side", "--dry-run=server", "--field-manager="+fieldManager, "-f", "-")
			g.Expect(string(out)).To(ContainSubstring("(server dry run)"))
		})
	}

	t.Run("samples", func(t *testing.T) {
		// The samples are valid against the installed CRDs. No webhook
		// configuration exists (those above were dry runs), so this checks
		// the OpenAPI schema only.
		run(t, root, env, nil, kubectl, "apply", "--server-side", "--dry-run=server",
			"--field-manager="+fieldManager, "--namespace", namespace, "-k", "config/samples")
	})

	t.Run("lb agent", func(t *testing.T) {
		// The optional agent DaemonSet and its RBAC, both renderings, are
		// valid objects for the API server.
		run(t, root, env, nil, kubectl, "apply", "--server-side", "--dry-run=server",
			"--field-manager="+fieldManager, "-k", "config/lbagent")
		out := run(t, root, env, nil, filepath.Join(bin, "helm"), "install", "converge", "charts/converge",
			"--namespace", namespace, "--dry-run=server", "--set", "lbAgent.enabled=true")
		NewWithT(t).Expect(string(out)).To(ContainSubstring("kind: DaemonSet"))
	})

	t.Run("helm install", func(t *testing.T) {
		// Helm's own dry run against the cluster renders NOTES.txt too.
		out := run(t, root, env, nil, filepath.Join(bin, "helm"), "install", "converge", "charts/converge",
			"--namespace", namespace, "--dry-run=server")
		g := NewWithT(t)
		g.Expect(string(out)).To(ContainSubstring("NOTES:"))
		g.Expect(string(out)).To(ContainSubstring(install.MutatingWebhookConfigurationName))
	})
}

// TestHelmValues checks that chart values reach the manager's arguments.
func TestHelmValues(t *testing.T) {
	root, bin := repoRoot(t), binDir(t)
	needBinaries(t, bin, "helm")
	helm := filepath.Join(bin, "helm")
	template := func(t *testing.T, release, ns string, set ...string) []*unstructured.Unstructured {
		args := []string{"template", release, "charts/converge", "--namespace", ns}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		return decode(t, run(t, root, nil, nil, helm, args...))
	}

	t.Run("controllers", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(managerArgs(g, template(t, "converge", namespace))).To(ContainElement("--controllers=*"))
		args := managerArgs(g, template(t, "converge", namespace, "controllers={basicreplicaset}"))
		g.Expect(args).To(ContainElement("--controllers=basicreplicaset"))
		args = managerArgs(g, template(t, "converge", namespace, "controllers={*,-basicreplicaset}"))
		g.Expect(args).To(ContainElement("--controllers=*,-basicreplicaset"))
	})

	t.Run("other release name and namespace", func(t *testing.T) {
		g := NewWithT(t)
		objs := template(t, "prod", "platform", "watchNamespaces={a,b}", "shardKey=blue",
			"leaderElection=false", "logLevel=debug")
		args := managerArgs(g, objs)
		g.Expect(args).To(ContainElements(
			"--webhook-cert-secret=prod-converge-webhook-cert",
			"--webhook-host-names=prod-converge-webhook-service.platform.svc,prod-converge-webhook-service.platform.svc.cluster.local",
			"--watch-namespace=a,b",
			"--shard-key=blue",
			"--log-level=debug",
		))
		g.Expect(args).NotTo(ContainElement("--leader-elect"))
		// The webhook configuration names never change; their clientConfig
		// follows the release.
		for _, cc := range webhookClientConfigs(g, objs) {
			g.Expect(cc.Service).NotTo(BeNil())
			g.Expect(cc.Service.Name).To(Equal("prod-converge-webhook-service"))
			g.Expect(cc.Service.Namespace).To(Equal("platform"))
		}
		g.Expect(names(ofKind(objs, "MutatingWebhookConfiguration"))).To(
			ConsistOf(install.MutatingWebhookConfigurationName))
		g.Expect(names(ofKind(objs, "ValidatingWebhookConfiguration"))).To(
			ConsistOf(install.ValidatingWebhookConfigurationName))
		g.Expect(names(ofKind(objs, "Service"))).To(ContainElement("prod-converge-webhook-service"))
	})

	t.Run("acme namespaced dns names", func(t *testing.T) {
		g := NewWithT(t)
		// The default: namespaced ACME Issuers order no name.
		g.Expect(managerArgs(g, template(t, "converge", namespace))).To(ContainElement("--acme-namespaced-dns-names="))
		args := managerArgs(g, template(t, "converge", namespace, "pki.acmeNamespacedDNSNames={*.apps.example.com,*.*.apps.example.com}"))
		g.Expect(args).To(ContainElement("--acme-namespaced-dns-names=*.apps.example.com,*.*.apps.example.com"))
	})

	t.Run("gitops lockdown", func(t *testing.T) {
		g := NewWithT(t)
		args := managerArgs(g, template(t, "converge", namespace, "gitops.defaultServiceAccount=deployer"))
		g.Expect(args).To(ContainElements("--gitops-lockdown=true", "--gitops-default-service-account=deployer"))
		args = managerArgs(g, template(t, "converge", namespace, "gitops.lockdown=false", "gitops.defaultServiceAccount="))
		g.Expect(args).To(ContainElement("--gitops-lockdown=false"))
		g.Expect(args).NotTo(ContainElement(HavePrefix("--gitops-default-service-account")))
	})

	t.Run("metrics disabled", func(t *testing.T) {
		g := NewWithT(t)
		objs := template(t, "converge", namespace, "metrics.enabled=false")
		g.Expect(managerArgs(g, objs)).To(ContainElement("--metrics-bind-address=0"))
		g.Expect(names(ofKind(objs, "Service"))).To(ConsistOf(webhookService, receiverService, acmeService))
	})

	t.Run("receiver disabled", func(t *testing.T) {
		g := NewWithT(t)
		objs := template(t, "converge", namespace, "receiver.enabled=false")
		g.Expect(managerArgs(g, objs)).To(ContainElement("--receiver-bind-address=0"))
		g.Expect(names(ofKind(objs, "Service"))).NotTo(ContainElement(receiverService))
		for _, p := range deployment(g, objs).Spec.Template.Spec.Containers[0].Ports {
			g.Expect(p.Name).NotTo(Equal("receiver"))
		}
	})

	t.Run("acme http01 disabled", func(t *testing.T) {
		g := NewWithT(t)
		objs := template(t, "converge", namespace, "acmeHTTP01.enabled=false")
		g.Expect(managerArgs(g, objs)).To(ContainElement("--acme-http01-bind-address=0"))
		g.Expect(names(ofKind(objs, "Service"))).NotTo(ContainElement(acmeService))
		for _, p := range deployment(g, objs).Spec.Template.Spec.Containers[0].Ports {
			g.Expect(p.Name).NotTo(Equal("acme-http01"))
		}
	})

	t.Run("lb agent", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(ofKind(template(t, "converge", namespace), "DaemonSet")).To(BeEmpty(), "the agent is off by default")
		objs := template(t, "prod", "platform", "lbAgent.enabled=true", "lbAgent.interface=bond0", "lbAgent.leaseDuration=3s")
		ds := &appsv1.DaemonSet{}
		convert(g, find(g, objs, "DaemonSet", "prod-converge-lb-agent"), ds)
		pod := ds.Spec.Template.Spec
		g.Expect(pod.HostNetwork).To(BeTrue())
		g.Expect(pod.ServiceAccountName).To(Equal("prod-converge-lb-agent"))
		c := pod.Containers[0]
		g.Expect(c.Args).To(ContainElements("agent", "loadbalancer", "--lease-namespace=platform",
			"--interface=bond0", "--lease-duration=3s", "--lb-default-class=true"))
		g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "NODE_NAME",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}))
		g.Expect(c.SecurityContext.Capabilities.Add).To(ConsistOf(corev1.Capability("NET_ADMIN"), corev1.Capability("NET_RAW")))
		g.Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
		g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
		// The agent's Pods are never selected as manager Pods (the webhook
		// and metrics Services, the PodDisruptionBudget).
		d := deployment(g, objs)
		g.Expect(d.Spec.Selector.MatchLabels).NotTo(BeEmpty())
		match := true
		for k, v := range d.Spec.Selector.MatchLabels {
			match = match && ds.Spec.Template.Labels[k] == v
		}
		g.Expect(match).To(BeFalse(), "the manager's selector matches the agent's Pods")
		// Its rules are those of config/lbagent (which internal/lbagent runs
		// an agent with): nothing more, nothing less.
		want := decode(t, mustRead(t, filepath.Join(root, "config/lbagent/rbac.yaml")))
		for _, kind := range []string{"ClusterRole", "Role"} {
			gotRole, wantRole := &rbacv1.ClusterRole{}, &rbacv1.ClusterRole{}
			convert(g, ofKind(want, kind)[0], wantRole)
			name := map[string]string{"ClusterRole": "prod-converge-lb-agent", "Role": "prod-converge-lb-agent-leases"}[kind]
			convert(g, find(g, objs, kind, name), gotRole)
			g.Expect(gotRole.Rules).To(Equal(wantRole.Rules), kind)
		}
		rb := &rbacv1.RoleBinding{}
		convert(g, find(g, objs, "RoleBinding", "prod-converge-lb-agent-leases"), rb)
		g.Expect(rb.Namespace).To(Equal("platform"))
		g.Expect(rb.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: "prod-converge-lb-agent", Namespace: "platform"}))
	})

	t.Run("machine agent", func(t *testing.T) {
		g := NewWithT(t)
		objs := template(t, "converge", namespace)
		g.Expect(ofKind(objs, "DaemonSet")).To(BeEmpty(), "off by default")
		g.Expect(managerArgs(g, objs)).NotTo(ContainElement("--qemu-machines=agent"))

		objs = template(t, "converge", namespace, "machineAgent.enabled=true", "machineAgent.image=converge-qemu:1")
		g.Expect(managerArgs(g, objs)).To(ContainElements("--qemu-machines=agent", "--machine-agent-lease-namespace=$(POD_NAMESPACE)"))
		ds := &appsv1.DaemonSet{}
		convert(g, find(g, objs, "DaemonSet", "converge-machine-agent"), ds)
		pod := ds.Spec.Template.Spec
		g.Expect(pod.HostNetwork).To(BeTrue())
		g.Expect(pod.ServiceAccountName).To(Equal("converge-machine-agent"))
		c := pod.Containers[0]
		g.Expect(c.Image).To(Equal("converge-qemu:1"))
		g.Expect(c.Args).To(ContainElements("agent", "machines", "--node-name=$(NODE_NAME)", "--lease-namespace=$(POD_NAMESPACE)",
			"--machine-state-dir=/var/lib/converge/machines"))
		g.Expect(c.SecurityContext.Privileged).To(HaveValue(BeTrue()))
		// An upgrade of the chart never restarts an agent (and its VMs).
		g.Expect(ds.Spec.UpdateStrategy.Type).To(Equal(appsv1.OnDeleteDaemonSetStrategyType))
		var state *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == "state" {
				state = &pod.Volumes[i]
			}
		}
		g.Expect(state).NotTo(BeNil())
		g.Expect(state.HostPath).NotTo(BeNil(), "the VM state outlives the agent Pod")

		// The agent's own ServiceAccount holds exactly the generated rules,
		// and its Lease only in the release namespace.
		data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "machineagent", "role.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		gen := &rbacv1.ClusterRole{}
		convert(g, decode(t, data)[0], gen)
		cr := &rbacv1.ClusterRole{}
		convert(g, find(g, objs, "ClusterRole", "converge-machine-agent-role"), cr)
		g.Expect(cr.Rules).To(Equal(gen.Rules))
		g.Expect(allows(cr.Rules, "coordination.k8s.io", "leases", "get")).To(BeFalse(), "no Lease anywhere else")
		role := &rbacv1.Role{}
		convert(g, find(g, objs, "Role", "converge-machine-agent-lease"), role)
		g.Expect(role.Namespace).To(Equal(namespace))
		g.Expect(allows(role.Rules, "coordination.k8s.io", "leases", "get", "create", "update")).To(BeTrue())
		for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
			for _, o := range ofKind(objs, kind) {
				if !strings.Contains(o.GetName(), "machine-agent") {
					continue
				}
				b := &rbacv1.RoleBinding{}
				convert(g, o, b)
				g.Expect(b.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: "converge-machine-agent", Namespace: namespace}))
			}
		}
	})

	t.Run("receiver port and tmp size", func(t *testing.T) {
		g := NewWithT(t)
		objs := template(t, "converge", namespace, "receiver.port=8099", "tmp.sizeLimit=1Gi")
		g.Expect(managerArgs(g, objs)).To(ContainElement("--receiver-bind-address=:8099"))
		g.Expect(deployment(g, objs).Spec.Template.Spec.Containers[0].Ports).To(ContainElement(
			corev1.ContainerPort{Name: "receiver", ContainerPort: 8099, Protocol: corev1.ProtocolTCP}))
		checkTmp(g, objs, "1Gi")
	})
}

// checkTmp: the root filesystem is read-only, so /tmp is a size-limited
// emptyDir and TMPDIR points at it (ssh for ssh GitRepositories and the
// database clients of backups write temporary files).
func checkTmp(g Gomega, objs []*unstructured.Unstructured, size string) {
	pod := deployment(g, objs).Spec.Template.Spec
	c := pod.Containers[0]
	g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "TMPDIR", Value: "/tmp"}))
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == "/tmp" {
			mount = &c.VolumeMounts[i]
		}
	}
	g.Expect(mount).NotTo(BeNil(), "a volume is mounted at /tmp")
	g.Expect(mount.ReadOnly).To(BeFalse())
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == mount.Name {
			vol = &pod.Volumes[i]
		}
	}
	g.Expect(vol).NotTo(BeNil(), "volume %s", mount.Name)
	g.Expect(vol.EmptyDir).NotTo(BeNil(), "/tmp is an emptyDir")
	g.Expect(vol.EmptyDir.SizeLimit).NotTo(BeNil(), "/tmp is size-limited")
	g.Expect(vol.EmptyDir.SizeLimit.String()).To(Equal(size))
}

// checkReceiver: push webhooks have their own port, named receiver, and a
// Service in front of it; the admission webhook Service does not reach it.
func checkReceiver(g Gomega, objs []*unstructured.Unstructured) {
	c := deployment(g, objs).Spec.Template.Spec.Containers[0]
	g.Expect(c.Args).To(ContainElement("--receiver-bind-address=:9292"))
	g.Expect(c.Ports).To(ContainElement(corev1.ContainerPort{Name: "receiver", ContainerPort: 9292, Protocol: corev1.ProtocolTCP}))
	var found bool
	for _, o := range ofKind(objs, "Service") {
		svc := &corev1.Service{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, svc)).To(Succeed())
		for _, p := range svc.Spec.Ports {
			if p.TargetPort == intstr.FromString("receiver") || p.TargetPort == intstr.FromInt32(9292) {
				g.Expect(svc.Name).To(Equal(receiverService), "only the receiver Service targets the receiver port")
				found = true
			}
		}
		if svc.Name == webhookService {
			for _, p := range svc.Spec.Ports {
				g.Expect(p.TargetPort).NotTo(Equal(intstr.FromString("receiver")))
			}
		}
	}
	g.Expect(found).To(BeTrue(), "a Service targets the receiver port")
}

// checkACMEHTTP01: ACME HTTP-01 answers have their own port, named
// acme-http01, and a Service on port 80 in front of it (what a CA connects
// to, through the user's Ingress or LoadBalancer).
func checkACMEHTTP01(g Gomega, objs []*unstructured.Unstructured) {
	c := deployment(g, objs).Spec.Template.Spec.Containers[0]
	g.Expect(c.Args).To(ContainElement("--acme-http01-bind-address=:8089"))
	g.Expect(c.Ports).To(ContainElement(corev1.ContainerPort{Name: "acme-http01", ContainerPort: 8089, Protocol: corev1.ProtocolTCP}))
	var found bool
	for _, o := range ofKind(objs, "Service") {
		svc := &corev1.Service{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, svc)).To(Succeed())
		for _, p := range svc.Spec.Ports {
			if p.TargetPort == intstr.FromString("acme-http01") {
				g.Expect(svc.Name).To(Equal(acmeService))
				g.Expect(p.Port).To(Equal(int32(80)))
				found = true
			}
		}
	}
	g.Expect(found).To(BeTrue(), "a Service targets the acme-http01 port")
}

// checkNamespaces: every namespaced object is in converge-system, so that
// nothing lands in whatever namespace kubectl's context points at.
func checkNamespaces(g Gomega, objs []*unstructured.Unstructured) {
	clusterScoped := []string{"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
		"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
	for _, o := range objs {
		if slices.Contains(clusterScoped, o.GetKind()) {
			g.Expect(o.GetNamespace()).To(BeEmpty(), "%s is cluster-scoped", id(o))
			continue
		}
		g.Expect(o.GetNamespace()).To(Equal(namespace), "namespace of %s", id(o))
	}
}

// checkCRDs: every generated CRD is installed.
func checkCRDs(g Gomega, objs []*unstructured.Unstructured) {
	want, err := install.CRDs()
	g.Expect(err).NotTo(HaveOccurred())
	var wantNames []string
	for _, crd := range want {
		wantNames = append(wantNames, crd.Name)
	}
	g.Expect(names(ofKind(objs, "CustomResourceDefinition"))).To(ConsistOf(wantNames),
		"the rendering's CRDs differ from config/crd/bases (is config/crd/kustomization.yaml up to date? run hack/sync-chart.sh?)")
}

// checkWebhooks: the two webhook configurations carry the names the manager
// injects its CA into, call the webhook Service, and only intercept
// Converge's own API groups, so that a stopped manager (failurePolicy Fail)
// can never block core operations.
func checkWebhooks(g Gomega, objs []*unstructured.Unstructured) {
	muts := ofKind(objs, "MutatingWebhookConfiguration")
	vals := ofKind(objs, "ValidatingWebhookConfiguration")
	g.Expect(names(muts)).To(ConsistOf(install.MutatingWebhookConfigurationName))
	g.Expect(names(vals)).To(ConsistOf(install.ValidatingWebhookConfigurationName))

	type hook struct {
		name  string
		path  string
		rules []admissionregistrationv1.RuleWithOperations
	}
	var got []hook
	check := func(name string, cc admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations) {
		g.Expect(cc.URL).To(BeNil(), "webhook %s: clientConfig.url", name)
		g.Expect(cc.CABundle).To(BeEmpty(), "webhook %s: the manager injects caBundle; it must not be rendered", name)
		g.Expect(cc.Service).NotTo(BeNil(), "webhook %s: clientConfig.service", name)
		g.Expect(cc.Service.Name).To(Equal(webhookService), "webhook %s: service name", name)
		g.Expect(cc.Service.Namespace).To(Equal(namespace), "webhook %s: service namespace", name)
		if cc.Service.Port != nil {
			g.Expect(*cc.Service.Port).To(BeEquivalentTo(443), "webhook %s: service port", name)
		}
		g.Expect(rules).NotTo(BeEmpty(), "webhook %s: rules", name)
		for _, r := range rules {
			g.Expect(r.APIGroups).NotTo(BeEmpty(), "webhook %s: apiGroups", name)
			for _, grp := range r.APIGroups {
				g.Expect(grp).NotTo(ContainSubstring("*"), "webhook %s intercepts every API group", name)
				g.Expect(grp).To(HaveSuffix(".converge.dev"), "webhook %s intercepts API group %q", name, grp)
			}
		}
		path := ""
		if cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		got = append(got, hook{name: name, path: path, rules: rules})
	}
	for _, o := range muts {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		convert(g, o, m)
		g.Expect(m.Webhooks).NotTo(BeEmpty())
		for _, w := range m.Webhooks {
			check(w.Name, w.ClientConfig, w.Rules)
		}
	}
	for _, o := range vals {
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		convert(g, o, v)
		g.Expect(v.Webhooks).NotTo(BeEmpty())
		for _, w := range v.Webhooks {
			check(w.Name, w.ClientConfig, w.Rules)
		}
	}

	// The same webhooks as generated (config/webhook/manifests.yaml).
	wantMuts, wantVals, err := install.WebhookConfigurations("", nil)
	g.Expect(err).NotTo(HaveOccurred())
	var want []hook
	add := func(name string, cc admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations) {
		path := ""
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		want = append(want, hook{name: name, path: path, rules: rules})
	}
	for _, m := range wantMuts {
		for _, w := range m.Webhooks {
			add(w.Name, w.ClientConfig, w.Rules)
		}
	}
	for _, v := range wantVals {
		for _, w := range v.Webhooks {
			add(w.Name, w.ClientConfig, w.Rules)
		}
	}
	g.Expect(got).To(ConsistOf(want), "the rendered webhooks differ from config/webhook/manifests.yaml (run hack/sync-chart.sh?)")

	// The Service exists and reaches the manager's webhook port.
	svc := &corev1.Service{}
	convert(g, find(g, objs, "Service", webhookService), svc)
	g.Expect(svc.Spec.Ports).To(HaveLen(1))
	g.Expect(svc.Spec.Ports[0].Port).To(BeEquivalentTo(443))
	dep := deployment(g, objs)
	g.Expect(svc.Spec.Selector).NotTo(BeEmpty())
	for k, v := range svc.Spec.Selector {
		g.Expect(dep.Spec.Template.Labels).To(HaveKeyWithValue(k, v), "webhook Service selector")
	}
	g.Expect(containerPort(dep.Spec.Template.Spec.Containers[0], svc.Spec.Ports[0].TargetPort)).To(
		BeEquivalentTo(9443), "webhook Service targetPort")
}

// checkRBAC: least privilege. No cluster-admin, no wildcards, Secrets
// cluster-wide only to read and write (the Database controller writes
// connection Secrets and every external-system controller reads credentials
// in any namespace, as cert-manager and Crossplane do) and never to delete
// (connection Secrets go with their owner, by garbage collection), the
// ClusterRole is exactly the generated one, and every binding binds the
// manager's ServiceAccount to a role of the rendering.
func checkRBAC(t *testing.T, g Gomega, root string, objs []*unstructured.Unstructured) {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range ofKind(objs, "ClusterRole") {
		cr := &rbacv1.ClusterRole{}
		convert(g, o, cr)
		g.Expect(cr.AggregationRule).To(BeNil(), "ClusterRole %s aggregates other roles", cr.Name)
		checkRules(g, "ClusterRole "+cr.Name, cr.Rules)
		for _, r := range cr.Rules {
			if slices.Contains(r.Resources, "secrets") {
				g.Expect(r.Verbs).NotTo(ContainElements("delete", "deletecollection"), "ClusterRole %s may delete Secrets cluster-wide", cr.Name)
			}
		}
		roles["ClusterRole/"+cr.Name] = cr.Rules
	}
	for _, o := range ofKind(objs, "Role") {
		r := &rbacv1.Role{}
		convert(g, o, r)
		checkRules(g, "Role "+r.Name, r.Rules)
		roles["Role/"+r.Name] = r.Rules
	}

	// The manager's ClusterRole is the generated one, nothing more.
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	generated := decode(t, data)
	g.Expect(generated).To(HaveLen(1))
	gen := &rbacv1.ClusterRole{}
	convert(g, generated[0], gen)
	g.Expect(roles).To(HaveKey("ClusterRole/" + managerClusterRole))
	g.Expect(roles["ClusterRole/"+managerClusterRole]).To(Equal(gen.Rules),
		"%s differs from config/rbac/role.yaml (run hack/sync-chart.sh?)", managerClusterRole)
	// The DHCP agents' ClusterRole, when rendered, is the generated one.
	if agentRules, ok := roles["ClusterRole/"+dhcpAgentClusterRole]; ok {
		data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "dhcp-agent", "role.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		generated := decode(t, data)
		g.Expect(generated).To(HaveLen(1))
		gen := &rbacv1.ClusterRole{}
		convert(g, generated[0], gen)
		g.Expect(agentRules).To(Equal(gen.Rules), "%s differs from config/rbac/dhcp-agent/role.yaml (run hack/sync-chart.sh?)", dhcpAgentClusterRole)
		g.Expect(names(ofKind(objs, "ServiceAccount"))).To(ContainElement(dhcpAgentSA))
	}

	// Leader election and the webhook certificate Secret, in the namespace.
	var nsRules []rbacv1.PolicyRule
	for k, rules := range roles {
		if strings.HasPrefix(k, "Role/") {
			nsRules = append(nsRules, rules...)
		}
	}
	g.Expect(allows(nsRules, "coordination.k8s.io", "leases", "get", "list", "watch", "create", "update", "patch", "delete")).To(BeTrue(),
		"no Role grants the leader-election Lease")
	g.Expect(allows(nsRules, "", "secrets", "get", "list", "watch", "create", "update", "patch")).To(BeTrue(),
		"no Role grants the webhook certificate Secret")

	dep := deployment(g, objs)
	sa := dep.Spec.Template.Spec.ServiceAccountName
	g.Expect(sa).NotTo(BeEmpty())
	g.Expect(names(ofKind(objs, "ServiceAccount"))).To(ContainElement(sa))

	bound := map[string]bool{}
	checkBinding := func(kind, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		g.Expect(ref.Name).NotTo(Equal("cluster-admin"), "%s %s binds cluster-admin", kind, name)
		g.Expect(ref.Name).NotTo(Equal("admin"), "%s %s binds admin", kind, name)
		g.Expect(ref.Name).NotTo(Equal("edit"), "%s %s binds edit", kind, name)
		g.Expect(roles).To(HaveKey(ref.Kind+"/"+ref.Name), "%s %s binds a role the rendering does not define", kind, name)
		subject := sa
		if ref.Kind == "ClusterRole" && ref.Name == dhcpAgentClusterRole {
			subject = dhcpAgentSA // the agents' own, and only theirs
		}
		g.Expect(subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: subject, Namespace: namespace}),
			"%s %s subjects", kind, name)
		bound[ref.Kind+"/"+ref.Name] = true
	}
	for _, o := range ofKind(objs, "ClusterRoleBinding") {
		b := &rbacv1.ClusterRoleBinding{}
		convert(g, o, b)
		checkBinding("ClusterRoleBinding", b.Name, b.RoleRef, b.Subjects)
	}
	for _, o := range ofKind(objs, "RoleBinding") {
		b := &rbacv1.RoleBinding{}
		convert(g, o, b)
		checkBinding("RoleBinding", b.Name, b.RoleRef, b.Subjects)
	}
	g.Expect(bound).To(HaveKey("ClusterRole/"+managerClusterRole), "the manager's ClusterRole is not bound")
	if _, ok := roles["ClusterRole/"+dhcpAgentClusterRole]; ok {
		g.Expect(bound).To(HaveKey("ClusterRole/"+dhcpAgentClusterRole), "the DHCP agents' ClusterRole is not bound")
	}
	if slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--dhcp-agent-service-account="+dhcpAgentSA) {
		g.Expect(roles).To(HaveKey("ClusterRole/"+dhcpAgentClusterRole), "cluster mode without the agents' ClusterRole")
	}
	for k := range roles {
		if strings.HasPrefix(k, "Role/") {
			g.Expect(bound).To(HaveKey(k), "%s is not bound", k)
		}
	}
}

func checkRules(g Gomega, what string, rules []rbacv1.PolicyRule) {
	for _, r := range rules {
		g.Expect(r.Verbs).NotTo(ContainElement(ContainSubstring("*")), "%s: wildcard verb", what)
		g.Expect(r.Resources).NotTo(ContainElement(ContainSubstring("*")), "%s: wildcard resource", what)
		g.Expect(r.APIGroups).NotTo(ContainElement(ContainSubstring("*")), "%s: wildcard API group", what)
		g.Expect(r.NonResourceURLs).NotTo(ContainElement(ContainSubstring("*")), "%s: wildcard URL", what)
		g.Expect(r.Verbs).NotTo(ContainElements("escalate", "bind"), "%s: privilege escalation verb", what)
		checkImpersonation(g, what, r)
	}
}

// checkImpersonation: the one impersonation allowed is the Sync
// controller's, of ServiceAccounts only (the API server adds their groups):
// never users, groups, UIDs or extra fields, each of which would let the
// manager become anyone, and alone in its rule so that no other verb rides
// along.
func checkImpersonation(g Gomega, what string, r rbacv1.PolicyRule) {
	if !slices.Contains(r.Verbs, "impersonate") {
		return
	}
	g.Expect(what).To(Equal("ClusterRole "+managerClusterRole), "%s may impersonate", what)
	g.Expect(r.Verbs).To(Equal([]string{"impersonate"}), "%s: impersonate shares a rule with other verbs", what)
	g.Expect(r.APIGroups).To(Equal([]string{""}), "%s: impersonate outside the core group", what)
	g.Expect(r.Resources).To(Equal([]string{"serviceaccounts"}), "%s: impersonate on more than serviceaccounts", what)
}

// checkTenantRoles: the tenant ClusterRoles ship, under their documented
// names, with exactly the rules of config/rbac/tenant_roles.yaml.
func checkTenantRoles(t *testing.T, g Gomega, root string, objs []*unstructured.Unstructured) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "tenant_roles.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	want := decode(t, data)
	g.Expect(names(want)).To(ConsistOf("converge-edit", "converge-view"))
	for _, w := range want {
		wr := &rbacv1.ClusterRole{}
		convert(g, w, wr)
		got := &rbacv1.ClusterRole{}
		convert(g, find(g, objs, "ClusterRole", wr.Name), got)
		g.Expect(got.Rules).To(Equal(wr.Rules), "ClusterRole %s differs from config/rbac/tenant_roles.yaml (run hack/sync-chart.sh?)", wr.Name)
		for k, v := range wr.Labels {
			g.Expect(got.Labels).To(HaveKeyWithValue(k, v), "ClusterRole %s aggregation label", wr.Name)
		}
	}
}

// allows reports whether one of rules grants all verbs on group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource string, verbs ...string) bool {
	granted := map[string]bool{}
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && len(r.ResourceNames) == 0 {
			for _, v := range r.Verbs {
				granted[v] = true
			}
		}
	}
	for _, v := range verbs {
		if !granted[v] {
			return false
		}
	}
	return true
}

// checkDeployment: the manager runs hardened, probed, and with the webhook
// certificate settings matching the webhook Service.
func checkDeployment(g Gomega, objs []*unstructured.Unstructured) {
	dep := deployment(g, objs)
	pod := dep.Spec.Template.Spec
	g.Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]
	g.Expect(c.Image).NotTo(BeEmpty())

	g.Expect(c.SecurityContext).NotTo(BeNil(), "container securityContext")
	sc := c.SecurityContext
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil && pod.SecurityContext != nil {
		nonRoot = pod.SecurityContext.RunAsNonRoot
	}
	g.Expect(nonRoot).To(HaveValue(BeTrue()), "runAsNonRoot")
	g.Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()), "readOnlyRootFilesystem")
	g.Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()), "allowPrivilegeEscalation")
	g.Expect(sc.Privileged == nil || !*sc.Privileged).To(BeTrue(), "privileged")
	g.Expect(sc.Capabilities).NotTo(BeNil(), "capabilities")
	g.Expect(sc.Capabilities.Drop).To(ContainElement(corev1.Capability("ALL")), "capabilities.drop")
	g.Expect(sc.Capabilities.Add).To(BeEmpty(), "capabilities.add")
	g.Expect(pod.HostNetwork).To(BeFalse())
	g.Expect(pod.HostPID).To(BeFalse())

	g.Expect(c.LivenessProbe).NotTo(BeNil(), "livenessProbe")
	g.Expect(c.ReadinessProbe).NotTo(BeNil(), "readinessProbe")
	g.Expect(c.LivenessProbe.HTTPGet).NotTo(BeNil())
	g.Expect(c.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
	g.Expect(c.ReadinessProbe.HTTPGet).NotTo(BeNil())
	g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
	g.Expect(c.Resources.Requests).NotTo(BeEmpty(), "resource requests")
	g.Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory), "memory limit")

	g.Expect(c.Args).NotTo(BeEmpty())
	g.Expect(c.Args[0]).To(Equal("run"), "the first argument is the run command")
	g.Expect(c.Args).To(ContainElements(
		"--leader-elect",
		// Syncs never act as the manager (docs/gitops.md, "Permissions").
		"--gitops-lockdown=true",
		"--gitops-default-service-account=default",
		"--webhook-cert-secret="+webhookCertSecret,
		"--webhook-host-names="+webhookService+"."+namespace+".svc,"+webhookService+"."+namespace+".svc.cluster.local",
	))
	g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}))
}

// --- helpers ---

// run runs a command in dir with extra environment and stdin, and fails the
// test with its output when it fails.
func run(t *testing.T, dir string, env []string, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err,
			stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decoding YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			t.Fatalf("document without kind or apiVersion: %v", m)
		}
		out = append(out, u)
	}
}

// encode joins objects into a multi-document YAML stream.
func encode(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatalf("encoding %s: %v", id(o), err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes()
}

func convert(g Gomega, u *unstructured.Unstructured, into any) {
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true)).
		To(Succeed(), "decoding %s", id(u))
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func names(objs []*unstructured.Unstructured) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	return out
}

func find(g Gomega, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range ofKind(objs, kind) {
		if o.GetName() == name {
			return o
		}
	}
	g.Expect(names(ofKind(objs, kind))).To(ContainElement(name), "%s %s not rendered", kind, name)
	return nil
}

func id(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

func deployment(g Gomega, objs []*unstructured.Unstructured) *appsv1.Deployment {
	deps := ofKind(objs, "Deployment")
	g.Expect(deps).To(HaveLen(1), "Deployments")
	d := &appsv1.Deployment{}
	convert(g, deps[0], d)
	g.Expect(d.Spec.Template.Spec.Containers).NotTo(BeEmpty())
	return d
}

func managerArgs(g Gomega, objs []*unstructured.Unstructured) []string {
	return deployment(g, objs).Spec.Template.Spec.Containers[0].Args
}

func webhookClientConfigs(g Gomega, objs []*unstructured.Unstructured) []admissionregistrationv1.WebhookClientConfig {
	var out []admissionregistrationv1.WebhookClientConfig
	for _, o := range ofKind(objs, "MutatingWebhookConfiguration") {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		convert(g, o, m)
		for _, w := range m.Webhooks {
			out = append(out, w.ClientConfig)
		}
	}
	for _, o := range ofKind(objs, "ValidatingWebhookConfiguration") {
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		convert(g, o, v)
		for _, w := range v.Webhooks {
			out = append(out, w.ClientConfig)
		}
	}
	g.Expect(out).NotTo(BeEmpty())
	return out
}

// containerPort resolves a Service targetPort (number or name) against c.
func containerPort(c corev1.Container, target intstr.IntOrString) int32 {
	if target.Type == intstr.Int {
		return target.IntVal
	}
	for _, p := range c.Ports {
		if p.Name == target.StrVal {
			return p.ContainerPort
		}
	}
	return 0
}

// customResources returns the objects whose API group is served by one of
// crds.
func customResources(objs, crds []*unstructured.Unstructured) []string {
	groups := map[string]bool{}
	for _, o := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd); err == nil {
			groups[crd.Spec.Group] = true
		}
	}
	var out []string
	for _, o := range objs {
		if groups[o.GroupVersionKind().Group] {
			out = append(out, id(o))
		}
	}
	return out
}

// repoRoot and binDir resolve as every suite does (internal/testenv).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func binDir(t *testing.T) string {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// needBinaries skips the test (fails it in CI) when a binary is missing.
func needBinaries(t *testing.T, bin string, names ...string) {
	t.Helper()
	var missing []string
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(bin, n))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%s missing in %s", strings.Join(missing, ", "), bin)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI must run `make tools` first)", msg)
	}
	t.Skipf("\n\n*** SKIPPING packaging test: %s. Run `make tools` to build them. ***\n\n", msg)
}
