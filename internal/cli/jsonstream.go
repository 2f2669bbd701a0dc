package cli

import (
	"encoding/json"
	"io"
	"sync"
)

// jsonStream writes a probe's progress as iperf3 3.17's --json-stream
// does: one JSON object a line, {"event": NAME, "data": ...}, with the
// events start (what was asked), interval (each interval report, as
// {"sum": ...}), end (the result) and error (a message).
type jsonStream struct {
	mu sync.Mutex // guards w: interval reports come from the probe's goroutines
	w  io.Writer
}

func (s *jsonStream) event(name string, data any) error {
	b, err := json.Marshal(struct {
		Event string `json:"event"`
		Data  any    `json:"data"`
	}{name, data})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.w.Write(append(b, '\n'))
	return err
}
