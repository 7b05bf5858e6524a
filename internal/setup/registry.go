package setup

import (
	"fmt"
	"sort"

	ctrl "sigs.k8s.io/controller-runtime"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/controller/basicdeployment"
	"github.com/converge-dev/converge/internal/controller/basicreplicaset"
	"github.com/converge-dev/converge/internal/controller/cainjector"
	"github.com/converge-dev/converge/internal/controller/certificate"
	"github.com/converge-dev/converge/internal/controller/certificaterequest"
	"github.com/converge-dev/converge/internal/controller/database"
	"github.com/converge-dev/converge/internal/controller/databasebackup"
	"github.com/converge-dev/converge/internal/controller/dhcpagent"
	"github.com/converge-dev/converge/internal/controller/dhcpagentdeployment"
	"github.com/converge-dev/converge/internal/controller/gitrepository"
	"github.com/converge-dev/converge/internal/controller/ippool"
	"github.com/converge-dev/converge/internal/controller/issuer"
	"github.com/converge-dev/converge/internal/controller/kwokmachine"
	"github.com/converge-dev/converge/internal/controller/lbipam"
	machinectrl "github.com/converge-dev/converge/internal/controller/machine"
	"github.com/converge-dev/converge/internal/controller/machinebmc"
	"github.com/converge-dev/converge/internal/controller/machineupgrade"
	"github.com/converge-dev/converge/internal/controller/qemumachine"
	"github.com/converge-dev/converge/internal/controller/sqlinstance"
	syncctrl "github.com/converge-dev/converge/internal/controller/sync"
	"github.com/converge-dev/converge/internal/git"
	"github.com/converge-dev/converge/internal/gitops/artifact"
	"github.com/converge-dev/converge/internal/gitops/render"
	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/qemu"
	webhookbmc "github.com/converge-dev/converge/internal/webhook/bmc"
	webhookdhcp "github.com/converge-dev/converge/internal/webhook/dhcp"
	webhookgitops "github.com/converge-dev/converge/internal/webhook/gitops"
	webhooklb "github.com/converge-dev/converge/internal/webhook/lb"
	webhookmachine "github.com/converge-dev/converge/internal/webhook/machine"
	webhookpki "github.com/converge-dev/converge/internal/webhook/pki"
	webhooksql "github.com/converge-dev/converge/internal/webhook/sql"
	webhookupgrade "github.com/converge-dev/converge/internal/webhook/upgrade"
	webhookworkloads "github.com/converge-dev/converge/internal/webhook/workloads"
)

// controller is a named controller that can be enabled or disabled with
// --controllers.
type controller struct {
	name  string
	setup func(mgr ctrl.Manager, o Options) error
}

