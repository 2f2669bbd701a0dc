package udp

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

// TestReverseSpoofedHello: a client holding the control connection sends
// its reverse test's hellos with a forged source (here: from a socket that
// stands for the victim; the client cannot read what reaches it). The
// responder sends the victim only a cookie datagram per hello, of the
// hello's size, and no data; a wrong echo, or none, ends the session with
// a refusal. A second client that echoes the cookie it received at its own
// address gets data there, never at the victim's.
func TestReverseSpoofedHello(t *testing.T) {
	addr := probetest.Start(t, NewHandler())
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		echo    string // "none", "guess" or "own": what the client echoes
		wantErr string
	}{
		{"no echo", "none", "did not echo the cookie"},
		{"guessed cookie", "guess", "matches no address"},
		{"own address's cookie", "own", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			victim, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer victim.Close()
			own, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer own.Close()
			spec := probe.Spec{Kind: probe.KindUDP, Target: addr, Reverse: true, Duration: probe.Duration(300 * time.Millisecond),
				RateBps: rate(10_000_000), Timeout: probe.Duration(2 * time.Second)}
			cli, err := engine.Dial(ctx, spec, engine.SockOpts{})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			sd, _ := json.Marshal(startData{})
			if err := cli.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStart, Data: sd}); err != nil {
				t.Fatal(err)
			}
			hello := make([]byte, HeaderLen)
			Packet{Session: cli.Session, Flags: FlagHello}.Put(hello)
			const hellos = 10
			for i := 0; i < hellos; i++ { // "spoofed": from the victim's address
				if _, err := victim.WriteToUDP(hello, raddr); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			switch c.echo {
			case "guess":
				b, _ := json.Marshal(hex.EncodeToString(make([]byte, CookieLen)))
				_ = cli.Ctrl.Send(ctx, engine.Message{Type: msgCookie, Data: b})
			case "own":
				if _, err := own.WriteToUDP(hello, raddr); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 2048)
				_ = own.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, err := own.Read(buf)
				if err != nil || n != engine.PacketHeaderLen+CookieLen || buf[3]&FlagCookie == 0 {
					t.Fatalf("no cookie at the client's own address: %d bytes, %v", n, err)
				}
				b, _ := json.Marshal(hex.EncodeToString(buf[engine.PacketHeaderLen:n]))
				_ = cli.Ctrl.Send(ctx, engine.Message{Type: msgCookie, Data: b})
			}
			m, err := cli.Ctrl.Expect(ctx, engine.MsgStart)
			if c.wantErr != "" {
				var re *engine.RemoteError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %+v, %v; want the responder's refusal with %q", m, err, c.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("proven client not started: %v", err)
				}
				// Data comes to the proven address.
				buf := make([]byte, 2048)
				_ = own.SetReadDeadline(time.Now().Add(5 * time.Second))
				data := 0
				for data == 0 {
					n, err := own.Read(buf)
					if err != nil {
						t.Fatalf("no data at the proven address: %v", err)
					}
					if n >= HeaderLen && buf[3]&(FlagHello|FlagCookie) == 0 {
						data++
					}
				}
			}
			// The victim got at most a cookie per hello, each the hello's
			// size, and no data.
			buf := make([]byte, 2048)
			cookies := 0
			for {
				_ = victim.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				n, err := victim.Read(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if n != len(hello) || buf[3]&FlagCookie == 0 {
					t.Fatalf("the victim got a %d-byte datagram with flags %#x: data went to an address that never proved itself", n, buf[3])
				}
				cookies++
			}
			if cookies > hellos {
				t.Errorf("the victim got %d cookies for %d hellos", cookies, hellos)
			}
			t.Logf("victim received %d cookie datagrams of %d bytes for %d forged hellos, no data", cookies, len(hello), hellos)
		})
	}
}

// TestForwardResultNotToForgedSource: a forward test's result datagram
// goes only to the control connection's host; data datagrams forged from
// another address (127.0.0.2 here, the control connection is from
// 127.0.0.1) do not make the responder send its result there.
func TestForwardResultNotToForgedSource(t *testing.T) {
	addr := probetest.Start(t, NewHandler())
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Skipf("cannot bind 127.0.0.2: %v", err)
	}
	defer victim.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	spec := probe.Spec{Kind: probe.KindUDP, Target: addr, Duration: probe.Duration(200 * time.Millisecond), RateBps: rate(1_000_000)}
	cli, err := engine.DialWithKey(ctx, spec, engine.SockOpts{}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sd, _ := json.Marshal(startData{})
	if err := cli.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStart, Data: sd}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Ctrl.Expect(ctx, engine.MsgStart); err != nil {
		t.Fatal(err)
	}
	pkt := make([]byte, 200)
	Packet{Session: cli.Session, Seq: 0, SentNs: time.Now().UnixNano()}.Put(pkt)
	if _, err := victim.WriteToUDP(pkt, raddr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	tx, _ := json.Marshal(txReport{Sent: 1, Bytes: 200, DurationNs: int64(200 * time.Millisecond)})
	if err := cli.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStop, Data: tx}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cli.Ctrl.Expect(ctx, engine.MsgResult)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), msgInterval) {
			t.Fatalf("no result on the control connection: %v (%+v)", err, m)
		}
	}
	_ = victim.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := victim.Read(make([]byte, 1<<16)); err == nil {
		t.Fatalf("the forged source got a %d-byte datagram", n)
	}
}
