// Package webhookcert gives the webhook server its serving certificate, in
// both modes the manager runs in:
//
//   - in a cluster, from a Secret (kubernetes.io/tls plus ca.crt) that is
//     watched, so a rotated certificate is served without a restart;
//   - locally (`converge up`, tests), from files in the data directory.
//
// With self-management on (the default), the Manager also issues a private
// CA and a serving certificate when the store holds none or when they are
// close to expiry, and injects the CA bundle into Converge's webhook
// configurations. With it off, something else (cert-manager, Helm) owns the
// Secret and the CA bundle, and the Manager only loads and watches.
//
// The certificate is served from memory through tls.Config.GetCertificate,
// so rotating it never restarts the listener.
//
// The virtual BMCs' Redfish certificates (internal/bmc) are its second
// user: their CA is a Bundle holding the CA alone (NewCA), kept in a
// create-only CASecretStore through LoadOrCreateCA, and each BMC's serving
// certificate is issued in memory from it (Bundle.IssueServing) and issued
// again when Bundle.Check says it no longer covers the BMC's hosts or is
// close to expiry.
package webhookcert
