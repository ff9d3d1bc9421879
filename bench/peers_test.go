package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKeyPathsAcceptsOnlyKnownPeers(t *testing.T) {
	for _, tc := range []struct {
		list    string
		want    map[string]string
		wantErr bool
	}{
		{list: "", want: map[string]string{}},
		{list: "pgqueuer=/v/bin/python, pg-boss=/n", want: map[string]string{"pgqueuer": "/v/bin/python", "pg-boss": "/n"}},
		{list: "celery=/v/bin/python", wantErr: true},
		{list: "pgqueuer", wantErr: true},
		{list: "pgqueuer=", wantErr: true},
	} {
		got, err := keyPaths(tc.list)
		if (err != nil) != tc.wantErr {
			t.Errorf("keyPaths(%q): error %v, want error %v", tc.list, err, tc.wantErr)
			continue
		}
		if tc.wantErr {
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("keyPaths(%q) = %v, want %v", tc.list, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("keyPaths(%q)[%s] = %q, want %q", tc.list, k, got[k], v)
			}
		}
	}
}

// A worker's log holds whatever the peer printed, then its tally line.
func TestReadTallyFindsTheResultLine(t *testing.T) {
	for _, tc := range []struct {
		name, log  string
		noop, lats int
		wantErr    bool
	}{
		{name: "tally", log: "BENCH-READY\nsome warning\nBENCH-RESULT {\"noop\": 1208, \"latency_us\": [2100, 3400]}\n", noop: 1208, lats: 2},
		{name: "killed before its tally", log: "BENCH-READY\n", wantErr: true},
		{name: "truncated tally", log: "BENCH-RESULT {\"noop\": 12", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "worker.log")
			if err := os.WriteFile(path, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readTally(path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("readTally: error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (got.Noop != tc.noop || len(got.LatencyUS) != tc.lats) {
				t.Fatalf("readTally = %+v, want %d no-op jobs and %d latencies", got, tc.noop, tc.lats)
			}
		})
	}
}
