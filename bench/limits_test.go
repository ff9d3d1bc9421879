package main

import "testing"

// mostInWindow slides: a window straddling two buckets counts what falls in
// it, as a rate cap's window does.
func TestMostInWindow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		times  []int64
		width  int64
		expect int
	}{
		{"none", nil, 10, 0},
		{"one", []int64{5}, 10, 1},
		{"all in one window", []int64{0, 1, 2, 9}, 10, 4},
		{"the window's end is open", []int64{0, 10}, 10, 1},
		{"straddling two buckets", []int64{1, 8, 9, 11, 12, 19, 25}, 10, 4}, // 8, 9, 11, 12; buckets of 10 would say 3
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := mostInWindow(tc.times, tc.width); got != tc.expect {
				t.Errorf("mostInWindow(%v, %d) = %d, want %d", tc.times, tc.width, got, tc.expect)
			}
		})
	}
}
