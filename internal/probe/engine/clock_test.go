package engine

import "testing"

func TestEstimateClock(t *testing.T) {
	// Far clock 5 ms ahead; RTTs 2 ms and 0.4 ms: the smaller one wins.
	const ms = int64(1e6)
	samples := []TimeSample{
		{T1: 0, T2: 1*ms + 5*ms, T3: 2 * ms},
		{T1: 10 * ms, T2: 10*ms + ms/5 + 5*ms, T3: 10*ms + 2*ms/5},
	}
	c, err := EstimateClock(samples, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.SameClock || c.OffsetMs < 4.999 || c.OffsetMs > 5.001 || c.ErrorBoundMs < 0.199 || c.ErrorBoundMs > 0.201 {
		t.Fatalf("clock = %+v, want offset 5 ms ± 0.2 ms", c)
	}
	if c, _ := EstimateClock(nil, true); !c.SameClock {
		t.Fatal("same clock not reported")
	}
	if _, err := EstimateClock(nil, false); err == nil {
		t.Fatal("no samples accepted")
	}
}
