package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// Raw tool outputs (a v1 task answer's TaskResult, GET
// /api/v2/tasks/{id}/raw) go from the store to the answer in chunks of
// rawChunkChars characters (Store.TaskOutputChunk), never whole: an 8 MB
// output costs a read a few MB at most, not five copies of itself. And at
// most rawReadSlots outputs are read at once; a read that finds no slot
// within rawReadWait is answered 503 with Retry-After, so parallel reads
// cannot take the server past its memory limit.
const (
	rawReadSlots  = 4
	rawReadWait   = 2 * time.Second
	rawChunkChars = 256 << 10
)

// rawReads bounds and sizes the reads of raw outputs.
type rawReads struct {
	slots chan struct{}
	wait  time.Duration // how long a read waits for a slot
	chunk int64         // characters per store read
}

func newRawReads() *rawReads {
	return &rawReads{slots: make(chan struct{}, rawReadSlots), wait: rawReadWait, chunk: rawChunkChars}
}

// acquireRawRead takes a read slot, waiting up to the bound; without one it
// answers 503 (Retry-After: 1) and returns false.
func (s *Server) acquireRawRead(w http.ResponseWriter, r *http.Request, v1 bool) (func(), bool) {
	release := func() { <-s.raw.slots }
	select {
	case s.raw.slots <- struct{}{}:
		return release, true
	default:
	}
	t := time.NewTimer(s.raw.wait)
	defer t.Stop()
	select {
	case s.raw.slots <- struct{}{}:
		return release, true
	case <-r.Context().Done():
		return nil, false // the caller is gone: nobody reads an answer
	case <-t.C:
	}
	w.Header().Set("Retry-After", "1")
	s.fail(w, r, v1, &api.Error{Status: http.StatusServiceUnavailable,
		Message: fmt.Sprintf("%d raw outputs are being read at once, the most this server reads; try again in a second", cap(s.raw.slots))})
	return nil, false
}

// streamOutput writes the task's raw output, first (its first chunk,
// already read) and then the rest, through write, chunk by chunk. An error
// after the answer started cannot be answered: the connection is cut
// (http.ErrAbortHandler), so the client sees a truncated answer, never a
// short output as a whole one.
func (s *Server) streamOutput(ctx context.Context, id, first string, write func(part string) error) {
	part, off := first, int64(0)
	for part != "" {
		if err := write(part); err != nil {
			return // the client went away
		}
		off += int64(utf8.RuneCountInString(part))
		var err error
		if part, err = s.st.TaskOutputChunk(ctx, id, off, s.raw.chunk); err != nil {
			s.log.Error("raw output cut short", "task_id", id, "at", off, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}

// rawMark stands for the raw output in a v1 answer marshalled without it;
// the answer is written around it. (No stored text holds a NUL.)
const rawMark = "\x00cnperf raw output\x00"

// writeTaskV1 answers a v1 task with its raw output streamed into
// TaskResult.
func (s *Server) writeTaskV1(w http.ResponseWriter, r *http.Request, t store.Task) {
	if t.RawSize == 0 {
		s.okV1(w, taskV1(t, ""))
		return
	}
	release, ok := s.acquireRawRead(w, r, true)
	if !ok {
		return
	}
	defer release()
	first, err := s.st.TaskOutputChunk(r.Context(), t.TaskID, 0, s.raw.chunk)
	if err != nil {
		s.fail(w, r, true, err)
		return
	}
	data, err := json.Marshal(taskV1(t, rawMark))
	if err == nil {
		data, err = json.Marshal(api.Envelope{Status: 0, Msg: "", Data: data})
	}
	mark, _ := json.Marshal(rawMark)
	i := bytes.Index(data, mark)
	if err != nil || i < 0 {
		s.fail(w, r, true, fmt.Errorf("encode task %s: %v", t.TaskID, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(data[:i+1]); err != nil { // up to the opening quote
		return
	}
	s.streamOutput(r.Context(), t.TaskID, first, func(part string) error {
		q, err := json.Marshal(part) // escaping is per character: chunks escape alone
		if err != nil {
			return err
		}
		_, err = w.Write(q[1 : len(q)-1])
		return err
	})
	_, _ = w.Write(append(data[i+len(mark)-1:], '\n')) // from the closing quote
}

func (s *Server) handleTaskRaw(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t, err := s.st.GetTask(r.Context(), id)
	if err != nil {
		s.fail(w, r, false, wrapNotFound(err, "task "+id))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if t.RawSize == 0 {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	release, ok := s.acquireRawRead(w, r, false)
	if !ok {
		return
	}
	defer release()
	first, err := s.st.TaskOutputChunk(r.Context(), id, 0, s.raw.chunk)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(t.RawSize, 10))
	w.WriteHeader(http.StatusOK)
	s.streamOutput(r.Context(), id, first, func(part string) error {
		_, err := w.Write([]byte(part))
		return err
	})
}
