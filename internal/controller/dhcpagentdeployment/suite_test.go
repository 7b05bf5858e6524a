package dhcpagentdeployment_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// agentNamespace holds the agent Deployments of the suite's manager.
const agentNamespace = "cvdhcp-agents"

// The suite's manager runs in cluster mode (--dhcp-agent-image) with both
// the in-manager agent and the Deployment controller enabled: the first
// must stay off.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"dhcp-agent", "dhcp-agent-deployment"}
		o.DHCPAgent = setup.DHCPAgentOptions{Image: "registry.example/converge:test", Namespace: agentNamespace,
			ServiceAccount: "dhcp-agents", Attachment: "{network}-nad@net1", Interface: "net1"}
	}}, &env))
}
