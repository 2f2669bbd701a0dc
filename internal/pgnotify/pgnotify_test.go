package pgnotify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store/storetest"
	"github.com/jackc/pgx/v5"
)

func TestPayloadsStayUnderTheLimit(t *testing.T) {
	n := New("", "replica-1", nil)
	var msgs []string
	for i := range 60 {
		msgs = append(msgs, fmt.Sprintf("%02d-%s", i, strings.Repeat("x", 700)))
	}
	msgs = append(msgs, msgs[0])                         // a repeat goes once
	msgs = append(msgs, strings.Repeat("y", maxPayload)) // too long alone: dropped
	ps := n.payloads(msgs)
	if len(ps) < 2 {
		t.Fatalf("%d payloads for 60 messages of 700 bytes", len(ps))
	}
	total := 0
	for _, p := range ps {
		if len(p) > maxPayload {
			t.Errorf("payload of %d bytes, limit %d", len(p), maxPayload)
		}
		total += strings.Count(p, "-xxx")
	}
	if total != 60 {
		t.Errorf("%d messages in the payloads, want 60", total)
	}
}

func TestNotifyStatement(t *testing.T) {
	q, args := notifyStatement([]string{"a", "b", "c"})
	if q != "SELECT pg_notify($1, $2), pg_notify($1, $3), pg_notify($1, $4)" {
		t.Errorf("statement %q", q)
	}
	if !slices.Equal(args, []any{Channel, "a", "b", "c"}) {
		t.Errorf("arguments %v", args)
	}
}

// TestDelivery: messages published by one replica reach another, in
// order, all of them (more than one payload's worth, sent together), and
// never their sender.
func TestDelivery(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := New(dsn, "a", nil), New(dsn, "b", nil)
	gotA, gotB := listening(ctx, t, a), listening(ctx, t, b)
	var sent []string
	for i := range 60 {
		sent = append(sent, fmt.Sprintf("%02d-%s", i, strings.Repeat("x", 700)))
	}
	a.Publish(sent...)
	receiveAll(t, gotB, sent)
	select {
	case m := <-gotA:
		t.Errorf("the sender got its own message %.20q", m)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestDirect: messages sent with Direct's channel and payloads (here by a
// plain NOTIFY, as a store transaction sends them) reach that replica
// alone, all of them.
func TestDirect(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b, c := New(dsn, "a", nil), New(dsn, "b", nil), New(dsn, "c", nil)
	got := map[*Notifier]chan string{b: listening(ctx, t, b), c: listening(ctx, t, c)}
	var sent []string
	for i := range 20 {
		sent = append(sent, fmt.Sprintf("%02d-%s", i, strings.Repeat("x", 700)))
	}
	channel, payloads := a.Direct("b", sent)
	if channel != ChannelOf("b") || channel == ChannelOf("c") || len(payloads) < 2 {
		t.Fatalf("Direct: channel %q, %d payloads", channel, len(payloads))
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, p := range payloads {
		if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", channel, p); err != nil {
			t.Fatal(err)
		}
	}
	receiveAll(t, got[b], sent)
	select {
	case m := <-got[c]:
		t.Errorf("replica c got b's message %.20q", m)
	case <-time.After(200 * time.Millisecond):
	}
}

// listening runs n until ctx ends and returns what it delivers, once it
// listens.
func listening(ctx context.Context, t *testing.T, n *Notifier) chan string {
	t.Helper()
	got := make(chan string, 1000)
	go n.Run(ctx, func(ms []string) {
		for _, m := range ms {
			got <- m
		}
	})
	select {
	case <-n.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10 s")
	}
	return got
}

// receiveAll waits for sent to arrive on got, all of them, in order.
func receiveAll(t *testing.T, got chan string, sent []string) {
	t.Helper()
	var recv []string
	for range sent {
		select {
		case m := <-got:
			recv = append(recv, m)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d messages arrived within 10 s", len(recv), len(sent))
		}
	}
	if !slices.Equal(recv, sent) {
		t.Error("messages arrived out of order or changed")
	}
}
