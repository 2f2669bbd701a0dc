package matrix

// Rounds orders every ordered pair of n nodes (indices) into rounds in
// which no node is in two pairs: the circle method's n-1 (n even) or n (n
// odd, one node resting per round) pairings, each run once in each
// direction, so 2(n-1) rounds for an even n. Every ordered pair appears
// exactly once.
func Rounds(n int) [][][2]int {
	if n < 2 {
		return nil
	}
	m := n
	if m%2 == 1 {
		m++ // a dummy node: whoever meets it rests that round
	}
	ring := make([]int, m)
	for i := range ring {
		ring[i] = i
	}
	var pairings [][][2]int
	for r := 0; r < m-1; r++ {
		var round [][2]int
		for i := 0; i < m/2; i++ {
			a, b := ring[i], ring[m-1-i]
			if a < n && b < n {
				round = append(round, [2]int{a, b})
			}
		}
		pairings = append(pairings, round)
		// Keep ring[0] in place and rotate the rest by one.
		last := ring[m-1]
		copy(ring[2:], ring[1:m-1])
		ring[1] = last
	}
	var out [][][2]int
	for _, dir := range []bool{false, true} {
		for _, p := range pairings {
			round := make([][2]int, len(p))
			for i, ab := range p {
				if dir {
					ab[0], ab[1] = ab[1], ab[0]
				}
				round[i] = ab
			}
			out = append(out, round)
		}
	}
	return out
}
