package sqlengine

import (
	"slices"
	"testing"
)

// TestDrift: what Drift reports for each difference between a snapshot and
// a spec, alone, so that each check is seen on its own; the server tests
// (TestSnapshotSeesDrift) show the snapshots that real servers give.
func TestDrift(t *testing.T) {
	mine := Claim{UID: "u1", Namespace: "ns", Name: "app"}
	other := Claim{UID: "u2", Namespace: "ns", Name: "app"}
	sp := Spec{Name: "app", Owner: "app_owner", Claim: mine}
	pgPrivs := map[string][]string{"app_owner": {"CONNECT", "CREATE", "TEMPORARY"}}
	pg := func(mod func(*Snapshot)) *Snapshot {
		s := &Snapshot{engine: Postgres,
			Databases: map[string]SnapshotDatabase{"app": {Claim: mine, Owner: "app_owner", Privileges: pgPrivs}},
			Roles:     map[string]SnapshotRole{"app_owner": {Claim: mine, CanLogin: true}}}
		if mod != nil {
			mod(s)
		}
		return s
	}
	maria := func(mod func(*Snapshot)) *Snapshot {
		s := &Snapshot{engine: MariaDB,
			Databases: map[string]SnapshotDatabase{"app": {Claim: mine, Privileges: map[string][]string{"app_owner": mariaDBPrivileges}}},
			Roles:     map[string]SnapshotRole{"app_owner": {Claim: mine, CanLogin: true}}}
		if mod != nil {
			mod(s)
		}
		return s
	}
	unclaimed := sp
	unclaimed.Claim = Claim{}
	cases := []struct {
		name string
		snap *Snapshot
		sp   Spec
		want []string
	}{
		{"postgres as provisioned", pg(nil), sp, nil},
		{"mariadb as provisioned", maria(nil), sp, nil},
		{"database missing", pg(func(s *Snapshot) { delete(s.Databases, "app") }), sp, []string{`database "app" is missing`}},
		{"role missing", pg(func(s *Snapshot) { delete(s.Roles, "app_owner") }), sp, []string{`role "app_owner" is missing`}},
		{"both missing", pg(func(s *Snapshot) { s.Databases, s.Roles = nil, nil }), sp,
			[]string{`database "app" is missing`, `role "app_owner" is missing`}},
		{"no login", pg(func(s *Snapshot) { s.Roles["app_owner"] = SnapshotRole{Claim: mine} }), sp, []string{`role "app_owner" may not log in`}},
		{"privileged", pg(func(s *Snapshot) { s.Roles["app_owner"] = SnapshotRole{Claim: mine, CanLogin: true, Privileged: true} }), sp,
			[]string{`role "app_owner" was given privileged attributes`}},
		{"database marker", pg(func(s *Snapshot) { d := s.Databases["app"]; d.Claim = other; s.Databases["app"] = d }), sp,
			[]string{`the marker of database "app" changed`}},
		{"role marker", pg(func(s *Snapshot) { s.Roles["app_owner"] = SnapshotRole{Claim: other, CanLogin: true} }), sp,
			[]string{`the marker of role "app_owner" changed`}},
		{"markers of a spec without a claim", pg(func(s *Snapshot) {
			d := s.Databases["app"]
			d.Claim = other
			s.Databases["app"] = d
			s.Roles["app_owner"] = SnapshotRole{Claim: other, CanLogin: true}
		}), unclaimed, nil},
		{"role marker, database missing", pg(func(s *Snapshot) {
			delete(s.Databases, "app")
			s.Roles["app_owner"] = SnapshotRole{Claim: other, CanLogin: true}
		}), sp, []string{`database "app" is missing`, `the marker of role "app_owner" changed`}},
		{"database marker, role missing", pg(func(s *Snapshot) {
			d := s.Databases["app"]
			d.Claim = other
			s.Databases["app"] = d
			delete(s.Roles, "app_owner")
		}), sp, []string{`role "app_owner" is missing`, `the marker of database "app" changed`}},
		{"another owner", pg(func(s *Snapshot) {
			s.Databases["app"] = SnapshotDatabase{Claim: mine, Owner: "thief", Privileges: map[string][]string{"thief": {"CONNECT", "CREATE", "TEMPORARY"}}}
		}), sp, []string{`database "app" is owned by "thief"`}},
		{"postgres privilege missing", pg(func(s *Snapshot) {
			s.Databases["app"] = SnapshotDatabase{Claim: mine, Owner: "app_owner", Privileges: map[string][]string{"app_owner": {"CONNECT"}}}
		}), sp, []string{`role "app_owner" lacks CREATE, TEMPORARY on "app"`}},
		{"mariadb has no owner", maria(func(s *Snapshot) { d := s.Databases["app"]; d.Owner = ""; s.Databases["app"] = d }), sp, nil},
		{"mariadb privilege missing", maria(func(s *Snapshot) {
			d := s.Databases["app"]
			d.Privileges = map[string][]string{"app_owner": slices.DeleteFunc(slices.Clone(mariaDBPrivileges), func(p string) bool { return p == "TRIGGER" })}
			s.Databases["app"] = d
		}), sp, []string{`role "app_owner" lacks TRIGGER on "app"`}},
		{"mariadb privileges of another user", maria(func(s *Snapshot) {
			d := s.Databases["app"]
			d.Privileges = map[string][]string{"someone": mariaDBPrivileges}
			s.Databases["app"] = d
		}), sp, []string{`role "app_owner" lacks SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES, CREATE VIEW, TRIGGER on "app"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.snap.Drift(tc.sp); !slices.Equal(got, tc.want) {
				t.Errorf("Drift = %q, want %q", got, tc.want)
			}
		})
	}
}
