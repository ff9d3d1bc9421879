package main

import (
	"strings"
	"testing"
)

// The limit rule on made-up samples: counts at or under the cap pass, any
// sample above it is one violation naming the scope, key, count and time;
// a scope with no cap in the rules is not judged.
func TestCheckLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		samples []LimitSample
		want    []string // substrings of the violations, in order
		max     int
	}{
		{name: "none", samples: nil, max: 0},
		{name: "within the cap", samples: []LimitSample{
			{Scope: jobSync, Key: "t0", At: at(1), Count: 2},
			{Scope: jobSync, Key: "t1", At: at(1), Count: 2},
			{Scope: jobSync, Key: "t0", At: at(1.1), Count: 1},
		}, max: 2},
		{name: "one sample above the cap", samples: []LimitSample{
			{Scope: jobSync, Key: "t0", At: at(1), Count: 2},
			{Scope: jobSync, Key: "t3", At: at(2.5), Count: 3},
			{Scope: jobSync, Key: "t3", At: at(2.6), Count: 2},
		}, want: []string{"scope " + jobSync + " key t3: 3 rows processing at 03:04:07.500, above its cap of 2"}, max: 3},
		{name: "the null key counts like any other", samples: []LimitSample{
			{Scope: jobSync, Key: "null", At: at(4), Count: 5},
		}, want: []string{"key null: 5 rows"}, max: 5},
		{name: "an uncapped scope is not judged", samples: []LimitSample{
			{Scope: jobAsync, Key: "t0", At: at(1), Count: 40},
		}, max: 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := testRules()
			r.LimitCaps = map[string]int{jobSync: 2}
			rep := Check(&History{Incarnations: incs(), Limits: tc.samples}, r)
			var got []Violation
			for _, v := range rep.Violations {
				if v.Rule == ruleLimit {
					got = append(got, v)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("limit violations %v, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i].Text, w) {
					t.Errorf("violation %q, want it to say %q", got[i].Text, w)
				}
			}
			if rep.MaxLimited != tc.max || rep.LimitSamples != len(tc.samples) {
				t.Errorf("max_limited=%d limit_samples=%d, want %d and %d", rep.MaxLimited, rep.LimitSamples, tc.max, len(tc.samples))
			}
		})
	}
}