// controllers is every controller Converge runs. Add new ones here.
var controllers = []controller{
	{name: basicdeployment.ControllerName, setup: func(mgr ctrl.Manager, _ Options) error {
		return (&basicdeployment.Reconciler{}).SetupWithManager(mgr)
	}},
	{name: basicreplicaset.ControllerName, setup: func(mgr ctrl.Manager, _ Options) error {
		return (&basicreplicaset.Reconciler{}).SetupWithManager(mgr)
	}},
	{name: gitrepository.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&gitrepository.Reconciler{
			Store: artifact.Store{Dir: o.GitOps.CacheDir},
			Git:   git.Client{MaxFetchSize: o.GitOps.MaxFetchSize, MaxArtifactSize: o.GitOps.MaxArtifactSize, Policy: o.egress},
		}).SetupWithManager(mgr)
	}},
	{name: syncctrl.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&syncctrl.Reconciler{
			Store:                   artifact.Store{Dir: o.GitOps.CacheDir},
			AllowCrossNamespaceRefs: o.GitOps.AllowCrossNamespaceRefs,
			DefaultServiceAccount:   o.GitOps.DefaultServiceAccount,
			Render: render.Options{
				MaxManifests: o.GitOps.MaxManifests,
				MaxFileSize:  o.GitOps.MaxFileSize,
				Timeout:      o.GitOps.RenderTimeout,
			},
			Lockdown:           o.GitOps.Lockdown,
			RenderCacheObjects: o.GitOps.RenderCacheObjects,
		}).SetupWithManager(mgr)
	}},
	{name: sqlinstance.PostgresControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&sqlinstance.Reconciler{Engine: sqlv1alpha1.EnginePostgres, HealthInterval: o.SQLInstanceHealthInterval, Egress: o.egress}).SetupWithManager(mgr)
	}},
	{name: sqlinstance.MariaDBControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&sqlinstance.Reconciler{Engine: sqlv1alpha1.EngineMariaDB, HealthInterval: o.SQLInstanceHealthInterval, Egress: o.egress}).SetupWithManager(mgr)
	}},
	{name: database.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&database.Reconciler{ObserveInterval: o.DatabaseObserveInterval, ResyncInterval: o.DatabaseResyncInterval, BackupDir: o.BackupDir, Egress: o.egress}).SetupWithManager(mgr)
	}},
	{name: databasebackup.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&databasebackup.Reconciler{BackupDir: o.BackupDir, Egress: o.egress}).SetupWithManager(mgr)
	}},
	{name: lbipam.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&lbipam.Reconciler{DefaultClass: o.LBDefaultClass, MaxListenersPerNamespace: o.LBMaxListenersPerNamespace,
			MaxAssignmentsPerPool: o.LBMaxAssignmentsPerPool}).SetupWithManager(mgr)
	}},
	{name: machinectrl.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&machinectrl.Reconciler{DrainTimeout: o.Machines.DrainTimeout}).SetupWithManager(mgr)
	}},
	{name: kwokmachine.ControllerName, setup: func(mgr ctrl.Manager, _ Options) error {
		return (&kwokmachine.Reconciler{}).SetupWithManager(mgr)
	}},
	{name: machinebmc.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		b := o.BMC
		switch machinebmc.Expose(b.Expose) {
		case "", machinebmc.ExposeLocal, machinebmc.ExposeService:
		default:
			return fmt.Errorf("--bmc-expose %q: want Local or Service", b.Expose)
		}
		return (&machinebmc.Reconciler{
			Server: &bmc.Server{Host: b.BindAddress, Advertise: b.AdvertiseAddress, NetNS: b.Netns, CASecret: b.CASecretKey()},
			Expose: machinebmc.Expose(b.Expose),
		}).SetupWithManager(mgr)
	}},
	{name: machineupgrade.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&machineupgrade.Reconciler{BMCCASecret: o.BMC.CASecretKey()}).SetupWithManager(mgr)
	}},
	{name: qemumachine.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		m := o.Machines
		if m.QemuMachines == machineoptions.QemuMachinesAgent {
			// The VMs run under the machine agents: bind, never run.
			ns := m.AgentLeaseNamespace
			if ns == "" {
				ns = machineoptions.DefaultAgentLeaseNamespace
			}
			return (&qemumachine.Scheduler{LeaseNamespace: ns, CheckInterval: m.AgentCheckInterval}).SetupWithManager(mgr)
		}
		if m.StateDir == "" {
			m.StateDir = machineoptions.DefaultMachineStateDir
		}
		if m.ImageDir == "" {
			m.ImageDir = machineoptions.DefaultMachineImageDir
		}
		return (&qemumachine.Reconciler{
			Host:           &qemu.Host{StateDir: m.StateDir, ImageDir: m.ImageDir, Netns: m.Netns, Binary: m.QemuBinary, Accel: m.QemuAccel},
			PowerDownGrace: m.PowerDownGrace,
			StopVMsOnExit:  m.StopVMsOnExit,
		}).SetupWithManager(mgr)
	}},
	{name: ippool.ControllerName, setup: func(mgr ctrl.Manager, _ Options) error {
		return (&ippool.Reconciler{}).SetupWithManager(mgr)
	}},
	{name: dhcpagent.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		if o.DHCPAgent.Image != "" {
			return nil // cluster mode: dhcp-agent-deployment runs the agents
		}
		images := o.Machines.ImageDir
		if images == "" {
			images = machineoptions.DefaultMachineImageDir
		}
		return (&dhcpagent.Reconciler{Netns: o.Machines.Netns, ImageDir: images, NetBootPort: o.Machines.NetbootHTTPPort}).SetupWithManager(mgr)
	}},
	{name: dhcpagentdeployment.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		a := o.DHCPAgent
		if a.Image == "" {
			return nil // local mode: the dhcp-agent controller serves
		}
		if a.Namespace == "" {
			return fmt.Errorf("--dhcp-agent-namespace is required with --dhcp-agent-image")
		}
		return (&dhcpagentdeployment.Reconciler{Image: a.Image, Namespace: a.Namespace, ServiceAccount: a.ServiceAccount,
			Attachment: a.Attachment, Interface: a.Interface}).SetupWithManager(mgr)
	}},
	{name: issuer.IssuerControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&issuer.Reconciler{ClusterResourceNamespace: o.PKI.ClusterResourceNamespace, ACMEAllowedDirectories: o.PKI.ACMEAllowedDirectories}).SetupWithManager(mgr)
	}},
	{name: issuer.ClusterIssuerControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&issuer.Reconciler{Cluster: true, ClusterResourceNamespace: o.PKI.ClusterResourceNamespace, ACMEAllowedDirectories: o.PKI.ACMEAllowedDirectories}).SetupWithManager(mgr)
	}},
	{name: certificaterequest.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&certificaterequest.Reconciler{ClusterResourceNamespace: o.PKI.ClusterResourceNamespace, Solver: o.PKI.Solver, ACMEAllowedDirectories: o.PKI.ACMEAllowedDirectories, ACMENamespacedDNSNames: o.PKI.ACMENamespacedDNSNames}).SetupWithManager(mgr)
	}},
	{name: certificate.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&certificate.Reconciler{OwnSecrets: o.PKI.OwnSecrets, BackoffBase: o.PKI.BackoffBase, MaxRSAKeySize: o.PKI.MaxRSAKeySize}).SetupWithManager(mgr)
	}},
	{name: cainjector.ControllerName, setup: func(mgr ctrl.Manager, o Options) error {
		return (&cainjector.Reconciler{Overlap: o.PKI.CAInjectionOverlap, ClusterResourceNamespace: o.PKI.ClusterResourceNamespace}).SetupWithManager(mgr)
	}},
}

