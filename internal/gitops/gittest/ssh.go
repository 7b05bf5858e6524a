package gittest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// SSHServer serves the repositories over ssh: an in-process SSH server (the
// protocol from golang.org/x/crypto/ssh) that runs the real git-upload-pack
// for `git-upload-pack '<repo>'` exec requests, accepting one client key.
type SSHServer struct {
	// URL is the base URL, ssh://git@127.0.0.1:PORT/ .
	URL string
	// ClientKey is the PEM private key the server accepts.
	ClientKey []byte
	// KnownHosts is a known_hosts line for the server's host key.
	KnownHosts []byte
}

// ServeSSH starts the SSH server over Root until the test ends.
func (s *Server) ServeSSH(t testing.TB) *SSHServer {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	clientPub, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) == string(allowed.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("unknown key")
	}}
	cfg.AddHostKey(hostSigner)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.serveSSHConn(c, cfg)
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	host := "[127.0.0.1]:" + strconv.Itoa(port)
	return &SSHServer{
		URL:        "ssh://git@127.0.0.1:" + strconv.Itoa(port) + "/",
		ClientKey:  pem.EncodeToMemory(blk),
		KnownHosts: []byte(host + " " + string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))),
	}
}

func (s *Server) serveSSHConn(c net.Conn, cfg *ssh.ServerConfig) {
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		_ = c.Close()
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go s.serveSession(ch, creqs)
	}
}

func (s *Server) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type == "env" {
			_ = req.Reply(true, nil)
			continue
		}
		if req.Type != "exec" || len(req.Payload) < 4 {
			_ = req.Reply(false, nil)
			continue
		}
		n := binary.BigEndian.Uint32(req.Payload)
		command := string(req.Payload[4 : 4+n])
		cmd, repo, ok := strings.Cut(command, " ")
		if !ok || cmd != "git-upload-pack" {
			_ = req.Reply(false, nil)
			return
		}
		repo = strings.Trim(repo, "'\"")
		path := filepath.Join(s.Root, filepath.Clean("/"+repo))
		_ = req.Reply(true, nil)
		c := exec.Command(s.git, "upload-pack", path)
		c.Stdin, c.Stdout, c.Stderr = ch, ch, io.Discard
		status := 0
		if err := c.Run(); err != nil {
			status = 1
		}
		_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(status)))
		return
	}
}
