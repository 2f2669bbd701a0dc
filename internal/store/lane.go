package store

import (
	"context"
	"database/sql"
	"sync"
)

// A lane keeps a few of the pool's connections for one hot path, a run's
// creation (its endpoints' read and its transaction), so that the
// statements that path prepares on them stay prepared. On the shared
// pool a burst of other work (a matrix round's starts and reports) leaves
// the next creation on a connection that never ran its statements, and
// PostgreSQL's first use of a statement on a connection (pgx prepares
// and caches it per connection) costs a round trip and a parse more, on
// every statement of the creation and so on every task's dispatch
// latency. When every lane connection is busy the path uses the pool.
type lane struct {
	db    *sql.DB
	idle  chan *sql.Conn
	slots chan struct{} // one per connection the lane holds

	mu     sync.Mutex // guards closed
	closed bool
}

// laneConns is how many connections a lane holds: run creations rarely
// overlap on one replica.
const laneConns = 2

func newLane(db *sql.DB, n int) *lane {
	return &lane{db: db, idle: make(chan *sql.Conn, n), slots: make(chan struct{}, n)}
}

// get returns a lane connection, or nil when all are busy or one cannot
// be made (the caller uses the pool). A nil lane has none.
func (l *lane) get(ctx context.Context) *sql.Conn {
	if l == nil {
		return nil
	}
	select {
	case c := <-l.idle:
		return c
	default:
	}
	select {
	case l.slots <- struct{}{}:
	default:
		return nil
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		<-l.slots
		return nil
	}
	c, err := l.db.Conn(ctx)
	if err != nil {
		<-l.slots
		return nil
	}
	return c
}

// put gives back c, taken by get; a connection whose use failed is
// closed instead (a broken one is never kept), and a lane that was
// closed keeps none.
func (l *lane) put(c *sql.Conn, failed bool) {
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if failed || l.closed {
		c.Close()
		<-l.slots
		return
	}
	l.idle <- c // never blocks: a slot was taken for it
}

// close closes the idle connections; those in use are closed when given
// back.
func (l *lane) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for {
		select {
		case c := <-l.idle:
			c.Close()
			<-l.slots
		default:
			return
		}
	}
}
