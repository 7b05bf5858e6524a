package spec

import (
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
)

// Provider ID prefixes of the built-in infrastructure providers.
const (
	KwokProviderIDPrefix = "kwok://"
	QemuProviderIDPrefix = "qemu://"
)

// KwokProviderID is the only spec.providerID a KwokMachine may carry:
// kwok://<namespace>/<name>. The KwokMachine controller writes it; the
// infrastructure webhook refuses any other value.
func KwokProviderID(km *infrastructurev1alpha1.KwokMachine) string {
	return KwokProviderIDPrefix + km.Namespace + "/" + km.Name
}

// QemuProviderID is the only spec.providerID a QemuMachine may carry:
// qemu://<namespace>/<name>. The QemuMachine controller writes it (and
// its Node agent registers the Node with it); the infrastructure webhook
// refuses any other value.
func QemuProviderID(qm *infrastructurev1alpha1.QemuMachine) string {
	return QemuProviderIDPrefix + qm.Namespace + "/" + qm.Name
}
