package webhookcert

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestIssueRefusesNoHosts(t *testing.T) {
	g := NewWithT(t)
	_, err := Issue(nil, time.Now())
	g.Expect(err).To(MatchError(ContainSubstring("at least one host name")))
	m := &Manager{Store: DirStore{Dir: t.TempDir()}, SelfManage: true}
	g.Expect(m.Sync(t.Context())).To(MatchError(ContainSubstring("at least one host name")))
}
