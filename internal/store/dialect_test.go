package store

import "testing"

func TestRebindDollar(t *testing.T) {
	cases := []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"a = ? AND b = ?", "a = $1 AND b = $2"},
		{"x IN (?, ?, ?) LIMIT ?", "x IN ($1, $2, $3) LIMIT $4"},
		{"s = '?' AND t = ?", "s = '?' AND t = $1"},
		{"s = 'it''s?' AND t = ?", "s = 'it''s?' AND t = $1"},
	}
	for _, c := range cases {
		if got := rebindDollar(c.in); got != c.want {
			t.Errorf("rebindDollar(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestUpsertStatements(t *testing.T) {
	cases := []struct {
		d    dialect
		want string
	}{
		{sqliteDialect{}, "INSERT INTO t (k, a, b) VALUES (?, ?, ?) ON CONFLICT (k) DO UPDATE SET a = excluded.a, b = excluded.b"},
		{postgresDialect{}, "INSERT INTO t (k, a, b) VALUES ($1, $2, $3) ON CONFLICT (k) DO UPDATE SET a = excluded.a, b = excluded.b"},
	}
	for _, c := range cases {
		if got := c.d.rebind(c.d.upsert("t", "k", []string{"k", "a", "b"}, []string{"a", "b"})); got != c.want {
			t.Errorf("%s upsert:\n got %s\nwant %s", c.d.name(), got, c.want)
		}
	}
}

func TestPlaceholders(t *testing.T) {
	for n, want := range map[int]string{0: "", 1: "?", 3: "?, ?, ?"} {
		if got := placeholders(n); got != want {
			t.Errorf("placeholders(%d) = %q, want %q", n, got, want)
		}
	}
}
