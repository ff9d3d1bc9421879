package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// The claim_ahead 0 rows differ from the default ones in the manifest only.
func TestAhead0VariantWritesClaimAhead0(t *testing.T) {
	b := &bench{c: &config{work: t.TempDir(), procs: 2, conc: 64, python: "python3", node: "node"}}
	for _, tc := range []struct {
		v    variant
		key  string
		want []string
	}{
		{ahead0(sidecarVariant("python", "stdio")), "python-stdio-ahead0", []string{"settings:\n  claim_ahead: 0s\n"}},
		{ahead0(ttl0Variant("node")), "node-stdio-ttl0-ahead0", []string{"settings:\n  result_ttl: 0s\n  claim_ahead: 0s\n"}},
	} {
		if tc.v.Key != tc.key || !tc.v.ClaimAhead0 {
			t.Fatalf("ahead0 = %+v, want key %s", tc.v, tc.key)
		}
		path, err := b.writeManifest(tc.v, "t-"+tc.key)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range tc.want {
			if !strings.Contains(string(raw), want) {
				t.Errorf("%s manifest lacks %q:\n%s", tc.key, want, raw)
			}
		}
	}
	plain, err := b.writeManifest(sidecarVariant("python", "stdio"), "t-plain")
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(plain); strings.Contains(string(raw), "claim_ahead") || strings.Contains(string(raw), "settings:") {
		t.Errorf("the default row's manifest sets claim_ahead:\n%s", raw)
	}
}

func TestScrapeGauges(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       [2]float64
		wantErr    bool
	}{
		{"summed over handlers", "# HELP soniq_claim_reserve_jobs x\nsoniq_claim_reserve_jobs{handler=\"a\"} 12\nsoniq_claim_reserve_jobs{handler=\"b\"} 3\n" +
			"soniq_claim_reserve_target_jobs{handler=\"a\"} 250\nsoniq_claim_reserve_jobs_total 99\n", [2]float64{15, 250}, false},
		{"not exported yet reads 0", "soniq_claim_rows_bucket{le=\"1\"} 4\n", [2]float64{0, 0}, false},
		{"a bad value is an error", "soniq_claim_reserve_jobs{handler=\"a\"} x\n", [2]float64{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/metrics" {
					http.NotFound(w, r)
					return
				}
				fmt.Fprint(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			got, err := scrapeGauges(context.Background(), strings.TrimPrefix(srv.URL, "http://"), "soniq_claim_reserve_jobs", "soniq_claim_reserve_target_jobs")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (got[0] != tc.want[0] || got[1] != tc.want[1]) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// The sharing goals read the default set, and name the claim_ahead 0 set
// beside it; the 4- and 8-sidecar targets are the issue's.
func TestSharingGoalsBySet(t *testing.T) {
	row := func(k int, off bool, jps, pg, size float64) *shareResult {
		return &shareResult{Sidecars: k, ClaimAhead0: off, Median: jps, Cost: &tpResult{PostgresCPU10k: pg, ClaimSize: size}}
	}
	r := &report{Sharing: []*shareResult{
		row(1, false, 1000, 1.0, 300), row(4, false, 960, 1.1, 250), row(8, false, 880, 1.3, 200),
		row(1, true, 900, 2.0, 30), row(4, true, 700, 4.0, 8), row(8, true, 300, 7.0, 4),
	}}
	r.evaluate(2)
	want := map[string]struct{ met, has string }{
		"4 sidecars sharing one database vs one, same total budget":    {"yes", "96 % (960 vs 1000 jobs/s; 250 vs 300 rows per claim); claim_ahead 0: 78 %"},
		"8 sidecars sharing one database vs one, same total budget":    {"**no**", "88 %"},
		"Postgres CPU per job, 8 sidecars sharing one database vs one": {"**no**", "1.30×"},
	}
	for _, g := range r.Goals {
		w, found := want[g.Name]
		if !found {
			continue
		}
		delete(want, g.Name)
		if g.Met != w.met || !strings.Contains(g.Measured, w.has) {
			t.Errorf("%s: met %q measured %q, want %q containing %q", g.Name, g.Met, g.Measured, w.met, w.has)
		}
	}
	for name := range want {
		t.Errorf("no goal %q", name)
	}
}
