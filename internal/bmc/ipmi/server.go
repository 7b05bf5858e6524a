// Package ipmi is an IPMI v2.0 BMC over LAN (RMCP+, what `ipmitool -I
// lanplus` and freeipmi speak), written from the specification (IPMI v2.0
// rev 1.1, §13): no library serves it.
//
// What it answers:
//
//   - before a session: Get Channel Authentication Capabilities (v1.5 or
//     RMCP+ framing) and Get Channel Cipher Suites; Open Session and RAKP
//     1-4 for cipher suites 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128)
//     and 17 (RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128). Every other
//     packet without a session is dropped unanswered. Cipher suite 0 (no
//     authentication), anonymous and null user names and IPMI v1.5
//     sessions are refused;
//   - in a session (every packet integrity-checked and encrypted): Get
//     Device ID, Set Session Privilege Level, Close Session, Get Chassis
//     Status, Chassis Control, Set and Get System Boot Options.
//
// One user per BMC, whose name and password the [Backend] gives at every
// session setup, so a rotated password takes effect for the next session.
// Sessions expire after SessionTimeout without a packet; at most
// MaxSessions exist at once (half-open ones included, and those expire
// after HandshakeTimeout).
package ipmi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// ChassisAction is a Chassis Control request.
type ChassisAction byte

// Chassis Control actions (IPMI v2.0 §28.3).
const (
	PowerDown    ChassisAction = 0
	PowerUp      ChassisAction = 1
	PowerCycle   ChassisAction = 2
	HardReset    ChassisAction = 3
	SoftShutdown ChassisAction = 5
)

func (a ChassisAction) String() string {
	switch a {
	case PowerDown:
		return "power off"
	case PowerUp:
		return "power on"
	case PowerCycle:
		return "power cycle"
	case HardReset:
		return "power reset"
	case SoftShutdown:
		return "power soft"
	}
	return "unknown"
}

// BootDevice is a boot device of Set System Boot Options.
type BootDevice string

// Boot devices.
const (
	BootNone  BootDevice = "none"
	BootPXE   BootDevice = "pxe"
	BootDisk  BootDevice = "disk"
	BootCDROM BootDevice = "cdrom"
)

// Caller is who sent an accepted command.
type Caller struct {
	// Addr is the remote IP address.
	Addr string
	// User is the session's user name.
	User string
}

// Backend is the machine behind the BMC.
type Backend interface {
	// Credentials are the BMC user's name and password; ok is false while
	// there are none (every session is then refused).
	Credentials() (user, password string, ok bool)
	// PoweredOn is the machine's observed power state.
	PoweredOn(ctx context.Context) (bool, error)
	// Chassis carries out a Chassis Control action.
	Chassis(ctx context.Context, a ChassisAction, c Caller) error
	// SetBoot sets the boot device override; persistent false is the next
	// boot only.
	SetBoot(ctx context.Context, d BootDevice, persistent bool, c Caller) error
	// Boot is the boot device override as set.
	Boot(ctx context.Context) (d BootDevice, persistent bool, err error)
}

// Defaults of [Server].
const (
	DefaultMaxSessions      = 16
	DefaultSessionTimeout   = 60 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
)

// Server is one BMC's IPMI endpoint. Set Backend before Serve; the zero
// values of the other fields take their defaults.
type Server struct {
	Backend Backend
	// GUID is the BMC's GUID, used in RAKP.
	GUID [16]byte
	// MaxSessions bounds the sessions, half-open ones included.
	MaxSessions int
	// SessionTimeout closes a session idle for that long.
	SessionTimeout time.Duration
	// HandshakeTimeout drops a session not activated within it.
	HandshakeTimeout time.Duration
	// Log logs refusals at V(1).
	Log logr.Logger
	// now is time.Now; tests replace it (and skew, what they add).
	now  func() time.Time
	skew *atomic.Int64

	mu       sync.Mutex
	sessions map[uint32]*session
	// bootInProgress is parameter 0 of the boot options.
	bootInProgress byte
}

