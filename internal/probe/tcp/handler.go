package tcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// Handler is the responder side of the tcp probe. It never opens sockets:
// it takes the session's data connections and sets options on them.
type Handler struct{}

// Kind returns "tcp".
func (Handler) Kind() string { return probe.KindTCP }

// Serve runs one test: it accepts the data connections, waits for the
// client's start, then receives (or sends, in reverse mode) and reports.
func (Handler) Serve(ctx context.Context, s *engine.Session) error {
	cfg, err := validate(s.Spec)
	if err != nil {
		return fmt.Errorf("invalid tcp probe: %w", err)
	}
	conns := make([]net.Conn, cfg.streams)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	for range cfg.streams {
		dc, err := s.AcceptData(sctx)
		if err != nil {
			return err
		}
		if dc.Stream < 0 || dc.Stream >= cfg.streams || conns[dc.Stream] != nil {
			_ = dc.Close()
			return fmt.Errorf("data connection with bad stream index %d (want 0-%d, each once)", dc.Stream, cfg.streams-1)
		}
		conns[dc.Stream] = dc.Conn
		var errs []error
		errs = append(errs, setBuffers(dc.Conn, cfg.window), EnableArrivedTOS(dc.Conn))
		if cfg.reverse {
			errs = append(errs, setTOS(dc.Conn, cfg.tos))
		}
		if err := errors.Join(errs...); err != nil {
			s.Log.Debug("data connection options", "stream", dc.Stream, "err", err)
		}
		if cfg.reverse && cfg.congestion != "" {
			if err := setCongestion(dc.Conn, cfg.congestion); err != nil {
				return err
			}
		}
	}
	if _, err := s.Ctrl.Expect(sctx, engine.MsgStart); err != nil {
		return fmt.Errorf("wait for start: %w", err)
	}
	if err := s.Ctrl.Send(sctx, engine.Message{Type: msgGo}); err != nil {
		return err
	}
	t0 := time.Now()
	rctx, rcancel := context.WithDeadline(ctx, t0.Add(cfg.duration+3*grace))
	defer rcancel()

	sd := newSide(conns, cfg.reverse, cfg, t0, func(smp sample) {
		b, err := json.Marshal(smp)
		if err == nil {
			err = s.Ctrl.Send(rctx, engine.Message{Type: msgInterval, Data: b})
		}
		if err != nil {
			s.Log.Debug("send interval sample", "err", err)
		}
	})
	sd.accepted = true
	stopCh := make(chan error, 1)
	go func() {
		m, err := s.Ctrl.RecvNoDeadline(rctx)
		if err == nil && m.Type != engine.MsgStop {
			err = fmt.Errorf("control protocol: want %q, got %q", engine.MsgStop, m.Type)
		}
		stopCh <- err
	}()
	sd.start()
	stopped := false
	var stopErr error
	select {
	case <-sd.doneCh:
	case stopErr = <-stopCh:
		stopped = true
		if stopErr != nil || sd.sender {
			// The client gave up (or stopped before we finished sending).
			sd.abort()
		} else {
			// The client has finished sending: give our reads a bounded
			// time to drain to the end of each stream.
			t := time.AfterFunc(grace, sd.abort)
			defer t.Stop()
		}
	case <-rctx.Done():
		sd.abort()
	}
	streamErr := sd.wait(rctx)
	res := sd.finish()
	if !stopped {
		select {
		case stopErr = <-stopCh:
		case <-rctx.Done():
			stopErr = fmt.Errorf("no stop from the client: %w", rctx.Err())
		}
	}
	if stopErr != nil {
		return fmt.Errorf("client went away mid-test: %w", errors.Join(stopErr, streamErr))
	}
	if streamErr != nil {
		res.Note = "responder: " + streamErr.Error()
	}
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	fctx, fcancel := context.WithTimeout(ctx, grace)
	defer fcancel()
	return s.Ctrl.Send(fctx, engine.Message{Type: engine.MsgResult, Data: b})
}
