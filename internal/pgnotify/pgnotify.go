// Package pgnotify carries short messages between the server replicas that
// share one PostgreSQL database, through LISTEN/NOTIFY on one channel
// they share and one channel each (ChannelOf: messages for one replica,
// sent by the server inside a store transaction, Direct).
// Each replica keeps one connection of its own that LISTENs, and sends
// with NOTIFY on a second one; messages queued while a NOTIFY is on its
// way are sent together in the next (one NOTIFY per batch, each payload
// under PostgreSQL's 8,000-byte limit), so a run of 1,000 tasks costs a
// few NOTIFYs, not 1,000. Delivery is best effort, as NOTIFY is: a
// replica that is disconnected when a message is sent never sees it.
// Whoever uses this must be correct without it (it only makes things
// happen sooner); the server's long polls end at their wait and look at
// the store again.
package pgnotify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Channel is the NOTIFY channel the replicas share.
const Channel = "cnperf_cluster"

// ChannelOf is the NOTIFY channel of one replica: each listens on its
// own beside Channel, so that a message meant for one replica (an offer
// for the agent whose session it holds) costs the others nothing. The
// name is a hash of the replica's id: a plain identifier of fixed length,
// whatever the id holds.
func ChannelOf(replica string) string {
	sum := sha256.Sum256([]byte(replica))
	return "cnperf_replica_" + hex.EncodeToString(sum[:8])
}

// maxPayload keeps a NOTIFY payload under PostgreSQL's 8,000-byte limit.
const maxPayload = 7000

// reconnectEvery bounds how often a broken connection is re-made.
const reconnectEvery = time.Second

// opTimeout bounds each NOTIFY and each connect.
const opTimeout = 5 * time.Second

// batch is one NOTIFY payload: the sender and its messages.
type batch struct {
	From string   `json:"from"`
	Msgs []string `json:"msgs"`
}

// Notifier publishes and receives messages. Create it with New, run Run,
// and call Publish from any goroutine.
type Notifier struct {
	dsn  string
	self string // this replica's id: its own messages are not delivered back
	log  *slog.Logger

	mu     sync.Mutex // guards queue
	queue  []string
	kick   chan struct{}
	ready  chan struct{} // closed once the first LISTEN is in place
	readyO sync.Once
}

// New returns a notifier for the database at dsn (a postgres:// DSN, as
// the store takes); self names this replica.
func New(dsn, self string, log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Notifier{dsn: dsn, self: self, log: log, kick: make(chan struct{}, 1), ready: make(chan struct{})}
}

// Ready is closed once the notifier listens (tests wait for it).
func (n *Notifier) Ready() <-chan struct{} { return n.ready }

// Publish queues msgs for the other replicas and returns at once. The
// messages of one call are queued together, so they go in one NOTIFY
// (as far as maxPayload allows): the sender takes the whole queue when it
// wakes, and a call that queued its messages one by one could have its
// first sent alone and the rest a round trip later.
func (n *Notifier) Publish(msgs ...string) {
	if len(msgs) == 0 {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, msgs...)
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Run listens and sends until ctx ends, re-making a broken connection
// every second; deliver is called with each batch of messages another
// replica sent, in order, from one goroutine.
func (n *Notifier) Run(ctx context.Context, deliver func(msgs []string)) error {
	var wg sync.WaitGroup
	wg.Go(func() { n.sendLoop(ctx) })
	wg.Go(func() { n.listenLoop(ctx, deliver) })
	wg.Wait()
	return nil
}

func (n *Notifier) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	c, err := pgx.Connect(cctx, n.dsn)
	if err != nil {
		return nil, fmt.Errorf("pgnotify: connect: %w", err)
	}
	return c, nil
}

func (n *Notifier) listenLoop(ctx context.Context, deliver func([]string)) {
	for ctx.Err() == nil {
		err := n.listen(ctx, deliver)
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("cluster notifications: listening failed; reconnecting", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(reconnectEvery):
		}
	}
}

