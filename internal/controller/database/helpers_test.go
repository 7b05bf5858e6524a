package database_test

import (
	"database/sql"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

type engineCase struct {
	name string
	srv  *sqltest.Server
	kind string
}

func engines() []engineCase {
	return []engineCase{{"postgres", pg, "PostgresInstance"}, {"mariadb", maria, "MariaDBInstance"}}
}

// createInstance creates a Ready instance of srv (at host:port, default the
// server's) and waits for it.
func createInstance(t *testing.T, e engineCase, ns, name string, port int) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	if port == 0 {
		port = e.srv.Port
	}
	g.Expect(env.Tenant.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-admin"},
		StringData: map[string]string{"username": e.srv.AdminUser, "password": e.srv.AdminPassword}})).To(Succeed())
	spec := sqlv1alpha1.InstanceSpec{Host: "127.0.0.1", Port: int32(port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: name + "-admin"}}
	var obj client.Object = &sqlv1alpha1.PostgresInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if e.srv.Engine == sqlengine.MariaDB {
		obj = &sqlv1alpha1.MariaDBInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	}
	g.Expect(env.Tenant.Create(ctx, obj)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.(sqlv1alpha1.Instance).InstanceStatus().Ready).To(BeTrue())
	}).Should(Succeed())
}

func newDatabase(ns, name, kind, instance string) *sqlv1alpha1.Database {
	return &sqlv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sqlv1alpha1.DatabaseSpec{
			InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: sqlv1alpha1.GroupVersion.String(), Kind: kind, Name: instance},
		},
	}
}

// waitReady waits for Ready=True at the current generation.
func waitReady(t *testing.T, d *sqlv1alpha1.Database) {
	t.Helper()
	g := NewWithT(t)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		ready := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
		g.Expect(ready.Reason).To(Equal(sqlv1alpha1.AvailableReason), ready.Message)
		testenv.ExpectKstatus(t.Context(), g, env.Client, d, kstatus.CurrentStatus, "")
	}).WithTimeout(60 * time.Second).Should(Succeed())
}

func connectionSecret(t *testing.T, d *sqlv1alpha1.Database) map[string]string {
	t.Helper()
	g := NewWithT(t)
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: d.Namespace, Name: d.Name + "-connection"}, sec)).To(Succeed())
	out := map[string]string{}
	for k, v := range sec.Data {
		out[k] = string(v)
	}
	return out
}

// requestReconcile sets converge.dev/reconcile-requested-at.
func requestReconcile(t *testing.T, d *sqlv1alpha1.Database) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
	base := d.DeepCopy()
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[sqlv1alpha1.ReconcileRequestedAtAnnotation] = time.Now().Format(time.RFC3339Nano)
	g.Expect(env.Tenant.Patch(t.Context(), d, client.MergeFrom(base))).To(Succeed())
}

func dbExists(t *testing.T, srv *sqltest.Server, name string) bool {
	t.Helper()
	var n int
	db := srv.Open(t, "")
	q := "SELECT COUNT(*) FROM pg_database WHERE datname = $1"
	if srv.Engine == sqlengine.MariaDB {
		q = "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?"
	}
	if err := db.QueryRowContext(t.Context(), q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func roleExists(t *testing.T, srv *sqltest.Server, name string) bool {
	t.Helper()
	var n int
	db := srv.Open(t, "")
	q := "SELECT COUNT(*) FROM pg_roles WHERE rolname = $1"
	if srv.Engine == sqlengine.MariaDB {
		q = "SELECT COUNT(*) FROM mysql.user WHERE User = ?"
	}
	if err := db.QueryRowContext(t.Context(), q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func ownerConn(t *testing.T, srv *sqltest.Server, sec map[string]string) *sql.DB {
	t.Helper()
	db, err := sqlengine.OpenDB(srv.Config(sec["username"], sec["password"], sec["database"]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// proxy is a TCP proxy that can be cut, to make a server unreachable
// without stopping it.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	port   int
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{target: target}
	p.listen(t, "127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) listen(t *testing.T, addr string) {
	t.Helper()
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly after a cut
		if p.ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.port = p.ln.Addr().(*net.TCPAddr).Port
	go func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}(p.ln)
}

// cut closes the listener and every proxied connection.
func (p *proxy) cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// restore listens again on the same port.
func (p *proxy) restore(t *testing.T) { p.listen(t, fmt.Sprintf("127.0.0.1:%d", p.port)) }

const metav1False = metav1.ConditionFalse

func objMeta(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