// webhookSet is the admission webhooks for one kind. Webhooks are served
// whatever --controllers says: admission protects the API, not a controller.
type webhookSet struct {
	name  string
	setup func(mgr ctrl.Manager) error
	// setupWithOptions, when set, is used instead of setup by webhooks
	// that depend on the manager's options.
	setupWithOptions func(mgr ctrl.Manager, o Options) error
}

var webhooks = []webhookSet{
	{name: "basicdeployment", setup: webhookworkloads.BasicDeployment{}.SetupWithManager},
	{name: "basicreplicaset", setup: webhookworkloads.BasicReplicaSet{}.SetupWithManager},
	{name: "gitrepository", setup: webhookgitops.GitRepository{}.SetupWithManager},
	{name: "sync", setupWithOptions: func(mgr ctrl.Manager, o Options) error {
		return webhookgitops.Sync{RequireServiceAccount: o.GitOps.Lockdown && o.GitOps.DefaultServiceAccount == ""}.SetupWithManager(mgr)
	}},
	{name: "postgresinstance", setup: webhooksql.PostgresInstance{}.SetupWithManager},
	{name: "mariadbinstance", setup: webhooksql.MariaDBInstance{}.SetupWithManager},
	{name: "database", setup: webhooksql.Database{}.SetupWithManager},
	{name: "ipaddresspool", setup: webhooklb.IPAddressPool{}.SetupWithManager},
	{name: "l2advertisement", setup: webhooklb.L2Advertisement{}.SetupWithManager},
	{name: "machine", setup: webhookmachine.Machine{}.SetupWithManager},
	{name: "infrastructure", setup: webhookmachine.Providers{}.SetupWithManager},
	{name: "ippool", setup: webhookdhcp.IPPool{}.SetupWithManager},
	{name: "machinenetworkconfig", setup: webhookdhcp.MachineNetworkConfig{}.SetupWithManager},
	{name: "machinebmc", setup: webhookbmc.MachineBMC{}.SetupWithManager},
	{name: "machineupgrade", setup: webhookupgrade.MachineUpgrade{}.SetupWithManager},
	{name: "certificate", setupWithOptions: func(mgr ctrl.Manager, o Options) error {
		return webhookpki.Certificate{MinimumDuration: o.PKI.MinimumCertificateDuration, MaxRSAKeySize: o.PKI.MaxRSAKeySize}.SetupWithManager(mgr)
	}},
	{name: "issuer", setupWithOptions: func(mgr ctrl.Manager, o Options) error {
		return webhookpki.Issuer{ACMEAllowedDirectories: o.PKI.ACMEAllowedDirectories}.SetupWithManager(mgr)
	}},
	{name: "clusterissuer", setupWithOptions: func(mgr ctrl.Manager, o Options) error {
		return webhookpki.ClusterIssuer{ACMEAllowedDirectories: o.PKI.ACMEAllowedDirectories}.SetupWithManager(mgr)
	}},
	{name: "certificaterequest", setup: webhookpki.CertificateRequest{}.SetupWithManager},
}

// ControllerNames lists every controller by name, sorted.
func ControllerNames() []string {
	out := make([]string, 0, len(controllers))
	for _, c := range controllers {
		out = append(out, c.name)
	}
	sort.Strings(out)
	return out
}

func controllerByName(name string) controller {
	for _, c := range controllers {
		if c.name == name {
			return c
		}
	}
	panic("unknown controller " + name) // SelectControllers validated the name
}

// Permissions of the manager itself (not of one controller): injecting the
// webhook CA bundle and reviewing tokens for the secure metrics endpoint.
// Leases (leader election) and the webhook certificate Secret are namespaced
// and granted by a Role in config/rbac and the chart.
//
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;patch,resourceNames=converge-mutating-webhook-configuration;converge-validating-webhook-configuration
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
