package udp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// The reverse test's return-address handshake. Before it sends data, the
// responder must know that the address it will send to belongs to the
// client that holds the control connection; the source address of a hello
// datagram alone proves nothing (it can be forged, and the responder
// would then flood whoever was named). So:
//
//  1. the client sends hello datagrams from its data socket;
//  2. for each hello the responder sends, to the address the hello came
//     from, one cookie datagram of the hello's size (no amplification):
//     16 bytes of HMAC-SHA-256 over that address under a secret of the
//     session;
//  3. the client echoes the cookie it received on the control
//     connection;
//  4. the responder sends data only to the address whose cookie came
//     back, and to nothing if none did.
//
// Only a host that receives datagrams at the address can echo its cookie,
// so a forged hello costs its victim one small datagram and the session
// fails. Decision: the cookie travels to the UDP address and back over the
// control connection (return routability, as QUIC's address validation),
// not the other way round: a cookie sent over the control connection and
// echoed from the UDP source would be known to the very client that forges
// the source address.

// msgCookie is the client's echo of the cookie, on the control connection.
const msgCookie = "udp-cookie"

// Bounds of the handshake on the responder's side.
const (
	// maxCandidates bounds the addresses whose hellos get a cookie.
	maxCandidates = 8
	// maxCookieSends bounds the cookie datagrams one session sends.
	maxCookieSends = 256
	// cookieResend is how often the client repeats its hello until a
	// cookie arrives.
	cookieResend = 20 * time.Millisecond
)

// cookieFor is the cookie of address to under the session's secret.
func cookieFor(secret []byte, to netip.AddrPort) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(to.String()))
	return m.Sum(nil)[:CookieLen]
}

// awaitReturnAddress runs the responder's side of the handshake and
// returns the address proven to be the client's.
func awaitReturnAddress(ctx context.Context, s *engine.Session, wait time.Duration) (netip.AddrPort, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return netip.AddrPort{}, fmt.Errorf("udp cookie secret: %w", err)
	}
	hellos := make(chan netip.AddrPort, 16)
	s.HandlePackets(func(pkt []byte, from netip.AddrPort, _ engine.RxInfo) {
		if len(pkt) >= engine.PacketHeaderLen && pkt[2] == engine.PacketUDPData && pkt[3]&FlagHello != 0 {
			select {
			case hellos <- from:
			default: // a flood of hellos: the client repeats them anyway
			}
		}
	})
	type echoed struct {
		cookie []byte
		err    error
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	echo := make(chan echoed, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		m, err := s.Ctrl.Expect(wctx, msgCookie)
		if err != nil {
			echo <- echoed{err: err}
			return
		}
		var text string
		if err := json.Unmarshal(m.Data, &text); err != nil {
			echo <- echoed{err: fmt.Errorf("decode the client's cookie: %w", err)}
			return
		}
		c, err := hex.DecodeString(text)
		echo <- echoed{cookie: c, err: err}
	})
	defer wg.Wait() // the control connection is the caller's again after this
	candidates := map[netip.AddrPort]bool{}
	sends := 0
	pkt := make([]byte, engine.PacketHeaderLen+CookieLen)
	engine.PacketHeader{Type: engine.PacketUDPData, Flags: FlagCookie, Session: s.ID}.Put(pkt)
	for {
		select {
		case from := <-hellos:
			if !candidates[from] {
				if len(candidates) >= maxCandidates {
					continue
				}
				candidates[from] = true
			}
			if sends >= maxCookieSends {
				continue
			}
			sends++
			copy(pkt[engine.PacketHeaderLen:], cookieFor(secret, from))
			_ = s.WriteTo(pkt, from)
		case e := <-echo:
			if e.err != nil {
				if wctx.Err() != nil && ctx.Err() == nil {
					if len(candidates) == 0 {
						return netip.AddrPort{}, fmt.Errorf("no hello datagram from the client within %v: is UDP to the responder's port blocked?", wait)
					}
					return netip.AddrPort{}, fmt.Errorf("the client did not echo the cookie sent to %s within %v: is UDP from the responder's port blocked?", addrList(candidates), wait)
				}
				return netip.AddrPort{}, fmt.Errorf("wait for the client's cookie: %w", e.err)
			}
			var (
				found bool
				to    netip.AddrPort
			)
			for addr := range candidates { // every candidate is compared
				if hmac.Equal(e.cookie, cookieFor(secret, addr)) {
					found, to = true, addr
				}
			}
			if !found {
				return netip.AddrPort{}, errors.New("the cookie the client echoed matches no address its hellos came from: nothing is sent")
			}
			s.Log.Debug("udp return address proven", "to", to)
			return to, nil
		}
	}
}

func addrList(m map[netip.AddrPort]bool) string {
	s := ""
	for a := range m {
		if s != "" {
			s += ", "
		}
		s += a.String()
	}
	return s
}

// startReverse is the client's side: it asks the responder to start,
// sends hellos from conn until a cookie comes back, echoes it on the
// control connection and waits for the responder's go-ahead.
func startReverse(ctx context.Context, cli *engine.Client, conn *net.UDPConn, spec probe.Spec, sd startData) error {
	b, _ := json.Marshal(sd)
	if err := cli.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStart, Data: b}); err != nil {
		return err
	}
	hctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	hello := make([]byte, HeaderLen)
	Packet{Session: cli.Session, Flags: FlagHello}.Put(hello)
	wg.Go(func() {
		t := time.NewTicker(cookieResend)
		defer t.Stop()
		for {
			_, _ = conn.Write(hello)
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
		}
	})
	wg.Go(func() {
		defer stop() // no more hellos once the cookie is echoed
		buf := make([]byte, 2048)
		for hctx.Err() == nil {
			_ = conn.SetReadDeadline(time.Now().Add(cookieResend))
			n, err := conn.Read(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) || udpio.IsRefused(err) {
					continue
				}
				return
			}
			h, ok := engine.ParsePacketHeader(buf[:n])
			if !ok || h.Session != cli.Session || h.Flags&FlagCookie == 0 || n < engine.PacketHeaderLen+CookieLen {
				continue
			}
			text, _ := json.Marshal(hex.EncodeToString(buf[engine.PacketHeaderLen : engine.PacketHeaderLen+CookieLen]))
			_ = cli.Ctrl.Send(ctx, engine.Message{Type: msgCookie, Data: text})
			return
		}
	})
	wctx, cancel := context.WithTimeout(ctx, spec.TimeoutOr(engine.DefaultControlTimeout))
	_, err := cli.Ctrl.Expect(wctx, engine.MsgStart)
	cancel()
	stop()
	wg.Wait()
	_ = conn.SetReadDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("start the test: %w", err)
	}
	return nil
}