type session struct {
	id, consoleID uint32
	suite         suite
	maxPriv       byte // granted at Open Session
	priv          byte // current
	role          byte // RAKP 1 role byte as sent
	user          string
	password      []byte
	rm, rc        [16]byte
	keys          *keys
	active        bool
	created, seen time.Time
	outSeq        uint32
	inHigh        uint32
	inWindow      uint32
}

func (s *Server) defaults() {
	if s.MaxSessions <= 0 {
		s.MaxSessions = DefaultMaxSessions
	}
	if s.SessionTimeout <= 0 {
		s.SessionTimeout = DefaultSessionTimeout
	}
	if s.HandshakeTimeout <= 0 {
		s.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.sessions == nil {
		s.sessions = map[uint32]*session{}
	}
}

// Serve answers packets on conn until ctx ends or conn is closed.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	go func() {
		<-ctx.Done()
		_ = conn.Close()
	}()
	buf := make([]byte, 1024)
	for {
		n, addr, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if out := s.Handle(ctx, buf[:n], addr); out != nil {
			_, _ = conn.WriteTo(out, addr)
		}
	}
}

// Sessions is the number of sessions, half-open ones included.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaults()
	s.expire()
	return len(s.sessions)
}

// Handle answers one datagram from addr; nil means no answer. It never
// panics, whatever the bytes.
func (s *Server) Handle(ctx context.Context, b []byte, addr net.Addr) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaults()
	s.expire()
	p, err := decodePacket(b, func(id uint32) int {
		if ss := s.sessions[id]; ss != nil && ss.active {
			return ss.suite.authCodeLen()
		}
		return 0
	})
	if err != nil {
		s.Log.V(1).Info("Dropping packet", "from", addr.String(), "reason", err.Error())
		return nil
	}
	if !p.rmcpp {
		// IPMI v1.5 framing: only the session-less discovery commands.
		if p.sessionID != 0 {
			return nil
		}
		return s.sessionless(p, false)
	}
	switch p.payloadType {
	case payloadOpenSessReq:
		if p.sessionID != 0 || p.authed || p.encrypted {
			return nil
		}
		return s.openSession(p.payload)
	case payloadRAKP1:
		if p.sessionID != 0 || p.authed || p.encrypted {
			return nil
		}
		return s.rakp1(p.payload)
	case payloadRAKP3:
		if p.sessionID != 0 || p.authed || p.encrypted {
			return nil
		}
		return s.rakp3(p.payload)
	case payloadIPMI:
		if p.sessionID == 0 {
			if p.authed || p.encrypted {
				return nil
			}
			return s.sessionless(p, true)
		}
		return s.inSession(ctx, p, addr)
	}
	return nil
}

// expire drops idle sessions and stale handshakes.
func (s *Server) expire() {
	now := s.now()
	for id, ss := range s.sessions {
		if (ss.active && now.Sub(ss.seen) > s.SessionTimeout) || (!ss.active && now.Sub(ss.created) > s.HandshakeTimeout) {
			delete(s.sessions, id)
		}
	}
}

// sessionless answers Get Channel Authentication Capabilities and Get
// Channel Cipher Suites outside a session, in the framing they came in.
func (s *Server) sessionless(p *packet, rmcpp bool) []byte {
	m, err := decodeMessage(p.payload)
	if err != nil || m.netFn != netFnApp {
		return nil
	}
	var rsp []byte
	switch m.cmd {
	case cmdGetChannelAuthCaps:
		cc, data := channelAuthCaps(m.data)
		rsp = encodeResponse(m, cc, data)
	case cmdGetChannelCipherSuites:
		cc, data := channelCipherSuites(m.data)
		rsp = encodeResponse(m, cc, data)
	default:
		return nil
	}
	if rmcpp {
		return encodeRMCPP(payloadIPMI, false, 0, 0, rsp, nil)
	}
	return encodeV15(rsp)
}

