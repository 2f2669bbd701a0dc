package stats

// SeqTracker accounts datagrams by sequence number (0, 1, 2, ... as sent):
// unique receptions, duplicates and reordering. A packet is out of order
// when it arrives after one with a higher sequence number. Loss is what the
// sender sent minus the unique packets received.
type SeqTracker struct {
	seen       []uint64 // bitset of sequence numbers received
	unique     int64
	duplicates int64
	outOfOrder int64
	maxSeq     uint64
	any        bool
}

// maxTrackedSeq bounds the bitset (128 Mi packets = 16 MiB); packets
// beyond it still count as received but duplicates among them go unseen.
const maxTrackedSeq = 1 << 27

// Add records the arrival of seq and reports whether it was a duplicate.
func (s *SeqTracker) Add(seq uint64) (duplicate bool) {
	if seq < maxTrackedSeq {
		w, bit := seq/64, uint64(1)<<(seq%64)
		if w >= uint64(len(s.seen)) {
			n := 2 * len(s.seen)
			if n <= int(w) {
				n = int(w) + 1
			}
			grown := make([]uint64, n)
			copy(grown, s.seen)
			s.seen = grown
		}
		if s.seen[w]&bit != 0 {
			s.duplicates++
			return true
		}
		s.seen[w] |= bit
	}
	s.unique++
	if s.any && seq < s.maxSeq {
		s.outOfOrder++
	}
	if !s.any || seq > s.maxSeq {
		s.maxSeq = seq
	}
	s.any = true
	return false
}

// Received returns the number of distinct sequence numbers received.
func (s *SeqTracker) Received() int64 { return s.unique }

// Duplicates returns how many arrivals repeated a sequence number.
func (s *SeqTracker) Duplicates() int64 { return s.duplicates }

// OutOfOrder returns how many arrivals came after a higher number.
func (s *SeqTracker) OutOfOrder() int64 { return s.outOfOrder }

// MaxSeq returns the highest sequence number seen and whether any was.
func (s *SeqTracker) MaxSeq() (uint64, bool) { return s.maxSeq, s.any }

// Lost returns sent minus unique received (never negative).
func (s *SeqTracker) Lost(sent int64) int64 {
	if l := sent - s.unique; l > 0 {
		return l
	}
	return 0
}

// LossPct returns the lost share of sent in percent (0 when nothing was sent).
func LossPct(lost, sent int64) float64 {
	if sent <= 0 {
		return 0
	}
	return 100 * float64(lost) / float64(sent)
}