func (n *Notifier) listen(ctx context.Context, deliver func([]string)) error {
	c, err := n.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	lctx, cancel := context.WithTimeout(ctx, opTimeout)
	_, err = c.Exec(lctx, "LISTEN "+Channel+"; LISTEN "+ChannelOf(n.self))
	cancel()
	if err != nil {
		return fmt.Errorf("pgnotify: LISTEN: %w", err)
	}
	n.readyO.Do(func() { close(n.ready) })
	for {
		// No deadline: this waits for the next notification until ctx
		// ends; a dead connection makes it fail and we reconnect.
		nt, err := c.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("pgnotify: wait: %w", err)
		}
		var b batch
		if err := json.Unmarshal([]byte(nt.Payload), &b); err != nil {
			n.log.Warn("cluster notifications: unreadable payload", "err", err)
			continue
		}
		if b.From == n.self || len(b.Msgs) == 0 {
			continue
		}
		deliver(b.Msgs)
	}
}

func (n *Notifier) sendLoop(ctx context.Context) {
	var c *pgx.Conn
	defer func() {
		if c != nil {
			c.Close(context.Background())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		}
		n.mu.Lock()
		msgs := n.queue
		n.queue = nil
		n.mu.Unlock()
		for ps := range slices.Chunk(n.payloads(msgs), maxPerStatement) {
			for try := 0; ; try++ {
				if c == nil {
					var err error
					if c, err = n.connect(ctx); err != nil {
						n.log.Warn("cluster notifications: cannot send", "err", err)
					}
				}
				if c != nil {
					sctx, cancel := context.WithTimeout(ctx, opTimeout)
					q, args := notifyStatement(ps)
					_, err := c.Exec(sctx, q, args...)
					cancel()
					if err == nil {
						break
					}
					n.log.Warn("cluster notifications: NOTIFY failed", "err", err)
					c.Close(context.Background())
					c = nil
				}
				if try >= 2 || ctx.Err() != nil {
					break // dropped: receivers fall back on their long polls' waits
				}
				select {
				case <-ctx.Done():
				case <-time.After(reconnectEvery):
				}
			}
		}
	}
}

// maxPerStatement bounds the payloads one NOTIFY statement carries.
const maxPerStatement = 16

// notifyStatement is one statement that sends every payload of ps: one
// round trip, where a statement per payload took one each, one after the
// other, on the latency of the last (a matrix round's offers fill five or
// six payloads). PostgreSQL delivers them together, at the statement's
// commit, in order.
func notifyStatement(ps []string) (string, []any) {
	var q strings.Builder
	args := make([]any, 0, len(ps)+1)
	args = append(args, Channel)
	q.WriteString("SELECT ")
	for i, p := range ps {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "pg_notify($1, $%d)", i+2)
		args = append(args, p)
	}
	return q.String(), args
}

// Direct is the channel and the payloads that carry msgs to replica
// alone, as its Run delivers them, for a sender other than Publish (a
// NOTIFY inside a store transaction, delivered at its commit).
func (n *Notifier) Direct(replica string, msgs []string) (channel string, payloads []string) {
	return ChannelOf(replica), n.payloads(msgs)
}

// payloads packs msgs, without duplicates, into JSON batches of at most
// maxPayload bytes (a message longer than that alone is dropped).
func (n *Notifier) payloads(msgs []string) []string {
	seen := make(map[string]bool, len(msgs))
	var out []string
	cur := batch{From: n.self}
	size := 0
	flush := func() {
		if len(cur.Msgs) == 0 {
			return
		}
		b, _ := json.Marshal(cur)
		out = append(out, string(b))
		cur.Msgs, size = nil, 0
	}
	for _, m := range msgs {
		if seen[m] {
			continue
		}
		seen[m] = true
		enc, _ := json.Marshal(m)
		if len(enc)+len(n.self)+32 > maxPayload {
			n.log.Warn("cluster notifications: message too long; dropped", "bytes", len(m))
			continue
		}
		if size+len(enc)+len(n.self)+32 > maxPayload {
			flush()
		}
		cur.Msgs = append(cur.Msgs, m)
		size += len(enc) + 1
	}
	flush()
	return out
}