func channelAuthCaps(d []byte) (byte, []byte) {
	if len(d) != 2 {
		return ccReqDataLength, nil
	}
	if ch := d[0] & 0x0f; ch != 0x0e && ch != 0x01 {
		return ccInvalidDataField, nil
	}
	return ccOK, []byte{
		0x01, // channel
		0x80, // IPMI v2.0 extended capabilities; no IPMI v1.5 authentication type
		0x04, // non-null user names only: no anonymous login, no null user
		0x02, // IPMI v2.0 (RMCP+) only
		0, 0, 0, 0,
	}
}

// cipherSuiteRecords are the records of Get Channel Cipher Suites.
var cipherSuiteRecords = func() []byte {
	var out []byte
	for _, s := range suites {
		out = append(out, 0xc0, s.id, s.auth, 0x40|s.integrity, 0x80|s.conf)
	}
	return out
}()

func channelCipherSuites(d []byte) (byte, []byte) {
	if len(d) != 3 {
		return ccReqDataLength, nil
	}
	if ch := d[0] & 0x0f; ch != 0x0e && ch != 0x01 {
		return ccInvalidDataField, nil
	}
	if d[1] != payloadIPMI {
		return ccInvalidDataField, nil
	}
	idx := int(d[2]&0x3f) * 16
	out := []byte{0x01}
	if idx < len(cipherSuiteRecords) {
		out = append(out, cipherSuiteRecords[idx:min(idx+16, len(cipherSuiteRecords))]...)
	}
	return ccOK, out
}

func (s *Server) newSessionID() uint32 {
	for {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id := binary.LittleEndian.Uint32(b[:])
		if id != 0 && s.sessions[id] == nil {
			return id
		}
	}
}

func (s *Server) openSession(d []byte) []byte {
	if len(d) < 32 {
		return nil
	}
	tag, console := d[0], binary.LittleEndian.Uint32(d[4:8])
	fail := func(status byte) []byte {
		out := []byte{tag, status, 0, 0}
		out = binary.LittleEndian.AppendUint32(out, console)
		return encodeRMCPP(payloadOpenSessRsp, false, 0, 0, out, nil)
	}
	if d[8] != 0x00 || d[16] != 0x01 || d[24] != 0x02 {
		return fail(statusIllegalParameter)
	}
	su, ok := findSuite(d[12]&0x3f, d[20]&0x3f, d[28]&0x3f)
	if !ok {
		return fail(statusNoCipherSuiteMatch)
	}
	priv := d[1] & 0x0f
	if priv == 0 {
		priv = privAdministrator
	}
	if priv > privAdministrator {
		return fail(statusInvalidRole)
	}
	if console == 0 {
		return fail(statusInvalidSessionID)
	}
	if len(s.sessions) >= s.MaxSessions {
		return fail(statusNoResources)
	}
	now := s.now()
	ss := &session{id: s.newSessionID(), consoleID: console, suite: su, maxPriv: priv, created: now, seen: now}
	s.sessions[ss.id] = ss
	out := []byte{tag, statusOK, priv, 0}
	out = binary.LittleEndian.AppendUint32(out, console)
	out = binary.LittleEndian.AppendUint32(out, ss.id)
	out = append(out, 0x00, 0, 0, 8, su.auth, 0, 0, 0)
	out = append(out, 0x01, 0, 0, 8, su.integrity, 0, 0, 0)
	out = append(out, 0x02, 0, 0, 8, su.conf, 0, 0, 0)
	return encodeRMCPP(payloadOpenSessRsp, false, 0, 0, out, nil)
}

