// Command kitchen runs the kitchen example's Order controller, its Chef and
// (with --webhook-cert-dir) its Order webhook in a controller-runtime manager against the cluster of a kubeconfig
// (--kubeconfig, else $KUBECONFIG, else ~/.kube/config or in-cluster).
// Install the CRDs in examples/kitchen/config/crd first; see
// examples/kitchen/README.md.
package main

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/converge-dev/converge/examples/kitchen"
	kitchenv1alpha1 "github.com/converge-dev/converge/examples/kitchen/api/v1alpha1"
)

func main() {
	metrics := flag.String("metrics-bind-address", "0", `address of the metrics endpoint ("0": off)`)
	leaderElect := flag.Bool("leader-elect", false, "elect a leader, so that only one replica reconciles")
	leaderNS := flag.String("leader-election-namespace", "", "namespace of the leader Lease (default: the Pod's, in a cluster)")
	certDir := flag.String("webhook-cert-dir", "", "directory of the webhook server's tls.crt and tls.key; empty: no webhook (install config/webhook pointed at this server to use it)")
	webhookPort := flag.Int("webhook-port", 9443, "port of the webhook server")
	logOpts := zap.Options{Development: true}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	log := ctrl.Log.WithName("kitchen")

	scheme := runtime.NewScheme()
	if err := kitchenv1alpha1.AddToScheme(scheme); err != nil {
		log.Error(err, "building the scheme")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metrics},
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "kitchen.example.converge.dev",
		LeaderElectionNamespace: *leaderNS,
		WebhookServer:           webhook.NewServer(webhook.Options{Port: *webhookPort, CertDir: *certDir}),
	})
	if err != nil {
		log.Error(err, "building the manager")
		os.Exit(1)
	}
	if err := (&kitchen.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the Order controller")
		os.Exit(1)
	}
	if err := (&kitchen.Chef{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the Chef")
		os.Exit(1)
	}
	if *certDir != "" {
		if err := (kitchen.OrderValidator{}).SetupWithManager(mgr); err != nil {
			log.Error(err, "setting up the Order webhook")
			os.Exit(1)
		}
	} else {
		log.Info("no --webhook-cert-dir: the Order webhook is off, an Order of 0 sets is not refused")
	}
	log.Info("cooking")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}
