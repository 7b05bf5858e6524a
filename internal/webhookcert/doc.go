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
package webhookcert