func (s *Server) rakp1(d []byte) []byte {
	if len(d) < 28 {
		return nil
	}
	tag, id := d[0], binary.LittleEndian.Uint32(d[4:8])
	ss := s.sessions[id]
	fail := func(status byte, console uint32) []byte {
		out := []byte{tag, status, 0, 0}
		out = binary.LittleEndian.AppendUint32(out, console)
		return encodeRMCPP(payloadRAKP2, false, 0, 0, out, nil)
	}
	if ss == nil || ss.active || ss.password != nil {
		return fail(statusInvalidSessionID, 0)
	}
	role, ulen := d[24], int(d[27])
	if ulen > 16 || len(d) < 28+ulen {
		delete(s.sessions, id)
		return fail(statusInvalidNameLength, ss.consoleID)
	}
	if p := role & 0x0f; p == 0 || p > ss.maxPriv {
		delete(s.sessions, id)
		return fail(statusUnauthorizedRole, ss.consoleID)
	}
	name := string(d[28 : 28+ulen])
	user, password, ok := s.Backend.Credentials()
	if !ok || name == "" || !hmac.Equal([]byte(name), []byte(user)) {
		delete(s.sessions, id)
		s.Log.V(1).Info("Refusing IPMI session: unknown user", "user", name)
		return fail(statusUnauthorizedName, ss.consoleID)
	}
	copy(ss.rm[:], d[8:24])
	_, _ = rand.Read(ss.rc[:])
	ss.role, ss.user, ss.password = role, name, []byte(password)
	var sid, cid [4]byte
	binary.LittleEndian.PutUint32(sid[:], ss.id)
	binary.LittleEndian.PutUint32(cid[:], ss.consoleID)
	code := ss.suite.mac(ss.password, cid[:], sid[:], ss.rm[:], ss.rc[:], s.GUID[:], []byte{role, byte(ulen)}, []byte(name))
	out := []byte{tag, statusOK, 0, 0}
	out = append(out, cid[:]...)
	out = append(out, ss.rc[:]...)
	out = append(out, s.GUID[:]...)
	out = append(out, code...)
	return encodeRMCPP(payloadRAKP2, false, 0, 0, out, nil)
}

func (s *Server) rakp3(d []byte) []byte {
	if len(d) < 8 {
		return nil
	}
	tag, id := d[0], binary.LittleEndian.Uint32(d[4:8])
	ss := s.sessions[id]
	if ss == nil || ss.active || ss.password == nil {
		out := []byte{tag, statusInvalidSessionID, 0, 0, 0, 0, 0, 0}
		return encodeRMCPP(payloadRAKP4, false, 0, 0, out, nil)
	}
	fail := func(status byte) []byte {
		delete(s.sessions, id)
		out := []byte{tag, status, 0, 0}
		out = binary.LittleEndian.AppendUint32(out, ss.consoleID)
		return encodeRMCPP(payloadRAKP4, false, 0, 0, out, nil)
	}
	if d[1] != statusOK {
		delete(s.sessions, id) // the console gave up
		return nil
	}
	var cid [4]byte
	binary.LittleEndian.PutUint32(cid[:], ss.consoleID)
	want := ss.suite.mac(ss.password, ss.rc[:], cid[:], []byte{ss.role, byte(len(ss.user))}, []byte(ss.user)) //nolint:gosec // at most 16 (RAKP 1)
	if !hmac.Equal(want, d[8:]) {
		s.Log.V(1).Info("Refusing IPMI session: wrong password", "user", ss.user)
		return fail(statusInvalidIntegrity)
	}
	sik := ss.suite.mac(ss.password, ss.rm[:], ss.rc[:], []byte{ss.role, byte(len(ss.user))}, []byte(ss.user)) //nolint:gosec // at most 16 (RAKP 1)
	k, err := deriveKeys(ss.suite, sik)
	if err != nil {
		return fail(statusNoResources)
	}
	var sid [4]byte
	binary.LittleEndian.PutUint32(sid[:], ss.id)
	icv := ss.suite.mac(sik, ss.rm[:], sid[:], s.GUID[:])[:ss.suite.rakp4Len()]
	ss.keys, ss.active, ss.priv, ss.seen = k, true, ss.role&0x0f, s.now()
	ss.password = nil
	out := []byte{tag, statusOK, 0, 0}
	out = append(out, cid[:]...)
	out = append(out, icv...)
	return encodeRMCPP(payloadRAKP4, false, 0, 0, out, nil)
}

