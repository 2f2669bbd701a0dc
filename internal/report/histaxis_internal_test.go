package report

import (
	"strconv"
	"testing"
)

// TestHistogramShareAxisStopsAt100: the histogram's y axis is a share of
// samples, so its top tick never reads more than 100 %, whatever the
// shape (all samples in one bin put the axis at 105 % before, which the
// ticks rounded up to 150 %).
func TestHistogramShareAxisStopsAt100(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts []int64
	}{
		{"one bin", []int64{0, 1000, 0, 0}},
		{"97 % in one bin", []int64{3, 97}},
		{"half and half", []int64{50, 50, 0}},
		{"spread", []int64{10, 20, 30, 20, 10, 5, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := histogramChart("h", "RR: histogram", []distribution{{name: "a", what: "round trip", widthUs: 5, counts: tc.counts}})
			if c == nil || len(c.YTicks) == 0 {
				t.Fatal("no chart or no y ticks")
			}
			top := c.YTicks[len(c.YTicks)-1]
			v, err := strconv.ParseFloat(top.Label, 64)
			if err != nil {
				t.Fatalf("top tick %q: %v", top.Label, err)
			}
			if v > 100 {
				t.Errorf("top tick %q %%: a share of samples cannot exceed 100 %%", top.Label)
			}
			// The highest bar still fits under the axis: every line's
			// y lies inside the plot.
			for _, tk := range c.YTicks {
				if tk.Pos < c.Plot.Y-0.5 || tk.Pos > c.Plot.Y+c.Plot.H+0.5 {
					t.Errorf("tick %q at %.1f lies outside the plot %.1f-%.1f", tk.Label, tk.Pos, c.Plot.Y, c.Plot.Y+c.Plot.H)
				}
			}
		})
	}
}
