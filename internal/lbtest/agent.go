package lbtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/converge-dev/converge/internal/lbagent"
	"github.com/converge-dev/converge/internal/setup"
)

const childEnv = "CONVERGE_LBTEST_AGENT"

// AgentSpec is what a child agent process runs with.
type AgentSpec struct {
	Kubeconfig     string
	NodeName       string
	NetNS          string
	Interface      string
	LeaseNamespace string
	LeaseDuration  time.Duration
	RenewInterval  time.Duration
	ProbeInterval  time.Duration
	// KubeAPIQPS and KubeAPIBurst are the agent's status-write budget.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// Userspace runs the userspace data plane (lbdataplane.Proxy).
	Userspace bool
}

// MaybeRunAgentChild runs the agent and exits when this process was
// started by StartAgent; call it first in TestMain (and bench mains).
func MaybeRunAgentChild() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var s AgentSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "lbtest agent:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lbtest agent:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background()) //nolint:forbidigo // process main
	go func() {
		ch := make(chan os.Signal, 1)
		signalNotify(ch)
		<-ch
		cancel()
	}()
	err = lbagent.Run(ctx, lbagent.Config{RESTConfig: cfg, Scheme: setup.Scheme(), NodeName: s.NodeName, NetNS: s.NetNS,
		Interface: s.Interface, LeaseNamespace: s.LeaseNamespace, DefaultClass: true,
		LeaseDuration: s.LeaseDuration, RenewInterval: s.RenewInterval, ProbeInterval: s.ProbeInterval,
		KubeAPIQPS: s.KubeAPIQPS, KubeAPIBurst: s.KubeAPIBurst, Userspace: s.Userspace,
		Log: ctrl.Log.WithName("lbagent").WithValues("node", s.NodeName)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lbtest agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Agent is a child process running one node's agent.
type Agent struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartAgent re-executes the current binary as an agent (see
// MaybeRunAgentChild). The topology kills it on Close.
func (t *Topology) StartAgent(s AgentSpec) (*Agent, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	if os.Getenv("CONVERGE_LBTEST_AGENT_LOGS") == "" {
		cmd.Stderr = nil
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &Agent{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(a.done) }()
	t.onClose(func() { a.Kill() })
	return a, nil
}

// Stop asks the agent to stop (it removes its rules, addresses and
// Leases) and waits.
func (a *Agent) Stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		a.Kill()
	}
}

// Kill kills the agent like a crashing node: nothing is cleaned up.
func (a *Agent) Kill() {
	_ = a.cmd.Process.Kill()
	<-a.done
}