// acceptSeq is the sliding window of IPMI v2.0 §6.12.13: a sequence number
// is accepted once, if above the highest seen or at most 16 below it.
func (ss *session) acceptSeq(seq uint32) bool {
	if seq == 0 {
		return false
	}
	switch {
	case seq > ss.inHigh:
		shift := seq - ss.inHigh
		if shift >= 32 {
			ss.inWindow = 0
		} else {
			ss.inWindow <<= shift
		}
		ss.inWindow |= 1
		ss.inHigh = seq
		return true
	case ss.inHigh-seq < 16:
		bit := uint32(1) << (ss.inHigh - seq)
		if ss.inWindow&bit != 0 {
			return false
		}
		ss.inWindow |= bit
		return true
	}
	return false
}

func (s *Server) inSession(ctx context.Context, p *packet, addr net.Addr) []byte {
	ss := s.sessions[p.sessionID]
	if ss == nil || !ss.active || !p.authed || !p.encrypted {
		return nil
	}
	if !ss.keys.verify(p.signed, p.authCode) || !ss.acceptSeq(p.seq) {
		return nil
	}
	plain, err := ss.keys.decrypt(p.payload)
	if err != nil {
		return nil
	}
	m, err := decodeMessage(plain)
	if err != nil {
		return nil
	}
	ss.seen = s.now()
	cc, data, closeAfter := s.command(ctx, ss, m, addr)
	rsp := encodeResponse(m, cc, data)
	ss.outSeq++
	out := encodeRMCPP(payloadIPMI, true, ss.consoleID, ss.outSeq, ss.keys.encrypt(rsp), ss.keys.sign)
	if closeAfter {
		delete(s.sessions, ss.id)
	}
	return out
}

func host(addr net.Addr) string {
	if u, ok := addr.(*net.UDPAddr); ok {
		return u.IP.String()
	}
	h, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return h
}

