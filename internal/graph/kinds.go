package graph

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Relation says why an edge exists, read from the upper object to the lower
// one: a Sync Applies what its inventory lists, an owner Owns what names it
// in its ownerReferences, and an object Needs what its spec or status
// refers to (its source, instance, issuer, Secrets, Machines...). An object
// is BlockedBy what holds it from outside its references: a Machine whose
// drain a PodDisruptionBudget refuses.
type Relation string

// The relations of the graph.
const (
	Applies Relation = "applies"
	Owns    Relation = "owns"
	Needs   Relation = "needs"
	// BlockedBy is read from the held object to what holds it.
	BlockedBy Relation = "blocked by"
)

// Inverse is the relation read from the lower object: "applied by",
// "owned by", "needed by".
func (r Relation) Inverse() string {
	switch r {
	case Applies:
		return "applied by"
	case Owns:
		return "owned by"
	case BlockedBy:
		return "blocks"
	default:
		return "needed by"
	}
}

// Link is one reference an object makes, found in its spec or status.
type Link struct {
	Why Relation
	To  Ref
}

// Reverse finds objects of Kind (in the same namespace) that point at an
// object of the entry's kind: a MachineBMC names its Machine in
// spec.machineRef, yet the Machine is what needs the BMC to be driven.
type Reverse struct {
	Kind schema.GroupVersionKind
	// Target is the name of the object (of the entry's kind, in the same
	// namespace) that u serves; "" for none.
	Target func(u *unstructured.Unstructured) string
}

// Kind is what the graph knows of one kind: its aliases on the command line,
// the references it makes, the kinds it owns, the objects that serve it by
// pointing at it, and the command a person runs next when it is the cause.
type Kind struct {
	GVK schema.GroupVersionKind
	// Aliases are lower-case names accepted in KIND/NAME besides the kind.
	Aliases []string
	// Links returns the references u makes (Needs and Applies).
	Links func(u *unstructured.Unstructured) []Link
	// Serves are kinds whose objects point at this one and that it needs.
	Serves []Reverse
	// Owns are kinds listed (in the namespace) for objects owned by this one.
	Owns []schema.GroupVersionKind
	// Next is the command for a person when this object is the root cause;
	// nil uses a generic hint.
	Next func(n *Node) string
	// Status reads an object whose kind kstatus does not read right; nil
	// uses kstatus.
	Status func(u *unstructured.Unstructured) (Status, string, string)
	// Drains: the kind's conditions name the Pods whose eviction a
	// PodDisruptionBudget refuses (a Machine being deleted, an upgrade
	// draining one); the graph links it to those budgets (BlockedBy).
	Drains bool
	// Requestable: the kind's controller honours the reconcile kit's
	// RequestedAtAnnotation (pkg/reconcile) and records the value it handled
	// in status.lastHandledReconcileAt, so `converge reconcile KIND/NAME`
	// can ask for a reconcile and wait for it. A test holds this in step
	// with the CRDs that declare the field.
	Requestable bool
}

func gvk(group, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: group, Version: "v1alpha1", Kind: kind}
}

var (
	secretGVK = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	podGVK    = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	nodeGVK   = schema.GroupVersionKind{Version: "v1", Kind: "Node"}
)

