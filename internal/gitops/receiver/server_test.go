package receiver_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/gitops/receiver"
)

// serve runs a receiver.Server with o in front of a handler that counts the
// requests it gets, and returns the base URL and the count.
func serve(t *testing.T, o receiver.Options) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	o.BindAddress = "127.0.0.1:0"
	srv := &receiver.Server{Options: o, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("receiver: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for srv.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the receiver did not start listening")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "http://" + srv.Addr().String(), &n
}

// clientFrom sends requests from the loopback address ip (all of 127/8 is
// loopback on Linux), to act as distinct sources.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

func postFrom(g Gomega, c *http.Client, url string) (int, string) {
	resp, err := c.Post(url+"/hook/gitrepository/a/b", "application/json", nil) //nolint:noctx // bounded by the client's timeout
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestRateLimitPerSource: a flooding source gets 429 with Retry-After once its
// burst is spent, and its requests never reach the handler; another source is
// still served.
func TestRateLimitPerSource(t *testing.T) {
	g := NewWithT(t)
	url, handled := serve(t, receiver.Options{Rate: 1000, Burst: 1000, SourceRate: 0.01, SourceBurst: 3})
	flooder, other := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	var limited int
	for range 20 {
		code, retry := postFrom(g, flooder, url)
		if code == http.StatusTooManyRequests {
			limited++
			secs, err := strconv.Atoi(retry)
			g.Expect(err).NotTo(HaveOccurred(), "Retry-After %q is a number of seconds", retry)
			g.Expect(secs).To(BeNumerically(">=", 1))
			continue
		}
		g.Expect(code).To(Equal(http.StatusNoContent))
	}
	g.Expect(limited).To(Equal(17))
	g.Expect(handled.Load()).To(BeEquivalentTo(3))
	code, _ := postFrom(g, other, url)
	g.Expect(code).To(Equal(http.StatusNoContent), "another source has its own budget")
}

// TestRateLimitGlobal: many sources together are held to the global rate.
func TestRateLimitGlobal(t *testing.T) {
	g := NewWithT(t)
	url, handled := serve(t, receiver.Options{Rate: 0.01, Burst: 4, SourceRate: 1000, SourceBurst: 1000})
	var limited int
	for i := range 10 {
		code, retry := postFrom(g, clientFrom("127.0.0."+strconv.Itoa(10+i)), url)
		if code == http.StatusTooManyRequests {
			limited++
			g.Expect(retry).NotTo(BeEmpty())
		}
	}
	g.Expect(limited).To(Equal(6))
	g.Expect(handled.Load()).To(BeEquivalentTo(4))
}

// TestSlowClientIsCutOff: a client that never finishes its headers is
// disconnected after the read timeout instead of holding a connection.
func TestSlowClientIsCutOff(t *testing.T) {
	g := NewWithT(t)
	url, handled := serve(t, receiver.Options{Rate: 1000, Burst: 1000, SourceRate: 1000, SourceBurst: 1000,
		ReadTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", url[len("http://"):])
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	_, err = conn.Write([]byte("POST /hook/gitrepository/a/b HTTP/1.1\r\nHost: x\r\n"))
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	g.Expect(conn.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	buf := make([]byte, 512)
	for {
		if _, err = conn.Read(buf); err != nil {
			break
		}
	}
	var ne net.Error
	if ok := errorAs(err, &ne); ok {
		g.Expect(ne.Timeout()).To(BeFalse(), "the server closed the connection before our 5s deadline")
	}
	g.Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
	g.Expect(handled.Load()).To(BeZero())
}

func errorAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error) //nolint:errorlint // a direct net.Error from Read
	if ok {
		*target = ne
	}
	return ok
}
