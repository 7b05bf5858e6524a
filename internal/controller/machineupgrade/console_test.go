package machineupgrade

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

// TestConsoleSince: a console check reads what was printed after the mark
// taken before the power cycle: the new part of a console that grew in
// place, all of a console rewritten from its start since (QEMU truncates
// it at each start), also once the rewritten one is longer than the mark.
func TestConsoleSince(t *testing.T) {
	old := []byte("SeaBIOS\nconverge-image: v2\nlogin:\n")
	off, digest := consoleMark(old)
	tests := []struct {
		name    string
		console string
		offset  *int64
		digest  string
		want    string
	}{
		{"grown in place: only the new part", string(old) + "converge-init\nconverge-image: v3\n", &off, digest, "converge-init\nconverge-image: v3\n"},
		{"nothing new yet", string(old), &off, digest, ""},
		{"rewritten, shorter than the mark", "SeaBIOS\n", &off, digest, "SeaBIOS\n"},
		{"rewritten, longer than the mark", "SeaBIOS\nconverge-image: v3\nconverge-lease: eth0 10.0.0.5/24\n", &off, digest,
			"SeaBIOS\nconverge-image: v3\nconverge-lease: eth0 10.0.0.5/24\n"},
		{"no mark: all", "a\nb\n", nil, "", "a\nb\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(string(consoleSince([]byte(tt.console), tt.offset, tt.digest))).To(Equal(tt.want))
		})
	}
	// The old boot's marker does not satisfy a check once the console grew.
	re := regexp.MustCompile(`^converge-image: v2$`)
	g := NewWithT(t)
	g.Expect(matchLine(consoleSince(append(old, "converge-image: v3\n"...), &off, digest), re)).To(BeFalse())
	g.Expect(matchLine(consoleSince([]byte("x\r\nconverge-image: v2\r\n"), nil, ""), re)).To(BeTrue(), "a CRLF line matches")
	g.Expect(lastLine([]byte("a\nlast one \n\n"))).To(Equal("last one"))
}

// TestLocalConsole: the default reader reads the file at status.consoleLog
// on this host; a Machine without one, or whose file is not here (another
// host's), is an error that says so.
func TestLocalConsole(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "console.log")
	g.Expect(os.WriteFile(path, []byte("hello\n"), 0o600)).To(Succeed())
	m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}}
	m.Status.ConsoleLog = path
	b, err := LocalConsole{}.ReadConsole(t.Context(), m)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("hello\n"))

	m.Status.ConsoleLog = filepath.Join(dir, "elsewhere", "console.log")
	_, err = LocalConsole{}.ReadConsole(t.Context(), m)
	g.Expect(errors.Is(err, ErrConsoleElsewhere)).To(BeTrue())
	g.Expect(err).To(MatchError("machine w-0: its console file is not on the manager's host: " + m.Status.ConsoleLog +
		" is not here (a QemuMachine under a per-node agent keeps it on its node)"))

	m.Status.ConsoleLog = ""
	_, err = LocalConsole{}.ReadConsole(t.Context(), m)
	g.Expect(errors.Is(err, ErrNoConsole)).To(BeTrue())
}

// TestCompileChecks: a console check compiles to a regular expression; a
// console pre-check and a bad regular expression are refused naming the
// field (the controller's own guard for objects the webhook did not see).
func TestCompileChecks(t *testing.T) {
	g := NewWithT(t)
	u := &upgradev1alpha1.MachineUpgrade{}
	u.Spec.PostChecks = []upgradev1alpha1.Check{{Name: "img", Console: "^converge-image: v2$"}, {Name: "on", Expression: "true"}}
	cs, err := compileChecks(u)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.post).To(HaveLen(2))
	g.Expect(cs.post[0].console).NotTo(BeNil())
	g.Expect(cs.post[1].prg).NotTo(BeNil())
	g.Expect(hasConsoleCheck(u)).To(BeTrue())

	u.Spec.PostChecks = []upgradev1alpha1.Check{{Name: "img", Console: "("}}
	_, err = compileChecks(u)
	g.Expect(err).To(MatchError(ContainSubstring("spec.postChecks[img].console: error parsing regexp")))
	u.Spec.PostChecks = nil
	u.Spec.PreChecks = []upgradev1alpha1.Check{{Name: "img", Console: "x"}}
	_, err = compileChecks(u)
	g.Expect(err).To(MatchError("spec.preChecks[img].console: a console check is a post-check only"))
}
