package matrix

import "testing"

func TestRounds(t *testing.T) {
	for n := 2; n <= 9; n++ {
		rounds := Rounds(n)
		want := 2 * (n - 1)
		if n%2 == 1 {
			want = 2 * n
		}
		if len(rounds) != want {
			t.Errorf("n=%d: %d rounds, want %d", n, len(rounds), want)
		}
		seen := map[[2]int]bool{}
		for ri, r := range rounds {
			busy := map[int]bool{}
			for _, p := range r {
				if p[0] == p[1] || busy[p[0]] || busy[p[1]] {
					t.Errorf("n=%d round %d: node twice or self pair in %v", n, ri, r)
				}
				busy[p[0]], busy[p[1]] = true, true
				if seen[p] {
					t.Errorf("n=%d: pair %v twice", n, p)
				}
				seen[p] = true
			}
		}
		if len(seen) != n*(n-1) {
			t.Errorf("n=%d: %d ordered pairs, want %d", n, len(seen), n*(n-1))
		}
	}
}