func (s *Server) command(ctx context.Context, ss *session, m *message, addr net.Addr) (cc byte, data []byte, closeAfter bool) {
	caller := Caller{Addr: host(addr), User: ss.user}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	need := func(p byte) bool { return ss.priv >= p }
	switch {
	case m.netFn == netFnApp && m.cmd == cmdGetDeviceID:
		return ccOK, []byte{
			0x20,       // device ID
			0x01,       // device revision; no SDRs
			0x01, 0x00, // firmware 1.00, normal operation
			0x02,             // IPMI 2.0
			0x80,             // chassis device
			0x00, 0x00, 0x00, // manufacturer: none registered
			0x01, 0x00, // product ID
		}, false
	case m.netFn == netFnApp && m.cmd == cmdGetChannelAuthCaps:
		cc, d := channelAuthCaps(m.data)
		return cc, d, false
	case m.netFn == netFnApp && m.cmd == cmdGetChannelCipherSuites:
		cc, d := channelCipherSuites(m.data)
		return cc, d, false
	case m.netFn == netFnApp && m.cmd == cmdSetSessionPrivilegeLevel:
		if len(m.data) != 1 {
			return ccReqDataLength, nil, false
		}
		p := m.data[0] & 0x0f
		switch {
		case p == 0:
		case p < privUser || p > privAdministrator:
			return 0x80, nil, false // requested level not available for this user
		case p > ss.maxPriv || p > ss.role&0x0f:
			return 0x81, nil, false // requested level exceeds the user's limit
		default:
			ss.priv = p
		}
		return ccOK, []byte{ss.priv}, false
	case m.netFn == netFnApp && m.cmd == cmdCloseSession:
		if len(m.data) < 4 {
			return ccReqDataLength, nil, false
		}
		if binary.LittleEndian.Uint32(m.data[:4]) != ss.id {
			return 0x87, nil, false // invalid session ID
		}
		return ccOK, nil, true
	case m.netFn == netFnChassis && m.cmd == cmdGetChassisStatus:
		if !need(privUser) {
			return ccInsufficientPriv, nil, false
		}
		on, err := s.Backend.PoweredOn(ctx)
		if err != nil {
			return ccUnspecified, nil, false
		}
		var state byte
		if on {
			state = 0x01
		}
		return ccOK, []byte{state | 0x40, 0x00, 0x00, 0x00}, false // policy: previous state
	case m.netFn == netFnChassis && m.cmd == cmdChassisControl:
		if !need(privOperator) {
			return ccInsufficientPriv, nil, false
		}
		if len(m.data) != 1 {
			return ccReqDataLength, nil, false
		}
		a := ChassisAction(m.data[0] & 0x0f)
		switch a {
		case PowerDown, PowerUp, PowerCycle, HardReset, SoftShutdown:
		default:
			return ccInvalidDataField, nil, false
		}
		if err := s.Backend.Chassis(ctx, a, caller); err != nil {
			s.Log.Error(err, "Chassis control failed", "action", a.String())
			return ccUnspecified, nil, false
		}
		return ccOK, nil, false
	case m.netFn == netFnChassis && m.cmd == cmdSetSystemBootOptions:
		if !need(privOperator) {
			return ccInsufficientPriv, nil, false
		}
		return s.setBootOptions(ctx, m.data, caller), nil, false
	case m.netFn == netFnChassis && m.cmd == cmdGetSystemBootOptions:
		if !need(privUser) {
			return ccInsufficientPriv, nil, false
		}
		cc, d := s.getBootOptions(ctx, m.data)
		return cc, d, false
	}
	return ccInvalidCommand, nil, false
}

func (s *Server) setBootOptions(ctx context.Context, d []byte, caller Caller) byte {
	if len(d) < 1 {
		return ccReqDataLength
	}
	switch d[0] & 0x7f {
	case 0: // set in progress
		if len(d) != 2 {
			return ccReqDataLength
		}
		s.bootInProgress = d[1] & 0x03
		return ccOK
	case 3, 4: // service partition scan, boot info acknowledge: accepted
		return ccOK
	case 5: // boot flags
		if len(d) < 3 {
			return ccReqDataLength
		}
		dev := BootNone
		if d[1]&0x80 != 0 {
			switch (d[2] >> 2) & 0x0f {
			case 0:
			case 1:
				dev = BootPXE
			case 2, 3:
				dev = BootDisk
			case 5:
				dev = BootCDROM
			default:
				return ccInvalidDataField
			}
		}
		if err := s.Backend.SetBoot(ctx, dev, d[1]&0x40 != 0, caller); err != nil {
			s.Log.Error(err, "Setting the boot device failed", "device", dev)
			return ccUnspecified
		}
		return ccOK
	}
	return ccParamUnsupported
}

func (s *Server) getBootOptions(ctx context.Context, d []byte) (byte, []byte) {
	if len(d) != 3 {
		return ccReqDataLength, nil
	}
	switch d[0] & 0x7f {
	case 0:
		return ccOK, []byte{0x01, 0x00, s.bootInProgress}
	case 5:
		dev, persistent, err := s.Backend.Boot(ctx)
		if err != nil {
			return ccUnspecified, nil
		}
		var f0, f1 byte
		switch dev {
		case BootPXE:
			f1 = 1 << 2
		case BootDisk:
			f1 = 2 << 2
		case BootCDROM:
			f1 = 5 << 2
		}
		if dev != BootNone {
			f0 = 0x80
			if persistent {
				f0 |= 0x40
			}
		}
		return ccOK, []byte{0x01, 0x05, f0, f1, 0, 0, 0}
	}
	return ccParamUnsupported, nil
}