// str reads a string at path in u ("" when absent).
func str(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

// local is a reference to name in u's namespace, with kind gv.
func local(u *unstructured.Unstructured, k schema.GroupVersionKind, name string) Ref {
	return Ref{Group: k.Group, Version: k.Version, Kind: k.Kind, Namespace: u.GetNamespace(), Name: name}
}

// secretAt links the Secret named at path, when set.
func secretAt(u *unstructured.Unstructured, path ...string) []Link {
	if n := str(u, path...); n != "" {
		return []Link{{Needs, local(u, secretGVK, n)}}
	}
	return nil
}

// typedRef reads an {apiVersion, kind, name} reference at path.
func typedRef(u *unstructured.Unstructured, path ...string) []Link {
	m, ok, _ := unstructured.NestedStringMap(u.Object, path...)
	if !ok || m["name"] == "" || m["kind"] == "" {
		return nil
	}
	gv, err := schema.ParseGroupVersion(m["apiVersion"])
	if err != nil {
		return nil
	}
	return []Link{{Needs, Ref{Group: gv.Group, Version: gv.Version, Kind: m["kind"], Namespace: u.GetNamespace(), Name: m["name"]}}}
}

func hint(format string, a ...any) func(*Node) string {
	return func(n *Node) string {
		args := make([]any, 0, len(a))
		for _, x := range a {
			switch x {
			case "NAME":
				x = n.Ref.Name
			case "NS":
				x = n.Ref.Namespace
			}
			args = append(args, x)
		}
		return fmt.Sprintf(format, args...)
	}
}

// clusterResourceNamespace is where a ClusterIssuer's Secrets live (the
// manager's --cluster-resource-namespace default).
const clusterResourceNamespace = "converge-system"

func issuerLinks(u *unstructured.Unstructured) []Link {
	var out []Link
	out = append(out, secretAt(u, "spec", "ca", "secretName")...)
	out = append(out, secretAt(u, "spec", "acme", "privateKeySecretRef", "name")...)
	if u.GetKind() == "ClusterIssuer" {
		for i := range out {
			out[i].To.Namespace = clusterResourceNamespace
		}
	}
	return out
}

func issuerRef(u *unstructured.Unstructured) []Link {
	name := str(u, "spec", "issuerRef", "name")
	if name == "" {
		return nil
	}
	group, kind := str(u, "spec", "issuerRef", "group"), str(u, "spec", "issuerRef", "kind")
	if group == "" {
		group = "pki.converge.dev"
	}
	if kind == "" {
		kind = "Issuer"
	}
	r := Ref{Group: group, Version: "v1alpha1", Kind: kind, Namespace: u.GetNamespace(), Name: name}
	return []Link{{Needs, r}}
}

func instanceLinks(u *unstructured.Unstructured) []Link {
	return append(secretAt(u, "spec", "adminSecretRef", "name"), secretAt(u, "spec", "tls", "caSecretRef", "name")...)
}

func syncLinks(u *unstructured.Unstructured) []Link {
	var out []Link
	if name := str(u, "spec", "sourceRef", "name"); name != "" {
		r := local(u, gvk("gitops.converge.dev", "GitRepository"), name)
		if ns := str(u, "spec", "sourceRef", "namespace"); ns != "" {
			r.Namespace = ns
		}
		out = append(out, Link{Needs, r})
	}
	deps, _, _ := unstructured.NestedSlice(u.Object, "spec", "dependsOn")
	for _, d := range deps {
		m, _ := d.(map[string]any)
		s := func(k string) string { v, _ := m[k].(string); return v }
		gv, err := schema.ParseGroupVersion(s("apiVersion"))
		if s("apiVersion") == "" || err != nil {
			gv = schema.GroupVersion{Group: "gitops.converge.dev", Version: "v1alpha1"}
		}
		kind, ns := s("kind"), s("namespace")
		if kind == "" {
			kind = "Sync"
		}
		if ns == "" {
			ns = u.GetNamespace()
		}
		out = append(out, Link{Needs, Ref{Group: gv.Group, Version: gv.Version, Kind: kind, Namespace: ns, Name: s("name")}})
	}
	inv, _, _ := unstructured.NestedSlice(u.Object, "status", "inventory")
	for _, o := range inv {
		m, _ := o.(map[string]any)
		s := func(k string) string { v, _ := m[k].(string); return v }
		out = append(out, Link{Applies, Ref{Group: s("group"), Version: s("version"), Kind: s("kind"), Namespace: s("namespace"), Name: s("name")}})
	}
	return out
}

// upgradeLinks are the Machines of an upgrade's status.machines, the ones
// whose step is running or failed first: the cause of a held upgrade is
// looked for below the Machine it is working on before the others.
func upgradeLinks(u *unstructured.Unstructured) []Link {
	ms, _, _ := unstructured.NestedSlice(u.Object, "status", "machines")
	var busy, rest []Link
	for _, m := range ms {
		mm, _ := m.(map[string]any)
		name, _ := mm["name"].(string)
		if name == "" {
			continue
		}
		l := Link{Needs, local(u, gvk("machine.converge.dev", "Machine"), name)}
		if st, _ := mm["stepState"].(string); st == "Running" || st == "Failed" {
			busy = append(busy, l)
		} else {
			rest = append(rest, l)
		}
	}
	return append(busy, rest...)
}

func machineLinks(u *unstructured.Unstructured) []Link {
	out := typedRef(u, "spec", "infrastructureRef")
	if n := str(u, "status", "nodeRef", "name"); n != "" {
		out = append(out, Link{Needs, Ref{Version: "v1", Kind: "Node", Name: n}})
	}
	return out
}

func serviceLinks(u *unstructured.Unstructured) []Link {
	if str(u, "spec", "type") != "LoadBalancer" {
		return nil
	}
	if p := u.GetAnnotations()["lb.converge.dev/pool"]; p != "" {
		return []Link{{Needs, Ref{Group: "lb.converge.dev", Version: "v1alpha1", Kind: "IPAddressPool", Name: p}}}
	}
	return nil
}

// Kinds is the one table of what the graph knows, one entry per kind.
var Kinds = []Kind{
	{GVK: gvk("gitops.converge.dev", "Sync"), Aliases: []string{"syncs", "sy"}, Links: syncLinks, Requestable: true,
		Next: func(n *Node) string {
			if n.Reason == "PruneLimitExceeded" {
				return hint("converge sync approve-prune %s -n %s", "NAME", "NS")(n)
			}
			return hint("converge reconcile sync %s -n %s", "NAME", "NS")(n)
		}},
	{GVK: gvk("gitops.converge.dev", "GitRepository"), Aliases: []string{"gitrepositories", "gitrepo"}, Requestable: true,
		Links: func(u *unstructured.Unstructured) []Link { return secretAt(u, "spec", "secretRef", "name") },
		Next:  hint("converge reconcile gitrepository %s -n %s", "NAME", "NS")},
	{GVK: gvk("sql.converge.dev", "Database"), Aliases: []string{"databases", "db", "sqldb"}, Requestable: true,
		Links: func(u *unstructured.Unstructured) []Link {
			out := typedRef(u, "spec", "instanceRef")
			if n := str(u, "spec", "restoreFrom", "name"); n != "" {
				out = append(out, Link{Needs, local(u, gvk("backup.converge.dev", "DatabaseBackup"), n)})
			}
			return out
		}},
	{GVK: gvk("sql.converge.dev", "PostgresInstance"), Aliases: []string{"postgresinstances", "pg"}, Links: instanceLinks},
	{GVK: gvk("sql.converge.dev", "MariaDBInstance"), Aliases: []string{"mariadbinstances"}, Links: instanceLinks},
	{GVK: gvk("backup.converge.dev", "DatabaseBackup"), Aliases: []string{"databasebackups"},
		Links: func(u *unstructured.Unstructured) []Link {
			if n := str(u, "spec", "databaseRef", "name"); n != "" {
				return []Link{{Needs, local(u, gvk("sql.converge.dev", "Database"), n)}}
			}
			return nil
		}},
	{GVK: gvk("pki.converge.dev", "Certificate"), Aliases: []string{"certificates", "cert"}, Links: issuerRef,
		Owns: []schema.GroupVersionKind{gvk("pki.converge.dev", "CertificateRequest")},
		Next: hint("converge cert status %s -n %s", "NAME", "NS")},
	{GVK: gvk("pki.converge.dev", "CertificateRequest"), Aliases: []string{"certificaterequests", "cr"}, Links: issuerRef},
	{GVK: gvk("pki.converge.dev", "Issuer"), Aliases: []string{"issuers"}, Links: issuerLinks},
	{GVK: gvk("pki.converge.dev", "ClusterIssuer"), Aliases: []string{"clusterissuers"}, Links: issuerLinks},
	{GVK: gvk("machine.converge.dev", "Machine"), Aliases: []string{"machines"}, Links: machineLinks, Drains: true,
		Serves: []Reverse{{Kind: gvk("bmc.converge.dev", "MachineBMC"), Target: func(u *unstructured.Unstructured) string {
			return str(u, "spec", "machineRef", "name")
		}}}},
	{GVK: gvk("bmc.converge.dev", "MachineBMC"), Aliases: []string{"machinebmcs", "bmc"},
		Links: func(u *unstructured.Unstructured) []Link { return secretAt(u, "spec", "authSecretRef", "name") }},
	{GVK: gvk("infrastructure.converge.dev", "QemuMachine"), Aliases: []string{"qemumachines"}},
	{GVK: gvk("infrastructure.converge.dev", "KwokMachine"), Aliases: []string{"kwokmachines"}},
	{GVK: gvk("upgrade.converge.dev", "MachineUpgrade"), Aliases: []string{"machineupgrades", "upgrade"}, Links: upgradeLinks, Drains: true,
		Next: func(n *Node) string {
			if n.Status == Failed {
				return hint("converge upgrade retry %s -n %s", "NAME", "NS")(n)
			}
			return hint("converge upgrade status %s -n %s", "NAME", "NS")(n)
		}},
	{GVK: gvk("workloads.converge.dev", "BasicDeployment"), Aliases: []string{"basicdeployments", "bd"},
		Owns: []schema.GroupVersionKind{gvk("workloads.converge.dev", "BasicReplicaSet")},
		Next: hint("converge rollout status basicdeployment/%s -n %s", "NAME", "NS")},
	{GVK: gvk("workloads.converge.dev", "BasicReplicaSet"), Aliases: []string{"basicreplicasets", "brs"},
		Owns: []schema.GroupVersionKind{podGVK}},
	{GVK: gvk("lb.converge.dev", "IPAddressPool"), Aliases: []string{"ipaddresspools"}},
	{GVK: gvk("dhcp.converge.dev", "IPPool"), Aliases: []string{"ippools"}},
	{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Service"}, Aliases: []string{"services", "svc"}, Links: serviceLinks},
	{GVK: secretGVK, Aliases: []string{"secrets"},
		Next: func(n *Node) string {
			if n.Status == NotFound {
				return fmt.Sprintf("kubectl -n %s create secret generic %s --from-literal=KEY=VALUE (the keys the referring object names)", n.Ref.Namespace, n.Ref.Name)
			}
			return fmt.Sprintf("kubectl -n %s get secret %s -o yaml", n.Ref.Namespace, n.Ref.Name)
		}},
	{GVK: podGVK, Aliases: []string{"pods", "po"}},
	{GVK: pdbGVK, Aliases: []string{"poddisruptionbudgets", "pdb"}, Status: pdbStatus,
		Next: func(n *Node) string {
			return fmt.Sprintf("make room for a disruption: scale up the Pods it selects, or lower its minAvailable / raise its maxUnavailable (kubectl -n %s edit poddisruptionbudget %s); the drain retries by itself", n.Ref.Namespace, n.Ref.Name)
		}},
	{GVK: nodeGVK, Aliases: []string{"nodes", "no"}},
}

// lookup finds the entry of a group and kind.
func lookup(group, kind string) *Kind {
	for i := range Kinds {
		if Kinds[i].GVK.Group == group && Kinds[i].GVK.Kind == kind {
			return &Kinds[i]
		}
	}
	return nil
}

// Requestable lists the kinds whose controllers honour the reconcile kit's
// RequestedAtAnnotation (Kind.Requestable), as their lower-case names.
func Requestable() []string {
	var out []string
	for _, k := range Kinds {
		if k.Requestable {
			out = append(out, strings.ToLower(k.GVK.Kind))
		}
	}
	return out
}

// IsRequestable reports whether gvk's controller honours the reconcile
// kit's RequestedAtAnnotation (Kind.Requestable).
func IsRequestable(gvk schema.GroupVersionKind) bool {
	k := lookup(gvk.Group, gvk.Kind)
	return k != nil && k.Requestable
}

// ParseKind resolves a kind as a person types it (Database, database,
// databases, db) to its table entry.
func ParseKind(s string) (schema.GroupVersionKind, error) {
	l := strings.ToLower(s)
	for _, k := range Kinds {
		if strings.ToLower(k.GVK.Kind) == l {
			return k.GVK, nil
		}
		for _, a := range k.Aliases {
			if a == l {
				return k.GVK, nil
			}
		}
	}
	return schema.GroupVersionKind{}, fmt.Errorf("unknown kind %q (try database, postgresinstance, sync, gitrepository, certificate, issuer, machine, machineupgrade, basicdeployment, secret, ...)", s)
}
